#include "agent/agent.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "agent/host_probe.h"
#include "common/config_reload.h"
#include "common/labels.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "common/validation.h"
#include "common/version.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"
#include "host/core_sched_prctl.h"
#include "host/known_bad.h"
#include "host/topology.h"

namespace cosched::agent {
namespace {

constexpr int kDefaultReportIntervalS = 10;

absl::Status InStep(absl::string_view step, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("cs-agent start-up step \"",
                                                  step, "\" failed: ",
                                                  status.message()));
}

}  // namespace

absl::StatusOr<std::string> DefaultHostId() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) {
    return absl::InternalError("cannot read the hostname for the host id");
  }
  return std::string(name);
}

namespace {

// vmm_binaries and vmm_users, or their defaults, into `rule`.
absl::Status VmmRuleFromConfig(const v1::AgentConfig& config, discovery::VmmRule& rule) {
  constexpr int kMaxEntries = 32;
  if (config.vmm_binaries_size() > kMaxEntries || config.vmm_users_size() > kMaxEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat("vmm_binaries and vmm_users must have at most ", kMaxEntries, " entries"));
  }
  if (config.vmm_binaries_size() > 0) {
    rule.binaries.assign(config.vmm_binaries().begin(), config.vmm_binaries().end());
    for (size_t i = 0; i < rule.binaries.size(); ++i) {
      if (!absl::StartsWith(rule.binaries[i], "/")) {
        return absl::InvalidArgumentError(absl::StrCat(
            "vmm_binaries[", i, "] '", rule.binaries[i], "' must be an absolute path pattern"));
      }
    }
  }
  const bool defaults = config.vmm_users_size() == 0;
  const std::vector<std::string> users =
      defaults ? std::vector<std::string>{"root", "libvirt-qemu"}
               : std::vector<std::string>(config.vmm_users().begin(), config.vmm_users().end());
  ASSIGN_OR_RETURN(rule.uids, discovery::ResolveUsers(users, "vmm_users", defaults));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AgentOptions> AgentOptionsFromConfig(
    const v1::AgentConfig& config) {
  AgentOptions options;
  if (!config.server().empty()) options.session.server_address = config.server();
  if (config.host_id().empty()) {
    ASSIGN_OR_RETURN(options.host_id, DefaultHostId());
  } else {
    options.host_id = config.host_id();
  }
  if (!config.state_dir().empty()) options.state_dir = config.state_dir();
  options.session.tls = config.tls();
  options.session.insecure = config.insecure();
  if (config.report_interval_s() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("report_interval_s must be positive, got ",
                     config.report_interval_s()));
  }
  options.session.report_interval = std::chrono::seconds(
      config.report_interval_s() == 0 ? kDefaultReportIntervalS
                                      : config.report_interval_s());
  options.reconciler.fail_open = config.fail_open();
  if (config.rescan_interval_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rescan_interval_ms must be positive, got ",
                     config.rescan_interval_ms()));
  }
  if (config.rescan_interval_ms() > 0) {
    options.loop.rescan_interval = std::chrono::milliseconds(config.rescan_interval_ms());
  }
  if (!config.sysfs_root().empty()) options.sysfs_root = config.sysfs_root();
  options.allow_hazards.assign(config.allow_hazards().begin(), config.allow_hazards().end());
  RETURN_IF_ERROR(host::ValidateHazardNames("allow_hazards", options.allow_hazards));
  options.sched_ext_dir = config.sched_ext_dir();
  options.nested_is_hazard = config.nested_is_hazard();
  RETURN_IF_ERROR(ValidateLabels("labels", config.labels()));
  options.labels.insert(config.labels().begin(), config.labels().end());
  RETURN_IF_ERROR(VmmRuleFromConfig(config, options.vmm));
  if (config.report_failures_before_moving() != 0) {
    if (config.report_failures_before_moving() < 1 || config.report_failures_before_moving() > 100) {
      return absl::InvalidArgumentError(
          absl::StrCat("report_failures_before_moving must be between 1 and 100, got ",
                       config.report_failures_before_moving()));
    }
    options.session.report_failures_before_moving = config.report_failures_before_moving();
  }
  if (config.enforce() == "observe") {
    options.reconciler.observe = true;
  } else if (!config.enforce().empty() && config.enforce() != "on") {
    return absl::InvalidArgumentError(absl::StrCat(
        "enforce '", config.enforce().substr(0, 64),
        "' must be on (the default: cookies are set) or observe (none are set; "
        "each VM reports what enforcing would do)"));
  }
  if (config.on_hazard() == "clear") {
    options.reconciler.clear_on_hazard = true;
  } else if (!config.on_hazard().empty() && config.on_hazard() != "hold") {
    return absl::InvalidArgumentError(absl::StrCat(
        "on_hazard '", config.on_hazard(), "' must be hold (the default) or clear"));
  }
  {
    const bool named = !config.known_bad_file().empty();
    absl::StatusOr<v1::KnownBadList> known_bad = host::LoadKnownBadList(
        named ? config.known_bad_file() : host::kDefaultKnownBadFile, /*required=*/named);
    if (!known_bad.ok()) return known_bad.status();
    options.known_bad.assign(known_bad->entries().begin(), known_bad->entries().end());
  }
  const v1::TelemetryConfig& telemetry = config.telemetry();
  options.telemetry = telemetry.enabled();
  options.collector.enable_schedstats = telemetry.enable_schedstats();
  if (telemetry.buffer_size_kb() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("telemetry.buffer_size_kb must be positive, got ",
                     telemetry.buffer_size_kb()));
  }
  if (telemetry.buffer_size_kb() > 0) {
    options.collector.trace.buffer_size_kb = telemetry.buffer_size_kb();
  }
  if (telemetry.poll_interval_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("telemetry.poll_interval_ms must be positive, got ",
                     telemetry.poll_interval_ms()));
  }
  if (telemetry.poll_interval_ms() > 0) {
    options.collector.poll_interval =
        std::chrono::milliseconds(telemetry.poll_interval_ms());
  }
  options.first_answer_wait = kFirstAnswerWait;
  options.metrics_listen =
      config.metrics_listen().empty()
          ? kDefaultMetricsListen
          : metrics::NormalizeMetricsListen(config.metrics_listen());
  return options;
}

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      metrics_(std::make_unique<AgentMetrics>(
          [this] { return session_ != nullptr && session_->watching(); },
          [this] { return session_ != nullptr && !session_->refusal().empty(); },
          metrics::TlsFiles{options_.session.tls.cert_file(), options_.session.tls.ca_file()})) {}

Agent::~Agent() { Stop(); }

absl::Status Agent::CheckOptions() {
  RETURN_IF_ERROR(ValidateId("host_id", options_.host_id));
  RETURN_IF_ERROR(ParseServerList("server", options_.session.server_address).status());
  if (options_.session.report_interval.count() <= 0) {
    return absl::InvalidArgumentError("report interval must be positive");
  }
  if (!options_.host_fs) options_.host_fs = std::make_shared<host::LocalPseudoFs>();
  if (!options_.state_fs) options_.state_fs = std::make_shared<host::LocalStateFs>();
  if (!options_.core_sched) {
    options_.core_sched = std::make_shared<host::PrctlCoreSched>();
  }
  if (!options_.cpu_affinity) {
    options_.cpu_affinity = std::make_shared<host::LinuxCpuAffinity>();
  }
  if (options_.telemetry && !options_.sched_trace) {
    options_.sched_trace = host::MakeTracefsSchedTrace("/sys/kernel/tracing", "cs-agent",
                                                 options_.procfs_root);
  }
  RETURN_IF_ERROR(host::ValidateHazardNames("allow_hazards", options_.allow_hazards));
  RETURN_IF_ERROR(ValidateLabels(
      "labels", Labels(options_.labels.begin(), options_.labels.end())));
  if (options_.hazard_poll.count() <= 0) {
    return absl::InvalidArgumentError("hazard_poll must be positive");
  }
  if (!options_.vm_discovery) {
    // Reporting no VMs would tell csd that the host runs none.
    return absl::InvalidArgumentError(
        "AgentOptions.vm_discovery is required (discovery::MakeVmDiscovery makes the real one)");
  }
  return absl::OkStatus();
}

void Agent::PrepareStateDir() {
  if (options_.state_dir.empty()) {
    cache_ = std::make_unique<AssignmentCache>("", options_.state_fs);
    enablement_ = std::make_unique<HostEnablementState>("", options_.state_fs);
    state_dir_usable_ = false;
    return;
  }
  enablement_ = std::make_unique<HostEnablementState>(
      absl::StrCat(options_.state_dir, "/", HostEnablementState::kStateFileName),
      options_.state_fs);
  // The cache keeps the path even when the dir cannot be used now: each
  // save tries again, and one that fails is enforced from memory and says
  // so (AssignmentCache::Apply).
  cache_ = std::make_unique<AssignmentCache>(
      absl::StrCat(options_.state_dir, "/", AssignmentCache::kStateFileName),
      options_.state_fs);
  absl::Status dir = options_.state_fs->EnsureDirectory(options_.state_dir);
  state_dir_usable_ = dir.ok();
  if (!dir.ok()) {
    LOG(ERROR) << "state dir " << options_.state_dir << " cannot be used ("
               << dir.message() << "): starting with no assignments; every VM "
               << "is fail-closed on a cookie of its own until csd sends its state";
    metrics_->RecordStateUnusable("state_dir");
  }
}

void Agent::LoadAssignments() {
  if (!state_dir_usable_) return;
  enablement_->Load();
  std::optional<AssignmentCache::SetAside> aside = cache_->LoadOrSetAside(absl::Now());
  if (!aside) return;
  const std::string where =
      aside->moved_to.empty()
          ? absl::StrCat("cannot move it aside (", aside->move_error.message(),
                         "), so it stays until csd's state replaces it")
          : absl::StrCat("moved it to ", aside->moved_to);
  LOG(ERROR) << "not using the kept assignments: " << aside->problem.message() << "; "
             << where << "; starting with no assignments: every VM is fail-closed "
             << "on a cookie of its own (keeping the one it holds) until csd sends "
             << "its state";
  metrics_->RecordStateUnusable(aside->reason);
}

absl::Status Agent::DescribeHost() {
  const host::PseudoFs& fs = *options_.host_fs;
  ASSIGN_OR_RETURN(v1::Topology topology,
                   host::ReadTopology(fs, options_.sysfs_root));
  ASSIGN_OR_RETURN(bool smt_active,
                   host::ReadSmtActive(fs, options_.sysfs_root, topology));
  ASSIGN_OR_RETURN(bool schedstats,
                   host::ReadSchedstatsEnabled(fs, options_.procfs_root));
  probe_ = options_.core_sched->Probe();

  registration_.set_host_id(options_.host_id);
  *registration_.mutable_topology() = std::move(topology);
  v1::HostCapabilities* capabilities = registration_.mutable_capabilities();
  capabilities->set_smt_active(smt_active);
  capabilities->set_core_sched(probe_.support);
  capabilities->set_core_sched_detail(probe_.detail);
  capabilities->set_schedstats_enabled(schedstats);
  registration_.set_agent_version(CoschedVersion());
  registration_.mutable_labels()->insert(options_.labels.begin(), options_.labels.end());
  registration_.set_observe(options_.reconciler.observe);

  HazardWatchOptions watch;
  watch.paths.sysfs_root = options_.sysfs_root;
  watch.paths.procfs_root = options_.procfs_root;
  watch.paths.sched_ext_dir = options_.sched_ext_dir.empty()
                                  ? options_.sysfs_root + "/kernel/sched_ext"
                                  : options_.sched_ext_dir;
  watch.paths.cgroupfs_root = options_.sysfs_root + "/fs/cgroup";
  watch.rules = HazardRulesOf(options_);
  watch.poll = options_.hazard_poll;
  hazard_watch_ = std::make_unique<HazardWatch>(options_.host_fs, std::move(watch), [this] {
    // A hazard came or went: the next pass holds or resumes tagging, and
    // csd hears of it at once.
    if (loop_) loop_->Trigger();
    if (session_) session_->RequestReport();
  });
  // Before the first pass: a host unsafe at start never gets a cookie.
  hazard_watch_->ReadNow();
  *capabilities->mutable_preflight() = hazard_watch_->preflight();
  return absl::OkStatus();
}

namespace {

// The settings a reload cannot change: the names of those `next` changes.
std::vector<std::string> RestartOnlyChanges(const AgentOptions& now, const AgentOptions& next) {
  std::vector<std::string> changed;
  auto note = [&changed](bool differs, const char* name) {
    if (differs) changed.push_back(name);
  };
  using google::protobuf::util::MessageDifferencer;
  note(now.host_id != next.host_id, "host_id");
  note(now.session.server_address != next.session.server_address, "server");
  note(!MessageDifferencer::Equals(now.session.tls, next.session.tls), "tls");
  note(now.session.insecure != next.session.insecure, "insecure");
  note(now.session.report_interval != next.session.report_interval, "report_interval_s");
  note(now.session.report_failures_before_moving != next.session.report_failures_before_moving,
       "report_failures_before_moving");
  note(now.state_dir != next.state_dir, "state_dir");
  note(now.metrics_listen != next.metrics_listen, "metrics_listen");
  note(now.sysfs_root != next.sysfs_root || now.procfs_root != next.procfs_root, "sysfs_root");
  note(now.sched_ext_dir != next.sched_ext_dir, "sched_ext_dir");
  note(now.loop.rescan_interval != next.loop.rescan_interval, "rescan_interval_ms");
  note(now.telemetry != next.telemetry ||
           now.collector.enable_schedstats != next.collector.enable_schedstats ||
           now.collector.trace.buffer_size_kb != next.collector.trace.buffer_size_kb ||
           now.collector.poll_interval != next.collector.poll_interval,
       "telemetry");
  note(now.vmm.binaries != next.vmm.binaries, "vmm_binaries");
  note(now.vmm.uids != next.vmm.uids, "vmm_users");
  return changed;
}

bool SameKnownBad(const std::vector<v1::KnownBadEntry>& a, const std::vector<v1::KnownBadEntry>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const v1::KnownBadEntry& x, const v1::KnownBadEntry& y) {
                      return google::protobuf::util::MessageDifferencer::Equals(x, y);
                    });
}

}  // namespace

absl::StatusOr<std::string> Agent::Reload(const AgentOptions& next) {
  if (!session_) return absl::FailedPreconditionError("the agent has not started");
  RETURN_IF_ERROR(RestartOnly(RestartOnlyChanges(options_, next), "cs-agent"));
  std::vector<std::string> changed;
  if (options_.allow_hazards != next.allow_hazards) changed.push_back("allow_hazards");
  if (options_.nested_is_hazard != next.nested_is_hazard) changed.push_back("nested_is_hazard");
  if (!SameKnownBad(options_.known_bad, next.known_bad)) changed.push_back("the known-bad list");
  if (options_.reconciler.clear_on_hazard != next.reconciler.clear_on_hazard) {
    changed.push_back("on_hazard");
  }
  if (options_.reconciler.fail_open != next.reconciler.fail_open) changed.push_back("fail_open");
  if (options_.reconciler.observe != next.reconciler.observe) {
    changed.push_back(next.reconciler.observe ? "enforce (now observe)" : "enforce (now on)");
  }
  if (options_.labels != next.labels) changed.push_back("labels");
  if (changed.empty()) return std::string();

  options_.allow_hazards = next.allow_hazards;
  options_.nested_is_hazard = next.nested_is_hazard;
  options_.known_bad = next.known_bad;
  options_.reconciler.clear_on_hazard = next.reconciler.clear_on_hazard;
  options_.reconciler.fail_open = next.reconciler.fail_open;
  options_.reconciler.observe = next.reconciler.observe;
  options_.labels = next.labels;
  reconciler_->SetPolicy(options_.reconciler.fail_open, options_.reconciler.clear_on_hazard,
                         options_.reconciler.observe);
  // Hazards that come or go with the new rules trigger a pass and a Report
  // themselves (the watch's on_change); a policy change needs a pass.
  hazard_watch_->SetRules(HazardRulesOf(options_));
  session_->SetRegistration(options_.labels, options_.reconciler.observe);
  loop_->Trigger();
  return absl::StrJoin(changed, ", ");
}

absl::Status Agent::Start() {
  if (session_) return absl::FailedPreconditionError("agent already started");
  RETURN_IF_ERROR(InStep("check options", CheckOptions()));
  PrepareStateDir();
  LoadAssignments();
  if (options_.first_answer_wait.count() > 0 && cache_->revision() == 0 && !enablement_->kept()) {
    enablement_->AwaitFirstAnswer(absl::FromChrono(options_.first_answer_wait));
    LOG(INFO) << "a first start: no cookie until csd answers, for at most "
              << options_.first_answer_wait.count() << " ms";
  }
  RETURN_IF_ERROR(InStep("describe host", DescribeHost()));
  LOG(INFO) << "cs-agent " << CoschedVersion() << " host " << options_.host_id
            << ": " << registration_.topology().cores_size() << " cores, SMT "
            << (capabilities().smt_active() ? "active" : "inactive")
            << ", core scheduling: " << probe_.detail << "; "
            << cache_->assignments().size()
            << " assignments kept at revision " << cache_->revision();

  ReconcilerOptions reconciler_options = options_.reconciler;
  reconciler_options.smt_active = capabilities().smt_active();
  reconciler_options.probe = probe_;
  HazardWatch* hazard_watch = hazard_watch_.get();
  reconciler_options.hazards = [hazard_watch] { return hazard_watch->hazards(); };
  HostEnablementState* enablement = enablement_.get();
  reconciler_options.enablement = [enablement] { return enablement->Get(); };
  reconciler_ = std::make_unique<CookieReconciler>(options_.core_sched.get(),
                                                   reconciler_options);
  dedicated_ = std::make_unique<DedicatedCoreEnforcer>(
      options_.cpu_affinity.get(), registration_.topology());
  ReconcileLoopOptions loop_options = options_.loop;
  AgentMetrics* agent_metrics = metrics_.get();
  loop_options.on_pass = [agent_metrics](const PassRecord& pass) {
    agent_metrics->RecordReconcilePass(pass);
  };
  AssignmentCache* cache = cache_.get();
  loop_options.assignment_revision = [cache] { return cache->revision(); };
  loop_options.host_id = options_.host_id;
  loop_ = std::make_unique<ReconcileLoop>(
      loop_options, options_.vm_discovery.get(), reconciler_.get(),
      [cache](const discovery::DiscoveredVm& vm) -> std::optional<v1::Assignment> {
        // A VM is tagged under its name or its UUID.
        if (auto a = cache->Find(vm.vm_id)) return a;
        if (!vm.uuid.empty()) return cache->Find(vm.uuid);
        return std::nullopt;
      },
      [this] {
        if (session_) session_->RequestReport();
      },
      dedicated_.get());

  StartCollector();

  ServerSessionOptions session_options = options_.session;
  session_options.applied_revision = [this] { return loop_->enforced_revision(); };
  session_options.preflight = [hazard_watch] { return hazard_watch->preflight(); };
  session_options.impostors = [this] { return loop_->Impostors(); };
  session_options.on_enablement = [this, enablement](const v1::HostEnablement& answer) {
    // csd changed its mind (a setting, this host's vulnerabilities): the
    // next pass holds or resumes tagging, and csd hears the VMs' states.
    if (enablement->Set(answer)) {
      loop_->Trigger();
      session_->RequestReport();
    }
  };
  session_options.interceptors = [agent_metrics] {
    std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(agent_metrics->rpc().MakeClientInterceptorFactory());
    return interceptors;
  };
  session_ = std::make_unique<ServerSession>(
      std::move(session_options), registration_, cache_.get(),
      [this] { return ObservationsWithRunStates(); },
      [this](int64_t revision) { OnAssignmentsChanged(revision); },
      &stats_queue_);
  // Served once the session exists: scrapes read its state.
  RETURN_IF_ERROR(InStep("serve metrics", ServeMetrics()));
  // Enforce what is known before csd answers (restart, csd away).
  loop_->Start();
  hazard_watch_->Start();
  if (options_.process_events) {
    ReconcileLoop* loop = loop_.get();
    absl::Status events = options_.process_events->Start(
        [loop](const host::ProcessEvent& event) { loop->NoteProcessEvent(event); });
    if (!events.ok()) {
      LOG(WARNING) << events << "; new threads are found by the rescan every "
                   << options_.loop.rescan_interval.count() << " ms";
    }
  }
  return InStep("connect to csd", session_->Start());
}

absl::StatusOr<std::vector<v1::VMObservation>> Agent::ObservationsWithRunStates() const {
  ASSIGN_OR_RETURN(std::vector<v1::VMObservation> observations, loop_->Observations());
  // The run states come from the loop's last result, read a moment later:
  // a pass in between gives a VM its newer state, and a VM that newer pass
  // no longer found stays UNSPECIFIED (taken as running) until the next
  // Report, which leaves it out.
  std::optional<ReconcileResult> result = loop_->last_result();
  if (!result) return observations;
  std::map<std::string, v1::VMRunState> run_states;
  for (const VmOutcome& vm : result->vms) run_states.emplace(vm.vm_id, vm.run_state);
  for (v1::VMObservation& o : observations) {
    auto it = run_states.find(o.vm_id());
    if (it != run_states.end()) o.set_run_state(it->second);
  }
  return observations;
}

absl::Status Agent::ServeMetrics() {
  if (options_.metrics_listen.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(metrics_server_,
                   metrics::MetricsHttpServer::Start(options_.metrics_listen,
                                                     metrics_->collectables()));
  LOG(INFO) << "metrics on http://" << metrics_server_->address() << "/metrics";
  return absl::OkStatus();
}

int Agent::metrics_port() const {
  return metrics_server_ ? metrics_server_->port() : 0;
}

void Agent::TriggerReconcile() {
  if (loop_) loop_->Trigger();
}

void Agent::StartCollector() {
  v1::HostCapabilities* capabilities = registration_.mutable_capabilities();
  if (!options_.telemetry) {
    capabilities->set_telemetry_detail("telemetry disabled in the config");
    return;
  }
  SiblingShareCollectorOptions collector_options = options_.collector;
  collector_options.window = options_.session.report_interval;
  collector_options.procfs_root = options_.procfs_root;
  collector_options.cgroupfs_root = options_.sysfs_root + "/fs/cgroup";
  collector_options.vms_version = [loop = loop_.get()] { return int64_t{loop->passes()}; };
  collector_options.lag = options_.collector.poll_interval;
  ReconcileLoop* loop = loop_.get();
  AgentMetrics* agent_metrics = metrics_.get();
  collector_options.on_window = [loop, agent_metrics](const v1::StatsWindow& window) {
    std::map<std::string, std::string> groups;
    if (std::optional<ReconcileResult> result = loop->last_result()) {
      for (const VmOutcome& vm : result->vms) groups[vm.vm_id] = vm.group;
    }
    agent_metrics->RecordStatsWindow(window, [&groups](const std::string& vm_id) {
      auto it = groups.find(vm_id);
      return it == groups.end() ? std::string() : it->second;
    });
  };
  collector_ = std::make_unique<SiblingShareCollector>(
      collector_options, registration_.topology(), options_.sched_trace.get(),
      options_.host_fs.get(),
      [loop]() -> absl::StatusOr<std::vector<CollectedVm>> {
        std::optional<ReconcileResult> result = loop->last_result();
        if (!result) return absl::UnavailableError("no reconcile pass yet");
        std::vector<CollectedVm> vms;
        vms.reserve(result->vms.size());
        for (VmOutcome& vm : result->vms) {
          // A VM csd cannot name (QEMU without -name and -uuid, or a name
          // outside the id rule) would make csd refuse the whole Report.
          if (!ValidateId("vm_id", vm.vm_id).ok()) continue;
          vms.push_back({std::move(vm.vm_id), std::move(vm.group), std::move(vm.tids),
                         std::move(vm.cgroup)});
        }
        return vms;
      },
      &stats_queue_);
  absl::Status started = collector_->Start();
  if (!started.ok()) {
    collector_.reset();
    LOG(WARNING) << "sibling-sharing telemetry is off: " << started
                 << "; tagging goes on without it";
    capabilities->set_telemetry_detail(std::string(started.message()));
    return;
  }
  capabilities->set_telemetry_active(true);
  capabilities->set_telemetry_detail("tracing sched_switch");
  // The collector may just have turned schedstats on.
  absl::StatusOr<bool> schedstats =
      host::ReadSchedstatsEnabled(*options_.host_fs, options_.procfs_root);
  if (schedstats.ok()) capabilities->set_schedstats_enabled(*schedstats);
  LOG(INFO) << "sibling-sharing telemetry on: windows of "
            << options_.session.report_interval.count() << " ms, schedstats "
            << (capabilities->schedstats_enabled() ? "on (forced idle measured)"
                                                   : "off (no forced idle)");
}

void Agent::Stop() {
  // Scrapes read the session: stop them first.
  metrics_server_.reset();
  if (options_.process_events) options_.process_events->Stop();
  if (collector_) collector_->Stop();
  // Its callback reaches the loop and the session.
  if (hazard_watch_) hazard_watch_->Stop();
  if (session_) session_->Stop();
  if (loop_) loop_->Stop();
}

void Agent::OnAssignmentsChanged(int64_t revision) {
  // The revision lives in the cache, not under mu_: taking mu_ here makes
  // sure a waiter is either before its check or already waiting.
  {
    std::lock_guard<std::mutex> lock(mu_);
  }
  revision_changed_.notify_all();
  if (loop_) loop_->Trigger();
  if (options_.on_assignments_changed) options_.on_assignments_changed(revision);
}

AssignmentMap Agent::assignments() const {
  return cache_ ? cache_->assignments() : AssignmentMap();
}

std::optional<v1::Assignment> Agent::FindAssignment(
    absl::string_view vm_id) const {
  return cache_ ? cache_->Find(vm_id) : std::nullopt;
}

std::string Agent::csd_refusal() const {
  return session_ ? session_->refusal() : std::string();
}

v1::HostEnablement Agent::enablement() const {
  if (enablement_) return enablement_->Get();
  v1::HostEnablement enforce;
  enforce.set_state(v1::HostEnablement::STATE_ENFORCE);
  return enforce;
}

int64_t Agent::applied_revision() const {
  return cache_ ? cache_->revision() : 0;
}

bool Agent::WaitForRevision(int64_t revision,
                            std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return revision_changed_.wait_for(
      lock, timeout, [&] { return applied_revision() >= revision; });
}

}  // namespace cosched::agent
