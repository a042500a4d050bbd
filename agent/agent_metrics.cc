#include "agent/agent_metrics.h"

#include <algorithm>
#include <set>
#include <utility>

#include "common/names.h"
#include "metrics/build_info.h"

namespace cosched::agent {
namespace {

constexpr double kNsPerSecond = 1e9;

constexpr std::array<v1::EnforcementState, 11> kStates = {
    v1::ENFORCEMENT_STATE_ENFORCED,    v1::ENFORCEMENT_STATE_PARTIAL,
    v1::ENFORCEMENT_STATE_FAILED,      v1::ENFORCEMENT_STATE_FAIL_CLOSED,
    v1::ENFORCEMENT_STATE_PENDING,     v1::ENFORCEMENT_STATE_HELD,
    v1::ENFORCEMENT_STATE_WAIVED,      v1::ENFORCEMENT_STATE_NOT_ENABLED, v1::ENFORCEMENT_STATE_OFF,
    v1::ENFORCEMENT_STATE_OBSERVED,    v1::ENFORCEMENT_STATE_UNSPECIFIED};

constexpr std::array<const char*, 4> kSharing = {"same", "idle", "foreign",
                                                 "unknown"};
constexpr std::array<const char*, 4> kCoreStates = {"both_busy", "one_idle",
                                                    "both_idle", "unknown"};
constexpr std::array<const char*, 3> kStateUnusableReasons = {
    "corrupt", "unreadable", "state_dir"};
constexpr std::array<const char*, 5> kThreadStatus = {
    "found", "tagged", "wrong", "untaggable", "unverified"};

// A pass takes from a few hundred microseconds (nothing to write) to
// seconds (thousands of threads to move).
prometheus::Histogram::BucketBoundaries ReconcileBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,     10};
}

double Seconds(int64_t ns) { return static_cast<double>(ns) / kNsPerSecond; }

}  // namespace

AgentMetrics::AgentMetrics(std::function<bool()> csd_connected,
                           std::function<bool()> csd_refused, metrics::TlsFiles tls)
    : registry_(std::make_shared<prometheus::Registry>()),
      scrape_gauges_(std::make_shared<metrics::ScrapeGauges>()),
      rpc_(*registry_, metrics::GrpcMetrics::Side::kClient,
           {v1::ReportRequest::descriptor()->file()}),
      vms_(prometheus::BuildGauge()
               .Name("cosched_agent_vms")
               .Help("VMs on this host by enforcement state, as of the last "
                     "reconcile pass.")
               .Register(*registry_)),
      threads_(prometheus::BuildGauge()
                   .Name("cosched_agent_threads")
                   .Help("Threads of VMs in scope by status (found, tagged, "
                         "wrong, untaggable, unverified: given their cookie "
                         "while the kernel reads cookies back as 0), as of "
                         "the last reconcile pass.")
                   .Register(*registry_)),
      readback_blind_(
          prometheus::BuildGauge()
              .Name("cosched_agent_cookie_readback_blind")
              .Help("1 while the kernel reads every cookie back as 0 (a cookie "
                    "just created reads 0: Linux 6.1's PR_SCHED_CORE_GET "
                    "before its pointer-hash key is ready, early after boot "
                    "on a host short of entropy). Cookies are then set once "
                    "per thread and cannot be verified; VMs show pending.")
              .Register(*registry_)
              .Add({})),
      impostors_(prometheus::BuildGauge()
                     .Name("cosched_agent_impostor_processes")
                     .Help("Processes that claim to be a VM and are not believed (not an "
                           "allowed VMM binary or user, not libvirt's process for the "
                           "domain, or a second claim of a VM's name), each isolated on "
                           "a cookie of its own, as of the last reconcile pass. Not 0: "
                           "something on the host is posing as a VM.")
                     .Register(*registry_)
                     .Add({})),
      prctl_writes_(prometheus::BuildCounter()
                        .Name("cosched_agent_prctl_writes_total")
                        .Help("prctl(PR_SCHED_CORE) calls that change a cookie "
                              "(create, share to, share from).")
                        .Register(*registry_)
                        .Add({})),
      prctl_reads_(prometheus::BuildCounter()
                       .Name("cosched_agent_prctl_reads_total")
                       .Help("prctl(PR_SCHED_CORE_GET) calls reading a cookie "
                             "back.")
                       .Register(*registry_)
                       .Add({})),
      threads_moved_(prometheus::BuildCounter()
                         .Name("cosched_agent_threads_moved_total")
                         .Help("Threads whose cookie a reconcile pass changed.")
                         .Register(*registry_)
                         .Add({})),
      passes_(prometheus::BuildCounter()
                  .Name("cosched_agent_reconcile_passes_total")
                  .Help("Reconcile passes by what triggered them (start, "
                        "request, process_event, rescan).")
                  .Register(*registry_)),
      discovery_failures_(prometheus::BuildCounter()
                              .Name("cosched_agent_discovery_failures_total")
                              .Help("Reconcile passes that could not list the "
                                    "host's VMs (cookies were left as they "
                                    "were).")
                              .Register(*registry_)
                              .Add({})),
      reconcile_seconds_(prometheus::BuildHistogram()
                             .Name("cosched_agent_reconcile_duration_seconds")
                             .Help("Duration of a reconcile pass: discovery, "
                                   "cookies, dedicated cores.")
                             .Register(*registry_)
                             .Add({}, ReconcileBuckets())),
      vm_run_(prometheus::BuildCounter()
                  .Name("cosched_vm_run_seconds_total")
                  .Help("Time the VM's threads ran on a CPU (sibling-sharing "
                        "collector).")
                  .Register(*registry_)),
      vm_sibling_(prometheus::BuildCounter()
                      .Name("cosched_vm_sibling_seconds_total")
                      .Help("The VM's run time split by what its SMT sibling "
                            "ran: same trust group, idle, foreign, unknown.")
                      .Register(*registry_)),
      vm_foreign_intervals_(
          prometheus::BuildCounter()
              .Name("cosched_vm_foreign_intervals_total")
              .Help("Stretches during which a sibling of the VM ran something "
                    "foreign.")
              .Register(*registry_)),
      vm_longest_foreign_(
          prometheus::BuildGauge()
              .Name("cosched_vm_longest_foreign_interval_seconds")
              .Help("Longest foreign interval of the VM in the last stats "
                    "window (0 when it did not run).")
              .Register(*registry_)),
      vm_forced_idle_(prometheus::BuildCounter()
                          .Name("cosched_vm_forced_idle_seconds_total")
                          .Help("Idle the VM forced on its SMT siblings: time a "
                                "sibling was kept idle by core scheduling while "
                                "the VM's threads ran, which the kernel charges "
                                "to the running task (needs schedstats).")
                          .Register(*registry_)),
      core_seconds_(prometheus::BuildCounter()
                        .Name("cosched_core_seconds_total")
                        .Help("Time of each physical core (index into the "
                              "host's topology) by how many of its CPUs were "
                              "busy.")
                        .Register(*registry_)),
      windows_(prometheus::BuildCounter()
                   .Name("cosched_agent_stats_windows_total")
                   .Help("Sibling-sharing windows recorded.")
                   .Register(*registry_)
                   .Add({})),
      events_(prometheus::BuildCounter()
                  .Name("cosched_agent_sched_switch_events_total")
                  .Help("sched_switch events the collector read.")
                  .Register(*registry_)
                  .Add({})),
      lost_events_(prometheus::BuildCounter()
                       .Name("cosched_agent_sched_switch_lost_events_total")
                       .Help("sched_switch events lost (dropped by the kernel "
                             "or missing a predecessor).")
                       .Register(*registry_)
                       .Add({})),
      state_unusable_(
          prometheus::BuildCounter()
              .Name("cosched_agent_state_unusable_total")
              .Help("Start-ups without the assignments kept in the state dir, "
                    "by reason: the state file was corrupt or unreadable (it "
                    "is moved aside to assignments.pb.<reason>-<UTC time> "
                    "when it can be), or the state dir could not be used. "
                    "VMs then fail closed on cookies of their own until csd "
                    "sends its state. Set at start-up: alert on > 0.")
              .Register(*registry_)),
      config_reloads_(prometheus::BuildCounter()
                          .Name("cosched_agent_config_reloads_total")
                          .Help("Reloads of cs-agent.yaml (systemctl reload, SIGHUP), by "
                                "result: applied, or refused (a bad file or a setting that "
                                "needs a restart; nothing of it applied, the log says why).")
                          .Register(*registry_)),
      config_reload_failed_(prometheus::BuildGauge()
                                .Name("cosched_agent_config_reload_failed")
                                .Help("1 when the last reload of cs-agent.yaml was refused: "
                                      "the agent runs on the settings before it, not on what "
                                      "the file says. Alert on 1.")
                                .Register(*registry_)
                                .Add({})) {
  metrics::AddBuildInfo(*registry_);
  metrics::AddCertificateExpiry(*scrape_gauges_, [tls] { return tls; });
  scrape_gauges_->Add(
      "cosched_agent_csd_connected",
      "1 while the agent holds its assignment stream from csd, else 0.",
      [csd_connected = std::move(csd_connected)] {
        return csd_connected && csd_connected() ? 1.0 : 0.0;
      });
  scrape_gauges_->Add(
      "cosched_agent_csd_refused",
      "1 while csd refuses the agent's calls (PERMISSION_DENIED or "
      "UNAUTHENTICATED: its host_id or credentials are wrong), else 0.",
      [csd_refused = std::move(csd_refused)] {
        return csd_refused && csd_refused() ? 1.0 : 0.0;
      });
  for (v1::EnforcementState state : kStates) {
    vms_.Add({{"state", EnforcementStateName(state)}}).Set(0);
  }
  for (const char* status : kThreadStatus) {
    threads_.Add({{"status", status}}).Set(0);
  }
  for (const char* reason : kStateUnusableReasons) {
    state_unusable_.Add({{"reason", reason}});
  }
  for (const char* result : {"applied", "refused"}) config_reloads_.Add({{"result", result}});
}

void AgentMetrics::RecordConfigReload(bool applied) {
  config_reloads_.Add({{"result", applied ? "applied" : "refused"}}).Increment();
  config_reload_failed_.Set(applied ? 0 : 1);
}

void AgentMetrics::RecordStateUnusable(const std::string& reason) {
  state_unusable_.Add({{"reason", reason}}).Increment();
}

std::vector<std::shared_ptr<prometheus::Collectable>>
AgentMetrics::collectables() const {
  return {registry_, scrape_gauges_};
}

void AgentMetrics::RecordReconcilePass(const PassRecord& pass) {
  passes_.Add({{"trigger", PassTriggerName(pass.trigger)}}).Increment();
  reconcile_seconds_.Observe(
      std::chrono::duration<double>(pass.duration).count());
  if (!pass.discovery.ok() || pass.result == nullptr) {
    discovery_failures_.Increment();
    return;
  }
  const ReconcileResult& result = *pass.result;
  std::map<v1::EnforcementState, int> by_state;
  std::array<int64_t, kThreadStatus.size()> threads{};
  std::set<std::string> present;
  for (const VmOutcome& vm : result.vms) {
    const v1::VMEnforcement& e = vm.enforcement;
    ++by_state[e.state()];
    threads[0] += e.threads_found();
    threads[1] += e.threads_tagged();
    threads[2] += e.threads_wrong();
    threads[3] += e.threads_untaggable();
    present.insert(vm.vm_id);
  }
  threads[4] = result.stats.threads_unverified;
  readback_blind_.Set(result.stats.readback_blind ? 1 : 0);
  impostors_.Set(pass.impostors);
  for (v1::EnforcementState state : kStates) {
    vms_.Add({{"state", EnforcementStateName(state)}}).Set(by_state[state]);
  }
  for (size_t i = 0; i < kThreadStatus.size(); ++i) {
    threads_.Add({{"status", kThreadStatus[i]}})
        .Set(static_cast<double>(threads[i]));
  }
  prctl_writes_.Increment(result.stats.cookie_writes);
  prctl_reads_.Increment(result.stats.cookie_reads);
  threads_moved_.Increment(result.stats.threads_changed);

  // A VM gone from the host takes its series with it.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = vm_series_.begin(); it != vm_series_.end();) {
    if (present.count(it->first) == 0) {
      RemoveVmSeriesLocked(it->second);
      it = vm_series_.erase(it);
    } else {
      ++it;
    }
  }
}

AgentMetrics::VmSeries AgentMetrics::MakeVmSeriesLocked(
    const std::string& vm_id, const std::string& trust_group) {
  const prometheus::Labels labels = {{"vm", vm_id},
                                     {"trust_group", trust_group}};
  VmSeries series;
  series.trust_group = trust_group;
  series.run = &vm_run_.Add(labels);
  for (size_t i = 0; i < kSharing.size(); ++i) {
    prometheus::Labels with_sharing = labels;
    with_sharing["sharing"] = kSharing[i];
    series.sibling[i] = &vm_sibling_.Add(with_sharing);
  }
  series.foreign_intervals = &vm_foreign_intervals_.Add(labels);
  series.longest_foreign = &vm_longest_foreign_.Add(labels);
  return series;
}

void AgentMetrics::RemoveVmSeriesLocked(const VmSeries& series) {
  vm_run_.Remove(series.run);
  for (prometheus::Counter* c : series.sibling) vm_sibling_.Remove(c);
  vm_foreign_intervals_.Remove(series.foreign_intervals);
  vm_longest_foreign_.Remove(series.longest_foreign);
  if (series.forced_idle != nullptr) vm_forced_idle_.Remove(series.forced_idle);
}

void AgentMetrics::RecordStatsWindow(
    const v1::StatsWindow& window,
    const std::function<std::string(const std::string& vm_id)>&
        trust_group_of) {
  windows_.Increment();
  events_.Increment(static_cast<double>(std::max<int64_t>(window.events(), 0)));
  lost_events_.Increment(
      static_cast<double>(std::max<int64_t>(window.lost_events(), 0)));

  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> in_window;
  for (const v1::VMStats& vm : window.vms()) {
    if (vm.vm_id().empty()) continue;
    const std::string group = trust_group_of ? trust_group_of(vm.vm_id()) : "";
    auto it = vm_series_.find(vm.vm_id());
    if (it != vm_series_.end() && it->second.trust_group != group) {
      RemoveVmSeriesLocked(it->second);
      vm_series_.erase(it);
      it = vm_series_.end();
    }
    if (it == vm_series_.end()) {
      it = vm_series_.emplace(vm.vm_id(), MakeVmSeriesLocked(vm.vm_id(), group))
               .first;
    }
    VmSeries& series = it->second;
    const v1::SiblingShare& share = vm.share();
    // Counters ignore negative increments: a malformed window cannot make
    // them go down.
    series.run->Increment(Seconds(share.run_ns()));
    series.sibling[0]->Increment(Seconds(share.same_ns()));
    series.sibling[1]->Increment(Seconds(share.idle_ns()));
    series.sibling[2]->Increment(Seconds(share.foreign_ns()));
    series.sibling[3]->Increment(Seconds(share.unknown_ns()));
    series.foreign_intervals->Increment(
        static_cast<double>(share.foreign_intervals()));
    series.longest_foreign->Set(
        Seconds(std::max<int64_t>(share.longest_foreign_ns(), 0)));
    if (share.forced_idle_known()) {
      if (series.forced_idle == nullptr) {
        series.forced_idle = &vm_forced_idle_.Add(
            {{"vm", vm.vm_id()}, {"trust_group", group}});
      }
      series.forced_idle->Increment(Seconds(share.forced_idle_ns()));
    }
    in_window.insert(vm.vm_id());
  }
  // A VM that did not run in this window had no foreign interval in it.
  for (auto& [vm_id, series] : vm_series_) {
    if (in_window.count(vm_id) == 0) series.longest_foreign->Set(0);
  }

  for (const v1::CoreShare& core : window.cores()) {
    if (core.core() < 0) continue;
    auto it = core_series_.find(core.core());
    if (it == core_series_.end()) {
      CoreSeries series;
      for (size_t i = 0; i < kCoreStates.size(); ++i) {
        series[i] = &core_seconds_.Add(
            {{"core", std::to_string(core.core())}, {"state", kCoreStates[i]}});
      }
      it = core_series_.emplace(core.core(), series).first;
    }
    it->second[0]->Increment(Seconds(core.both_busy_ns()));
    it->second[1]->Increment(Seconds(core.one_idle_ns()));
    it->second[2]->Increment(Seconds(core.both_idle_ns()));
    it->second[3]->Increment(Seconds(core.unknown_ns()));
  }
}

}  // namespace cosched::agent
