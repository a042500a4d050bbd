// StatsAggregator (stats_aggregator.h). The buckets and their rings are in
// stats_buckets.h (a VM's packed, a host's and a tenant's plain). In this
// file, in order:
//   the series: VmSeries, HostSeries, TenantSeries (gone VMs, folded);
//   taking windows: the worker queue (AddInBackground, WorkerLoop), Add,
//     the per-host bound (SeriesLimit, EvictOverLimit);
//   letting go: MaybeFoldGone (VMs gone from every host), MaybeSweep
//     (series quiet for a day), and the counts the metrics read;
//   answering: QueryVms, QueryTenant, QueryHostSince.
// The windows' validation is in stats_validation.cc.
#include "server/stats/stats_aggregator.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/sibling_share.h"
#include "common/thread_name.h"
#include "common/validation.h"
#include "server/stats/stats_buckets.h"

namespace cosched::server {
namespace {

using namespace stats_buckets;  // NOLINT: the buckets are this file's vocabulary

// Windows may end a little ahead of csd's clock (the agent's runs ahead);
// further ahead they are ignored, else they would land in a bucket that
// still holds windows of the span.
constexpr int64_t kMaxAheadNs = kMinuteNs;
constexpr int64_t kSweepEveryNs = 10 * kMinuteNs;

// A VmSeries' tenant before it is learned, and once the VM is found untagged.
constexpr int32_t kTenantUnknown = -1;
constexpr int32_t kTenantNone = -2;

struct VmSeries {
  VmRings rings;
  int64_t last_added_ns = 0;  // csd's clock, for the sweep
  // What the fold last learned of the VM (StatsAggregator::MaybeFoldGone):
  // its tenant (an index into tenant_names_) and when csd's store was
  // asked while the VM was quiet.
  int32_t tenant = kTenantUnknown;
  int64_t asked_quiet_ns = 0;
};

// What a query gathers before it becomes a response.
struct Gathered {
  std::map<std::string, ShareSums> vms;
  // A tenant's VMs gone from every host (folded), when any ran in the span.
  std::optional<ShareSums> gone;
  std::vector<CoreSums> cores;
  int64_t first_start_ns = std::numeric_limits<int64_t>::max();
  int64_t last_end_ns = 0;
  int64_t windows = 0;
  int64_t lost_events = 0;
  int64_t dropped_windows = 0;

  void Cover(const BucketHeader& b) {
    first_start_ns = std::min(first_start_ns, b.first_start_ns);
    last_end_ns = std::max(last_end_ns, b.last_end_ns);
  }

  v1::GetStatsResponse ToResponse() const {
    v1::GetStatsResponse r;
    if (windows == 0 && !gone) return r;
    r.set_start_unix_ns(first_start_ns);
    r.set_end_unix_ns(last_end_ns);
    ShareSums total;
    if (gone) {
      total.Add(*gone);
      ToProto(*gone, r.mutable_gone_vms());
    }
    for (const auto& [vm_id, share] : vms) {
      total.Add(share);
      v1::VMStats* s = r.add_vms();
      s->set_vm_id(vm_id);
      ToProto(share, s->mutable_share());
    }
    ToProto(total, r.mutable_total());
    for (size_t i = 0; i < cores.size(); ++i) {
      v1::CoreShare* c = r.add_cores();
      c->set_core(static_cast<int32_t>(i));
      c->set_both_busy_ns(cores[i].both_busy_ns);
      c->set_one_idle_ns(cores[i].one_idle_ns);
      c->set_both_idle_ns(cores[i].both_idle_ns);
      c->set_unknown_ns(cores[i].unknown_ns);
    }
    r.set_windows(windows);
    r.set_lost_events(lost_events);
    r.set_dropped_windows(dropped_windows);
    return r;
  }
};

}  // namespace

struct StatsAggregator::TenantSeries {
  TwoRings<VmBucket> rings;
};

struct StatsAggregator::HostSeries {
  std::mutex mu;
  TwoRings<HostBucket> rings;
  absl::flat_hash_map<std::string, std::unique_ptr<VmSeries>> vms;
  // Window end of the last window taken: a window starting before it was
  // taken already.
  int64_t last_end_ns = 0;
  int64_t last_added_ns = 0;  // csd's clock, for the sweep
};

StatsAggregator::StatsAggregator(Clock now)
    : now_(now ? std::move(now) : [] {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
            .count();
      }),
      worker_(NamedThread("cs-stats", [this] { WorkerLoop(); })) {}

StatsAggregator::~StatsAggregator() {
  {
    std::lock_guard lock(queue_mu_);
    stopping_ = true;
  }
  queue_wake_.notify_one();
  worker_.join();
}

void StatsAggregator::AddInBackground(
    std::shared_ptr<const v1::ReportRequest> report,
    std::shared_ptr<const absl::flat_hash_map<std::string, std::string>> tagged_id,
    std::function<void(int64_t ignored)> then) {
  {
    std::lock_guard lock(queue_mu_);
    queue_.push_back([this, report = std::move(report), tagged_id = std::move(tagged_id),
                      then = std::move(then)] {
      then(Add(report->host_id(), report->stats(), report->dropped_windows(), *tagged_id,
               report->vms_size()));
    });
  }
  queue_wake_.notify_one();
}

void StatsAggregator::WorkerLoop() {
  std::unique_lock lock(queue_mu_);
  while (true) {
    queue_wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued ran
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

std::shared_ptr<StatsAggregator::HostSeries> StatsAggregator::FindHost(
    absl::string_view host_id) const {
  auto it = hosts_.find(host_id);
  return it == hosts_.end() ? nullptr : it->second;
}

size_t StatsAggregator::SeriesLimit(int reported_vms) {
  return kMinSeriesPerHost + kSeriesPerReportedVm * static_cast<size_t>(std::max(reported_vms, 0));
}

int64_t StatsAggregator::Add(
    absl::string_view host_id,
    const google::protobuf::RepeatedPtrField<v1::StatsWindow>& stats,
    int64_t dropped_windows,
    const absl::flat_hash_map<std::string, std::string>& tagged_id, int reported_vms) {
  const int64_t now = now_();
  MaybeSweep(now);
  MaybeFoldGone(now);
  if (stats.empty()) return 0;
  std::shared_lock table(hosts_mu_);
  std::shared_ptr<HostSeries> host = FindHost(host_id);
  if (host == nullptr) {
    table.unlock();
    {
      std::unique_lock exclusive(hosts_mu_);
      auto& slot = hosts_[std::string(host_id)];
      if (slot == nullptr) {
        slot = std::make_shared<HostSeries>();
        slot->last_added_ns = now;  // a sweep must not take it before its first window
      }
    }
    table.lock();
    host = FindHost(host_id);
    // Swept already: only when csd's clock jumped a day between the lines.
    if (host == nullptr) return stats.size();
  }

  int64_t ignored = 0;
  std::vector<std::string> new_vms;
  std::vector<std::string> evicted;
  {
    std::lock_guard lock(host->mu);
    bool first = true;
    for (const v1::StatsWindow& w : stats) {
      if (w.start_unix_ns() < host->last_end_ns || w.end_unix_ns() <= now - kKeepNs ||
          w.end_unix_ns() > now + kMaxAheadNs) {
        ++ignored;
        continue;
      }
      host->last_end_ns = w.end_unix_ns();
      for (auto* ring : {&host->rings.fine, &host->rings.coarse}) {
        HostBucket* b = ring->For(w.end_unix_ns());
        if (b == nullptr) continue;
        b->Add(w);
        // The Report's dropped windows were just before its first window.
        if (first) b->dropped_windows = SaturatingAdd(b->dropped_windows, dropped_windows);
      }
      first = false;
      for (const v1::VMStats& v : w.vms()) {
        auto alias = tagged_id.find(v.vm_id());
        const std::string& id = alias == tagged_id.end() ? v.vm_id() : alias->second;
        std::unique_ptr<VmSeries>& series = host->vms[id];
        if (series == nullptr) {
          series = std::make_unique<VmSeries>();
          new_vms.push_back(id);
        }
        series->last_added_ns = now;
        series->rings.Add(w, v.share());
      }
    }
    if (ignored < stats.size()) host->last_added_ns = now;
    evicted = EvictOverLimit(*host, SeriesLimit(reported_vms));
  }
  if (!new_vms.empty() || !evicted.empty()) {
    std::lock_guard lock(index_mu_);
    for (const std::string& id : new_vms) {
      absl::InlinedVector<std::string, 1>& hosts = hosts_of_vm_[id];
      if (std::find(hosts.begin(), hosts.end(), host_id) == hosts.end()) {
        hosts.emplace_back(host_id);
      }
    }
    for (const std::string& id : evicted) ForgetInIndexLocked(id, host_id);
    evicted_series_ += evicted.size();
  }
  return ignored;
}

std::vector<std::string> StatsAggregator::EvictOverLimit(HostSeries& host, size_t limit) {
  std::vector<std::string> evicted;
  if (host.vms.size() <= limit) return evicted;
  // The least recently reported go first; this Report's VMs were reported
  // now, so they go last (only when the Report alone is over the limit).
  std::vector<std::pair<int64_t, std::string>> by_age;
  by_age.reserve(host.vms.size());
  for (const auto& [id, series] : host.vms) by_age.emplace_back(series->last_added_ns, id);
  const size_t excess = host.vms.size() - limit;
  std::nth_element(by_age.begin(), by_age.begin() + static_cast<ptrdiff_t>(excess) - 1,
                   by_age.end());
  evicted.reserve(excess);
  for (size_t i = 0; i < excess; ++i) {
    host.vms.erase(by_age[i].second);
    evicted.push_back(std::move(by_age[i].second));
  }
  return evicted;
}

void StatsAggregator::ForgetInIndexLocked(const std::string& vm_id, absl::string_view host_id) {
  auto it = hosts_of_vm_.find(vm_id);
  if (it == hosts_of_vm_.end()) return;
  auto& hosts = it->second;
  if (auto host = std::find(hosts.begin(), hosts.end(), host_id); host != hosts.end()) {
    hosts.erase(host);
  }
  if (hosts.empty()) hosts_of_vm_.erase(it);
}

uint64_t StatsAggregator::EvictedSeriesCount() const {
  std::lock_guard lock(index_mu_);
  return evicted_series_;
}

uint64_t StatsAggregator::FoldedSeriesCount() const {
  std::lock_guard lock(index_mu_);
  return folded_series_;
}

size_t StatsAggregator::GoneTenantCount() const {
  std::lock_guard lock(gone_mu_);
  return gone_by_tenant_.size();
}

void StatsAggregator::MaybeFoldGone(int64_t now_ns) {
  if (!vm_facts_) return;
  std::unique_lock fold(fold_mu_, std::try_to_lock);
  if (!fold.owns_lock() || now_ns - last_fold_ns_ < kMinuteNs) return;
  last_fold_ns_ = now_ns;

  // The series worth a question, by VM, at most kMaxAskedPerRound VMs: the
  // quiet ones (no window for kGoneAfterNs) not asked about within
  // kPresentRecheckNs, then those whose tenant is not known. In a steady
  // fleet, few; at a start with a large fleet, one bounded batch a round.
  // Whether a VM quiet here runs elsewhere is the store's to say (a host
  // reports it), so its series on other hosts need not be looked at.
  struct Seen {
    bool quiet = false;
    int32_t tenant = kTenantUnknown;
  };
  absl::flat_hash_map<std::string, Seen> vms;
  size_t quiet_count = 0;
  {
    std::shared_lock table(hosts_mu_);
    for (const auto& [host_id, host] : hosts_) {
      std::lock_guard lock(host->mu);
      for (const auto& [id, series] : host->vms) {
        const bool quiet = series->last_added_ns < now_ns - kGoneAfterNs &&
                           series->asked_quiet_ns <= now_ns - kPresentRecheckNs;
        if (!quiet && series->tenant != kTenantUnknown) continue;
        auto it = vms.find(id);
        if (it == vms.end()) {
          // Room for a quiet VM while there are VMs only unknown to drop.
          if (vms.size() >= kMaxAskedPerRound && (!quiet || quiet_count >= kMaxAskedPerRound)) {
            continue;
          }
          it = vms.emplace(id, Seen()).first;
        }
        if (series->tenant != kTenantUnknown) it->second.tenant = series->tenant;
        if (quiet && !it->second.quiet) {
          it->second.quiet = true;
          ++quiet_count;
        }
      }
    }
  }
  std::vector<std::string> ask;
  absl::flat_hash_set<std::string> quiet;
  for (const auto& [id, seen] : vms) {
    if (seen.quiet) {
      ask.push_back(id);
      quiet.insert(id);
    }
  }
  for (const auto& [id, seen] : vms) {
    if (ask.size() >= kMaxAskedPerRound) break;
    if (!seen.quiet && seen.tenant == kTenantUnknown) ask.push_back(id);
  }
  if (ask.empty()) return;
  // Without a lock on the series: the answer reads csd's store.
  absl::StatusOr<absl::flat_hash_map<std::string, VmFacts>> facts = vm_facts_(ask);
  if (!facts.ok()) {
    last_fold_ns_ = now_ns - kMinuteNs / 2;  // asked again in half a minute
    return;
  }
  // What to write back to each VM's series, and the VMs gone (with the
  // tenant their figures fold into, kTenantNone: only freed).
  absl::flat_hash_map<std::string, int32_t> learned;
  absl::flat_hash_map<std::string, int32_t> gone;
  for (const auto& [id, fact] : *facts) {
    auto seen = vms.find(id);
    if (seen == vms.end()) continue;
    int32_t tenant = seen->second.tenant;
    if (fact.tenant) {
      auto [it, added] = tenant_index_.try_emplace(*fact.tenant, static_cast<int32_t>(tenant_names_.size()));
      if (added) tenant_names_.push_back(*fact.tenant);
      tenant = it->second;
    } else if (tenant == kTenantUnknown) {
      tenant = kTenantNone;
    }
    if (quiet.contains(id) && !fact.reported) {
      gone.emplace(id, tenant);
    } else {
      learned.emplace(id, tenant);
    }
  }

  // Adds wait while the series change (they take the table shared).
  std::unique_lock table(hosts_mu_);
  std::vector<std::pair<std::string, std::string>> freed;  // (vm, host)
  for (auto& [host_id, host] : hosts_) {
    std::lock_guard lock(host->mu);
    for (auto series = host->vms.begin(); series != host->vms.end();) {
      VmSeries& s = *series->second;
      if (auto it = learned.find(series->first); it != learned.end()) {
        s.tenant = it->second;
        if (quiet.contains(series->first) && s.last_added_ns < now_ns - kGoneAfterNs) {
          s.asked_quiet_ns = now_ns;
        }
      }
      auto it = gone.find(series->first);
      // A window that came since the question: not gone after all.
      if (it == gone.end() || s.last_added_ns >= now_ns - kGoneAfterNs) {
        ++series;
        continue;
      }
      if (it->second >= 0) {
        std::lock_guard gone_lock(gone_mu_);
        std::unique_ptr<TenantSeries>& into = gone_by_tenant_[tenant_names_[it->second]];
        if (into == nullptr) into = std::make_unique<TenantSeries>();
        into->rings.MergeFrom(s.rings, now_ns);
      }
      freed.emplace_back(series->first, host_id);
      host->vms.erase(series++);
    }
  }
  std::lock_guard lock(index_mu_);
  for (const auto& [vm, host] : freed) ForgetInIndexLocked(vm, host);
  folded_series_ += freed.size();
}

void StatsAggregator::MaybeSweep(int64_t now_ns) {
  {
    std::shared_lock table(hosts_mu_);
    if (now_ns - last_sweep_ns_ < kSweepEveryNs) return;
  }
  std::unique_lock table(hosts_mu_);
  if (now_ns - last_sweep_ns_ < kSweepEveryNs) return;
  last_sweep_ns_ = now_ns;
  const int64_t cutoff = now_ns - kKeepNs;
  std::vector<std::pair<std::string, std::string>> gone;  // (vm, host)
  for (auto it = hosts_.begin(); it != hosts_.end();) {
    HostSeries& host = *it->second;
    std::lock_guard lock(host.mu);
    for (auto vm = host.vms.begin(); vm != host.vms.end();) {
      if (vm->second->last_added_ns < cutoff || host.last_added_ns < cutoff) {
        gone.emplace_back(vm->first, it->first);
        host.vms.erase(vm++);
      } else {
        // Stats are answered by the clock of the windows' ends; a
        // bucket out of its ring answers nothing, so it can go.
        vm->second->rings.DropExpired(now_ns);
        ++vm;
      }
    }
    host.rings.DropExpired(now_ns);
    if (host.last_added_ns < cutoff) {
      hosts_.erase(it++);
    } else {
      ++it;
    }
  }
  {
    std::lock_guard lock(gone_mu_);
    for (auto it = gone_by_tenant_.begin(); it != gone_by_tenant_.end();) {
      it->second->rings.DropExpired(now_ns);
      if (it->second->rings.size() == 0) {
        gone_by_tenant_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  std::lock_guard lock(index_mu_);
  for (const auto& [vm, host] : gone) ForgetInIndexLocked(vm, host);
}

template <typename Fn>
size_t StatsAggregator::SumOverSeries(Fn per_series) const {
  std::shared_lock table(hosts_mu_);
  size_t sum = 0;
  for (const auto& [id, host] : hosts_) {
    std::lock_guard lock(host->mu);
    for (const auto& [vm, series] : host->vms) sum += per_series(*series);
  }
  return sum;
}

size_t StatsAggregator::VmBucketCount() const {
  return SumOverSeries([](const VmSeries& s) { return s.rings.size(); });
}

size_t StatsAggregator::VmBucketBytes() const {
  return SumOverSeries([](const VmSeries& s) { return s.rings.bytes(); });
}

size_t StatsAggregator::VmSeriesCount() const {
  return SumOverSeries([](const VmSeries&) { return size_t{1}; });
}

v1::GetStatsResponse StatsAggregator::QueryVms(const std::vector<std::string>& vm_ids,
                                               int64_t span_seconds) const {
  const int64_t now = now_();
  const int64_t span_ns = span_seconds * kNsPerSecond;
  const int64_t since = now - span_ns;
  // Which hosts to look at for which VMs.
  std::map<std::string, std::vector<std::string>> vms_of_host;
  {
    std::lock_guard lock(index_mu_);
    for (const std::string& id : vm_ids) {
      auto it = hosts_of_vm_.find(id);
      if (it == hosts_of_vm_.end()) continue;
      for (const std::string& host : it->second) vms_of_host[host].push_back(id);
    }
  }
  Gathered g;
  std::shared_lock table(hosts_mu_);
  for (const auto& [host_id, ids] : vms_of_host) {
    std::shared_ptr<HostSeries> host = FindHost(host_id);
    if (host == nullptr) continue;
    std::lock_guard lock(host->mu);
    bool ran = false;
    for (const std::string& id : ids) {
      auto it = host->vms.find(id);
      if (it == host->vms.end()) continue;
      it->second->rings.ForEachSince(span_ns, now, since, [&](const VmBucket& b) {
        g.vms[id].Add(b.share);
        ran = true;
      });
    }
    if (!ran) continue;
    host->rings.For(span_ns).ForEachSince(now, since, [&](const HostBucket& b) {
      g.Cover(b);
      g.windows += b.windows;
      g.lost_events = SaturatingAdd(g.lost_events, b.lost_events);
      g.dropped_windows = SaturatingAdd(g.dropped_windows, b.dropped_windows);
    });
  }
  return g.ToResponse();
}

v1::GetStatsResponse StatsAggregator::QueryTenant(absl::string_view tenant,
                                                  const std::vector<std::string>& vm_ids,
                                                  int64_t span_seconds) const {
  v1::GetStatsResponse current = QueryVms(vm_ids, span_seconds);
  const int64_t now = now_();
  const int64_t span_ns = span_seconds * kNsPerSecond;
  Gathered g;
  {
    std::lock_guard lock(gone_mu_);
    auto it = gone_by_tenant_.find(tenant);
    if (it != gone_by_tenant_.end()) {
      it->second->rings.For(span_ns).ForEachSince(now, now - span_ns, [&](const VmBucket& b) {
        g.Cover(b);
        if (!g.gone) g.gone.emplace();
        g.gone->Add(b.share);
      });
    }
  }
  if (!g.gone) return current;
  // The gone VMs' part as an answer of its own, added as replicas' are.
  v1::GetStatsResponse sum = g.ToResponse();
  AddStatsAnswer(current, sum);
  return sum;
}

v1::GetStatsResponse StatsAggregator::QueryHost(absl::string_view host_id,
                                                int64_t span_seconds) const {
  const int64_t now = now_();
  const int64_t span_ns = span_seconds * kNsPerSecond;
  const int64_t since = now - span_ns;
  Gathered g;
  std::shared_lock table(hosts_mu_);
  std::shared_ptr<HostSeries> host = FindHost(host_id);
  if (host == nullptr) return g.ToResponse();
  std::lock_guard lock(host->mu);
  for (const auto& [id, series] : host->vms) {
    series->rings.ForEachSince(span_ns, now, since, [&, &id = id](const VmBucket& b) {
      g.vms[id].Add(b.share);
    });
  }
  host->rings.For(span_ns).ForEachSince(now, since, [&](const HostBucket& b) {
    g.Cover(b);
    g.windows += b.windows;
    g.lost_events = SaturatingAdd(g.lost_events, b.lost_events);
    g.dropped_windows = SaturatingAdd(g.dropped_windows, b.dropped_windows);
    if (b.cores.size() > g.cores.size()) g.cores.resize(b.cores.size());
    for (size_t i = 0; i < b.cores.size(); ++i) g.cores[i].Add(b.cores[i]);
  });
  return g.ToResponse();
}

v1::GetStatsResponse StatsAggregator::QueryHostSince(absl::string_view host_id,
                                                     int64_t since_unix_ns) const {
  const int64_t now = now_();
  const int64_t since = std::max(since_unix_ns, now - kFineSpanNs);
  Gathered g;
  std::shared_lock table(hosts_mu_);
  std::shared_ptr<HostSeries> host = FindHost(host_id);
  if (host == nullptr) return g.ToResponse();
  std::lock_guard lock(host->mu);
  for (const auto& [id, series] : host->vms) {
    series->rings.fine.ForEachSince(
        now, since, [&, &id = id](const VmBucket& b) { g.vms[id].Add(b.share); }, true);
  }
  host->rings.fine.ForEachSince(
      now, since,
      [&](const HostBucket& b) {
        g.Cover(b);
        g.windows += b.windows;
        g.lost_events = SaturatingAdd(g.lost_events, b.lost_events);
        g.dropped_windows = SaturatingAdd(g.dropped_windows, b.dropped_windows);
      },
      true);
  return g.ToResponse();
}

}  // namespace cosched::server
