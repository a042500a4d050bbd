#include "server/daemon/csd_server.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config_reload.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "common/validation.h"
#include "common/version.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "store/instrumented_store.h"
#include "store/sqlite_store.h"

namespace cosched::server {

namespace {

// csd's store as csd.yaml names it, and the replicas on its etcd prefix
// (null on SQLite).
struct OpenedStore {
  std::unique_ptr<store::Store> store;
  store::EtcdReplicas* replicas = nullptr;
  const store::EtcdCache* cache = nullptr;
  const store::EtcdMaintenance* maintenance = nullptr;
};

absl::StatusOr<OpenedStore> OpenStore(const CsdOptions& options) {
  const int64_t audit_days = options.audit_retention_days;
  const absl::Duration audit_retention =
      audit_days == -1 ? absl::InfiniteDuration() : absl::Hours(24 * audit_days);
  OpenedStore opened;
  if (options.etcd_store) {
    // Compaction and audit pruning are the leading replica's jobs; etcd
    // keeps no change log of its own to trim by count, so
    // changelog_retention is SQLite's only.
    store::EtcdStoreOptions etcd = *options.etcd_store;
    if (etcd.replicas.name.empty()) etcd.replicas.name = DefaultReplicaName(options.listen);
    etcd.maintenance.audit_retention = audit_retention;
    etcd.maintenance.audit_window_records = options.audit.window_records;
    ASSIGN_OR_RETURN(std::unique_ptr<store::EtcdStore> store, store::EtcdStore::Open(etcd));
    opened.replicas = &store->replicas();
    opened.cache = &store->cache();
    opened.maintenance = &store->maintenance();
    opened.store = std::move(store);
    return opened;
  }
  store::SqliteStoreOptions sqlite;
  sqlite.data_dir = options.data_dir;
  sqlite.changelog_retention = options.changelog_retention;
  sqlite.audit_retention = audit_retention;
  sqlite.audit_window_records = options.audit.window_records;
  ASSIGN_OR_RETURN(opened.store, store::SqliteStore::Open(sqlite));
  return opened;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CsdServer>> CsdServer::Start(
    const CsdOptions& options) {
  if (absl::Status valid = ValidateCsdOptions(options); !valid.ok()) return valid;
  auto credentials =
      MakeServerCredentials(options.listen, options.tls, options.insecure);
  if (!credentials.ok()) return credentials.status();
  auto local_peers = std::make_unique<LocalPeerTable>();
  auto authz = Authorizer::Create(options.authz, local_peers.get());
  if (!authz.ok()) return authz.status();
  ASSIGN_OR_RETURN(OpenedStore opened, OpenStore(options));

  std::unique_ptr<CsdServer> csd(new CsdServer());
  csd->options_ = options;
  csd->etcd_cache_ = opened.cache;
  csd->etcd_maintenance_ = opened.maintenance;
  csd->metrics_ = std::make_unique<CsdMetrics>(csd->MetricsOptions(options));
  CsdMetrics* csd_metrics = csd->metrics_.get();
  csd->store_ = std::make_unique<store::InstrumentedStore>(
      std::move(opened.store), [csd_metrics](absl::StatusCode code, double seconds) {
        csd_metrics->RecordStoreWrite(code, seconds);
      });
  csd->local_peers_ = std::move(local_peers);
  csd->authz_ = std::make_unique<Authorizer>(std::move(*authz));
  RETURN_IF_ERROR(csd->StartState(options));
  if (opened.replicas != nullptr) csd->StartReplicas(options, *opened.replicas);
  RETURN_IF_ERROR(csd->StartServing(options, *credentials, opened.replicas));
  LOG(INFO) << "csd serving on " << csd->address_ << ", data in "
            << options.data_dir << ", revision "
            << csd->store_->CurrentRevision();
  return csd;
}

CsdMetricsOptions CsdServer::MetricsOptions(const CsdOptions& options) {
  CsdMetricsOptions metrics_options;
  // Read only while metrics are served, which Shutdown stops first.
  metrics_options.connected_agents = [this] {
    return static_cast<double>(fanout_->WatcherCount());
  };
  metrics_options.store_revision = [this] {
    return static_cast<double>(store_->CurrentRevision());
  };
  metrics_options.store_cache_keys = [this] {
    return etcd_cache_ != nullptr ? static_cast<double>(etcd_cache_->keys()) : 0.0;
  };
  metrics_options.etcd_oldest_revision = [this] {
    return etcd_maintenance_ != nullptr ? etcd_maintenance_->oldest_revision() : int64_t{0};
  };
  metrics_options.held_report_hosts = [this] {
    return state_ ? static_cast<double>(state_->report_memory.HeldHosts()) : 0.0;
  };
  metrics_options.leader = [this] { return store_->Leads() ? 1.0 : 0.0; };
  metrics_options.rollout = [this] {
    return state_ ? state_->rollout.Get() : std::optional<v1::Rollout>();
  };
  metrics_options.rollout_counts = [this] {
    std::optional<v1::Rollout> r = state_ ? state_->rollout.Get() : std::nullopt;
    if (r) AddRolloutCounts(state_->placement, *r);
    return r;
  };
  metrics_options.forwarded_stats = [this]() -> std::optional<std::pair<int64_t, int64_t>> {
    if (!stats_forwarder_) return std::nullopt;
    return std::pair{stats_forwarder_->forwarded(), stats_forwarder_->dropped()};
  };
  metrics_options.tls_files = {options.tls.cert_file(), options.tls.ca_file()};
  metrics_options.stats_series = [this] {
    auto of = [](const StatsAggregator& stats) {
      return CsdMetricsOptions::StatsSeries{
          stats.VmSeriesCount(), stats.EvictedSeriesCount(), stats.FoldedSeriesCount(),
          stats.VmBucketBytes()};
    };
    return std::pair{of(state_->stats.own), of(state_->stats.forwarded)};
  };
  return metrics_options;
}

absl::Status CsdServer::StartState(const CsdOptions& options) {
  policy::PlacementOptions placement;
  placement.conflicts = options.class_conflicts;
  state_ = std::make_unique<StateParts>(*store_, nullptr, std::move(placement));
  // Before serving: Place answers from this view only.
  RETURN_IF_ERROR(state_->Load());
  watch_reads_ = std::make_unique<WatchReads>(*store_);
  stats_queries_ = std::make_unique<StatsQueries>(*store_, state_->stats.own);
  policy_queries_ = std::make_unique<PolicyQueries>(*store_, state_->placement,
                                                    state_->host_status, state_->stats.engine,
                                                    options.class_conflicts);
  external_changes_ =
      std::make_unique<ExternalChanges>(*store_, state_->effects, state_->rollout);
  fanout_ = std::make_unique<AssignmentFanout>(watch_reads_.get());
  end_streams_after_store_lost_ = options.end_streams_after_store_lost;
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    fanout_for_store_ = fanout_.get();
  }
  AssignmentFanout* fanout = fanout_.get();
  state_->host_status.set_connected_check(
      [fanout](absl::string_view host_id) { return fanout->IsConnected(host_id); });
  state_->settings.set_host_stale_after(absl::Seconds(options.host_stale_after_s));
  state_->settings.set_enforcement_write_interval(EnforcementWriteInterval(options));
  state_->reports.report_rate().set_options(options.report_rate);
  state_->settings.set_tag_from_metadata(options.tag_from_metadata);
  state_->settings.set_enforce_policy(*ParseEnforcePolicy(options.enforce, options.when_vulnerable));
  store_->SetCommitObserver(
      [fanout](const std::vector<std::string>& hosts, int64_t) {
        fanout->OnCommit(hosts);
      });
  EngineLoop::Observers engine_metrics;
  CsdMetrics* csd_metrics = metrics_.get();
  engine_metrics.changed = [csd_metrics](bool budget) { csd_metrics->RecordEngineChange(budget); };
  engine_metrics.prediction_errors = [csd_metrics](const std::map<std::string, double>& e) {
    csd_metrics->SetPredictionErrors(e);
  };
  engine_metrics.budget_unmet = [csd_metrics](int n) { csd_metrics->SetBudgetUnmetHosts(n); };
  engine_ = std::make_unique<EngineLoop>(*store_, state_->layouts, state_->stats.engine,
                                         state_->settings, options.class_conflicts,
                                         options.engine, EngineLoop::Hooks(),
                                         std::move(engine_metrics));
  EngineLoop* engine = engine_.get();
  state_->effects.set_layout_observer([engine](const std::string& host) { engine->Trigger(host); });
  // A replica that starts leading re-plans every host at once rather than
  // at its next interval.
  store_->SetLeadershipObserver([engine](bool leading) {
    if (leading) engine->Trigger("");
  });
  // Other replicas' commits (a store in etcd): into the views and streams
  // as this csd's own; and gRPC health says whether the store is there.
  store_->SetReachabilityObserver([this](bool reachable, const std::string& why) {
    SetStoreReachable(reachable, why);
  });
  store_->SetExternalObserver([external = external_changes_.get(),
                               fanout](const store::ExternalChange& change) {
    external->Apply(change);
    if (change.resync) {
      fanout->OnResync();
    } else {
      fanout->OnCommit(change.assignment_hosts);
    }
  });
  engine_->Start();
  rollouts_ = std::make_unique<RolloutControl>(
      *store_, state_->rollout, state_->host_status, state_->placement, options.rollout,
      /*clock=*/nullptr, /*observer=*/nullptr, [this]() -> absl::Status {
        // Replicas on etcd: each must read a rollout whose hosts are on
        // their host records before one is started.
        return replicas_ != nullptr ? replicas_->CheckRecordFormat(store::kRecordFormat)
                                    : absl::OkStatus();
      });
  rollouts_->Start();
  if (!options.audit.file.empty()) {
    AuditExporter::Observers audit_metrics;
    audit_metrics.exported = [csd_metrics](int64_t records, int64_t last) {
      csd_metrics->RecordAuditExported(records, last);
    };
    audit_metrics.failing = [csd_metrics](bool failing) {
      csd_metrics->SetAuditExportFailing(failing);
    };
    audit_metrics.missing = [csd_metrics](int64_t records) {
      csd_metrics->RecordAuditMissing(records);
    };
    audit_exporter_ = std::make_unique<AuditExporter>(
        *store_,
        AuditFileOptions{.path = options.audit.file,
                         .max_bytes = options.audit.file_max_mib << 20,
                         .keep = options.audit.file_keep},
        absl::Seconds(1), std::move(audit_metrics));
    audit_exporter_->Start();
  }
  return absl::OkStatus();
}

void CsdServer::StartReplicas(const CsdOptions& options, store::EtcdReplicas& replicas) {
  PeerDirectoryOptions peer_options;
  peer_options.self = replicas.name();
  peer_options.tls = options.tls;
  peer_options.insecure = options.insecure;
  store::EtcdReplicas* const etcd = &replicas;
  peer_directory_ = std::make_unique<PeerDirectory>([etcd] { return etcd->List(); },
                                                    std::move(peer_options));
  peer_stats_ = std::make_unique<PeerStats>(*peer_directory_, options.peer_timeout);
  peer_status_ = std::make_unique<PeerStatus>(*peer_directory_, options.peer_timeout);
  leader_queries_ = std::make_unique<LeaderQueries>([etcd] { return etcd->leader(); },
                                                    *peer_directory_);
  // Which hosts' agents each replica hears, so that every replica judges
  // liveness (Place, csctl hosts, rollouts) by all of them.
  replicas_ = etcd;
  HostStatus* status = &state_->host_status;
  status->set_replica_name(replicas.name());
  replicas.SetSeenExchange(
      [status, fanout = fanout_.get()] {
        return status->liveness().Record(fanout->ConnectedHosts());
      },
      [status](std::vector<store::EtcdSeen> others) { status->liveness().SetOthers(others); });
  // The leader's engine plans every replica's hosts: their windows go
  // to it, and it takes them (Replica.ForwardStats).
  StatsForwarderOptions forward_options;
  forward_options.timeout = options.peer_timeout;
  if (options.etcd_store) {
    forward_options.unserved_retry_for = 3 * options.etcd_store->replicas.seen_interval;
  }
  stats_forwarder_ = std::make_unique<StatsForwarder>([etcd] { return etcd->leader(); },
                                                      *peer_directory_, std::move(forward_options));
  StatsForwarder* forwarder = stats_forwarder_.get();
  state_->reports.set_stats_observer([forwarder](auto report, auto tagged_id) {
    forwarder->Enqueue(std::move(report), std::move(tagged_id));
  });
  replica_service_ = std::make_unique<ReplicaServiceImpl>(
      *store_, state_->host_status, state_->stats.forwarded, *authz_,
      [etcd] { return etcd->leader(); });
}

absl::Status CsdServer::StartServing(const CsdOptions& options,
                                     std::shared_ptr<grpc::ServerCredentials> credentials,
                                     store::EtcdReplicas* replicas) {
  queries_ = std::make_unique<QueryPool>(options.queries);
  ControlPlaneParts parts{.store = *store_,
                          .vms = state_->vms,
                          .policies = state_->policies,
                          .hosts = state_->hosts,
                          .host_status = state_->host_status,
                          .stats = *stats_queries_,
                          .audit = state_->audit,
                          .policy = *policy_queries_,
                          .authz = *authz_,
                          .engine = *engine_,
                          .rollouts = *rollouts_,
                          .queries = *queries_,
                          .peers = peer_stats_.get(),
                          .leader = leader_queries_.get(),
                          .status = [this] { return OwnStatus(); },
                          .peer_status = peer_status_.get()};
  control_plane_ = std::make_unique<ControlPlaneService>(parts);
  agent_service_ = std::make_unique<AgentServiceImpl>(state_->hosts, state_->reports,
                                                      *watch_reads_, *fanout_, *authz_);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &port_);
  builder.RegisterService(control_plane_.get());
  builder.RegisterService(agent_service_.get());
  if (replica_service_) builder.RegisterService(replica_service_.get());
  builder.experimental().SetInterceptorCreators(
      metrics_->MakeInterceptorFactories());
  // Agents hold streams for days: find dead peers, let idle agents ping.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen,
                     " (address in use, or not an address of this host?)"));
  }
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    health_ = server_->GetHealthCheckService();
    if (health_ != nullptr) health_->SetServingStatus(store_reachable_);
  }
  return StartBesideGrpc(options, replicas);
}

absl::Status CsdServer::StartBesideGrpc(const CsdOptions& options,
                                        store::EtcdReplicas* replicas) {
  std::string host = options.listen.substr(0, options.listen.rfind(':'));
  address_ = absl::StrCat(host, ":", port_);
  if (replicas != nullptr && replicas->address().empty()) {
    // Where the other replicas ask this one for its agents' stats: the
    // listening address, unless that is a wildcard.
    if (host == "0.0.0.0" || host == "[::]") {
      LOG(WARNING) << "csd listens on " << options.listen
                   << " and store.etcd.advertise_address is unset: the other replicas cannot "
                      "ask this one for its agents' stats, and their answers will say so";
    } else {
      replicas->SetAddress(address_);
    }
  }
  if (!options.local_socket.path.empty()) {
    auto local = LocalSocketServer::Start(options.local_socket, server_.get(),
                                          local_peers_.get());
    if (local.ok()) {
      local_socket_ = std::move(*local);
    } else if (options.local_socket.required) {
      return local.status();
    } else {
      LOG(WARNING) << "csd serves no local socket: " << local.status().message()
                   << " (set local_socket.path, or off)";
    }
  }
  if (!options.metrics_listen.empty()) {
    auto metrics_server = metrics::MetricsHttpServer::Start(
        options.metrics_listen, metrics_->collectables());
    if (!metrics_server.ok()) return metrics_server.status();
    metrics_server_ = std::move(*metrics_server);
    LOG(INFO) << "csd metrics on http://" << metrics_server_->address()
              << "/metrics";
  }
  return absl::OkStatus();
}

namespace {

// The settings a reload cannot change: the names of those `next` changes.
std::vector<std::string> RestartOnlyChanges(const CsdOptions& now, const CsdOptions& next) {
  using google::protobuf::util::MessageDifferencer;
  std::vector<std::string> changed;
  auto note = [&changed](bool differs, const char* name) {
    if (differs) changed.push_back(name);
  };
  note(now.listen != next.listen, "listen");
  note(now.data_dir != next.data_dir, "data_dir");
  note(!MessageDifferencer::Equals(now.tls, next.tls), "tls");
  note(now.insecure != next.insecure, "insecure");
  note(now.changelog_retention != next.changelog_retention, "changelog_retention");
  note(now.audit_retention_days != next.audit_retention_days, "audit_retention_days");
  note(!(now.audit == next.audit), "audit");
  note(now.metrics_listen != next.metrics_listen, "metrics_listen");
  note(now.class_conflicts != next.class_conflicts, "class_conflicts");
  // store: csd's main compares it in the file (ReloadConfig), where it is
  // one message.
  note(now.local_socket.path != next.local_socket.path ||
           now.local_socket.group != next.local_socket.group ||
           now.local_socket.mode != next.local_socket.mode,
       "local_socket");
  return changed;
}

bool SameBindings(const AuthzOptions& a, const AuthzOptions& b) {
  using google::protobuf::util::MessageDifferencer;
  auto same = [](const auto& x, const auto& y) {
    return std::equal(x.begin(), x.end(), y.begin(), y.end(),
                      [](const auto& m, const auto& n) { return MessageDifferencer::Equals(m, n); });
  };
  return same(a.roles, b.roles) && same(a.tokens, b.tokens);
}

}  // namespace

absl::StatusOr<std::string> CsdServer::Reload(const CsdOptions& next) {
  std::lock_guard<std::mutex> lock(reload_mu_);
  absl::StatusOr<std::string> result = [&]() -> absl::StatusOr<std::string> {
    RETURN_IF_ERROR(RestartOnly(RestartOnlyChanges(options_, next), "csd"));
    ASSIGN_OR_RETURN(EnforcePolicy enforce, ParseEnforcePolicy(next.enforce, next.when_vulnerable));
    ASSIGN_OR_RETURN(Authorizer authz, Authorizer::Create(next.authz, local_peers_.get()));
    std::vector<std::string> changed;
    const AuthzOptions& was = options_.authz;
    if (!SameBindings(was, next.authz)) changed.push_back("roles and tokens");
    if (was.plaintext_role != next.authz.plaintext_role) changed.push_back("plaintext_role");
    if (was.plaintext_agents != next.authz.plaintext_agents) changed.push_back("plaintext_agents");
    if (was.trust_domain != next.authz.trust_domain) changed.push_back("trust_domain");
    if (options_.tag_from_metadata != next.tag_from_metadata) changed.push_back("tag_from_metadata");
    if (options_.enforce != next.enforce || options_.when_vulnerable != next.when_vulnerable) {
      changed.push_back("enforce");
    }
    if (options_.host_stale_after_s != next.host_stale_after_s) changed.push_back("host_stale_after_s");
    if (options_.enforcement_write_interval_s != next.enforcement_write_interval_s) {
      changed.push_back("enforcement_write_interval_s");
    }
    if (!(options_.engine == next.engine)) changed.push_back("engine");
    if (!(options_.rollout == next.rollout)) changed.push_back("rollout");
    if (changed.empty()) return std::string();
    const std::string what = absl::StrJoin(changed, ", ");
    // On record before it applies: a reload that cannot be audited changes
    // nothing.
    RETURN_IF_ERROR(state_->audit.AuditConfigReload(what));
    authz_->Replace(authz);
    state_->settings.set_tag_from_metadata(next.tag_from_metadata);
    state_->settings.set_enforce_policy(std::move(enforce));
    state_->settings.set_host_stale_after(absl::Seconds(next.host_stale_after_s));
    state_->settings.set_enforcement_write_interval(EnforcementWriteInterval(next));
    if (!(options_.engine == next.engine)) engine_->SetOptions(next.engine);
    if (!(options_.rollout == next.rollout)) rollouts_->SetOptions(next.rollout);
    options_.engine = next.engine;
    options_.rollout = next.rollout;
    options_.authz = next.authz;
    options_.tag_from_metadata = next.tag_from_metadata;
    options_.enforce = next.enforce;
    options_.when_vulnerable = next.when_vulnerable;
    options_.host_stale_after_s = next.host_stale_after_s;
    options_.enforcement_write_interval_s = next.enforcement_write_interval_s;
    return what;
  }();
  metrics_->RecordConfigReload(result.ok());
  return result;
}

void CsdServer::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    // Scrapes read the fanout and the store: stop them first.
    metrics_server_.reset();
    {
      std::lock_guard<std::mutex> lock(health_mu_);
      health_ = nullptr;  // goes with the server
    }
    // No connection is handed to a server that is shutting down.
    if (local_socket_) local_socket_->Stop();
    // A csd that is going away refuses its agents' Reports from here on:
    // it must not halt a rollout because they fell silent to it.
    if (rollouts_) rollouts_->Stop();
    // Its last export ends; what it did not take waits in the store.
    if (audit_exporter_) audit_exporter_->Stop();
    // Plans and ExplainVMs waiting are answered, running ones finish.
    queries_->Stop();
    // Streams never end on their own: give calls a moment, then cancel.
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
    server_->Wait();
    engine_->Stop();
    // Other replicas' changes call into the fanout and the views: none
    // after this.
    store_->SetExternalObserver(nullptr);
    if (replicas_ != nullptr) replicas_->SetSeenExchange(nullptr, nullptr);
    // The store's writer tells the fanout of a commit after it answered
    // the write, so a client may already be gone while that call is still
    // to come: wait for the writes in flight (a write after them completes
    // only once their commit observers returned) before the fanout goes.
    absl::Status drained = store_->WriteSync(
        [](store::Transaction&) { return absl::OkStatus(); });
    LOG_IF(WARNING, !drained.ok()) << "draining the store at shutdown: " << drained;
    {
      std::lock_guard<std::mutex> lock(health_mu_);
      fanout_for_store_ = nullptr;
    }
    fanout_.reset();
    store_.reset();
    // No Report is taken any more.
    stats_forwarder_.reset();
    LOG(INFO) << "csd stopped";
  });
}

void CsdServer::Wait() { server_->Wait(); }

void CsdServer::SetStoreReachable(bool reachable, const std::string& why) {
  std::lock_guard<std::mutex> lock(health_mu_);
  if (reachable == store_reachable_) return;
  store_reachable_ = reachable;
  store_problem_ = reachable ? "" : why;
  if (fanout_for_store_ != nullptr) {
    fanout_for_store_->SetStoreReachable(reachable, end_streams_after_store_lost_, why);
  }
  LOG(WARNING) << "csd health: " << (reachable ? "SERVING, the store is back"
                                              : "NOT_SERVING, the store cannot be reached: ")
               << why;
  if (health_ != nullptr) health_->SetServingStatus(reachable);
}

v1::ReplicaStatus CsdServer::OwnStatus() const {
  v1::ReplicaStatus status;
  status.set_version(CoschedVersion());
  status.set_store(replicas_ != nullptr ? "etcd" : "sqlite");
  if (replicas_ != nullptr) {
    status.set_name(replicas_->name());
    status.set_address(replicas_->address());
  }
  status.set_leader(store_->Leads());
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    status.set_store_reachable(store_reachable_);
    status.set_store_problem(store_problem_);
  }
  status.set_revision(store_->CurrentRevision());
  if (fanout_ != nullptr) status.set_agents_connected(static_cast<int32_t>(fanout_->WatcherCount()));
  *status.mutable_started_time() =
      google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(started_));
  return status;
}

int CsdServer::metrics_port() const {
  return metrics_server_ ? metrics_server_->port() : 0;
}

CsdServer::~CsdServer() {
  if (server_) {
    Shutdown();
  } else if (store_) {
    // Start failed: the store must not call into what goes before it.
    store_->SetExternalObserver(nullptr);
    if (replicas_ != nullptr) replicas_->SetSeenExchange(nullptr, nullptr);
  }
}

}  // namespace cosched::server
