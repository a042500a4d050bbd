#include "server/state/placement_view.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "policy/trust_group.h"

namespace cosched::server {
namespace {

constexpr int kPageSize = 1000;

policy::PlacementRequest RequestOf(const PlacedVm& vm) {
  policy::PlacementRequest r;
  r.vm_id = vm.vm_id;
  r.tenant = vm.tenant_id;
  r.vcpus = std::max(vm.vcpus, 1);
  r.isolation = vm.isolation;
  r.classes = vm.classes;
  r.load = 1.0;
  r.pinning = vm.isolation == v1::ISOLATION_LEVEL_DEDICATED;
  return r;
}

// A host's record without its topology, which the view keeps as `cores`.
v1::Host RecordOf(const v1::Host& host) {
  v1::Host record = host;
  record.clear_topology();
  // Placement needs the hazards, not the per-CPU-issue details.
  record.mutable_capabilities()->mutable_preflight()->clear_vulnerabilities();
  return record;
}

}  // namespace

absl::StatusOr<PlacedVm> PlacedVmOf(store::Transaction& txn, const v1::VM& vm) {
  PlacedVm out;
  out.vm_id = vm.vm_id();
  out.tenant_id = vm.tenant_id();
  out.host_id = vm.host_id();
  out.isolation = vm.assignment().isolation();
  out.classes.assign(vm.interference_classes().begin(),
                     vm.interference_classes().end());
  if (!vm.host_id().empty()) {
    // The owner's observation: during a migration both sides report it.
    ASSIGN_OR_RETURN(auto seen, txn.ListObservations(vm.vm_id()));
    for (const store::Observation& o : seen) {
      if (o.host_id != vm.host_id()) continue;
      out.vcpus = o.vm.enforcement().vcpus();
      out.vcpu_affinity.assign(o.vm.enforcement().vcpu_affinity().begin(),
                               o.vm.enforcement().vcpu_affinity().end());
    }
  }
  return out;
}

PlacementView::PlacementView(policy::PlacementOptions options)
    : options_(std::move(options)), index_(options_) {}

absl::Status PlacementView::LoadPolicies(store::Transaction& txn) {
  std::unordered_map<std::string, v1::TenantPolicy> policies;
  store::Page page;
  page.limit = kPageSize;
  while (true) {
    ASSIGN_OR_RETURN(auto batch, txn.ListTenantPolicies(page));
    for (v1::TenantPolicy& p : batch) {
      page.after = p.tenant_id();
      policies[p.tenant_id()] = std::move(p);
    }
    if (static_cast<int>(batch.size()) < page.limit) break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  policies_ = std::move(policies);
  return absl::OkStatus();
}

v1::TenantPolicy PlacementView::PolicyOf(const std::string& tenant_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = policies_.find(tenant_id);
  return it != policies_.end() ? it->second : policy::DefaultTenantPolicy(tenant_id);
}

absl::Status PlacementView::Load(store::Store& store) {
  std::vector<v1::Host> hosts;
  std::vector<PlacedVm> vms;
  RETURN_IF_ERROR(store.Read([&](store::Transaction& txn) -> absl::Status {
    RETURN_IF_ERROR(LoadPolicies(txn));
    store::Page page;
    page.limit = kPageSize;
    while (true) {
      ASSIGN_OR_RETURN(auto batch, txn.ListHosts(page));
      for (auto& h : batch) hosts.push_back(std::move(h));
      if (static_cast<int>(batch.size()) < page.limit) break;
      page.after = hosts.back().host_id();
    }
    page.after.clear();
    while (true) {
      ASSIGN_OR_RETURN(auto batch, txn.ListVms(store::VmFilter(), page));
      for (const v1::VM& vm : batch) {
        if (vm.host_id().empty()) continue;
        ASSIGN_OR_RETURN(PlacedVm placed, PlacedVmOf(txn, vm));
        vms.push_back(std::move(placed));
      }
      if (static_cast<int>(batch.size()) < page.limit) break;
      page.after = batch.back().vm_id();
    }
    return absl::OkStatus();
  }));
  std::lock_guard<std::mutex> lock(mu_);
  hosts_.clear();
  vms_.clear();
  for (const v1::Host& h : hosts) {
    HostInfo& info = hosts_[h.host_id()];
    for (const v1::Core& core : h.topology().cores()) {
      info.cores.emplace_back(core.cpus().begin(), core.cpus().end());
    }
    info.record = RecordOf(h);
  }
  for (PlacedVm& vm : vms) {
    hosts_[vm.host_id].vms.insert(vm.vm_id);
    std::string id = vm.vm_id;
    vms_.emplace(std::move(id), std::move(vm));
  }
  RebuildLocked();
  LOG(INFO) << "placement view: " << index_.host_count() << " hosts, "
            << index_.vm_count() << " VMs";
  return absl::OkStatus();
}

void PlacementView::Apply(const PlacementDelta& delta) {
  if (delta.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const v1::TenantPolicy& p : delta.policies) policies_[p.tenant_id()] = p;
  std::set<std::string> dirty;
  for (const v1::Host& host : delta.hosts) ApplyHostLocked(host, dirty);
  bool removed = false;
  for (const std::string& id : delta.removed_hosts) removed |= hosts_.erase(id) > 0;
  for (const PlacedVm& vm : delta.vms) ApplyVmLocked(vm, dirty);
  for (const std::string& id : delta.removed_vms) RemoveVmLocked(id, dirty);
  if (removed) {
    RebuildLocked();  // rare: the index cannot drop a host
    return;
  }
  for (const std::string& host : dirty) ResetHostLocked(host);
}

void PlacementView::ApplyReportedVcpus(const std::string& host_id,
                                       const std::vector<v1::VMObservation>& reported) {
  std::unordered_map<std::string, int> vcpus;
  for (const v1::VMObservation& o : reported) {
    for (const std::string* key : {&o.vm_id(), &o.uuid()}) {
      if (!key->empty()) vcpus[*key] = o.enforcement().vcpus();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto host = hosts_.find(host_id);
  if (host == hosts_.end()) return;
  bool changed = false;
  for (const std::string& id : host->second.vms) {
    auto seen = vcpus.find(id);
    PlacedVm& vm = vms_.at(id);
    if (seen == vcpus.end() || vm.vcpus == seen->second) continue;
    vm.vcpus = seen->second;
    changed = true;
  }
  if (changed) ResetHostLocked(host_id);
}

int PlacementView::HostInfo::ThreadsPerCore() const {
  size_t fewest = 0;
  for (const auto& cpus : cores) {
    if (fewest == 0 || cpus.size() < fewest) fewest = cpus.size();
  }
  return static_cast<int>(std::clamp<size_t>(fewest, 1, 8));
}

void PlacementView::ApplyHostLocked(const v1::Host& host,
                                    std::set<std::string>& dirty) {
  HostInfo& info = hosts_[host.host_id()];
  info.record = RecordOf(host);
  std::vector<std::vector<int>> before = std::move(info.cores);
  info.cores.clear();
  for (const v1::Core& core : host.topology().cores()) {
    info.cores.emplace_back(core.cpus().begin(), core.cpus().end());
  }
  if (info.cores == before) return;  // routine re-registration
  if (!before.empty()) {
    // Rare (a host's topology changed): the index cannot resize a host.
    RebuildLocked();
    return;
  }
  absl::Status added = index_.AddHost(
      host.host_id(), static_cast<int>(info.cores.size()), info.ThreadsPerCore());
  LOG_IF(WARNING, !added.ok()) << "placement view: " << added;
  // VMs reported on the host before it had a topology join the index.
  dirty.insert(host.host_id());
}

void PlacementView::ApplyVmLocked(const PlacedVm& vm, std::set<std::string>& dirty) {
  auto it = vms_.find(vm.vm_id);
  if (it != vms_.end() && it->second == vm) return;  // e.g. every Report
  RemoveVmLocked(vm.vm_id, dirty);
  if (vm.host_id.empty()) return;
  vms_.emplace(vm.vm_id, vm);
  hosts_[vm.host_id].vms.insert(vm.vm_id);
  dirty.insert(vm.host_id);
}

void PlacementView::RemoveVmLocked(const std::string& vm_id,
                                   std::set<std::string>& dirty) {
  auto it = vms_.find(vm_id);
  if (it == vms_.end()) return;
  const std::string& host = it->second.host_id;
  // NOT_FOUND when its host is not in the index: nothing to undo.
  index_.RemoveVm(host, vm_id).IgnoreError();
  hosts_[host].vms.erase(vm_id);
  dirty.insert(host);
  vms_.erase(it);
}

void PlacementView::ResetHostLocked(const std::string& host_id) {
  auto host = hosts_.find(host_id);
  if (host == hosts_.end() || host->second.cores.empty()) return;
  for (const std::string& id : host->second.vms) {
    index_.RemoveVm(host_id, id).IgnoreError();  // NOT_FOUND: not added yet
  }
  for (const std::string& id : host->second.vms) {
    const PlacedVm& vm = vms_.at(id);
    policy::PlacementRequest r = RequestOf(vm);
    std::vector<int> cores;
    if (r.pinning) {
      // Dedicated VMs get whole cores of their own; csd does not know
      // which, so the view takes those Place would have chosen.
      auto free = index_.FreeCoresFor(host_id, r.vcpus);
      if (free.ok()) {
        cores = *std::move(free);
      } else {
        LOG_EVERY_N(WARNING, 100) << "placement view: dedicated VM '" << id
                                  << "' counted as unpinned: " << free.status();
      }
    }
    absl::Status added = index_.AddVm(host_id, r, cores);
    LOG_IF(WARNING, !added.ok()) << "placement view: VM '" << id << "': " << added;
  }
}

void PlacementView::RebuildLocked() {
  index_ = policy::PlacementIndex(options_);
  std::vector<std::string> ids;
  ids.reserve(hosts_.size());
  for (const auto& [id, info] : hosts_) {
    if (!info.cores.empty()) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  for (const std::string& id : ids) {
    // Ids are unique and cores > 0: it cannot fail.
    const HostInfo& info = hosts_[id];
    index_.AddHost(id, static_cast<int>(info.cores.size()), info.ThreadsPerCore())
        .IgnoreError();
    ResetHostLocked(id);
  }
}

absl::StatusOr<PlacementView::Answer> PlacementView::Place(
    const policy::PlacementRequest& request, const RuleOut& rule_out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.host_count() == 0) {
    return absl::ResourceExhaustedError(
        "no host can take the VM: no host with a known topology is registered");
  }
  policy::PlacementIndex::RuleOut by_id;
  if (rule_out) {
    by_id = [&](const std::string& host_id) { return rule_out(hosts_.at(host_id).record); };
  }
  ASSIGN_OR_RETURN(policy::PlacementDecision decision, index_.Place(request, by_id));
  Answer answer;
  const HostInfo& host = hosts_.at(decision.host_id);
  for (int core : decision.cores) {
    for (int cpu : host.cores[core]) answer.cpus.push_back(cpu);
  }
  std::sort(answer.cpus.begin(), answer.cpus.end());
  answer.decision = std::move(decision);
  return answer;
}

std::map<std::string, std::vector<std::string>> PlacementView::VmsByHost() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [host, info] : hosts_) {
    if (!info.vms.empty()) out[host].assign(info.vms.begin(), info.vms.end());
  }
  return out;
}

size_t PlacementView::host_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.host_count();
}

std::optional<v1::Host> PlacementView::HostRecord(const std::string& host_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = hosts_.find(host_id);
  if (it == hosts_.end() || it->second.record.host_id().empty()) return std::nullopt;
  return it->second.record;
}

void PlacementView::ForEachHost(const std::function<void(const v1::Host&)>& fn) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, info] : hosts_) {
    if (!info.record.host_id().empty()) fn(info.record);
  }
}

}  // namespace cosched::server
