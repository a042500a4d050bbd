#include "policy/placement.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/core_budget.h"
#include "common/validation.h"

namespace cosched::policy {
namespace {

constexpr int kMaxClasses = 64;
constexpr size_t kRanked = 3;
// A sibling of another cookie costs, on average, half the time of the two
// threads that want the core (core scheduling lets one run at a time).
constexpr double kConflictShare = 0.5;
// A thread left empty by an odd vCPU count on whole cores.
constexpr double kWastedThreadCost = 0.02;

std::string GroupKey(const PlacementRequest& r) {
  if (r.isolation == v1::ISOLATION_LEVEL_TENANT) {
    std::vector<std::string> classes = r.classes;
    std::sort(classes.begin(), classes.end());
    std::string key = absl::StrCat(r.tenant, "/tenant");
    for (const auto& c : classes) absl::StrAppend(&key, "/", c);
    return key;
  }
  return absl::StrCat(r.tenant, "/vm/", r.vm_id);
}

// Lowest `need` free cores, a contiguous run when there is one.
std::vector<int> ChooseCores(const std::vector<int32_t>& owner, int need) {
  int run = 0;
  for (int c = 0; c < static_cast<int>(owner.size()); ++c) {
    run = owner[c] < 0 ? run + 1 : 0;
    if (run == need) {
      std::vector<int> cores;
      for (int k = c - need + 1; k <= c; ++k) cores.push_back(k);
      return cores;
    }
  }
  std::vector<int> cores;
  for (int c = 0; c < static_cast<int>(owner.size()) &&
                  static_cast<int>(cores.size()) < need;
       ++c) {
    if (owner[c] < 0) cores.push_back(c);
  }
  return cores;
}

}  // namespace

PlacementIndex::PlacementIndex(PlacementOptions options)
    : options_(std::move(options)) {
  for (const auto& [a, b] : options_.conflicts) {
    conflict_masks_.emplace_back(ClassMask({a}), ClassMask({b}));
  }
}

uint64_t PlacementIndex::ClassMask(const std::vector<std::string>& classes) const {
  uint64_t mask = 0;
  for (const std::string& c : classes) {
    auto it = class_bits_.find(c);
    if (it == class_bits_.end()) {
      if (class_bits_.size() >= kMaxClasses) continue;  // cannot conflict
      it = class_bits_.emplace(c, class_bits_.size()).first;
    }
    mask |= uint64_t{1} << it->second;
  }
  return mask;
}

uint64_t PlacementIndex::ConflictMask(uint64_t classes) const {
  uint64_t out = 0;
  for (const auto& [a, b] : conflict_masks_) {
    if (classes & a) out |= b;
    if (classes & b) out |= a;
  }
  return out;
}

int PlacementIndex::GroupId(const PlacementRequest& request) const {
  return group_ids_.emplace(GroupKey(request), group_ids_.size())
      .first->second;
}

absl::Status PlacementIndex::AddHost(absl::string_view host_id, int cores,
                                     int threads_per_core) {
  if (cores < 1) return absl::InvalidArgumentError("cores must be at least 1");
  if (threads_per_core < 1 || threads_per_core > 8) {
    return absl::InvalidArgumentError("threads_per_core must be 1-8");
  }
  std::string id(host_id);
  if (host_index_.count(id) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("host '", id, "' is known"));
  }
  Host host;
  host.host_id = id;
  host.cores = cores;
  host.threads_per_core = threads_per_core;
  host.free_cores = cores;
  host.core_owner.assign(cores, -1);
  host_index_.emplace(id, hosts_.size());
  hosts_.push_back(std::move(host));
  return absl::OkStatus();
}

void PlacementIndex::Recount(Host& host) {
  host.unpinned_classes = 0;
  for (const Vm& vm : host.vms) {
    if (vm.cores.empty()) host.unpinned_classes |= vm.classes;
  }
}

absl::Status PlacementIndex::AddVm(absl::string_view host_id,
                                   const PlacementRequest& vm,
                                   const std::vector<int>& cores) {
  auto it = host_index_.find(std::string(host_id));
  if (it == host_index_.end()) {
    return absl::NotFoundError(absl::StrCat("host '", host_id, "' is not known"));
  }
  Host& host = hosts_[it->second];
  for (int c : cores) {
    if (c < 0 || c >= host.cores || host.core_owner[c] >= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "core ", c, " of host '", host_id, "' is not a free core"));
    }
  }
  Vm entry;
  entry.vm_id = vm.vm_id;
  entry.group = GroupId(vm);
  entry.vcpus = vm.vcpus;
  entry.load = vm.load;
  entry.classes = ClassMask(vm.classes);
  entry.cores = cores;
  for (int c : cores) host.core_owner[c] = entry.group;
  host.free_cores -= static_cast<int>(cores.size());
  host.vcpus += vm.vcpus;
  if (cores.empty()) {
    host.unpinned_load += vm.vcpus * vm.load;
    host.unpinned_classes |= entry.classes;
    group_load_[entry.group][it->second] += vm.vcpus * vm.load;
  }
  host.vms.push_back(std::move(entry));
  ++vm_count_;
  return absl::OkStatus();
}

absl::Status PlacementIndex::RemoveVm(absl::string_view host_id,
                                      absl::string_view vm_id) {
  auto it = host_index_.find(std::string(host_id));
  if (it == host_index_.end()) {
    return absl::NotFoundError(absl::StrCat("host '", host_id, "' is not known"));
  }
  Host& host = hosts_[it->second];
  auto vm = std::find_if(host.vms.begin(), host.vms.end(),
                         [&](const Vm& v) { return v.vm_id == vm_id; });
  if (vm == host.vms.end()) {
    return absl::NotFoundError(
        absl::StrCat("VM '", vm_id, "' is not on host '", host_id, "'"));
  }
  for (int c : vm->cores) host.core_owner[c] = -1;
  host.free_cores += static_cast<int>(vm->cores.size());
  host.vcpus -= vm->vcpus;
  if (vm->cores.empty()) {
    host.unpinned_load -= vm->vcpus * vm->load;
    auto& loads = group_load_[vm->group];
    if ((loads[it->second] -= vm->vcpus * vm->load) <= 1e-9) loads.erase(it->second);
  }
  host.vms.erase(vm);
  Recount(host);
  --vm_count_;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> PlacementIndex::FreeCoresFor(
    absl::string_view host_id, int vcpus) const {
  auto it = host_index_.find(std::string(host_id));
  if (it == host_index_.end()) {
    return absl::NotFoundError(absl::StrCat("host '", host_id, "' is not known"));
  }
  const Host& host = hosts_[it->second];
  const int count = CoresFor(vcpus, host.threads_per_core);
  if (host.free_cores < count) {
    return absl::ResourceExhaustedError(
        absl::StrCat("host '", host_id, "' has ", host.free_cores,
                     " free cores; ", count, " are needed"));
  }
  return ChooseCores(host.core_owner, count);
}

// Inline: Place calls it for every host of the fleet (BM_Place).
inline std::optional<PlacementIndex::Scored> PlacementIndex::Score(size_t h,
                                                            const PlacementRequest& request,
                                                            const RequestShape& shape,
                                                            const RuleOut& rule_out,
                                                            Tally& tally) const {
  const Host& host = hosts_[h];
  if (rule_out) {
    std::string why = rule_out(host.host_id);
    if (!why.empty()) {
      ++tally.ruled_out[why];
      return std::nullopt;
    }
  }
  const int tpc = host.threads_per_core;
  if (tpc != 2) ++tally.odd_hosts;
  const double threads = 1.0 * tpc * host.cores;
  if (host.vcpus + request.vcpus > options_.max_vcpus_per_thread * threads) {
    ++tally.full;
    return std::nullopt;
  }
  const double demand = shape.demand;
  if (shape.pinned) {
    // What pinned VMs may still take here: never the last shared cores.
    const int giveable = host.free_cores - (host.cores - GiveableCores(host.cores));
    const int need = CoresFor(request.vcpus, tpc);
    if (giveable < need) {
      ++tally.no_cores;
      return std::nullopt;
    }
    // Its own whole cores: no forced idle for it. The unpinned VMs lose
    // the cores it takes.
    const double before = 1.0 * tpc * host.free_cores;
    const double after = 1.0 * tpc * (host.free_cores - need);
    double imposed = 0;
    if (host.unpinned_load > 0) {
      double rho_before = std::min(1.0, host.unpinned_load / before);
      double rho_after = after > 0 ? std::min(1.0, host.unpinned_load / after) : 1.0;
      imposed = (rho_after - rho_before) * kConflictShare * host.unpinned_load /
                std::max(demand, 1e-3);
      if (host.unpinned_load > after) {
        imposed += (host.unpinned_load - after) / std::max(demand, 1e-3);
      }
    }
    return Scored{h, imposed + kWastedThreadCost * (tpc * need - request.vcpus),
                  host.free_cores - need};
  }
  if (host.free_cores == 0) {
    ++tally.no_cores;
    return std::nullopt;
  }
  if (shape.conflicts & host.unpinned_classes) {
    ++tally.conflicted;
    return std::nullopt;
  }
  const double pool = 1.0 * tpc * host.free_cores;
  double same = 0;
  if (shape.same_group != nullptr) {
    auto it = shape.same_group->find(h);
    if (it != shape.same_group->end()) same = it->second;
  }
  const double foreign = host.unpinned_load - same;
  const double total = host.unpinned_load + demand;
  double rho = std::min(1.0, foreign / pool);
  // Its own loss, and what it makes the others lose (per unit of its
  // demand: the same sibling conflicts, seen from the other side).
  double cost = 2 * rho * kConflictShare;
  if (total > pool) cost += (total - pool) / total;
  return Scored{h, cost, host.free_cores};
}

absl::StatusOr<PlacementDecision> PlacementIndex::Place(
    const PlacementRequest& request, const RuleOut& rule_out) const {
  absl::Status valid = ValidateId("vm_id", request.vm_id);
  if (!valid.ok()) return valid;
  valid = ValidateId("tenant", request.tenant);
  if (!valid.ok()) return valid;
  if (request.vcpus < 1) return absl::InvalidArgumentError("vcpus must be at least 1");
  if (!(request.load >= 0 && request.load <= 1)) {
    return absl::InvalidArgumentError("load must be in [0, 1]");
  }
  RequestShape shape;
  shape.pinned = request.isolation == v1::ISOLATION_LEVEL_DEDICATED || request.pinning;
  shape.demand = request.vcpus * request.load;
  shape.conflicts = ConflictMask(ClassMask(request.classes));
  if (request.isolation == v1::ISOLATION_LEVEL_TENANT) {
    auto it = group_load_.find(GroupId(request));
    if (it != group_load_.end()) shape.same_group = &it->second;
  }

  Tally tally;
  std::vector<Scored> best;  // sorted, at most kRanked
  auto better = [](const Scored& a, const Scored& b) {
    if (a.cost != b.cost) return a.cost < b.cost;
    if (a.leftover != b.leftover) return a.leftover < b.leftover;
    return a.host < b.host;
  };
  for (size_t h = 0; h < hosts_.size(); ++h) {
    std::optional<Scored> s = Score(h, request, shape, rule_out, tally);
    if (!s) continue;
    if (best.size() < kRanked || better(*s, best.back())) {
      best.insert(std::upper_bound(best.begin(), best.end(), *s, better), *s);
      if (best.size() > kRanked) best.pop_back();
    }
  }
  if (best.empty()) return NoHost(request, shape, tally);
  return Decide(request, shape, best);
}

absl::Status PlacementIndex::NoHost(const PlacementRequest& request, const RequestShape& shape,
                                    const Tally& tally) const {
  const bool pinned = shape.pinned;
  std::string why = absl::StrCat(
      "no host can take a ", request.vcpus, "-vCPU VM: ", tally.full,
      " at their vCPU limit, ", tally.no_cores, " without ",
      !pinned ? std::string("a free core")
      : tally.odd_hosts == 0
          ? absl::StrCat(CoresFor(request.vcpus, 2), " whole free cores")
          : absl::StrCat("enough whole free cores (", CoresFor(request.vcpus, 2),
                         " with 2 threads per core, ", request.vcpus, " with 1)"));
  if (!pinned) absl::StrAppend(&why, ", ", tally.conflicted, " with a conflicting class");
  if (pinned) {
    absl::StrAppend(&why, " (", kSharedCoresKept, " core of each host stays shared)");
  }
  for (const auto& [reason, count] : tally.ruled_out) {
    absl::StrAppend(&why, ", ", count, " ", reason);
  }
  return absl::ResourceExhaustedError(why);
}

PlacementDecision PlacementIndex::Decide(const PlacementRequest& request,
                                         const RequestShape& shape,
                                         const std::vector<Scored>& best) const {
  const bool pinned = shape.pinned;
  PlacementDecision decision;
  const Host& chosen = hosts_[best[0].host];
  decision.host_id = chosen.host_id;
  decision.predicted_cost = best[0].cost;
  const int chosen_need = CoresFor(request.vcpus, chosen.threads_per_core);
  if (pinned) decision.cores = ChooseCores(chosen.core_owner, chosen_need);
  for (const Scored& s : best) {
    const Host& host = hosts_[s.host];
    const int need = CoresFor(request.vcpus, host.threads_per_core);
    HostCandidate c;
    c.host_id = host.host_id;
    c.predicted_cost = s.cost;
    c.reason = pinned
                   ? absl::StrFormat("%d whole cores of %d free; %.1f unpinned "
                                     "load left on %d cores",
                                     need, host.free_cores, host.unpinned_load,
                                     host.free_cores - need)
                   : absl::StrFormat("shares %d free cores with %.1f unpinned load",
                                     host.free_cores, host.unpinned_load);
    decision.ranked.push_back(std::move(c));
  }
  decision.reason = absl::StrFormat(
      "%s: predicted cost %.3f (%s)%s", decision.host_id, decision.predicted_cost,
      decision.ranked[0].reason,
      pinned && chosen.threads_per_core > 1 &&
              request.vcpus % chosen.threads_per_core == 0
          ? "; vCPU count a multiple of the threads per core: aligned to whole cores"
          : "");
  return decision;
}

}  // namespace cosched::policy
