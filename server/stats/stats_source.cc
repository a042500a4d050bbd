#include "server/stats/stats_source.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "common/sibling_share.h"

namespace cosched::server {
namespace {

void AddCore(const v1::CoreShare& part, v1::CoreShare& sum) {
  sum.set_both_busy_ns(sum.both_busy_ns() + part.both_busy_ns());
  sum.set_one_idle_ns(sum.one_idle_ns() + part.one_idle_ns());
  sum.set_both_idle_ns(sum.both_idle_ns() + part.both_idle_ns());
  sum.set_unknown_ns(sum.unknown_ns() + part.unknown_ns());
}


v1::GetStatsResponse Sum(v1::GetStatsResponse first, const v1::GetStatsResponse& second) {
  if (!HasStats(second)) return first;
  if (!HasStats(first)) return second;
  AddStatsAnswer(second, first);
  return first;
}

}  // namespace

void AddStatsAnswer(const v1::GetStatsResponse& part, v1::GetStatsResponse& sum) {
  if (!HasStats(part)) return;
  if (!HasStats(sum)) {
    sum.set_start_unix_ns(part.start_unix_ns());
    sum.set_end_unix_ns(part.end_unix_ns());
  } else {
    sum.set_start_unix_ns(std::min(sum.start_unix_ns(), part.start_unix_ns()));
    sum.set_end_unix_ns(std::max(sum.end_unix_ns(), part.end_unix_ns()));
  }
  AddSiblingShare(part.total(), *sum.mutable_total());
  if (part.has_gone_vms()) AddSiblingShare(part.gone_vms(), *sum.mutable_gone_vms());
  // Both lists are sorted (by vm_id, by core): merged in order.
  std::map<std::string, v1::SiblingShare> vms;
  for (v1::VMStats& v : *sum.mutable_vms()) vms[v.vm_id()] = std::move(*v.mutable_share());
  for (const v1::VMStats& v : part.vms()) AddSiblingShare(v.share(), vms[v.vm_id()]);
  sum.clear_vms();
  for (auto& [vm_id, share] : vms) {
    v1::VMStats* v = sum.add_vms();
    v->set_vm_id(vm_id);
    *v->mutable_share() = std::move(share);
  }
  std::map<int32_t, v1::CoreShare> cores;
  for (const v1::CoreShare& c : sum.cores()) cores[c.core()] = c;
  for (const v1::CoreShare& c : part.cores()) {
    v1::CoreShare& into = cores[c.core()];
    into.set_core(c.core());
    AddCore(c, into);
  }
  sum.clear_cores();
  for (auto& [index, core] : cores) *sum.add_cores() = std::move(core);
  sum.set_windows(sum.windows() + part.windows());
  sum.set_lost_events(sum.lost_events() + part.lost_events());
  sum.set_dropped_windows(sum.dropped_windows() + part.dropped_windows());
}

v1::GetStatsResponse MergedStats::QueryVms(const std::vector<std::string>& vm_ids,
                                           int64_t span_seconds) const {
  return Sum(first_.QueryVms(vm_ids, span_seconds), second_.QueryVms(vm_ids, span_seconds));
}

v1::GetStatsResponse MergedStats::QueryHost(absl::string_view host_id,
                                            int64_t span_seconds) const {
  return Sum(first_.QueryHost(host_id, span_seconds), second_.QueryHost(host_id, span_seconds));
}

v1::GetStatsResponse MergedStats::QueryHostSince(absl::string_view host_id,
                                                 int64_t since_unix_ns) const {
  return Sum(first_.QueryHostSince(host_id, since_unix_ns),
             second_.QueryHostSince(host_id, since_unix_ns));
}

}  // namespace cosched::server
