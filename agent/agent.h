// cs-agent as a library: wires host access, the kernel interface, VM
// discovery, the assignment cache and the session with csd. The cs-agent
// binary and in-process tests both drive it through AgentOptions.
#ifndef COSCHED_AGENT_AGENT_H_
#define COSCHED_AGENT_AGENT_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/agent_metrics.h"
#include "agent/assignment_cache.h"
#include "agent/cookie_reconciler.h"
#include "agent/hazard_watch.h"
#include "agent/host_enablement.h"
#include "agent/dedicated_cores.h"
#include "agent/reconcile_loop.h"
#include "agent/server_session.h"
#include "agent/sibling_share_collector.h"
#include "agent/stats_window_queue.h"
#include "cosched/v1/config.pb.h"
#include "cosched/v1/types.pb.h"
#include "discovery/vm_discovery.h"
#include "discovery/vmm_identity.h"
#include "host/core_sched.h"
#include "host/cpu_affinity.h"
#include "host/process_events.h"
#include "host/pseudo_fs.h"
#include "host/sched_trace.h"
#include "host/state_fs.h"
#include "metrics/metrics_http.h"

namespace cosched::agent {

inline constexpr char kDefaultServerAddress[] = "127.0.0.1:7443";
inline constexpr char kDefaultStateDir[] = "/var/lib/cs-agent";
inline constexpr char kDefaultMetricsListen[] = "127.0.0.1:9464";
inline constexpr std::chrono::seconds kFirstAnswerWait{30};

struct AgentOptions {
  // Must follow the id rule (common/validation.h).
  std::string host_id;
  // The link to csd: address (default kDefaultServerAddress), TLS, report
  // interval, timeouts, backoff. The agent sets applied_revision and the
  // interceptors itself.
  ServerSessionOptions session = [] {
    ServerSessionOptions defaults;
    defaults.server_address = kDefaultServerAddress;
    return defaults;
  }();
  // Holds assignments.pb; created (mode 0700) when missing. Empty keeps the
  // assignments in memory only (tests). When the dir or the file cannot be
  // used the agent starts all the same, with no assignments (Start()).
  std::string state_dir = kDefaultStateDir;
  // fail_open: leave VMs without a known assignment untagged instead of
  // giving each a cookie of its own. The agent sets smt_active and the probe
  // from the host.
  ReconcilerOptions reconciler;
  // rescan_interval: a full reconcile pass at least this often. The agent
  // sets the callbacks.
  ReconcileLoopOptions loop;
  // host:port of the Prometheus /metrics endpoint; empty: not served (the
  // metrics are still kept, see Agent::metrics()). Port 0 picks a free one.
  std::string metrics_listen;
  std::string sysfs_root = "/sys";
  std::string procfs_root = "/proc";
  // The safety preflight (docs/agent.md, "Preflight"): hazards the operator
  // allows (host::ValidateHazardNames), where the sched_ext state is read
  // (empty: <sysfs_root>/kernel/sched_ext; tests give a stand-in) and how
  // often.
  std::vector<std::string> allow_hazards;
  // Running as a guest (nested virtualization) is a hazard too.
  bool nested_is_hazard = false;
  // The known-bad list's entries (host/known_bad.h, validated), loaded by
  // AgentOptionsFromConfig from known_bad_file.
  std::vector<v1::KnownBadEntry> known_bad;
  std::string sched_ext_dir;
  std::chrono::milliseconds hazard_poll{250};
  // The config's labels (common/labels.h), sent at Register.
  std::map<std::string, std::string> labels;
  // A first start (no assignments and no answer of csd kept): how long the
  // agent makes no cookie while it waits for csd's first answer, so that a
  // host csd holds for a staged rollout is never tagged (docs/operating.md,
  // "First deployment"); then it enforces. Zero: no wait (tests).
  // AgentOptionsFromConfig sets kFirstAnswerWait.
  std::chrono::milliseconds first_answer_wait{0};
  // Which processes may be VMs (vmm_binaries, vmm_users), for the
  // discovery that cs-agent's main builds; tests build their own.
  discovery::VmmRule vmm;

  // What the agent runs against; null picks the real one (LocalPseudoFs,
  // PrctlCoreSched, ...), except for vm_discovery, which must be set.
  std::shared_ptr<host::PseudoFs> host_fs;
  // The state dir's files; null: LocalStateFs.
  std::shared_ptr<host::StateFs> state_fs;
  std::shared_ptr<host::CoreSched> core_sched;
  // For the `dedicated` level's whole cores; null: LinuxCpuAffinity. It is
  // only used once some VM's assignment asks for dedicated cores.
  std::shared_ptr<host::CpuAffinity> cpu_affinity;
  std::shared_ptr<discovery::VmDiscovery> vm_discovery;
  // Null: no event source; the periodic rescan alone finds new threads.
  std::shared_ptr<host::ProcessEventSource> process_events;

  // The sibling-sharing collector, when `telemetry`. When the trace cannot
  // start the agent runs on without it and says why (log,
  // HostCapabilities.telemetry_detail). Of `collector`, poll_interval,
  // trace and enable_schedstats are taken; its windows last
  // session.report_interval, and the agent sets the roots and callbacks.
  bool telemetry = false;
  SiblingShareCollectorOptions collector;
  // Null: the kernel's tracefs.
  std::shared_ptr<host::SchedTrace> sched_trace;

  // Called on the session's thread after each assignment message applied,
  // with the new revision. Must not call Agent::Stop.
  std::function<void(int64_t revision)> on_assignments_changed;
};

// The machine's hostname, the default host id. INTERNAL if it cannot be
// read.
absl::StatusOr<std::string> DefaultHostId();

// Options from a config file's message, with the defaults above for unset
// fields (host id: DefaultHostId(); metrics_listen: kDefaultMetricsListen,
// "off" for none). INVALID_ARGUMENT naming the field for a
// bad value.
absl::StatusOr<AgentOptions> AgentOptionsFromConfig(
    const v1::AgentConfig& config);

// One cs-agent. Start and Stop are called from one thread; the accessors
// are thread-safe.
class Agent {
 public:
  explicit Agent(AgentOptions options);
  ~Agent();

  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Start-up, in order: check options, create the state dir, load the
  // assignments kept there, read the topology and capabilities, probe core
  // scheduling, start the session with csd (which connects in the
  // background, so an absent csd is not an error). The error names the step
  // that failed. A state dir or state file that cannot be used is not an
  // error: exiting would leave every VM started meanwhile untagged while
  // systemd restarts the agent in a loop. The agent then starts with no
  // assignments, so every VM fails closed on a cookie of its own (adopting
  // the one it holds) until csd sends its state; the file is moved aside,
  // and one ERROR line and cosched_agent_state_unusable_total say so.
  // Call once.
  absl::Status Start();
  // Stops the session promptly. Idempotent.
  void Stop();

  // A reload of cs-agent.yaml (SIGHUP; docs/agent.md, "Reloading the
  // configuration"): `next`, from the file as AgentOptionsFromConfig reads
  // it, takes effect at once for the hazard rules (allow_hazards,
  // nested_is_hazard, the known-bad list), on_hazard, fail_open and the
  // labels (the agent registers again). Any other setting that differs
  // needs a restart: FAILED_PRECONDITION naming each, and nothing changes.
  // Returns what changed, for the log ("" when nothing did). Call after a
  // successful Start, from one thread at a time.
  absl::StatusOr<std::string> Reload(const AgentOptions& next);

  // What the agent holds from csd.
  AssignmentMap assignments() const;
  std::optional<v1::Assignment> FindAssignment(absl::string_view vm_id) const;
  // The revision of the last assignment message applied (loaded from the
  // state dir at start).
  int64_t applied_revision() const;
  // Why csd refuses this agent (its host_id does not match its
  // certificate, or csd does not trust its credentials), with what to
  // fix; empty while it does not (also exported as the
  // cosched_agent_csd_refused gauge).
  std::string csd_refusal() const;
  // What csd last said about setting cookies here (HostEnablement);
  // ENFORCE before it said anything.
  v1::HostEnablement enablement() const;
  // Waits until applied_revision() >= `revision`; false on timeout.
  bool WaitForRevision(int64_t revision, std::chrono::milliseconds timeout);

  // Valid after a successful Start.
  const host::CoreSchedProbe& probe() const { return probe_; }
  const v1::Topology& topology() const { return registration_.topology(); }
  const v1::HostCapabilities& capabilities() const {
    return registration_.capabilities();
  }
  // Null before Start.
  const ServerSession* session() const { return session_.get(); }
  const ReconcileLoop* reconcile_loop() const { return loop_.get(); }
  // Asks for a reconcile pass now (e.g. on a libvirt lifecycle event).
  void TriggerReconcile();
  // The assignments as received (valid after Start()).
  const AssignmentCache& cache() const { return *cache_; }
  // The newest sibling-sharing window the collector closed, whether or not
  // csd has it yet; nullopt before the first, or without a collector.
  // Thread-safe, any time.
  std::optional<v1::StatsWindow> latest_stats() const { return stats_queue_.latest(); }
  // Windows waiting for csd to accept a Report.
  const StatsWindowQueue& pending_stats() const { return stats_queue_; }
  // The agent's Prometheus metrics (valid from construction; the sharing
  // statistics come in through AgentMetrics::RecordStatsWindow).
  AgentMetrics& metrics() { return *metrics_; }
  // The port /metrics is served on; 0 when not served.
  int metrics_port() const;

 private:
  absl::Status CheckOptions();
  // Both report what they could not use (log, metric) and never fail.
  void PrepareStateDir();
  void LoadAssignments();
  absl::Status DescribeHost();
  // Starts the collector when configured; its failure is reported, not
  // returned.
  void StartCollector();
  void OnAssignmentsChanged(int64_t revision);
  // The loop's observations with each VM's run state, for the Report.
  absl::StatusOr<std::vector<v1::VMObservation>> ObservationsWithRunStates() const;
  absl::Status ServeMetrics();

  AgentOptions options_;
  // Before everything it observes, so it outlives them.
  std::unique_ptr<AgentMetrics> metrics_;
  std::unique_ptr<metrics::MetricsHttpServer> metrics_server_;
  std::unique_ptr<AssignmentCache> cache_;
  // False when the state dir cannot be used: nothing is loaded from it.
  bool state_dir_usable_ = false;
  host::CoreSchedProbe probe_;
  v1::RegisterRequest registration_;
  std::unique_ptr<HazardWatch> hazard_watch_;
  std::unique_ptr<HostEnablementState> enablement_;
  std::unique_ptr<CookieReconciler> reconciler_;
  std::unique_ptr<DedicatedCoreEnforcer> dedicated_;
  std::unique_ptr<ReconcileLoop> loop_;
  std::unique_ptr<ServerSession> session_;
  StatsWindowQueue stats_queue_;
  std::unique_ptr<SiblingShareCollector> collector_;

  mutable std::mutex mu_;
  std::condition_variable revision_changed_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_AGENT_H_
