#include "server/engine/engine_history.h"

#include <algorithm>

#include "common/status_macros.h"
#include "cosched/v1/control_plane.pb.h"
#include "google/protobuf/util/json_util.h"
#include "server/state/layouts.h"

namespace cosched::server {
namespace {

constexpr int kAuditPage = 1000;

}  // namespace

absl::StatusOr<std::map<std::string, std::vector<absl::Time>>> LayoutChangesSince(
    store::Store& store, absl::Time since) {
  // host -> revision -> time: one ApplyLayout writes a record per VM, all
  // at one revision.
  std::map<std::string, std::map<int64_t, absl::Time>> by_host;
  RETURN_IF_ERROR(store.Read([&](store::Transaction& txn) -> absl::Status {
    by_host.clear();
    store::AuditFilter filter;
    filter.who = kEngineActor;
    filter.since_unix_ns = absl::ToUnixNanos(since);
    google::protobuf::util::JsonParseOptions parse;
    parse.ignore_unknown_fields = true;
    int64_t before = 0;
    while (true) {
      ASSIGN_OR_RETURN(auto records, txn.ListAudit(filter, before, kAuditPage));
      for (const v1::AuditRecord& record : records) {
        if (record.method() != "EngineDecision" || record.revision() == 0) continue;
        v1::VM vm;
        if (!google::protobuf::util::JsonStringToMessage(record.after(), &vm, parse).ok() ||
            vm.host_id().empty()) {
          continue;
        }
        absl::Time& at = by_host[vm.host_id()][record.revision()];
        at = std::max(at, absl::FromUnixNanos(record.time_unix_ns()));
      }
      if (static_cast<int>(records.size()) < kAuditPage) break;
      before = records.back().sequence();
    }
    return absl::OkStatus();
  }));
  std::map<std::string, std::vector<absl::Time>> changes;
  for (const auto& [host, revisions] : by_host) {
    std::vector<absl::Time>& times = changes[host];
    for (const auto& [revision, at] : revisions) times.push_back(at);
    std::sort(times.begin(), times.end());
  }
  return changes;
}

}  // namespace cosched::server
