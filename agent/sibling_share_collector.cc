#include "agent/sibling_share_collector.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log_every.h"
#include "host/topology.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace cosched::agent {
namespace {

using telemetry::GroupId;
using telemetry::kHostGroup;

absl::Status Annotate(const absl::Status& status, absl::string_view what) {
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

// The host topology in the calculator's form: CPUs 0..N-1, those the host
// topology does not list (offline) each a core of its own.
absl::StatusOr<telemetry::CpuTopology> CalculatorTopology(const v1::Topology& topology,
                                                          int trace_cpus) {
  int num_cpus = trace_cpus;
  for (const v1::Core& core : topology.cores())
    for (int cpu : core.cpus()) num_cpus = std::max(num_cpus, cpu + 1);
  std::vector<std::vector<int>> lists(num_cpus);
  for (const v1::Core& core : topology.cores())
    for (int cpu : core.cpus()) lists[cpu].assign(core.cpus().begin(), core.cpus().end());
  for (int cpu = 0; cpu < num_cpus; ++cpu)
    if (lists[cpu].empty()) lists[cpu] = {cpu};
  return telemetry::CpuTopology::FromSiblingLists(lists);
}

void CopyShare(const telemetry::SiblingShareStats& s, v1::SiblingShare* out) {
  out->set_run_ns(s.run_ns);
  out->set_same_ns(s.same_ns);
  out->set_idle_ns(s.idle_ns);
  out->set_foreign_ns(s.foreign_ns);
  out->set_unknown_ns(s.unknown_ns);
  out->set_foreign_intervals(s.foreign_intervals);
  out->set_longest_foreign_ns(s.longest_foreign_ns);
}

}  // namespace

SiblingShareCollector::SiblingShareCollector(SiblingShareCollectorOptions options,
                                             v1::Topology topology, host::SchedTrace* trace,
                                             const host::PseudoFs* fs, CollectedVmSource vms,
                                             StatsWindowQueue* queue)
    : options_(std::move(options)),
      topology_(std::move(topology)),
      trace_(trace),
      fs_(fs),
      vms_source_(std::move(vms)),
      queue_(queue),
      forced_idle_(fs, options_.procfs_root, options_.cgroupfs_root) {}

SiblingShareCollector::~SiblingShareCollector() { Stop(); }

absl::Status SiblingShareCollector::Open() {
  if (opened_) return absl::FailedPreconditionError("collector already open");
  if (options_.enable_schedstats) {
    absl::Status schedstats = trace_->EnableSchedstats();
    if (schedstats.ok()) {
      LOG(INFO) << "turned schedstats on (telemetry.enable_schedstats)";
    } else {
      LOG(WARNING) << "cannot turn schedstats on: " << schedstats
                   << "; forced idle is not measured";
    }
  }
  ASSIGN_OR_RETURN(format_, trace_->Start(options_.trace));
  absl::Status ready = [&]() -> absl::Status {
    absl::StatusOr<telemetry::SchedSwitchLayout> layout =
        telemetry::SchedSwitchLayout::FromFormat(format_.sched_switch_format);
    if (!layout.ok()) return Annotate(layout.status(), "events/sched/sched_switch/format");
    absl::StatusOr<telemetry::PageHeaderLayout> header =
        telemetry::PageHeaderLayout::FromHeaderPage(format_.header_page);
    if (!header.ok()) return Annotate(header.status(), "events/header_page");
    if (format_.page_size < header->data_offset)
      return absl::InvalidArgumentError(
          absl::StrCat("ring-buffer page of ", format_.page_size, " bytes is shorter than its header"));
    absl::StatusOr<telemetry::CpuTopology> cpus = CalculatorTopology(topology_, format_.num_cpus);
    if (!cpus.ok()) return Annotate(cpus.status(), "host topology");
    core_index_.assign(cpus->num_cores(), -1);
    for (int i = 0; i < topology_.cores_size(); ++i)
      if (topology_.cores(i).cpus_size() > 0)
        core_index_[cpus->core_of(topology_.cores(i).cpus(0))] = i;
    reader_ = std::make_unique<telemetry::RingBufferPageReader>(*header, *layout);
    merger_ = std::make_unique<telemetry::SchedSwitchMerger>(*cpus);
    calculator_ = std::make_unique<telemetry::SiblingShareCalculator>(
        *cpus, [this](int32_t tid) -> GroupId {
          auto it = tid_group_.find(tid);
          return it == tid_group_.end() ? kHostGroup : it->second;
        });
    return absl::OkStatus();
  }();
  if (!ready.ok()) {
    trace_->Stop();
    return ready;
  }
  page_.assign(format_.page_size, 0);
  group_vm_.assign(1, "");  // group 0: the host
  RefreshVms(true);
  watermark_ns_ = window_start_ns_ = trace_->NowNs();
  opened_ = true;
  return absl::OkStatus();
}

absl::Status SiblingShareCollector::Start() {
  RETURN_IF_ERROR(Open());
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void SiblingShareCollector::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (opened_) {
    trace_->Stop();
    opened_ = false;
  }
}

void SiblingShareCollector::Run() {
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    Poll();
    lock.lock();
    next += next_poll_delay();
    // After a stall, poll again at once but do not try to catch up.
    next = std::max(next, std::chrono::steady_clock::now());
    wake_.wait_until(lock, next, [this] { return stopping_; });
  }
}

int64_t SiblingShareCollector::pages_after_loss() const {
  return reader_ ? reader_->counts().pages_after_loss : 0;
}

GroupId SiblingShareCollector::GroupFor(const std::string& vm_id) {
  auto [it, inserted] = vm_groups_.try_emplace(vm_id, 0);
  if (!inserted) return it->second;
  if (!free_groups_.empty()) {
    it->second = free_groups_.back();
    free_groups_.pop_back();
    group_vm_[it->second] = vm_id;
  } else {
    it->second = static_cast<GroupId>(group_vm_.size());
    group_vm_.push_back(vm_id);
  }
  return it->second;
}

void SiblingShareCollector::RefreshVms(bool force) {
  const auto now = std::chrono::steady_clock::now();
  const int64_t version = options_.vms_version ? options_.vms_version() : vms_version_;
  if (!force && now < next_refresh_ && version == vms_version_) return;
  absl::StatusOr<std::vector<CollectedVm>> vms = vms_source_();
  if (vms.ok()) {
    next_refresh_ = now + options_.vm_refresh_interval;
    vms_version_ = version;
  } else {
    // Asked again at the next poll. At start the first reconcile pass is
    // usually still running: nothing to warn about.
    if (vms_known_) {
      COSCHED_LOG_EVERY_T(WARNING, 60) << "collector keeps the previous VM list: " << vms.status();
    }
    return;
  }
  vms_ = std::move(*vms);
  vms_known_ = true;
  absl::flat_hash_map<std::string, GroupId> previous = std::move(vm_groups_);
  vm_groups_.clear();
  for (const CollectedVm& vm : vms_) {
    auto it = previous.find(vm.vm_id);
    if (it != previous.end()) {
      vm_groups_.emplace(vm.vm_id, it->second);
      previous.erase(it);
      continue;
    }
    // Back before its last window closed (discovery missed it once).
    auto back = std::find_if(leaving_groups_.begin(), leaving_groups_.end(),
                             [&](GroupId g) { return group_vm_[g] == vm.vm_id; });
    if (back != leaving_groups_.end()) {
      vm_groups_.emplace(vm.vm_id, *back);
      leaving_groups_.erase(back);
    }
  }
  // VMs gone keep their id until their last window is out.
  for (const auto& [vm_id, group] : previous) leaving_groups_.push_back(group);
  tid_group_.clear();
  // Sharing keys: the host 0, then one per trust group, one per VM without.
  std::map<std::string, telemetry::SharingKey> trust_keys;
  telemetry::SharingKey next_key = 1;
  for (const CollectedVm& vm : vms_) {
    const GroupId group = GroupFor(vm.vm_id);
    telemetry::SharingKey key;
    if (vm.trust_group.empty()) {
      key = next_key++;
    } else {
      auto [k, inserted] = trust_keys.try_emplace(vm.trust_group, next_key);
      if (inserted) ++next_key;
      key = k->second;
    }
    calculator_->SetSharingKey(group, key);
    for (int tid : vm.tids) tid_group_[tid] = group;
  }
  calculator_->Reclassify();
}

int64_t SiblingShareCollector::Poll() {
  if (!opened_) return 0;
  RefreshVms(false);
  // Taken before reading: every event stamped before it (less the settle
  // time) is in the buffers by the time each is read.
  const int64_t watermark =
      trace_->NowNs() -
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.settle + options_.lag).count();
  int64_t events = 0;
  // At most one buffer's worth per CPU and poll, so a flood cannot keep the
  // loop on one CPU; what is left waits for the next poll.
  const size_t buffer_pages = std::max<size_t>(
      1, static_cast<size_t>(options_.trace.buffer_size_kb) * 1024 / format_.page_size);
  const size_t max_pages = buffer_pages + 1;
  busy_ = false;
  for (int cpu = 0; cpu < format_.num_cpus; ++cpu) {
    size_t pages = 0;
    for (; pages < max_pages; ++pages) {
      absl::StatusOr<size_t> n = trace_->ReadPage(cpu, page_);
      if (!n.ok()) {
        COSCHED_LOG_EVERY_T(WARNING, 60) << n.status();
        break;
      }
      if (*n == 0) break;
      absl::Status read = reader_->ReadPage(
          std::span<const uint8_t>(page_.data(), *n), cpu,
          [this, cpu, &events](const telemetry::SchedSwitch& ev,
                               const telemetry::SchedSwitchComms&) {
            merger_->Add(cpu, ev);
            ++events;
          });
      if (!read.ok()) {
        COSCHED_LOG_EVERY_T(WARNING, 60) << read;
      }
    }
    if (4 * pages >= buffer_pages) busy_ = true;
  }
  events_read_ += events;
  if (watermark > watermark_ns_) {
    watermark_ns_ = watermark;
    merger_->EmitUntil(watermark_ns_,
                       [this](const telemetry::SchedSwitch& ev) { calculator_->Add(ev); });
  }
  const int64_t window_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.window).count();
  if (!vms_known_ || watermark_ns_ - window_start_ns_ >= window_ns) CloseWindow();
  return events;
}

void SiblingShareCollector::CloseWindow() {
  if (!opened_) return;
  if (!vms_known_) {
    // Until the agent's first reconcile pass names the VMs (seconds on a
    // busy host), every VM thread would count as the host's: the events
    // only set each CPU's state, and the first window starts after.
    calculator_->TakeWindow(watermark_ns_);
    window_start_ns_ = watermark_ns_;
    return;
  }
  FinishWindow(calculator_->TakeWindow(watermark_ns_));
  window_start_ns_ = watermark_ns_;
  for (GroupId group : leaving_groups_) {
    group_vm_[group].clear();
    free_groups_.push_back(group);
  }
  leaving_groups_.clear();
}

void SiblingShareCollector::FinishWindow(const telemetry::SiblingShareWindow& window) {
  absl::StatusOr<bool> schedstats = host::ReadSchedstatsEnabled(*fs_, options_.procfs_root);
  std::vector<std::optional<int64_t>> forced_idle(vms_.size());
  if (schedstats.ok() && *schedstats) {
    std::vector<ForcedIdleSource> sources;
    sources.reserve(vms_.size());
    for (const CollectedVm& vm : vms_) sources.push_back({&vm.tids, &vm.cgroup});
    forced_idle = forced_idle_.Sample(sources);
  }
  absl::flat_hash_map<GroupId, const std::optional<int64_t>*> forced_by_group;
  for (size_t i = 0; i < vms_.size(); ++i) {
    auto it = vm_groups_.find(vms_[i].vm_id);
    if (it != vm_groups_.end()) forced_by_group[it->second] = &forced_idle[i];
  }

  // The wall clock of a window's end is read now; its start is exactly the
  // previous window's end. Reading the offset again for the start would
  // jitter by the time between two clock reads, and csd ignores a window
  // that starts before the previous one ended (it takes it for a repeat).
  const int64_t offset = trace_->UnixOffsetNs();
  const int64_t start_unix =
      last_end_unix_ns_ != 0 ? last_end_unix_ns_ : window_start_ns_ + offset;
  const int64_t end_unix = std::max(watermark_ns_ + offset, start_unix + 1);
  last_end_unix_ns_ = end_unix;
  v1::StatsWindow out;
  out.set_start_unix_ns(start_unix);
  out.set_end_unix_ns(end_unix);
  for (GroupId group = 1; group < group_vm_.size(); ++group) {
    if (group_vm_[group].empty()) continue;
    const telemetry::SiblingShareStats stats =
        group < window.groups.size() ? window.groups[group] : telemetry::SiblingShareStats{};
    auto forced = forced_by_group.find(group);
    const bool known = forced != forced_by_group.end() && forced->second->has_value();
    if (stats.run_ns == 0 && !(known && **forced->second > 0)) continue;
    v1::VMStats* vm = out.add_vms();
    vm->set_vm_id(group_vm_[group]);
    CopyShare(stats, vm->mutable_share());
    vm->mutable_share()->set_forced_idle_known(known);
    if (known) vm->mutable_share()->set_forced_idle_ns(**forced->second);
  }
  // Both number cores by their lowest CPU, so these come in Topology order.
  for (size_t core = 0; core < window.cores.size(); ++core) {
    if (core_index_[core] < 0) continue;
    const telemetry::CoreShareStats& c = window.cores[core];
    v1::CoreShare* share = out.add_cores();
    share->set_core(core_index_[core]);
    share->set_both_busy_ns(c.both_busy_ns);
    share->set_one_idle_ns(c.one_idle_ns);
    share->set_both_idle_ns(c.both_idle_ns);
    share->set_unknown_ns(c.unknown_ns);
  }
  out.set_events(window.events);
  const int64_t lost_pages = pages_after_loss() - lost_pages_reported_;
  lost_pages_reported_ = pages_after_loss();
  out.set_lost_events(lost_pages + window.inconsistent_events);
  if (options_.on_window) options_.on_window(out);
  queue_->Push(std::move(out));
}

}  // namespace cosched::agent
