// csd assembled: the durable store, the services, health checking and
// reflection, on one listening address. Used by csd's main and, on an
// ephemeral port, by tests.
#ifndef COSCHED_SERVER_DAEMON_CSD_SERVER_H_
#define COSCHED_SERVER_DAEMON_CSD_SERVER_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cosched/v1/config.pb.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "metrics/metrics_http.h"
#include "server/api/authz.h"
#include "server/api/csd_metrics.h"
#include "server/api/local_peers.h"
#include "server/api/local_socket.h"
#include "server/api/query_pool.h"
#include "server/api/services.h"
#include "server/engine/engine_loop.h"
#include "server/engine/engine_options.h"
#include "server/engine/policy_queries.h"
#include "server/fanout/assignment_fanout.h"
#include "server/fanout/watch_reads.h"
#include "server/replicas/external_changes.h"
#include "server/replicas/stats_forwarder.h"
#include "server/state/audit_export.h"
#include "server/state/rollout_control.h"
#include "server/state/state_parts.h"
#include "server/stats/stats_queries.h"
#include "store/etcd_store.h"
#include "store/store.h"

namespace cosched::server {

inline constexpr char kDefaultListen[] = "127.0.0.1:7443";
inline constexpr char kDefaultDataDir[] = "/var/lib/cosched";
inline constexpr char kDefaultMetricsListen[] = "127.0.0.1:9465";
inline constexpr int64_t kMaxAuditRetentionDays = 36500;
inline constexpr char kDefaultAuditFile[] = "/var/log/cosched/audit.jsonl";

// csd.yaml `audit:` (server/state/audit_export.h).
struct AuditOptions {
  // The audit file; empty: none (CsdOptionsFromConfig's default is
  // kDefaultAuditFile).
  std::string file;
  int64_t file_max_mib = 100;  // 1 to 4096
  int file_keep = 10;          // 0 to 1000
  // Records the store keeps at most: 1000 to 10 000 000.
  int64_t window_records = 100000;
  bool operator==(const AuditOptions&) const = default;
};

struct CsdOptions {
  // host:port; port 0 picks a free port (see CsdServer::port()).
  std::string listen = kDefaultListen;
  std::string data_dir = kDefaultDataDir;
  v1::TlsConfig tls;
  // Allow plaintext on a non-loopback address.
  bool insecure = false;
  int64_t changelog_retention = 100000;
  // Days audit records are kept (1 to kMaxAuditRetentionDays), or -1 to
  // keep every record.
  int64_t audit_retention_days = 365;
  // Identities and roles (server/api/authz.h).
  AuthzOptions authz;
  // host:port of the Prometheus /metrics endpoint; empty: not served. Port
  // 0 picks a free port (see CsdServer::metrics_port()).
  std::string metrics_listen;
  // Pairs of interference classes that must never share a core (Place).
  std::vector<std::pair<std::string, std::string>> class_conflicts;
  // Place chooses only hosts connected or reported within this many
  // seconds (1 to 86400).
  int64_t host_stale_after_s = 60;
  // StateSettings::set_enforcement_write_interval, in seconds (0 to 3600);
  // -1 (unset): 60 on etcd, where other replicas read it from the store;
  // never on SQLite, where the only csd holds it and writes each host's
  // first Report after a restart whole (EnforcementWriteInterval).
  int64_t enforcement_write_interval_s = -1;
  // How often each host may Report (server/state/report_rate_limit.h); not a
  // csd.yaml setting: agents never come near it. Tests whose agents report
  // every few milliseconds turn it off (per_second 0).
  ReportRateOptions report_rate;
  // Where Plan and ExplainVM run (server/api/query_pool.h); not a csd.yaml
  // setting.
  QueryPoolOptions queries;
  // StateSettings::set_tag_from_metadata.
  bool tag_from_metadata = false;
  // csd.yaml `enforce` and `when_vulnerable` (ParseEnforcePolicy).
  std::string enforce;
  std::vector<std::string> when_vulnerable;
  // The store in etcd; unset: SQLite in data_dir. Its replicas.address is
  // store.etcd.advertise_address: unset, the listening address with its
  // port once csd listens (none for a wildcard).
  std::optional<store::EtcdStoreOptions> etcd_store;
  // store.etcd.disable_compaction as written: only to refuse it beside
  // compact_history (etcd_store->maintenance.compact is the setting).
  bool etcd_disable_compaction = false;
  // How long GetStats waits for the other replicas on etcd (100 ms to
  // 10 s): store.etcd.peer_timeout_ms.
  absl::Duration peer_timeout = absl::Seconds(1);
  // A replica on etcd that cannot reach it for this long ends its agents'
  // streams with UNAVAILABLE, so that they move to another replica
  // (AssignmentFanout::SetStoreReachable); zero: never. Tests shorten it.
  absl::Duration end_streams_after_store_lost = absl::Seconds(10);
  // The policy engine's loop (tenants in mode auto).
  EngineOptions engine;
  // The Unix socket for local callers; no path: none.
  LocalSocketOptions local_socket;
  // Staged rollouts (csd.yaml `rollout:`).
  RolloutOptions rollout;
  // The audit trail's window in the store and its file.
  AuditOptions audit;
};

// Fills options from a config file's message; unset fields keep defaults
// (metrics_listen: kDefaultMetricsListen, local_socket.path:
// kDefaultLocalSocket, not required; "off" for none).
CsdOptions CsdOptionsFromConfig(const v1::CsdConfig& config);

// The checks Start makes of `options` before it touches the store or the
// network: INVALID_ARGUMENT naming the field (listen, changelog_retention,
// audit_retention_days, audit.*, host_stale_after_s, enforcement_write_interval_s, class_conflicts[i], trust_domain, plaintext_role,
// roles[i], tokens[i], store.etcd.*, engine.*, local_socket.*, rollout.*) and the rule. Users and groups
// named by roles[i] and local_socket.group are looked up. Files named by tls are read by Start;
// those named by store.etcd.tls must be readable here. On etcd, tls.cert_file is read here too:
// its certificate must allow client authentication and carry an identity roles make an operator
// (CheckReplicaIdentity: the other replicas see this one so).
absl::Status ValidateCsdOptions(const CsdOptions& options);

// What options.enforcement_write_interval_s means for its store: an
// infinite duration for never.
absl::Duration EnforcementWriteInterval(const CsdOptions& options);

// The replica name csd registers on etcd when store.etcd.replica_name is
// unset: the host name, stable across restarts, when csd listens on a
// fixed port (one csd a host); empty on port 0 (tests running several on
// one machine), for EtcdReplicas' host name and random suffix.
std::string DefaultReplicaName(const std::string& listen);

// Thread-safe. Shutdown() (or the destructor) stops serving, ends every
// stream and closes the store.
class CsdServer {
 public:
  // FAILED_PRECONDITION for plaintext off loopback or unreadable TLS files;
  // INVALID_ARGUMENT for a bad listen address, changelog or audit
  // retention, authorization options or class conflicts;
  // the store's error when it cannot open; UNAVAILABLE when the address
  // cannot be bound, or the metrics address cannot (naming it); the local
  // socket's error (LocalSocketServer::Start) when it is required.
  static absl::StatusOr<std::unique_ptr<CsdServer>> Start(
      const CsdOptions& options);
  ~CsdServer();

  int port() const { return port_; }
  // "127.0.0.1:<port>" style address that clients can dial.
  std::string address() const { return address_; }
  // The store's latest revision.
  int64_t revision() const { return store_->CurrentRevision(); }
  // Whether this csd leads the replicas on its store (always, on SQLite):
  // only the leader runs the policy engine and the store's upkeep.
  bool leads() const { return store_->Leads(); }
  // The port /metrics is served on; 0 when not served.
  int metrics_port() const;
  // The Unix socket local callers use; empty when none is served.
  std::string local_socket_path() const {
    return local_socket_ ? local_socket_->path() : std::string();
  }

  void Shutdown();
  // Blocks until Shutdown() from another thread.
  void Wait();

  // A reload of csd.yaml (SIGHUP; docs/operating.md, "Reloading csd's
  // configuration"): `next` (checked by ValidateCsdOptions) takes effect at
  // once for who gets which role (roles, tokens, plaintext_role,
  // plaintext_agents, trust_domain), tag_from_metadata, enforce and
  // when_vulnerable, host_stale_after_s and enforcement_write_interval_s;
  // the change is audited
  // (ReloadConfig, by csd:reload) and counted. Any other setting that
  // differs needs a restart: FAILED_PRECONDITION naming each, and nothing
  // changes; so does an authorization error (INVALID_ARGUMENT). csd's
  // main refuses changes of store, engine and rollout itself. Returns
  // what changed ("" when nothing did). Thread-safe.
  absl::StatusOr<std::string> Reload(const CsdOptions& next);
  // A reload refused before it reached Reload (a bad file), for the metric.
  void CountRefusedReload() { metrics_->RecordConfigReload(false); }

 private:
  CsdServer() = default;
  // Start's steps. What /metrics reads of this csd.
  CsdMetricsOptions MetricsOptions(const CsdOptions& options);
  // The desired state over store_, the fan-out, the engine and rollouts.
  absl::Status StartState(const CsdOptions& options);
  // csd on etcd: the other replicas, as GetStats, the stats forwarder and
  // liveness reach them.
  void StartReplicas(const CsdOptions& options, store::EtcdReplicas& replicas);
  // The gRPC services and server; then StartBesideGrpc.
  absl::Status StartServing(const CsdOptions& options,
                            std::shared_ptr<grpc::ServerCredentials> credentials,
                            store::EtcdReplicas* replicas);
  // The address the other replicas dial, the local socket and /metrics.
  absl::Status StartBesideGrpc(const CsdOptions& options, store::EtcdReplicas* replicas);
  // gRPC health: NOT_SERVING while the store cannot be reached (a store in
  // etcd whose watch is lost), SERVING again once it can.
  void SetStoreReachable(bool reachable, const std::string& why);
  // This replica's part of GetStatus.
  v1::ReplicaStatus OwnStatus() const;

  // First: it outlives everything that reports to it.
  std::unique_ptr<CsdMetrics> metrics_;
  std::unique_ptr<metrics::MetricsHttpServer> metrics_server_;
  std::unique_ptr<store::Store> store_;
  // The replicas on the etcd prefix (in store_); null on SQLite.
  store::EtcdReplicas* replicas_ = nullptr;
  // The etcd store's cache (owned by store_), for its metric; null on SQLite.
  const store::EtcdCache* etcd_cache_ = nullptr;
  const store::EtcdMaintenance* etcd_maintenance_ = nullptr;
  // Before the authorizer, which reads it, and the local socket, which
  // fills it.
  std::unique_ptr<LocalPeerTable> local_peers_;
  std::unique_ptr<Authorizer> authz_;
  std::unique_ptr<StateParts> state_;
  // What reads the state for the fan-out, GetStats, Place and ExplainVM,
  // and what follows the other replicas' writes into it.
  std::unique_ptr<WatchReads> watch_reads_;
  std::unique_ptr<StatsQueries> stats_queries_;
  std::unique_ptr<PolicyQueries> policy_queries_;
  std::unique_ptr<ExternalChanges> external_changes_;
  std::unique_ptr<AssignmentFanout> fanout_;
  // Stopped before the store drains, destroyed after it: the store's
  // commits tell it of changes until the end.
  std::unique_ptr<EngineLoop> engine_;
  // The same: its writes go through the store until it stops.
  std::unique_ptr<RolloutControl> rollouts_;
  // The same: it reads the store until it stops. Null without a file.
  std::unique_ptr<AuditExporter> audit_exporter_;
  // Replicas on etcd only: the others, as GetStats and the stats
  // forwarder reach them; outlives both.
  std::unique_ptr<PeerDirectory> peer_directory_;
  // csd on etcd: gathers the other replicas' stats; before the service
  // that uses it.
  std::unique_ptr<PeerStats> peer_stats_;
  // csd on etcd: ExplainVM and Plan asked of the leader; the same.
  std::unique_ptr<LeaderQueries> leader_queries_;
  // csd on etcd: the other replicas' GetStatus; the same.
  std::unique_ptr<PeerStatus> peer_status_;
  // Runs Plan and ExplainVM; stopped before the server, destroyed before
  // the engine and the state they read.
  std::unique_ptr<QueryPool> queries_;
  std::unique_ptr<ControlPlaneService> control_plane_;
  std::unique_ptr<AgentServiceImpl> agent_service_;
  // Replicas on etcd only: the stats of this replica's agents to the
  // leader, and the service the others call.
  std::unique_ptr<StatsForwarder> stats_forwarder_;
  std::unique_ptr<ReplicaServiceImpl> replica_service_;
  std::unique_ptr<grpc::Server> server_;
  // After the server: stopped (and destroyed) before it.
  std::unique_ptr<LocalSocketServer> local_socket_;
  // What it runs with, as reloads changed it; under reload_mu_.
  std::mutex reload_mu_;
  CsdOptions options_;
  int port_ = 0;
  std::string address_;
  std::once_flag shutdown_once_;
  mutable std::mutex health_mu_;
  grpc::HealthCheckServiceInterface* health_ = nullptr;  // guarded by health_mu_
  bool store_reachable_ = true;                          // guarded by health_mu_
  std::string store_problem_;                            // guarded by health_mu_
  absl::Time started_ = absl::Now();
  // fanout_ while it takes the store's reachability; null from Shutdown.
  AssignmentFanout* fanout_for_store_ = nullptr;         // guarded by health_mu_
  absl::Duration end_streams_after_store_lost_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_DAEMON_CSD_SERVER_H_
