// Fuzzes csd's request handling: bytes -> a method -> the request proto ->
// the desired state's parts and readers (server/state/, wired as csd wires
// them: tests/server/test_state.h), the domain logic behind every
// ControlPlane and AgentService RPC, on a real SQLite store. The gRPC layer
// (server/api/services.cc) only forwards to it.
//
// Input: a sequence of requests, each [method byte][length: 2 bytes, little
// endian][length bytes of the request message]; a length past the end takes
// the rest. One input is a session (register a host, tag, report, watch...).
//
// The store is one per process, created once in a temporary directory (on
// tmpfs when /dev/shm exists, so that SQLite's fsyncs cost little), and
// keeps what earlier inputs wrote: reproduce a crash with the input alone
// first, it usually needs no history.
//
// Checks, beyond the sanitizers: a request is never answered with INTERNAL,
// UNKNOWN, DATA_LOSS or UNIMPLEMENTED (bad input is the caller's error); and
// what a watch sends is accepted by an agent's AssignmentCache.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>

#include "agent/assignment_cache.h"
#include "fuzz/quiet_logs.h"
#include "store/sqlite_store.h"
#include "tests/server/test_state.h"

namespace cosched::server {
namespace {

// The store and its directory, removed at exit.
class FuzzStore {
 public:
  FuzzStore() {
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string dir_template = std::string(base) + "/cosched-rpc-fuzz-XXXXXX";
    if (mkdtemp(dir_template.data()) == nullptr) std::abort();
    dir_ = dir_template;
    store::SqliteStoreOptions options;
    options.data_dir = dir_ + "/data";
    // Small, so that compaction and the snapshot fallback of watches happen.
    options.changelog_retention = 64;
    auto opened = store::SqliteStore::Open(options);
    if (!opened.ok()) std::abort();
    store_ = std::move(*opened);
    state_ = std::make_unique<TestState>(*store_);
    // ExplainVM runs the simulator: keep each prediction short.
    state_->policy.set_explain_predict_seconds(0.02);
    // Reports' domain metadata tags, retags and untags VMs: hostile input too.
    state_->settings.set_tag_from_metadata(true);
    // Every input's Report is validated and written, not refused for its
    // rate (the limit is a token bucket with tests of its own).
    state_->reports.report_rate().set_options({.per_second = 0});
    if (!state_->Load().ok()) std::abort();
  }
  ~FuzzStore() {
    state_.reset();
    store_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  TestState& state() { return *state_; }

 private:
  std::string dir_;
  std::unique_ptr<store::SqliteStore> store_;
  std::unique_ptr<TestState> state_;
};

void CheckCode(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnimplemented:
      std::fprintf(stderr, "rpc_fuzz: request answered with %s\n", status.ToString().c_str());
      std::abort();
    default:
      break;
  }
}

template <typename T>
void Wait(std::function<void(Done<T>)> call) {
  std::promise<absl::Status> promise;
  call([&](absl::StatusOr<T> r) { promise.set_value(r.status()); });
  CheckCode(promise.get_future().get());
}

// Parses `bytes` as Request; false when they are not one.
template <typename Request>
bool Parse(absl::string_view bytes, Request* request) {
  return request->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

void Watch(TestState& state, const v1::WatchAssignmentsRequest& request) {
  absl::Status valid = state.watches.ValidateWatch(request);
  CheckCode(valid);
  if (!valid.ok()) return;
  auto first = state.watches.FirstWatchMessage(request.host_id(), request.resume_revision());
  CheckCode(first.status());
  if (!first.ok()) return;
  // An agent must accept whatever csd streams to it.
  agent::AssignmentCache cache("");
  if (!cache.Apply(*first).ok()) std::abort();
  auto update = state.watches.WatchUpdate(request.host_id(), first->revision());
  CheckCode(update.status());
  if (update.ok() && update->has_value() && !cache.Apply(**update).ok()) std::abort();
}

// ExplainVM on small hosts only (as scenario_fuzz): the simulator's time
// grows with cores and vCPUs, and csd's own limits allow hosts that take
// seconds to plan.
void Explain(TestState& state, const v1::ExplainVMRequest& request) {
  v1::GetVMRequest get;
  get.set_vm_id(request.vm_id());
  auto vm = state.vms.GetVm(get);
  if (vm.ok() && !vm->host_id().empty()) {
    v1::GetHostRequest get_host;
    get_host.set_host_id(vm->host_id());
    auto host = state.hosts.GetHost(get_host);
    if (!host.ok() || host->topology().cores_size() > 8) return;
    v1::ListVMsRequest list;
    list.set_host_id(vm->host_id());
    list.set_page_size(17);
    auto vms = state.vms.ListVms(list);
    if (!vms.ok() || vms->vms_size() > 16) return;
    int vcpus = 0;
    for (const v1::VM& v : vms->vms()) vcpus += std::max(v.enforcement().vcpus(), 1);
    if (vcpus > 32) return;
  }
  CheckCode(state.policy.ExplainVm(request).status());
}

// Who the fuzzer's changes are audited as.
const Actor kFuzzer{"fuzzer", "admin"};

void Call(TestState& state, uint8_t method, absl::string_view bytes) {
  switch (method % 19) {
    case 0: {
      v1::TagVMRequest r;
      if (Parse(bytes, &r)) Wait<v1::TagVMResponse>([&](auto done) { state.vms.TagVm(r, kFuzzer, done); });
      break;
    }
    case 1: {
      v1::UntagVMRequest r;
      if (Parse(bytes, &r)) Wait<v1::UntagVMResponse>([&](auto done) { state.vms.UntagVm(r, kFuzzer, done); });
      break;
    }
    case 2: {
      v1::GetVMRequest r;
      if (Parse(bytes, &r)) CheckCode(state.vms.GetVm(r).status());
      break;
    }
    case 3: {
      v1::ListVMsRequest r;
      if (Parse(bytes, &r)) CheckCode(state.vms.ListVms(r).status());
      break;
    }
    case 4: {
      v1::SetTenantPolicyRequest r;
      if (Parse(bytes, &r))
        Wait<v1::TenantPolicy>([&](auto done) { state.policies.SetTenantPolicy(r, kFuzzer, done); });
      break;
    }
    case 5: {
      v1::GetTenantPolicyRequest r;
      if (Parse(bytes, &r)) CheckCode(state.policies.GetTenantPolicy(r).status());
      break;
    }
    case 6: {
      v1::ListTenantPoliciesRequest r;
      if (Parse(bytes, &r)) CheckCode(state.policies.ListTenantPolicies(r).status());
      break;
    }
    case 7: {
      v1::ListHostsRequest r;
      if (Parse(bytes, &r)) CheckCode(state.hosts.ListHosts(r).status());
      break;
    }
    case 8: {
      v1::GetHostRequest r;
      if (Parse(bytes, &r)) CheckCode(state.hosts.GetHost(r).status());
      break;
    }
    case 9: {
      v1::RegisterRequest r;
      if (Parse(bytes, &r))
        Wait<v1::RegisterResponse>([&](auto done) { state.hosts.RegisterHost(r, kFuzzer, done); });
      break;
    }
    case 10: {
      // Observations and sibling-sharing stats windows.
      v1::ReportRequest r;
      if (Parse(bytes, &r))
        Wait<v1::ReportResponse>([&](auto done) { state.reports.ApplyReport(r, done); });
      break;
    }
    case 11: {
      v1::WatchAssignmentsRequest r;
      if (Parse(bytes, &r)) Watch(state, r);
      break;
    }
    case 12: {
      v1::GetStatsRequest r;
      if (Parse(bytes, &r)) CheckCode(state.stats_queries.GetStats(r).status());
      break;
    }
    case 13: {
      v1::ListAuditRecordsRequest r;
      if (Parse(bytes, &r)) CheckCode(state.audit.ListAuditRecords(r).status());
      break;
    }
    case 14: {
      // Answered from the placement view that the writes above keep.
      v1::PlaceRequest r;
      if (Parse(bytes, &r)) CheckCode(state.policy.Place(r).status());
      break;
    }
    case 15: {
      v1::ExplainVMRequest r;
      if (Parse(bytes, &r)) Explain(state, r);
      break;
    }
    case 16:
    case 17: {
      v1::DrainHostRequest r;
      if (Parse(bytes, &r)) {
        Wait<v1::Host>([&](auto done) {
          state.hosts.SetHostDraining(r, method % 19 == 16, kFuzzer, done);
        });
      }
      break;
    }
    case 18: {
      v1::RemoveHostRequest r;
      if (Parse(bytes, &r))
        Wait<v1::RemoveHostResponse>([&](auto done) { state.hosts.RemoveHost(r, kFuzzer, done); });
      break;
    }
  }
}

}  // namespace
}  // namespace cosched::server

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cosched::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* store = new cosched::server::FuzzStore();
  static const bool cleanup = [] { return std::atexit([] { delete store; }) == 0; }();
  (void)cleanup;
  while (size >= 3) {
    const uint8_t method = data[0];
    size_t length = data[1] | (size_t{data[2]} << 8);
    data += 3;
    size -= 3;
    length = std::min(length, size);
    cosched::server::Call(store->state(),
                          method, absl::string_view(reinterpret_cast<const char*>(data), length));
    data += length;
    size -= length;
  }
  return 0;
}
