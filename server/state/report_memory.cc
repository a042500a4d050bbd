#include "server/state/report_memory.h"

#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/time_util.h"

namespace cosched::server {

ReportMemory::Judged ReportMemory::Judge(const v1::ReportRequest& report,
                                         const ReportDigest& content,
                                         const ReportDigest& state,
                                         absl::Time now, absl::Duration hold) {
  std::lock_guard<std::mutex> lock(mu_);
  Judged judged;
  auto written = reports_.find(report.host_id());
  auto held = held_.find(report.host_id());
  const bool changed = written == reports_.end() || written->second.content != content;
  if (!changed && state == written->second.state) {
    // Back to what the store has: nothing to hold.
    if (held != held_.end()) held_.erase(held);
    judged.verdict = Verdict::kUnchanged;
  } else if (!changed && held != held_.end() && held->second.state == state) {
    judged.verdict = now - held->second.since >= hold ? Verdict::kWrite : Verdict::kUnchanged;
  } else {
    const absl::Time since = held != held_.end() ? held->second.since : now;
    judged.verdict = changed || now - since >= hold ? Verdict::kWrite : Verdict::kHold;
    // A state held before is replaced by this one, written or not, so
    // what is shown until the write commits is never older than the store.
    if (judged.verdict == Verdict::kHold || held != held_.end()) {
      Held& h = held_[report.host_id()];
      h.state = state;
      h.since = since;
      h.reported = now;
      h.vms.clear();
      {
        google::protobuf::io::StringOutputStream stream(&h.vms);
        google::protobuf::io::CodedOutputStream out(&stream);
        for (const v1::VMObservation& vm : report.vms()) {
          out.WriteVarint32(static_cast<uint32_t>(vm.vm_id().size()));
          out.WriteString(vm.vm_id());
          out.WriteVarint32(static_cast<uint32_t>(vm.uuid().size()));
          out.WriteString(vm.uuid());
          // ApplyReport took the agent's report_time out.
          out.WriteVarint32(static_cast<uint32_t>(vm.enforcement().ByteSizeLong()));
          vm.enforcement().SerializeWithCachedSizes(&out);
        }
      }
      h.vms.shrink_to_fit();  // the stream grew it by doubling
    }
  }
  if (written != reports_.end()) {
    judged.version = written->second.version;
    judged.cores = written->second.cores;
    judged.tagged_id = written->second.tagged_id;
  }
  return judged;
}

void ReportMemory::Remember(const std::string& host_id, Seen seen, uint64_t judged_version) {
  std::lock_guard<std::mutex> lock(mu_);
  // What is held went with this write, unless a later Report's state was
  // held meanwhile.
  if (auto held = held_.find(host_id); held != held_.end() && held->second.state == seen.state) {
    held_.erase(held);
  }
  if (judged_version != 0) {
    auto it = reports_.find(host_id);
    if (it == reports_.end() || it->second.version != judged_version) {
      if (it != reports_.end()) reports_.erase(it);
      return;
    }
  }
  seen.version = ++versions_;
  reports_[host_id] = std::move(seen);
}

void ReportMemory::Forget(absl::string_view host_id) {
  std::lock_guard<std::mutex> lock(mu_);
  reports_.erase(host_id);
}

void ReportMemory::Tagged(absl::string_view host_id, const std::string& reported_id,
                          const std::string& tagged_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reports_.find(host_id);
  if (it == reports_.end()) return;  // its next Report is written whole anyway
  it->second.version = ++versions_;
  if (reported_id == tagged_id) {
    it->second.tagged_id.erase(reported_id);
  } else {
    it->second.tagged_id[reported_id] = tagged_id;
  }
}

void ReportMemory::Untagged(absl::string_view host_id, const std::string& tagged_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reports_.find(host_id);
  if (it == reports_.end()) return;
  it->second.version = ++versions_;
  auto& ids = it->second.tagged_id;
  for (auto entry = ids.begin(); entry != ids.end();) {
    if (entry->second == tagged_id) {
      ids.erase(entry++);
    } else {
      ++entry;
    }
  }
}

void ReportMemory::Remove(absl::string_view host_id) {
  std::lock_guard<std::mutex> lock(mu_);
  reports_.erase(host_id);
  held_.erase(host_id);
}

void ReportMemory::ForgetAll() {
  std::lock_guard<std::mutex> lock(mu_);
  reports_.clear();
}

std::optional<v1::VMEnforcement> ReportMemory::HeldEnforcement(absl::string_view host_id,
                                                               absl::string_view vm_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto held = held_.find(host_id);
  if (held == held_.end()) return std::nullopt;
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t*>(held->second.vms.data()),
      static_cast<int>(held->second.vms.size()));
  std::string id, uuid;
  uint32_t size = 0;
  while (in.ReadVarint32(&size) && in.ReadString(&id, static_cast<int>(size)) &&
         in.ReadVarint32(&size) && in.ReadString(&uuid, static_cast<int>(size)) &&
         in.ReadVarint32(&size)) {
    if (id != vm_id && (uuid.empty() || uuid != vm_id)) {
      if (!in.Skip(static_cast<int>(size))) break;
      continue;
    }
    v1::VMEnforcement enforcement;
    const google::protobuf::io::CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(size));
    if (!enforcement.MergePartialFromCodedStream(&in) || !in.ConsumedEntireMessage()) break;
    in.PopLimit(limit);
    *enforcement.mutable_report_time() = google::protobuf::util::TimeUtil::NanosecondsToTimestamp(
        absl::ToUnixNanos(held->second.reported));
    return enforcement;
  }
  return std::nullopt;
}

size_t ReportMemory::HeldHosts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_.size();
}

}  // namespace cosched::server
