// Where a layout's VMs run: dedicated VMs on whole cores of their own
// (PinLayout), the pinnings the engine tries (PinningCandidates), and the
// moves it considers from a host's current layout (EngineMoves). The rest of
// the trade-off engine is in tradeoff.cc.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/cpu_list.h"
#include "common/status_macros.h"
#include "policy/tradeoff.h"
#include "policy/tradeoff_internal.h"

namespace cosched::policy {
namespace internal {

std::vector<int> CoreCpus(int first_core, int count, int cores) {
  std::vector<int> cpus;
  for (int c = first_core; c < first_core + count; ++c) cpus.push_back(c);
  for (int c = first_core; c < first_core + count; ++c) cpus.push_back(c + cores);
  return cpus;
}

std::vector<int> Intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

std::string DescribePin(const std::vector<int>& cpus, int cores) {
  if (cpus.empty()) return "not pinned";
  std::vector<int> whole, first;
  bool only_first = true;
  for (int c : cpus) {
    if (c < cores) {
      first.push_back(c);
    } else {
      only_first = false;
    }
    if (c < cores && std::binary_search(cpus.begin(), cpus.end(), c + cores)) {
      whole.push_back(c);
    }
  }
  const auto plural = [](const std::vector<int>& v) { return v.size() == 1 ? "core " : "cores "; };
  if (whole.size() * 2 == cpus.size()) {
    return absl::StrCat("pinned to ", plural(whole), FormatCpuList(whole));
  }
  if (only_first) {
    return absl::StrCat("pinned to the first thread of ", plural(first), FormatCpuList(first));
  }
  return absl::StrCat("pinned to CPUs ", FormatCpuList(cpus), " (simulator numbering)");
}

absl::StatusOr<BaseLayout> PinBase(const Scenario& scenario, const std::vector<VmInstance>& vms,
                                   const std::vector<VmDecision>& layout) {
  const int cores = scenario.cores;
  BaseLayout base;
  for (int c = 0; c < 2 * cores; ++c) base.all_cpus.push_back(c);
  base.pins.resize(vms.size());
  base.dedicated_first.assign(vms.size(), -1);
  base.top = cores;
  for (size_t v = 0; v < vms.size(); ++v) {
    if (layout[v].isolation != v1::ISOLATION_LEVEL_DEDICATED) continue;
    const int need = (vms[v].vcpus + 1) / 2;
    if (base.top - need < 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "VM '", vms[v].name, "' needs ", need, " whole free cores for `dedicated`; the host has ",
          base.top - 1, " left"));
    }
    base.top -= need;
    base.pins[v] = CoreCpus(base.top, need, cores);
    base.dedicated_first[v] = base.top;
  }
  if (base.top < cores) {
    for (int c = 0; c < 2 * cores; ++c) {
      if (c % cores < base.top) base.shared_cpus.push_back(c);
    }
  }
  for (size_t v = 0; v < vms.size(); ++v) {
    if (layout[v].isolation == v1::ISOLATION_LEVEL_DEDICATED) continue;
    // The scenario's pinning (what the host's agent found set by others)
    // is kept; the engine's own (the decision's) may move.
    const std::vector<int>& own =
        vms[v].pin_cpus.empty() ? layout[v].pin_cpus : vms[v].pin_cpus;
    if (base.top == cores) {
      base.pins[v] = own;
      continue;
    }
    base.pins[v] = own.empty() ? base.shared_cpus : Intersect(own, base.shared_cpus);
    // Pinned only to dedicated cores: on the shared ones, as the agent
    // confines it.
    if (base.pins[v].empty()) base.pins[v] = base.shared_cpus;
  }
  return base;
}

}  // namespace internal

using internal::BaseLayout;
using internal::CoreCpus;

namespace {

// A VM is "busy" when it has this many vCPUs and declares at least this
// load per vCPU: worth whole cores of its own.
constexpr int kBusyMinVcpus = 2;
constexpr double kBusyMinLoad = 0.5;

absl::Status CheckSizes(const Scenario& scenario, size_t layout, size_t flags, size_t vms) {
  if (layout != vms || flags != vms) {
    return absl::InvalidArgumentError(absl::StrCat("layout has ", layout, " VMs and ", flags,
                                                   " flags; scenario '", scenario.name,
                                                   "' has ", vms, " VMs"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PinLayout(const Scenario& scenario, std::vector<VmDecision>& layout) {
  const std::vector<VmInstance> vms = ExpandInstances(scenario);
  RETURN_IF_ERROR(CheckSizes(scenario, layout.size(), layout.size(), vms.size()));
  ASSIGN_OR_RETURN(BaseLayout base, internal::PinBase(scenario, vms, layout));
  for (size_t v = 0; v < layout.size(); ++v) layout[v].pin_cpus = std::move(base.pins[v]);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Pinning>> PinningCandidates(const Scenario& scenario,
                                                       const std::vector<VmDecision>& layout,
                                                       const std::vector<bool>& may_pin) {
  const std::vector<VmInstance> vms = ExpandInstances(scenario);
  RETURN_IF_ERROR(CheckSizes(scenario, layout.size(), may_pin.size(), vms.size()));
  ASSIGN_OR_RETURN(const BaseLayout base, internal::PinBase(scenario, vms, layout));
  const int cores = scenario.cores;
  auto movable = [&](size_t v) {
    return may_pin[v] && layout[v].isolation != v1::ISOLATION_LEVEL_DEDICATED &&
           vms[v].pin_cpus.empty();
  };
  // Where a movable VM runs when the engine does not pin it.
  const std::vector<int>& free_cpus = base.shared_cpus;

  std::vector<Pinning> out;
  Pinning unpinned{"unpinned", "no pinning beyond dedicated cores and what others set",
                   base.pins};
  for (size_t v = 0; v < vms.size(); ++v) {
    if (movable(v)) unpinned.pins[v] = free_cpus;
  }
  out.push_back(unpinned);

  std::vector<size_t> busy;
  bool any_movable = false;
  for (size_t v = 0; v < vms.size(); ++v) {
    if (!movable(v)) continue;
    any_movable = true;
    if (vms[v].vcpus >= kBusyMinVcpus && vms[v].workload.DeclaredLoad() >= kBusyMinLoad) {
      busy.push_back(v);
    }
  }
  std::stable_sort(busy.begin(), busy.end(),
                   [&](size_t a, size_t b) { return vms[a].vcpus > vms[b].vcpus; });
  if (!busy.empty() && busy.size() < vms.size()) {
    for (double scale : {1.0, 1.25, 1.5}) {
      Pinning cand{absl::StrFormat("busy-whole-cores-x%.2f", scale), "", unpinned.pins};
      int next = 0;
      bool fits = true;
      std::vector<std::string> placed;
      for (size_t v : busy) {
        const int need = static_cast<int>(std::ceil(scale * vms[v].vcpus / 2.0));
        if (next + need >= base.top) {
          fits = false;
          break;
        }
        cand.pins[v] = CoreCpus(next, need, cores);
        placed.push_back(absl::StrCat(vms[v].name, " on cores ", next, "-", next + need - 1));
        next += need;
      }
      if (!fits) continue;
      std::vector<int> rest;
      for (int c : base.all_cpus) {
        if (c % cores >= next && c % cores < base.top) rest.push_back(c);
      }
      for (size_t v = 0; v < vms.size(); ++v) {
        if (movable(v) && std::find(busy.begin(), busy.end(), v) == busy.end()) {
          cand.pins[v] = rest;
        }
      }
      cand.why = absl::StrCat("busy VMs pinned to whole cores of their own (",
                              absl::StrJoin(placed, ", "), "), the others to the remaining cores");
      out.push_back(std::move(cand));
    }
  }
  if (any_movable) {
    Pinning cand{"one-thread-per-core",
                 "VMs on the first thread of each core (the cost of nosmt, without a reboot)",
                 unpinned.pins};
    for (size_t v = 0; v < vms.size(); ++v) {
      if (!movable(v)) continue;
      std::vector<int> first;
      for (int c : free_cpus.empty() ? base.all_cpus : free_cpus) first.push_back(c % cores);
      std::sort(first.begin(), first.end());
      first.erase(std::unique(first.begin(), first.end()), first.end());
      cand.pins[v] = std::move(first);
    }
    out.push_back(std::move(cand));
  }
  // Scales that round to the same cores pin alike: predicted once.
  std::vector<Pinning> distinct;
  for (Pinning& p : out) {
    const bool seen = std::any_of(distinct.begin(), distinct.end(),
                                  [&](const Pinning& d) { return d.pins == p.pins; });
    if (!seen) distinct.push_back(std::move(p));
  }
  return distinct;
}

absl::StatusOr<std::vector<LayoutProposal>> EngineMoves(const Scenario& scenario,
                                                        const std::vector<VmDecision>& current,
                                                        const std::vector<bool>& managed) {
  std::vector<LayoutProposal> moves;
  ASSIGN_OR_RETURN(LayoutProposal groups, PlanLayout(scenario, current, managed));
  // A change of names alone cannot gain: not a move.
  if (groups.changes && !groups.same_grouping) {
    groups.move = "groups";
    moves.push_back(std::move(groups));
  }
  std::vector<VmDecision> pinned_now = current;
  RETURN_IF_ERROR(PinLayout(scenario, pinned_now));
  ASSIGN_OR_RETURN(std::vector<Pinning> pinnings, PinningCandidates(scenario, current, managed));
  for (Pinning& pinning : pinnings) {
    LayoutProposal move;
    move.move = pinning.name;
    move.planned = pinned_now;
    for (size_t v = 0; v < current.size(); ++v) {
      VmDecision& d = move.planned[v];
      if (pinning.pins[v] == d.pin_cpus) continue;
      move.changes = true;
      d.pin_cpus = std::move(pinning.pins[v]);
      d.reasons.push_back(absl::StrCat(internal::DescribePin(d.pin_cpus, scenario.cores), " (pinning '",
                                       pinning.name, "': ", pinning.why, ")"));
    }
    if (move.changes) moves.push_back(std::move(move));
  }
  return moves;
}

}  // namespace cosched::policy
