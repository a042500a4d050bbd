#include "discovery/libvirt_discovery.h"

#include <glog/logging.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"
#include "discovery/domain_metadata_xml.h"
#include "discovery/libvirt_status_xml.h"
#include "discovery/proc_parsers.h"

namespace cosched::discovery {
namespace {


std::string LastLibvirtError() {
  const char* message = virGetLastErrorMessage();
  return message != nullptr ? message : "unknown libvirt error";
}

// Once per process: libvirt's default event loop (it must be registered
// before the first connection is opened, or events are never delivered),
// and no printing of errors to stderr by libvirt itself.
void InitLibvirtOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (virInitialize() < 0) LOG(ERROR) << "libvirt: virInitialize failed";
    virSetErrorFunc(nullptr, [](void*, virErrorPtr) {});
    if (virEventRegisterDefaultImpl() < 0) {
      LOG(ERROR) << "libvirt: cannot register the event loop: " << LastLibvirtError();
    }
  });
}

// The one thread that runs libvirt's process-wide default event loop,
// while at least one LibvirtDiscovery exists.
class EventLoop {
 public:
  static EventLoop& Get() {
    static EventLoop* loop = new EventLoop;  // never destroyed: outlives static users
    return *loop;
  }

  void Acquire() {
    std::lock_guard<std::mutex> lock(mu_);
    if (users_++ > 0) return;
    stop_ = false;
    thread_ = std::thread([this] { Run(); });
  }

  // Joins the loop thread when the last user leaves. Must not be called on
  // the loop thread.
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--users_ > 0) return;
    stop_ = true;
    // A timeout due now wakes the loop from its poll.
    int wake = virEventAddTimeout(0, [](int, void*) {}, nullptr, nullptr);
    thread_.join();
    if (wake >= 0) virEventRemoveTimeout(wake);
  }

 private:
  void Run() {
    while (!stop_.load()) {
      if (virEventRunDefaultImpl() < 0) {
        LOG_EVERY_N(ERROR, 100) << "libvirt: event loop: " << LastLibvirtError();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }

  std::mutex mu_;
  int users_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

DomainEvent::Kind EventKind(int event) {
  switch (event) {
    case VIR_DOMAIN_EVENT_DEFINED:
      return DomainEvent::Kind::kDefined;
    case VIR_DOMAIN_EVENT_UNDEFINED:
      return DomainEvent::Kind::kUndefined;
    case VIR_DOMAIN_EVENT_STARTED:
      return DomainEvent::Kind::kStarted;
    case VIR_DOMAIN_EVENT_SUSPENDED:
      return DomainEvent::Kind::kSuspended;
    case VIR_DOMAIN_EVENT_RESUMED:
      return DomainEvent::Kind::kResumed;
    case VIR_DOMAIN_EVENT_STOPPED:
      return DomainEvent::Kind::kStopped;
    case VIR_DOMAIN_EVENT_SHUTDOWN:
      return DomainEvent::Kind::kShutdown;
    case VIR_DOMAIN_EVENT_PMSUSPENDED:
      return DomainEvent::Kind::kPmSuspended;
    case VIR_DOMAIN_EVENT_CRASHED:
      return DomainEvent::Kind::kCrashed;
    default:
      return DomainEvent::Kind::kOther;
  }
}

std::string DomainUuid(virDomainPtr dom) {
  char uuid[VIR_UUID_STRING_BUFLEN] = {};
  if (virDomainGetUUIDString(dom, uuid) < 0) return "";
  return absl::AsciiStrToLower(uuid);
}

struct Domain {
  std::string name;
  std::string uuid;
  // virDomainGetState's; -1 when it failed.
  int state = -1;
  int reason = 0;
  std::optional<v1::DomainMetadata> metadata = std::nullopt;
  // libvirt could not give its XML this time (DiscoveredVm::metadata_unknown).
  bool metadata_unknown = false;
};

// Domains are remembered under their UUID, else their name.
std::string DomainKey(const Domain& d) { return d.uuid.empty() ? d.name : d.uuid; }

// The tenancy in the domain's live XML. UNAVAILABLE when libvirt cannot
// give the XML (the domain went away, libvirtd restarts).
absl::StatusOr<std::optional<v1::DomainMetadata>> ReadDomainMetadata(virDomainPtr dom) {
  char* xml = virDomainGetXMLDesc(dom, 0);
  if (xml == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot read the domain XML from libvirt: ", LastLibvirtError()));
  }
  std::optional<v1::DomainMetadata> metadata = ParseDomainMetadata(xml);
  free(xml);
  return metadata;
}

}  // namespace

v1::VMRunState LibvirtRunState(int state, int reason, absl::string_view async_job,
                               bool seen_running) {
  switch (state) {
    case VIR_DOMAIN_RUNNING:
    case VIR_DOMAIN_BLOCKED:
    case VIR_DOMAIN_SHUTDOWN:
      return v1::VM_RUN_STATE_RUNNING;
    case VIR_DOMAIN_PAUSED:
      if (reason == VIR_DOMAIN_PAUSED_POSTCOPY) return v1::VM_RUN_STATE_MIGRATING_OUT;
      if (reason != VIR_DOMAIN_PAUSED_MIGRATION) return v1::VM_RUN_STATE_PAUSED;
      if (async_job == "migration in") return v1::VM_RUN_STATE_MIGRATING_IN;
      if (async_job == "migration out") return v1::VM_RUN_STATE_MIGRATING_OUT;
      return seen_running ? v1::VM_RUN_STATE_MIGRATING_OUT : v1::VM_RUN_STATE_MIGRATING_IN;
    case VIR_DOMAIN_PMSUSPENDED:
      return v1::VM_RUN_STATE_PAUSED;
    case VIR_DOMAIN_SHUTOFF:
      return reason == VIR_DOMAIN_SHUTOFF_MIGRATED ? v1::VM_RUN_STATE_MIGRATING_OUT
                                                   : v1::VM_RUN_STATE_SHUT_OFF;
    case VIR_DOMAIN_CRASHED:
      return v1::VM_RUN_STATE_SHUT_OFF;
    default:
      return v1::VM_RUN_STATE_UNSPECIFIED;
  }
}

const char* DomainEventKindName(DomainEvent::Kind kind) {
  switch (kind) {
    case DomainEvent::Kind::kDefined:
      return "defined";
    case DomainEvent::Kind::kUndefined:
      return "undefined";
    case DomainEvent::Kind::kStarted:
      return "started";
    case DomainEvent::Kind::kSuspended:
      return "suspended";
    case DomainEvent::Kind::kResumed:
      return "resumed";
    case DomainEvent::Kind::kStopped:
      return "stopped";
    case DomainEvent::Kind::kShutdown:
      return "shutdown";
    case DomainEvent::Kind::kPmSuspended:
      return "pmsuspended";
    case DomainEvent::Kind::kCrashed:
      return "crashed";
    case DomainEvent::Kind::kOther:
      return "other";
    case DomainEvent::Kind::kReconnected:
      return "reconnected";
    case DomainEvent::Kind::kMetadataChanged:
      return "metadata-changed";
  }
  return "other";
}

// What libvirt's callbacks reach. They hold it through a weak_ptr (freed by
// libvirt when it drops the callback), so a late callback after the
// discovery is gone does nothing.
struct LibvirtDiscovery::State {
  explicit State(Options o) : options(std::move(o)) {}

  // Opens the connection when it is not open (or libvirtd closed it) and
  // subscribes to events. UNAVAILABLE with libvirt's message on failure.
  absl::Status EnsureConnectedLocked();
  void DisconnectLocked();
  absl::StatusOr<std::vector<Domain>> ListActiveDomainsLocked();

  static void OnClose(virConnectPtr closed_conn, int reason, void* opaque) {
    std::shared_ptr<State> state = FromOpaque(opaque);
    // Only the connection in use counts, not one already replaced.
    if (state == nullptr || closed_conn != state->live.load()) return;
    LOG(WARNING) << "libvirt: connection to " << state->options.uri << " closed (reason "
                 << reason << ")";
    state->closed = true;
  }
  static void FreeOpaque(void* opaque) { delete static_cast<std::weak_ptr<State>*>(opaque); }
  void* NewOpaque() { return new std::weak_ptr<State>(self); }
  static std::shared_ptr<State> FromOpaque(void* opaque) {
    return static_cast<std::weak_ptr<State>*>(opaque)->lock();
  }

  const Options options;
  std::weak_ptr<State> self;

  std::mutex mu;
  virConnectPtr conn = nullptr;  // guarded by mu
  int lifecycle_callback = -1;   // guarded by mu
  int reconnect_timer = -1;      // guarded by mu
  bool ever_connected = false;   // guarded by mu
  // Active domains (DomainKey) seen RUNNING by a Discover() since they
  // became active, for LibvirtRunState; guarded by mu.
  std::set<std::string> seen_running;
  // The open connection, for the close callback (which runs without mu).
  std::atomic<virConnectPtr> live{nullptr};
  std::atomic<bool> closed{false};
  // Set on a reconnection; the kReconnected event is sent without mu held.
  std::atomic<bool> resync_pending{false};
  int metadata_callback = -1;  // guarded by mu

  // Domain metadata is read once per domain and again when libvirt says it
  // may have changed (metadata-change, define, start events), not on every
  // pass: each read is a round trip to libvirtd per domain. Without a
  // listener there are no events, and it is read on every pass.
  // An event stamps its domain (DomainKey) with a new generation; a cached
  // read is used only while its generation is the domain's current one, so
  // an event that arrives during a read is not lost. Under metadata_mu,
  // which callbacks take briefly (never mu, held across libvirt calls).
  struct CachedMetadata {
    uint64_t generation = 0;
    std::optional<v1::DomainMetadata> metadata;
  };
  std::mutex metadata_mu;
  uint64_t last_generation = 0;                          // guarded by metadata_mu
  std::map<std::string, uint64_t> metadata_generation;   // guarded by metadata_mu
  std::map<std::string, CachedMetadata> metadata_cache;  // guarded by metadata_mu

  void MetadataMayHaveChanged(const std::string& key) {
    std::lock_guard<std::mutex> lock(metadata_mu);
    metadata_generation[key] = ++last_generation;
  }
  uint64_t MetadataGeneration(const std::string& key) {
    std::lock_guard<std::mutex> lock(metadata_mu);
    auto it = metadata_generation.find(key);
    return it == metadata_generation.end() ? 0 : it->second;
  }
  absl::StatusOr<std::optional<v1::DomainMetadata>> MetadataOf(virDomainPtr dom,
                                                                const std::string& key);

  void SendPendingResync() {
    if (options.listener && resync_pending.exchange(false)) {
      DomainEvent e;
      e.kind = DomainEvent::Kind::kReconnected;
      options.listener(e);
    }
  }
};

absl::Status LibvirtDiscovery::State::EnsureConnectedLocked() {
  if (conn != nullptr && (closed.load() || virConnectIsAlive(conn) != 1)) {
    LOG(WARNING) << "libvirt: connection to " << options.uri << " lost; reconnecting";
    DisconnectLocked();
  }
  if (conn != nullptr) return absl::OkStatus();

  conn = virConnectOpenReadOnly(options.uri.c_str());
  if (conn == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to libvirt at ", options.uri, ": ", LastLibvirtError()));
  }
  closed = false;
  virConnSetErrorFunc(conn, nullptr, [](void*, virErrorPtr) {});
  live = conn;
  if (virConnectRegisterCloseCallback(conn, OnClose, NewOpaque(), FreeOpaque) < 0) {
    LOG(WARNING) << "libvirt: no close callback: " << LastLibvirtError();
  }
  if (options.listener) {
    auto on_lifecycle = [](virConnectPtr, virDomainPtr dom, int event, int detail,
                           void* opaque) -> int {
      std::shared_ptr<State> state = FromOpaque(opaque);
      if (state == nullptr) return 0;
      DomainEvent e;
      const char* name = virDomainGetName(dom);
      e.name = name != nullptr ? name : "";
      e.uuid = DomainUuid(dom);
      e.kind = EventKind(event);
      e.detail = detail;
      if (e.kind == DomainEvent::Kind::kDefined || e.kind == DomainEvent::Kind::kStarted ||
          e.kind == DomainEvent::Kind::kUndefined) {
        state->MetadataMayHaveChanged(e.uuid.empty() ? e.name : e.uuid);
      }
      VLOG(1) << "libvirt: domain " << e.name << " " << DomainEventKindName(e.kind);
      state->options.listener(e);
      return 0;
    };
    lifecycle_callback = virConnectDomainEventRegisterAny(
        conn, nullptr, VIR_DOMAIN_EVENT_ID_LIFECYCLE, VIR_DOMAIN_EVENT_CALLBACK(+on_lifecycle),
        NewOpaque(), FreeOpaque);
    auto on_metadata = [](virConnectPtr, virDomainPtr dom, int type, const char* nsuri,
                          void* opaque) -> int {
      std::shared_ptr<State> state = FromOpaque(opaque);
      if (state == nullptr) return 0;
      DomainEvent e;
      const char* name = virDomainGetName(dom);
      e.name = name != nullptr ? name : "";
      e.uuid = DomainUuid(dom);
      e.kind = DomainEvent::Kind::kMetadataChanged;
      e.detail = type;
      VLOG(1) << "libvirt: domain " << e.name << " metadata changed ("
              << (nsuri != nullptr ? nsuri : "type " + std::to_string(type)) << ")";
      state->MetadataMayHaveChanged(e.uuid.empty() ? e.name : e.uuid);
      state->options.listener(e);
      return 0;
    };
    metadata_callback =
        lifecycle_callback < 0
            ? -1
            : virConnectDomainEventRegisterAny(conn, nullptr, VIR_DOMAIN_EVENT_ID_METADATA_CHANGE,
                                               VIR_DOMAIN_EVENT_CALLBACK(+on_metadata),
                                               NewOpaque(), FreeOpaque);
    if (lifecycle_callback < 0 || metadata_callback < 0) {
      absl::Status status = absl::UnavailableError(absl::StrCat(
          "cannot subscribe to libvirt domain events at ", options.uri, ": ", LastLibvirtError()));
      DisconnectLocked();
      return status;
    }
  }
  {
    // Changes while disconnected were not heard: read every domain again.
    std::lock_guard<std::mutex> lock(metadata_mu);
    metadata_cache.clear();
  }
  LOG(INFO) << "libvirt: connected to " << options.uri;
  if (ever_connected) resync_pending = true;
  ever_connected = true;
  return absl::OkStatus();
}

void LibvirtDiscovery::State::DisconnectLocked() {
  if (conn == nullptr) return;
  if (lifecycle_callback >= 0) virConnectDomainEventDeregisterAny(conn, lifecycle_callback);
  lifecycle_callback = -1;
  if (metadata_callback >= 0) virConnectDomainEventDeregisterAny(conn, metadata_callback);
  metadata_callback = -1;
  live = nullptr;
  virConnectUnregisterCloseCallback(conn, OnClose);
  virConnectClose(conn);
  conn = nullptr;
}

absl::StatusOr<std::optional<v1::DomainMetadata>> LibvirtDiscovery::State::MetadataOf(
    virDomainPtr dom, const std::string& key) {
  const bool cached = static_cast<bool>(options.listener);
  const uint64_t generation = MetadataGeneration(key);
  if (cached) {
    std::lock_guard<std::mutex> lock(metadata_mu);
    auto it = metadata_cache.find(key);
    if (it != metadata_cache.end() && it->second.generation == generation) {
      return it->second.metadata;
    }
  }
  absl::StatusOr<std::optional<v1::DomainMetadata>> read = ReadDomainMetadata(dom);
  if (!read.ok()) {
    // Not cached: tried again on the next pass. Until then csd is told it
    // is unknown, and keeps the VM's tag as it is: a transient read error
    // is no reason to untag it (nor to tag it).
    LOG_EVERY_N(WARNING, 100) << "libvirt: domain " << key << ": " << read.status().message();
    return read.status();
  }
  if (cached) {
    std::lock_guard<std::mutex> lock(metadata_mu);
    metadata_cache[key] = CachedMetadata{generation, *read};
  }
  return *std::move(read);
}

absl::StatusOr<std::vector<Domain>> LibvirtDiscovery::State::ListActiveDomainsLocked() {
  virDomainPtr* list = nullptr;
  int n = virConnectListAllDomains(conn, &list, VIR_CONNECT_LIST_DOMAINS_ACTIVE);
  if (n < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot list libvirt domains at ", options.uri, ": ", LastLibvirtError()));
  }
  std::vector<Domain> domains;
  for (int i = 0; i < n; ++i) {
    const char* name = virDomainGetName(list[i]);
    Domain d{name != nullptr ? name : "", DomainUuid(list[i])};
    if (virDomainGetState(list[i], &d.state, &d.reason, 0) < 0) {
      LOG_EVERY_N(WARNING, 100) << "libvirt: cannot read the state of domain " << d.name << ": "
                                << LastLibvirtError() << "; reporting it as running";
      d.state = -1;
    }
    absl::StatusOr<std::optional<v1::DomainMetadata>> metadata = MetadataOf(list[i], DomainKey(d));
    if (metadata.ok()) {
      d.metadata = *std::move(metadata);
    } else {
      d.metadata_unknown = true;
    }
    domains.push_back(std::move(d));
    virDomainFree(list[i]);
  }
  free(list);
  {
    // Only listed domains are remembered, so that domains come and go
    // without growing the maps. Forgetting a generation is safe: a domain
    // that starts again has a start event and no cached read.
    std::lock_guard<std::mutex> lock(metadata_mu);
    std::set<std::string> listed;
    for (const Domain& d : domains) listed.insert(DomainKey(d));
    std::erase_if(metadata_cache, [&](const auto& entry) { return !listed.count(entry.first); });
    std::erase_if(metadata_generation,
                  [&](const auto& entry) { return !listed.count(entry.first); });
  }
  return domains;
}

LibvirtDiscovery::LibvirtDiscovery(Options options, std::shared_ptr<const host::PseudoFs> fs)
    : state_(std::make_shared<State>(std::move(options))),
      procfs_(fs, state_->options.procfs),
      fs_(std::move(fs)) {
  state_->self = state_;
  InitLibvirtOnce();
  EventLoop::Get().Acquire();
  std::lock_guard<std::mutex> lock(state_->mu);
  if (absl::Status status = state_->EnsureConnectedLocked(); !status.ok()) {
    LOG(WARNING) << status.message() << " (will retry)";
  }
  if (state_->options.listener) {
    // Keeps the event subscription alive across libvirtd restarts even when
    // nobody calls Discover().
    auto on_timer = [](int, void* opaque) {
      std::shared_ptr<State> state = State::FromOpaque(opaque);
      if (state == nullptr) return;
      {
        std::unique_lock<std::mutex> lock(state->mu, std::try_to_lock);
        if (!lock.owns_lock()) return;  // a Discover() is connecting anyway
        absl::Status status = state->EnsureConnectedLocked();
        if (!status.ok()) {
          LOG_EVERY_N(WARNING, 30) << status.message();
        }
      }
      state->SendPendingResync();
    };
    state_->reconnect_timer = virEventAddTimeout(state_->options.reconnect_interval_ms, on_timer,
                                                 state_->NewOpaque(), State::FreeOpaque);
    if (state_->reconnect_timer < 0) {
      LOG(WARNING) << "libvirt: no reconnect timer: " << LastLibvirtError();
    }
  }
}

LibvirtDiscovery::~LibvirtDiscovery() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->reconnect_timer >= 0) virEventRemoveTimeout(state_->reconnect_timer);
    state_->reconnect_timer = -1;
    state_->DisconnectLocked();
  }
  EventLoop::Get().Release();
}

bool LibvirtDiscovery::connected() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->conn != nullptr && !state_->closed.load() && virConnectIsAlive(state_->conn) == 1;
}

absl::StatusOr<std::vector<DiscoveredVm>> LibvirtDiscovery::Discover() { return Discover(false); }

absl::StatusOr<std::vector<DiscoveredVm>> LibvirtDiscovery::DiscoverWithUnmanaged() {
  return Discover(true);
}

absl::StatusOr<std::vector<DiscoveredVm>> LibvirtDiscovery::Discover(bool include_unmanaged) {
  State& state = *state_;
  std::vector<Domain> domains;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    absl::Status status = state.EnsureConnectedLocked();
    absl::StatusOr<std::vector<Domain>> listed =
        status.ok() ? state.ListActiveDomainsLocked() : absl::StatusOr<std::vector<Domain>>(status);
    if (!listed.ok() && state.conn != nullptr && virConnectIsAlive(state.conn) != 1) {
      // libvirtd restarted since the last call: one fresh attempt.
      state.DisconnectLocked();
      status = state.EnsureConnectedLocked();
      listed = status.ok() ? state.ListActiveDomainsLocked()
                           : absl::StatusOr<std::vector<Domain>>(status);
    }
    if (!listed.ok()) return listed.status();
    domains = std::move(*listed);
  }
  state.SendPendingResync();

  // The status XML gives the QEMU pid and vCPU thread ids.
  std::vector<std::optional<LibvirtDomainStatus>> statuses;
  std::vector<int> known_pids;
  for (const Domain& d : domains) {
    std::string path = absl::StrCat(state.options.status_dir, "/", d.name, ".xml");
    absl::StatusOr<std::string> xml = ReadFileToString(path);
    absl::StatusOr<LibvirtDomainStatus> status =
        xml.ok() ? ParseLibvirtStatusXml(*xml) : absl::StatusOr<LibvirtDomainStatus>(xml.status());
    if (!status.ok()) {
      LOG_EVERY_N(WARNING, 100) << "libvirt: domain " << d.name << ": " << status.status()
                                << "; matching its QEMU process by -uuid/-name";
      statuses.emplace_back();
      continue;
    }
    if (!status->uuid.empty() && !d.uuid.empty() && status->uuid != d.uuid) {
      LOG_EVERY_N(WARNING, 100) << "libvirt: " << path << " is for UUID " << status->uuid
                                << ", not " << d.uuid << "; ignored";
      statuses.emplace_back();
      continue;
    }
    known_pids.push_back(status->pid);
    statuses.emplace_back(std::move(*status));
  }

  // Run states, and the domains seen running, kept while they stay listed.
  std::vector<v1::VMRunState> run_states;
  {
    std::lock_guard<std::mutex> lock(state.mu);
    std::set<std::string> seen_running;
    for (size_t i = 0; i < domains.size(); ++i) {
      const Domain& d = domains[i];
      const std::string key = DomainKey(d);
      const bool seen = state.seen_running.count(key) > 0;
      // A state that cannot be read: the domain is active and has a QEMU.
      v1::VMRunState run_state =
          d.state < 0 ? v1::VM_RUN_STATE_RUNNING
                      : LibvirtRunState(d.state, d.reason,
                                        statuses[i] ? statuses[i]->async_job : "", seen);
      if (seen || run_state == v1::VM_RUN_STATE_RUNNING) seen_running.insert(key);
      run_states.push_back(run_state);
    }
    state.seen_running = std::move(seen_running);
  }

  absl::StatusOr<std::vector<DiscoveredVm>> scanned = procfs_.Discover(known_pids);
  if (!scanned.ok()) return scanned.status();

  std::set<int> claimed;
  auto find_unclaimed = [&](auto&& matches) -> DiscoveredVm* {
    for (DiscoveredVm& vm : *scanned) {
      if (!claimed.count(vm.qemu_pid) && matches(vm)) return &vm;
    }
    return nullptr;
  };

  std::vector<DiscoveredVm> vms;
  for (size_t i = 0; i < domains.size(); ++i) {
    const Domain& d = domains[i];
    const std::optional<LibvirtDomainStatus>& status = statuses[i];
    DiscoveredVm* found = nullptr;
    if (status) {
      found = find_unclaimed([&](const DiscoveredVm& vm) { return vm.qemu_pid == status->pid; });
    } else {
      found = find_unclaimed([&](const DiscoveredVm& vm) { return !d.uuid.empty() && vm.uuid == d.uuid; });
      if (found == nullptr) {
        found = find_unclaimed([&](const DiscoveredVm& vm) { return vm.vm_id == d.name; });
      }
    }
    if (found == nullptr) {
      LOG_EVERY_N(WARNING, 100) << "libvirt: active domain " << d.name
                                << " has no QEMU process in /proc (starting or stopping?)";
      continue;
    }
    claimed.insert(found->qemu_pid);
    DiscoveredVm vm = *found;
    vm.vm_id = d.name;
    vm.uuid = d.uuid;
    vm.run_state = run_states[i];
    vm.metadata = d.metadata;
    vm.metadata_unknown = d.metadata_unknown;
    if (status) {
      // libvirt knows its vCPU threads whatever their names.
      for (const LibvirtDomainStatus::Vcpu& vcpu : status->vcpus) {
        auto it = std::find_if(vm.threads.begin(), vm.threads.end(), [&](const DiscoveredThread& t) {
          return t.pid == vm.qemu_pid && t.tid == vcpu.tid;
        });
        if (it != vm.threads.end()) {
          it->kind = DiscoveredThread::Kind::kVcpu;
          continue;
        }
        // Created after the scan listed QEMU's threads (vCPU hotplug).
        absl::StatusOr<std::string> comm =
            fs_->ReadFile(absl::StrCat(state_->options.procfs.procfs_root, "/", vm.qemu_pid, "/task/", vcpu.tid, "/comm"));
        if (!comm.ok()) continue;  // gone again
        vm.threads.push_back({vcpu.tid, vm.qemu_pid, std::string(absl::StripSuffix(*comm, "\n")),
                              DiscoveredThread::Kind::kVcpu});
        std::sort(vm.threads.begin(), vm.threads.end(),
                  [](const DiscoveredThread& a, const DiscoveredThread& b) {
                    return std::pair(a.pid, a.tid) < std::pair(b.pid, b.tid);
                  });
      }
    }
    vms.push_back(std::move(vm));
  }
  std::sort(vms.begin(), vms.end(),
            [](const DiscoveredVm& a, const DiscoveredVm& b) { return a.qemu_pid < b.qemu_pid; });
  if (include_unmanaged) {
    for (DiscoveredVm& vm : *scanned) {
      if (claimed.count(vm.qemu_pid)) continue;
      if (!vm.vm_id.empty() || !vm.uuid.empty()) {
        LOG_EVERY_N(WARNING, 100) << "discovery: QEMU pid " << vm.qemu_pid << " claims VM '"
                                  << vm.vm_id << "' but libvirt runs no domain as it: "
                                  << "isolating it on a cookie of its own";
      }
      vm.MarkImpostor("libvirt runs no domain as this process");
      vms.push_back(std::move(vm));
    }
  }
  return vms;
}

CombinedDiscovery::CombinedDiscovery(std::unique_ptr<LibvirtDiscovery> libvirt,
                                     std::unique_ptr<ProcfsDiscovery> procfs)
    : libvirt_(std::move(libvirt)), procfs_(std::move(procfs)) {}

absl::StatusOr<std::vector<DiscoveredVm>> CombinedDiscovery::Discover() {
  absl::StatusOr<std::vector<DiscoveredVm>> vms = libvirt_->DiscoverWithUnmanaged();
  if (vms.ok()) {
    std::map<int, std::string> libvirt_vms;
    for (const DiscoveredVm& vm : *vms) {
      if (!vm.impostor) libvirt_vms.emplace(vm.qemu_pid, vm.vm_id);
    }
    std::lock_guard<std::mutex> lock(mu_);
    libvirt_vms_ = std::move(libvirt_vms);
    libvirt_seen_ = true;
    return vms;
  }
  LOG_EVERY_N(WARNING, 30) << "discovery: libvirt unavailable, using procfs alone: "
                           << vms.status().message();
  vms = procfs_->Discover();
  if (!vms.ok()) return vms;
  std::lock_guard<std::mutex> lock(mu_);
  for (DiscoveredVm& vm : *vms) {
    // What libvirt's domains say of their tenancy cannot be read now: csd
    // keeps what it tagged from it (a libvirtd restart untags nothing).
    vm.metadata_unknown = !vm.impostor;
  }
  // libvirt starts every domain; while it is away, a VM is only a process
  // it last said runs that domain.
  if (libvirt_seen_) MarkVmsLibvirtDidNotName(*vms, libvirt_vms_);
  return vms;
}

void MarkVmsLibvirtDidNotName(std::vector<DiscoveredVm>& vms,
                              const std::map<int, std::string>& libvirt_vms) {
  for (DiscoveredVm& vm : vms) {
    if (vm.impostor) continue;
    auto known = libvirt_vms.find(vm.qemu_pid);
    if (known == libvirt_vms.end() || known->second != vm.vm_id) {
      vm.MarkImpostor(absl::StrCat("libvirtd is away, and when last reached it ran no domain '",
                                   vm.vm_id, "' as this process"));
    }
  }
}

}  // namespace cosched::discovery
