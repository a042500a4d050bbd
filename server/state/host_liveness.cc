#include "server/state/host_liveness.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/names.h"

namespace cosched::server {
namespace {

// A problem is a sentence for an operator; a long reconcile error is cut
// so that a record of thousands of hosts stays small.
constexpr size_t kMaxProblemBytes = 240;

}  // namespace

std::string ReportProblem(const v1::ReportRequest& report) {
  std::string problem;
  if (report.preflight().hazards_size() > 0) {
    const v1::Hazard& hazard = report.preflight().hazards(0);
    problem = absl::StrCat("reports the hazard ", hazard.name(),
                           hazard.detail().empty() ? "" : absl::StrCat(" (", hazard.detail(), ")"));
  }
  for (const v1::VMObservation& vm : report.vms()) {
    if (!problem.empty()) break;
    const v1::EnforcementState state = vm.enforcement().state();
    // An observing agent's VM that enforcing would leave failed or partial
    // is as much a problem: a canary in observe shows it before any cookie
    // is set (a rollout's health check sees it).
    const v1::EnforcementState would = state == v1::ENFORCEMENT_STATE_OBSERVED
                                           ? vm.enforcement().observed_state()
                                           : state;
    if (would == v1::ENFORCEMENT_STATE_FAILED || would == v1::ENFORCEMENT_STATE_PARTIAL) {
      problem = absl::StrCat("has reconcile errors: VM ", vm.vm_id(),
                             state == v1::ENFORCEMENT_STATE_OBSERVED ? " would be " : " is ",
                             EnforcementStateName(would),
                             vm.enforcement().last_error().empty()
                                 ? ""
                                 : absl::StrCat(" (", vm.enforcement().last_error(), ")"));
    }
  }
  if (problem.size() > kMaxProblemBytes) {
    problem.resize(kMaxProblemBytes - 3);
    problem += "...";
  }
  return problem;
}

void HostLiveness::Note(const v1::ReportRequest& report, absl::Time now) {
  Seen seen;
  seen.time = now;
  seen.problem = ReportProblem(report);
  seen.applied_revision = report.applied_revision();
  std::lock_guard<std::mutex> lock(mu_);
  local_[report.host_id()] = std::move(seen);
}

void HostLiveness::Forget(absl::string_view host_id) {
  std::lock_guard<std::mutex> lock(mu_);
  local_.erase(host_id);
}

std::optional<HostLiveness::Seen> HostLiveness::Local(absl::string_view host_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = local_.find(host_id);
  if (it == local_.end()) return std::nullopt;
  return it->second;
}

std::optional<HostLiveness::Seen> HostLiveness::Latest(absl::string_view host_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto local = local_.find(host_id);
  auto other = others_.find(host_id);
  if (local == local_.end() && other == others_.end()) return std::nullopt;
  if (other == others_.end()) return local->second;
  if (local == local_.end() || other->second.time > local->second.time) return other->second;
  Seen seen = local->second;
  seen.connected = other->second.connected;
  seen.connected_to = other->second.connected_to;
  seen.connected_as_of = other->second.connected_as_of;
  return seen;
}

bool HostLiveness::ConnectedElsewhere(absl::string_view host_id, absl::Time not_before) const {
  return !ConnectedReplica(host_id, not_before).empty();
}

std::string HostLiveness::ConnectedReplica(absl::string_view host_id,
                                           absl::Time not_before) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = others_.find(host_id);
  if (it == others_.end() || !it->second.connected) return "";
  return it->second.connected_as_of >= not_before ? it->second.connected_to : "";
}

std::vector<store::EtcdSeenHost> HostLiveness::Record(
    const std::vector<std::string>& connected) const {
  std::vector<store::EtcdSeenHost> record;
  absl::flat_hash_map<std::string, size_t> index;
  std::lock_guard<std::mutex> lock(mu_);
  record.reserve(local_.size());
  for (const auto& [host_id, seen] : local_) {
    index[host_id] = record.size();
    store::EtcdSeenHost& host = record.emplace_back();
    host.set_host_id(host_id);
    host.set_last_report_unix_ns(absl::ToUnixNanos(seen.time));
    host.set_problem(seen.problem);
    host.set_applied_revision(seen.applied_revision);
  }
  for (const std::string& host_id : connected) {
    auto it = index.find(host_id);
    if (it != index.end()) {
      record[it->second].set_connected(true);
      continue;
    }
    store::EtcdSeenHost& host = record.emplace_back();
    host.set_host_id(host_id);
    host.set_connected(true);
  }
  return record;
}

void HostLiveness::SetOthers(const std::vector<store::EtcdSeen>& others) {
  absl::flat_hash_map<std::string, Seen> merged;
  for (const store::EtcdSeen& record : others) {
    for (const store::EtcdSeenHost& host : record.hosts()) {
      Seen seen;
      if (host.last_report_unix_ns() != 0) {
        seen.time = absl::FromUnixNanos(host.last_report_unix_ns());
      }
      seen.problem = host.problem();
      seen.applied_revision = host.applied_revision();
      seen.connected = host.connected();
      seen.replica = record.replica();
      if (seen.connected) {
        seen.connected_to = record.replica();
        seen.connected_as_of = absl::FromUnixNanos(record.written_unix_ns());
      }
      auto [it, inserted] = merged.try_emplace(host.host_id(), seen);
      if (inserted) continue;
      // Its agent moved between replicas: the latest Report speaks, and
      // it is connected if either holds its stream.
      // By the newest record that says so.
      const bool connected = it->second.connected || seen.connected;
      const bool newer_stream =
          seen.connected && (!it->second.connected ||
                             seen.connected_as_of > it->second.connected_as_of);
      const std::string connected_to =
          newer_stream ? seen.connected_to : it->second.connected_to;
      const absl::Time connected_as_of =
          newer_stream ? seen.connected_as_of : it->second.connected_as_of;
      if (seen.time > it->second.time) it->second = std::move(seen);
      it->second.connected = connected;
      it->second.connected_to = connected_to;
      it->second.connected_as_of = connected_as_of;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  others_ = std::move(merged);
}

}  // namespace cosched::server
