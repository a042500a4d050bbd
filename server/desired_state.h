// csd's domain logic over the Store: validates requests, applies the policy
// rules, and keeps assignments, hosts and the change log consistent. Knows
// nothing of gRPC, so tests and fuzzers drive it directly.
#ifndef COSCHED_SERVER_DESIRED_STATE_H_
#define COSCHED_SERVER_DESIRED_STATE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cosched/v1/agent.pb.h"
#include "cosched/v1/control_plane.pb.h"
#include "policy/placement.h"
#include "server/host_enablement.h"
#include "server/host_liveness.h"
#include "server/report_rate_limit.h"
#include "server/placement_view.h"
#include "server/rollout_view.h"
#include "server/stats_aggregator.h"
#include "store/store.h"

namespace cosched::server {

// The audit trail's `who` of the policy engine's decisions.
inline constexpr char kEngineActor[] = "csd:engine";

// Who asks for a change: written to the audit trail with it.
struct Actor {
  std::string who;
  // The role acted with ("host" for an agent).
  std::string role;
};

// One VM's layout as the policy engine decided it, against the VM as it
// was at `expected_revision` (its assignment's revision when planned).
struct LayoutChange {
  std::string vm_id;
  int64_t expected_revision = 0;
  v1::IsolationLevel isolation = v1::ISOLATION_LEVEL_UNSPECIFIED;
  std::string trust_group;
  // The host's CPUs its vCPUs are pinned to (Assignment.pin on the host
  // planned); empty: not pinned.
  std::vector<int> pin_cpus;
  // Reasons and predicted figures; decided_by and decided_at are set by
  // ApplyLayout.
  v1::LayoutDecision decision;
};

// Thread-safe (the Store serialises writes). Every method validates its
// input first: INVALID_ARGUMENT names the field and the rule, and nothing is
// written. Writes are asynchronous: `done` runs once the change is durable
// (on the store's completion thread) or has failed, with nothing
// half-written.
// Every change is audited: an AuditRecord naming the actor, the record
// before and after, is written in the change's own transaction and logged.
class DesiredState {
 public:
  template <typename T>
  using Done = std::function<void(absl::StatusOr<T>)>;

  // `stats_clock` is the clock of the stats kept in memory (tests set it;
  // nullptr: the system clock). `placement` configures Place (class
  // conflicts); the view stays empty until LoadPlacement.
  explicit DesiredState(store::Store* store,
                        StatsAggregator::Clock stats_clock = nullptr,
                        policy::PlacementOptions placement = {})
      : store_(store),
        stats_(stats_clock),
        forwarded_stats_(std::move(stats_clock)),
        conflicts_(placement.conflicts),
        placement_(std::move(placement)) {}

  // Builds the placement view from the store (csd calls it once at start,
  // before serving); from then on every committed write keeps it current.
  // Also reads the staged rollout (rollout()).
  absl::Status LoadPlacement() {
    absl::Status loaded = placement_.Load(*store_);
    if (loaded.ok()) loaded = rollout_.Load(*store_);
    return loaded;
  }
  const PlacementView& placement() const { return placement_; }

  // Idempotent upsert. FAILED_PRECONDITION when the tenant's policy forbids
  // the level or the VM is tagged for another tenant.
  void TagVm(const v1::TagVMRequest& request, const Actor& actor,
             Done<v1::TagVMResponse> done);
  // NOT_FOUND when the VM is not tagged.
  void UntagVm(const v1::UntagVMRequest& request, const Actor& actor,
               Done<v1::UntagVMResponse> done);
  // Re-assigns the tenant's VMs that use its default level.
  // FAILED_PRECONDITION (listing them) when tagged VMs use a level the new
  // policy forbids.
  void SetTenantPolicy(const v1::SetTenantPolicyRequest& request,
                       const Actor& actor, Done<v1::TenantPolicy> done);
  // Audited when the host is new.
  void RegisterHost(const v1::RegisterRequest& request, const Actor& actor,
                    Done<v1::RegisterResponse> done);
  // Records the reported VMs as present on the host (their assignments are
  // then streamed there; vm_presence.h says who owns each) and their
  // enforcement; once that is committed, adds the stats windows to the
  // in-memory aggregate (under the id a VM is tagged with, when it is
  // tagged by UUID) and then runs `done`, on the aggregate's thread. A
  // Report that says what the host's last one said (times and stats aside)
  // writes nothing. FAILED_PRECONDITION for an unregistered host.
  void ApplyReport(const v1::ReportRequest& request,
                   Done<v1::ReportResponse> done);
  // Writes the policy engine's layout of `host_id`: every change or none,
  // at one revision, each VM audited (method EngineDecision, who
  // kEngineActor) with its decision's reasons and predicted figures, and
  // streamed to the hosts that receive it. A compare-and-set: ABORTED when
  // a VM's assignment is no longer at its expected_revision (a TagVM or
  // policy change came first: re-read and re-decide), when it left the
  // host, or when it is no longer the engine's to decide (tagged with a
  // level, its tenant not in mode auto); FAILED_PRECONDITION when its
  // tenant's policy does not allow the level or the group is not the one
  // the level gives. Answers the revision written.
  void ApplyLayout(const std::string& host_id, std::vector<LayoutChange> changes,
                   Done<int64_t> done);
  // The policy engine's flag of a host whose budget no allowed layout meets
  // (Host.budget_unmet): `reason` sets it, empty clears it. Written and
  // audited (method EngineBudgetFlag) only when it turns on or off, so a
  // host that stays flagged is not rewritten every pass. Answers whether
  // it was written. NOT_FOUND for an unknown host.
  void SetBudgetFlag(const std::string& host_id, const std::string& reason, Done<bool> done);
  // Host lifecycle (ControlPlane.DrainHost, UndrainHost, RemoveHost).
  // NOT_FOUND for an unknown host. Removal is FAILED_PRECONDITION while the
  // host's agent is connected (set_connected_check) or VMs are reported
  // there.
  void SetHostDraining(const v1::DrainHostRequest& request, bool draining,
                       const Actor& actor, Done<v1::Host> done);
  // The off switch for one host or the hosts a selector matches now
  // (SetHostEnforcement with host_id or selector; `all` is RolloutControl's
  // fleet setting). Each host that changes is written and audited with the
  // reason, a few hosts a write (so that a selector of any size fits
  // etcd's Txn limit); a write that fails ends the call with its error and
  // how many hosts were switched before it. NOT_FOUND for an unknown host
  // or a selector matching none.
  void SetHostEnforcement(const v1::SetHostEnforcementRequest& request, const Actor& actor,
                          Done<v1::SetHostEnforcementResponse> done);
  void RemoveHost(const v1::RemoveHostRequest& request, const Actor& actor,
                  Done<v1::RemoveHostResponse> done);

  // Tag reported VMs that nobody tagged from their domain metadata
  // (csd.yaml tag_from_metadata; metadata_tag.h): in ApplyReport, inside
  // the Report's write, as if TagVM had been called, audited "from
  // metadata on host X". Only the VM's owner host's metadata counts; a
  // change of it retags the VM, and metadata that turns bad or names no
  // tenant any more untags it (fail-closed). A VM tagged by TagVM is never
  // changed by metadata. Default off; a reload of csd.yaml may change it.
  void set_tag_from_metadata(bool on) { tag_from_metadata_ = on; }

  // csd.yaml `enforce` (host_enablement.h): what Register and Report
  // answer each host, what Place takes a host that needs no cookies for,
  // and what GetHost shows. Default always; a reload of csd.yaml may
  // change it.
  void set_enforce_policy(EnforcePolicy policy) {
    auto next = std::make_shared<const EnforcePolicy>(std::move(policy));
    std::lock_guard<std::mutex> lock(settings_mu_);
    enforce_ = std::move(next);
  }
  EnforcePolicy enforce_policy() const {
    std::lock_guard<std::mutex> lock(settings_mu_);
    return *enforce_;
  }

  // The staged rollout as csd last wrote or read it: which hosts Register,
  // Report and GetHost say are enabled. Its writer (RolloutControl) sets
  // it after each commit; other replicas' writes reach it through
  // ApplyExternalChange.
  RolloutView& rollout() { return rollout_; }
  const RolloutView& rollout() const { return rollout_; }
  // Each host's last Report and stream, to this csd or (replicas on etcd)
  // to another replica, by its seen record (server/host_liveness.h).
  HostLiveness& liveness() { return liveness_; }
  const HostLiveness& liveness() const { return liveness_; }
  // How long since the host's agent last registered or reported (to any
  // replica, or as stored), whether or not it holds a stream: a stuck agent
  // keeps its stream and reports nothing.
  absl::Duration SilentFor(const v1::Host& host) const;
  // Its agent holds a stream on this csd or, by its last seen record, on
  // another replica.
  bool IsConnected(absl::string_view host_id) const;
  // The replica that holds its agent's stream: this csd's name
  // (set_replica_name) or another's; empty when none does.
  std::string ConnectedReplica(absl::string_view host_id) const;
  // How often each host may Report (server/report_rate_limit.h).
  ReportRateLimit& report_rate() { return report_rate_; }
  // This csd's name among the replicas on etcd. Set before serving.
  void set_replica_name(std::string name) { replica_name_ = std::move(name); }

  // Whether a host's agent holds a watch stream on this csd now (csd's
  // fan-out knows). Set before serving; unset: none does.
  void set_connected_check(std::function<bool(absl::string_view)> check) {
    connected_ = std::move(check);
  }
  // Called once a committed write may change what the policy engine would
  // decide for a host: a VM tagged, retagged or untagged there, a Report
  // that changed what the host runs (host_id), or a tenant policy changed
  // (an empty host_id: every host). On the store's completion thread: it
  // must only take note. Set before serving.
  void set_layout_observer(std::function<void(const std::string& host_id)> observer) {
    layout_observer_ = std::move(observer);
  }
  // What the engine and ExplainVM read besides the store: the agents'
  // stats (this csd's own and, on etcd, those the other replicas forwarded
  // while it led) and the class conflicts.
  const StatsSource& stats() const { return engine_stats_; }
  // Where the stats other replicas forward go (ReplicaService).
  StatsAggregator& forwarded_stats() { return forwarded_stats_; }
  // This csd's own agents' stats (GetStats answers from them).
  const StatsAggregator& own_stats() const { return stats_; }
  // ServedHost of TakeForwardedStats: `host_id` is registered and, by what
  // this csd knows, `replica` took its latest Report or holds its stream.
  bool ServedBy(const std::string& host_id, const std::string& replica) const;
  // Called with each Report's stats once this csd took them (csd replicas
  // on etcd: the forwarder to the leader). Set before serving.
  using StatsObserver =
      std::function<void(std::shared_ptr<const v1::ReportRequest> report,
                         std::shared_ptr<const absl::flat_hash_map<std::string, std::string>>
                             tagged_id)>;
  void set_stats_observer(StatsObserver observer) { stats_observer_ = std::move(observer); }
  const std::vector<std::pair<std::string, std::string>>& class_conflicts() const {
    return conflicts_;
  }
  store::Store& store() const { return *store_; }
  // Place chooses only hosts that are connected or reported within this
  // long (default 60 s: six report intervals). A reload of csd.yaml may
  // change it.
  void set_host_stale_after(absl::Duration d) { host_stale_after_ns_ = absl::ToInt64Nanoseconds(d); }
  absl::Duration host_stale_after() const { return absl::Nanoseconds(host_stale_after_ns_.load()); }
  // Why Place would not choose `host` now: empty when it would.
  std::string UnplaceableReason(const v1::Host& host, bool needs_isolation) const;
  // When the host's agent last reported to any replica (nullopt: not
  // since csd started, as far as it knows).
  std::optional<absl::Time> LastReport(absl::string_view host_id) const;

  // NOT_FOUND when the VM is not tagged; for a VM that hosts report, the
  // message says why its domain metadata did not tag it (refused, naming
  // the field, or tag_from_metadata off). The VM carries its enforcement
  // as last reported.
  absl::StatusOr<v1::VM> GetVm(const v1::GetVMRequest& request);
  absl::StatusOr<v1::ListVMsResponse> ListVms(const v1::ListVMsRequest& request);
  // The built-in default (explicitly_set=false) when none was set.
  absl::StatusOr<v1::TenantPolicy> GetTenantPolicy(
      const v1::GetTenantPolicyRequest& request);
  absl::StatusOr<v1::ListTenantPoliciesResponse> ListTenantPolicies(
      const v1::ListTenantPoliciesRequest& request);
  absl::StatusOr<v1::Host> GetHost(const v1::GetHostRequest& request);
  absl::StatusOr<v1::ListHostsResponse> ListHosts(
      const v1::ListHostsRequest& request);
  // Sibling-sharing stats of a VM, host, tenant or trust group over the
  // last window_seconds. A tenant's or trust group's VMs are those tagged
  // for it now: a VM's whole recent history counts for its current tenant
  // and group. INVALID_ARGUMENT for no subject or a bad one, or
  // window_seconds outside 1-86400 (0: 300); NOT_FOUND when no window of
  // the subject ended in the span. From this csd's agents only: replicas
  // on etcd gather the others' too (server/peer_stats.h).
  absl::StatusOr<v1::GetStatsResponse> GetStats(
      const v1::GetStatsRequest& request);
  // GetStats's answer before its NOT_FOUND: `stats` may have no window,
  // and `not_found` is the error to give when no replica has one.
  struct StatsQuery {
    v1::GetStatsResponse stats;
    std::string not_found;
  };
  absl::StatusOr<StatsQuery> QueryStats(const v1::GetStatsRequest& request);
  // Newest first.
  // Puts a reload of csd.yaml on record (method ReloadConfig, by
  // csd:reload, `changed` as its reason); the store's error otherwise.
  absl::Status AuditConfigReload(const std::string& changed);

  absl::StatusOr<v1::ListAuditRecordsResponse> ListAuditRecords(
      const v1::ListAuditRecordsRequest& request);

  // Ranks hosts for a new VM (ControlPlane.Place): validates every field,
  // takes the tenant's default level when none is asked, and answers from
  // the placement view. Creates nothing.
  absl::StatusOr<v1::PlaceResponse> Place(const v1::PlaceRequest& request);
  // The policy engine's decision for a VM on its host (ControlPlane.ExplainVM).
  // Runs the simulator: tens of milliseconds to seconds on big hosts.
  // FAILED_PRECONDITION also for hosts the engine cannot plan in reasonable
  // time (over 1024 cores, or over 8 vCPUs per hardware thread).
  absl::StatusOr<v1::ExplainVMResponse> ExplainVm(
      const v1::ExplainVMRequest& request);
  // Simulated seconds each ExplainVm prediction runs (default 5); the
  // fuzzer shortens it. Set before serving.
  void set_explain_predict_seconds(double seconds) { explain_predict_s_ = seconds; }

  // INVALID_ARGUMENT for a bad host id or negative revision;
  // FAILED_PRECONDITION for an unregistered host.
  absl::Status ValidateWatch(const v1::WatchAssignmentsRequest& request);
  // Every message's revision is the one of the read that produced it, so
  // that an agent at revision R holds every change of its host up to R: a
  // commit that lands while the message is read is either in it or above
  // its revision (docs/architecture.md, "What an agent's revision means").
  //
  // The first message of a watch: a delta since `resume_revision` (empty
  // when nothing changed) when the change log still covers it, else a
  // snapshot of the host's assignments.
  absl::StatusOr<v1::WatchAssignmentsResponse> FirstWatchMessage(
      absl::string_view host_id, int64_t resume_revision);
  // The changes of `host_id` after `revision`, as a delta (or a snapshot
  // when the log no longer covers it); nullopt when nothing changed.
  absl::StatusOr<std::optional<v1::WatchAssignmentsResponse>> WatchUpdate(
      absl::string_view host_id, int64_t revision);

  int64_t CurrentRevision() const { return store_->CurrentRevision(); }

  // What other csd replicas committed (the store's external observer, on
  // its completion thread, in revision order with this csd's own writes):
  // brings the placement view, the Reports this csd remembers and the
  // policy engine's notes up to date, as this csd's own writes do. The
  // records are read from the store as they are now. When they cannot be
  // read (etcd away, a value that does not parse), the next change reads
  // the whole view again. Defined in replica_changes.cc.
  void ApplyExternalChange(const store::ExternalChange& change);

 private:
  // What csd remembers of each host's last committed Report.
  struct ReportSeen {
    std::string content;  // ReportContent
    int cores = 0;        // of the topology it was checked against
    // Reported vm_id -> the id it is tagged under, where they differ: where
    // an unchanged Report's stats windows go.
    absl::flat_hash_map<std::string, std::string> tagged_id;
  };
  // The part of a Report that is written: everything but times and stats.
  static std::string ReportContent(const v1::ReportRequest& request);
  // What csd remembers of the host's last Report when `content` is what
  // it reported then (the Report can be answered without a write); nullopt
  // when something changed.
  std::optional<ReportSeen> UnchangedReport(absl::string_view host_id,
                                            const std::string& content);
  void RememberReport(const std::string& host_id, ReportSeen seen);
  // The next Report of the host is written whole: its topology changed, it
  // was removed, or a VM it reports was tagged or untagged (whose id its
  // stats go under).
  void ForgetReport(absl::string_view host_id);
  void AddReportStats(std::shared_ptr<const v1::ReportRequest> report,
                      absl::flat_hash_map<std::string, std::string> tagged_id,
                      Done<v1::ReportResponse> done);
  // The host as it is now: its last report time and whether it is placeable.
  void AddLiveness(v1::Host& host) const;
  // SetHostEnforcement's run over its hosts, a write at a time.
  struct EnforcementSwitch {
    v1::SetHostEnforcementRequest request;
    Actor actor;
    Done<v1::SetHostEnforcementResponse> done;
    std::vector<std::string> host_ids;
    v1::SetHostEnforcementResponse response;  // the hosts switched so far
  };
  // Switches run->host_ids from `from` on; answers run->done at the end.
  void SwitchEnforcement(std::shared_ptr<EnforcementSwitch> run, size_t from);
  // The later of its stored last_seen_time and its last Report to any
  // replica.
  absl::Time LastSeen(const v1::Host& host) const;
  // Connected, or seen within host_stale_after.
  bool IsLive(const v1::Host& host) const;

  // ExplainVm's recommendation for a VM on a host whose budget no layout
  // meets: Place's choice among the other hosts, into `response`.
  void RecommendHost(const v1::VM& vm, int vcpus, double load,
                     v1::ExplainVMResponse& response) const;

  // What the watch of `host_id` sends after `revision` (0: a snapshot), in
  // one read: a delta, empty when nothing changed, or a snapshot when the
  // change log no longer covers `revision`.
  absl::StatusOr<v1::WatchAssignmentsResponse> ReadWatchMessage(absl::string_view host_id,
                                                                int64_t revision);

  // `done`, after applying what a committed write changed to the view.
  template <typename T>
  Done<T> ApplyingPlacement(std::shared_ptr<PlacementDelta> delta, Done<T> done);
  // `done`, after forgetting the last Report of `hosts` once the write
  // committed: a VM they report was tagged or untagged.
  template <typename T>
  Done<T> ForgettingReports(std::shared_ptr<std::set<std::string>> hosts, Done<T> done);

  // `done`, after telling the layout observer of `host_id` once the write
  // committed; nothing when it stays unset (no change, a VM on no host).
  template <typename T>
  Done<T> NotifyingLayout(std::shared_ptr<std::optional<std::string>> host_id, Done<T> done);

  store::Store* store_;
  StatsAggregator stats_;             // this csd's agents' (GetStats)
  StatsAggregator forwarded_stats_;   // the other replicas' (the engine)
  MergedStats engine_stats_{stats_, forwarded_stats_};
  StatsObserver stats_observer_;
  std::function<void(const std::string&)> layout_observer_;
  const std::vector<std::pair<std::string, std::string>> conflicts_;
  PlacementView placement_;
  double explain_predict_s_ = 5;
  std::function<bool(absl::string_view)> connected_;
  // The settings a reload of csd.yaml changes while calls read them.
  std::atomic<int64_t> host_stale_after_ns_{absl::ToInt64Nanoseconds(absl::Seconds(60))};
  std::atomic<bool> tag_from_metadata_{false};
  mutable std::mutex settings_mu_;
  std::shared_ptr<const EnforcePolicy> enforce_ = std::make_shared<const EnforcePolicy>();
  RolloutView rollout_;
  HostLiveness liveness_;
  ReportRateLimit report_rate_;
  std::string replica_name_;
  mutable std::mutex reports_mu_;
  absl::flat_hash_map<std::string, ReportSeen> reports_;
  // An external change could not be applied: the next one reloads the
  // view. Only on the store's completion thread.
  bool external_reload_owed_ = false;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_DESIRED_STATE_H_
