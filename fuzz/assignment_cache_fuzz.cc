// Fuzzes what cs-agent reads back and what it is sent (agent/
// assignment_cache.h): its state file (assignments.pb, a header with a
// checksum, then a snapshot), which must be refused with DATA_LOSS when
// corrupt, never crash or load half; and the messages of the
// WatchAssignments stream applied to the cache.
//
// Input: byte 0 even: the rest is a state file. Odd: the rest is a sequence
// of [length: 2 bytes, little endian][WatchAssignmentsResponse] messages.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "agent/assignment_cache.h"
#include "fuzz/quiet_logs.h"

namespace cosched::agent {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void FuzzStateFile(absl::string_view content) {
  int64_t revision = -7;
  AssignmentMap assignments;
  absl::Status status = AssignmentCache::Decode(content, "assignments.pb", &revision, &assignments);
  if (!status.ok()) {
    // Refused whole: nothing is loaded.
    Check(status.code() == absl::StatusCode::kDataLoss);
    Check(revision == -7 && assignments.empty());
    return;
  }
  // What was accepted encodes back to a file that decodes the same.
  int64_t again_revision = 0;
  AssignmentMap again;
  Check(AssignmentCache::Decode(AssignmentCache::Encode(revision, assignments), "again",
                                &again_revision, &again)
            .ok());
  Check(again_revision == revision && again.size() == assignments.size());
}

void FuzzStream(const uint8_t* data, size_t size) {
  AssignmentCache cache("");
  while (size >= 2) {
    size_t length = std::min<size_t>(data[0] | (size_t{data[1]} << 8), size - 2);
    v1::WatchAssignmentsResponse update;
    if (update.ParseFromArray(data + 2, static_cast<int>(length))) {
      const int64_t before = cache.revision();
      const size_t before_count = cache.assignments().size();
      absl::Status status = cache.Apply(update);
      // On error nothing changes.
      if (!status.ok()) Check(cache.revision() == before && cache.assignments().size() == before_count);
      else Check(cache.revision() == update.revision());
    }
    data += 2 + length;
    size -= 2 + length;
  }
}

}  // namespace
}  // namespace cosched::agent

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cosched::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    cosched::agent::FuzzStateFile(
        absl::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  } else {
    cosched::agent::FuzzStream(data + 1, size - 1);
  }
  return 0;
}
