#include "tests/bench/fanout_fleet.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cosched::bench {
namespace {

int64_t UnixNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A VM's UUID, fixed by run, host and index (the form libvirt shows).
std::string VmUuid(const std::string& run, int host, int vm) {
  uint64_t run_number = 0;
  (void)absl::SimpleAtoi(run, &run_number);
  char uuid[40];
  std::snprintf(uuid, sizeof(uuid), "%08x-%04x-4%03x-8%03x-%012llx",
                static_cast<unsigned>(run_number), static_cast<unsigned>(vm & 0xffff),
                static_cast<unsigned>((host >> 12) & 0xfff),
                static_cast<unsigned>(host & 0xfff),
                static_cast<unsigned long long>(host) * 1000 + vm);
  return uuid;
}

// The index of a VM of this run's naming within its host; -1 when not one.
int VmIndexOf(absl::string_view vm_id) {
  size_t at = vm_id.rfind("-vm");
  int index = -1;
  if (at == absl::string_view::npos || !absl::SimpleAtoi(vm_id.substr(at + 3), &index)) {
    return -1;
  }
  return index;
}

}  // namespace

SimulatedAgent::SimulatedAgent(Fleet* fleet, int host,
                               v1::AgentService::Stub* stub)
    : fleet_(fleet), host_(host), stub_(stub), random_(static_cast<uint64_t>(host) + 1) {}

void SimulatedAgent::Start() {
  const Fleet::Options& options = fleet_->options();
  const std::string host_id = HostId(options.run, host_);
  register_request_.set_host_id(host_id);
  // Cores numbered by their lowest CPU, siblings n and n + cores, as Linux
  // numbers a two-thread-per-core x86 host.
  for (int c = 0; c < options.reporting.cores; ++c) {
    v1::Core* core = register_request_.mutable_topology()->add_cores();
    core->set_core_id(c);
    core->add_cpus(c);
    core->add_cpus(c + options.reporting.cores);
  }
  register_request_.mutable_capabilities()->set_smt_active(true);
  register_request_.mutable_capabilities()->set_core_sched(
      v1::CORE_SCHED_SUPPORT_SUPPORTED);
  register_request_.set_agent_version("loadgen");
  report_.set_host_id(host_id);
  for (int j = 0; j < options.vms_per_host; ++j) {
    v1::VMObservation* o = report_.add_vms();
    o->set_vm_id(VmId(options.run,
                      static_cast<size_t>(host_) * options.vms_per_host + j,
                      options.vms_per_host));
    o->set_uuid(VmUuid(options.run, host_, j));
    o->set_run_state(v1::VM_RUN_STATE_RUNNING);
    // Untagged: cs-agent keeps it on a cookie of its own (fail closed).
    v1::VMEnforcement* e = o->mutable_enforcement();
    const int vcpus = 2 << (j % 3);  // 2, 4, 8
    e->set_vcpus(vcpus);
    // vCPUs plus QEMU's main, I/O and worker threads.
    e->set_threads_found(vcpus + 6);
    e->set_threads_tagged(vcpus + 6);
    e->set_state(v1::ENFORCEMENT_STATE_FAIL_CLOSED);
  }
  // The collector starts with the agent; its first window is cut short so
  // that hosts' windows end at different times, as agents start at
  // different times.
  window_start_unix_ns_ = UnixNowNs();
  if (options.reporting.window_ns > 0) {
    window_end_unix_ns_ = window_start_unix_ns_ + 1 +
                          static_cast<int64_t>(random_() % options.reporting.window_ns);
  }
  register_context_.set_deadline(DeadlineIn(seconds(60)));
  stub_->async()->Register(&register_context_, &register_request_,
                           &register_response_, [this](grpc::Status status) {
                             if (!status.ok()) {
                               fleet_->SetupDone(status, "Register", true);
                             } else {
                               SetupReport();
                             }
                           });
}

// The first Report, as before the watch: no windows closed yet. Nothing
// else touches report_ until the watch starts.
void SimulatedAgent::SetupReport() {
  report_context_.set_deadline(DeadlineIn(seconds(60)));
  stub_->async()->Report(
      &report_context_, &report_, &report_response_, [this](grpc::Status status) {
        if (!status.ok()) {
          fleet_->SetupDone(status, "Report", true);
          return;
        }
        const ReportingOptions& reporting = fleet_->options().reporting;
        if (reporting.on()) {
          std::lock_guard<std::mutex> lock(mu_);
          auto now = Clock::now();
          earliest_ = now + reporting.min_gap;
          // Spread over the interval: agents that all connected within a
          // few seconds must not all report in the same second.
          next_periodic_ = now + std::chrono::duration_cast<Clock::duration>(
                                     reporting.interval *
                                     (static_cast<double>(random_() % 1000000) / 1e6));
          fleet_->timers().At(next_periodic_, this);
        }
        Watch();
      });
}

void SimulatedAgent::Watch() {
  watch_request_.set_host_id(register_request_.host_id());
  stub_->async()->WatchAssignments(&watch_context_, &watch_request_, this);
  StartRead(&message_);
  StartCall();
}

void SimulatedAgent::OnReadDone(bool ok) {
  if (!ok) return;  // OnDone follows with the status
  int64_t now = NowNs();
  for (const v1::Assignment& a : message_.assignments()) {
    for (const std::string& c : a.interference_classes()) {
      fleet_->ledger()->Arrived(c, now);
    }
  }
  if (fleet_->options().reporting.on()) {
    std::lock_guard<std::mutex> lock(mu_);
    ApplyMessageLocked(message_);
  }
  if (!watching_) {
    watching_ = true;
    fleet_->SetupDone(grpc::Status::OK, "WatchAssignments", false);
  } else {
    fleet_->MessageArrived();
  }
  StartRead(&message_);
}

void SimulatedAgent::ApplyMessageLocked(const v1::WatchAssignmentsResponse& message) {
  auto enforce = [this](int index, const std::string& trust_group) {
    if (index < 0 || index >= report_.vms_size()) return;
    v1::VMEnforcement* e = report_.mutable_vms(index)->mutable_enforcement();
    e->set_applied_trust_group(trust_group);
    e->set_state(trust_group.empty() ? v1::ENFORCEMENT_STATE_FAIL_CLOSED
                                     : v1::ENFORCEMENT_STATE_ENFORCED);
  };
  if (message.kind() == v1::WatchAssignmentsResponse::KIND_SNAPSHOT) {
    for (int i = 0; i < report_.vms_size(); ++i) enforce(i, "");
  }
  for (const v1::Assignment& a : message.assignments()) {
    enforce(VmIndexOf(a.vm_id()), a.trust_group());
  }
  for (const std::string& vm_id : message.removed_vm_ids()) enforce(VmIndexOf(vm_id), "");
  report_.set_applied_revision(message.revision());
  requested_ = true;
  if (!in_flight_) fleet_->timers().At(std::max(Clock::now(), earliest_), this);
}

void SimulatedAgent::CloseWindowsLocked(int64_t now_unix_ns) {
  const ReportingOptions& reporting = fleet_->options().reporting;
  if (!reporting.stats || reporting.window_ns <= 0) return;
  while (window_end_unix_ns_ <= now_unix_ns) {
    windows_.push_back(MakeWindowLocked(window_start_unix_ns_, window_end_unix_ns_));
    window_start_unix_ns_ = window_end_unix_ns_;
    window_end_unix_ns_ += reporting.window_ns;
  }
  // As cs-agent's queue: at most 120, the oldest dropped and counted.
  while (windows_.size() > 120) {
    windows_.pop_front();
    ++dropped_windows_;
  }
}

// Figures of a busy, well isolated host: VMs run 10-60% of their vCPUs,
// siblings mostly idle or the same group, foreign sharing only in switch
// windows of microseconds, forced idle about 1% of run time; cores' four
// states sum to the window.
v1::StatsWindow SimulatedAgent::MakeWindowLocked(int64_t start_unix_ns,
                                                 int64_t end_unix_ns) {
  const double span = static_cast<double>(end_unix_ns - start_unix_ns);
  auto uniform = [this] { return static_cast<double>(random_() % 1000000) / 1e6; };
  v1::StatsWindow w;
  w.set_start_unix_ns(start_unix_ns);
  w.set_end_unix_ns(end_unix_ns);
  for (const v1::VMObservation& o : report_.vms()) {
    v1::VMStats* v = w.add_vms();
    v->set_vm_id(o.vm_id());
    v1::SiblingShare* s = v->mutable_share();
    const double run = span * o.enforcement().vcpus() * (0.1 + 0.5 * uniform());
    const auto same = static_cast<int64_t>(run * 0.1 * uniform());
    const auto foreign = static_cast<int64_t>(run * 0.0002 * uniform());
    const auto unknown = static_cast<int64_t>(run * 0.0001 * uniform());
    s->set_run_ns(static_cast<int64_t>(run));
    s->set_same_ns(same);
    s->set_foreign_ns(foreign);
    s->set_unknown_ns(unknown);
    s->set_idle_ns(static_cast<int64_t>(run) - same - foreign - unknown);
    s->set_foreign_intervals(1 + static_cast<int64_t>(random_() % 500));
    s->set_longest_foreign_ns(2000 + static_cast<int64_t>(random_() % 40000));
    s->set_forced_idle_known(true);
    s->set_forced_idle_ns(static_cast<int64_t>(run * 0.02 * uniform()));
  }
  const int cores = register_request_.topology().cores_size();
  for (int c = 0; c < cores; ++c) {
    v1::CoreShare* share = w.add_cores();
    share->set_core(c);
    const auto both_busy = static_cast<int64_t>(span * 0.4 * uniform());
    const auto one_idle = static_cast<int64_t>(span * 0.4 * uniform());
    const auto unknown = static_cast<int64_t>(span * 0.001 * uniform());
    share->set_both_busy_ns(both_busy);
    share->set_one_idle_ns(one_idle);
    share->set_unknown_ns(unknown);
    share->set_both_idle_ns(static_cast<int64_t>(span) - both_busy - one_idle - unknown);
  }
  // About 2000 switches a second per CPU.
  w.set_events(static_cast<int64_t>(span / 1e9 * 2 * cores * 2000));
  return w;
}

void SimulatedAgent::OnTimer() {
  const ReportingOptions& reporting = fleet_->options().reporting;
  auto* call = new ReportCall();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = Clock::now();
    const bool due = now >= next_periodic_ || (requested_ && now >= earliest_);
    if (in_flight_ || !due) {
      delete call;
      return;
    }
    // Never closer than min_gap, periodic or not.
    if (now < earliest_) {
      fleet_->timers().At(earliest_, this);
      delete call;
      return;
    }
    if (!fleet_->ReportStarting()) {
      delete call;
      return;
    }
    // As ServerSession::ReportLoop: requests that came meanwhile fold into
    // this Report, and the interval starts again from it.
    call->after_watch = requested_ && now < next_periodic_;
    requested_ = false;
    next_periodic_ = now + reporting.interval;
    in_flight_ = true;
    CloseWindowsLocked(UnixNowNs());
    call->request = report_;
    for (const v1::StatsWindow& w : windows_) *call->request.add_stats() = w;
    call->request.set_dropped_windows(dropped_windows_);
    call->windows = static_cast<int>(windows_.size());
  }
  call->context.set_deadline(DeadlineIn(seconds(30)));
  call->sent_ns = NowNs();
  stub_->async()->Report(&call->context, &call->request, &call->response,
                         [this, call](grpc::Status status) { ReportDone(call, status); });
}

std::string SimulatedAgent::ReplaceVm(int slot, const std::string& vm_id,
                                      const std::string& uuid) {
  std::lock_guard<std::mutex> lock(mu_);
  v1::VMObservation* o = report_.mutable_vms(slot);
  std::string deleted = o->vm_id();
  o->set_vm_id(vm_id);
  o->set_uuid(uuid);
  v1::VMEnforcement* e = o->mutable_enforcement();
  e->clear_applied_trust_group();
  e->set_state(v1::ENFORCEMENT_STATE_FAIL_CLOSED);
  if (fleet_->options().reporting.on()) {
    requested_ = true;
    if (!in_flight_) fleet_->timers().At(std::max(Clock::now(), earliest_), this);
  }
  return deleted;
}

std::pair<std::string, std::string> Fleet::ReplaceVm(int agent, int slot, int64_t sequence) {
  std::string created = ChurnVmId(options_.run, agent, slot, sequence);
  // Unique per churn: the sequence in the last group, above any VmUuid's.
  uint64_t run_number = 0;
  (void)absl::SimpleAtoi(options_.run, &run_number);
  char uuid[40];
  std::snprintf(uuid, sizeof(uuid), "%08x-ffff-4fff-8fff-%012llx",
                static_cast<unsigned>(run_number), static_cast<unsigned long long>(sequence));
  std::string deleted = agents_[static_cast<size_t>(agent)]->ReplaceVm(slot, created, uuid);
  return {std::move(deleted), std::move(created)};
}

void SimulatedAgent::ReportDone(ReportCall* call, const grpc::Status& status) {
  const int64_t latency_us = (NowNs() - call->sent_ns) / 1000;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_ = false;
    earliest_ = Clock::now() + fleet_->options().reporting.min_gap;
    // Accepted windows leave the queue; refused ones go again next time,
    // as cs-agent's StatsWindowQueue.
    if (status.ok()) {
      windows_.erase(windows_.begin(),
                     windows_.begin() + std::min<size_t>(call->windows, windows_.size()));
      dropped_windows_ = 0;
    }
    fleet_->timers().At(next_periodic_, this);
    if (requested_) fleet_->timers().At(earliest_, this);
  }
  fleet_->ReportFinished(status, call->after_watch, call->windows, latency_us);
  delete call;
}

void SimulatedAgent::OnDone(const grpc::Status& status) {
  if (!watching_) {
    fleet_->SetupDone(
        status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL,
                                   "the stream ended before its first message")
                    : status,
        "WatchAssignments", false);
  }
  fleet_->WatchEnded(status, watching_);
}

}  // namespace cosched::bench
