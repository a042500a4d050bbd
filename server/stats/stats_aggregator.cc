// StatsAggregator (stats_aggregator.h). In this file, in order:
//   the buckets: ShareSums, BucketHeader, VmBucket, HostBucket, and
//     BucketRing/TwoRings (a minute ring of an hour, an hour ring of a day,
//     grown as they fill);
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

namespace cosched::server {
namespace {

constexpr int64_t kNsPerSecond = 1000000000;
constexpr int64_t kMinuteNs = 60 * kNsPerSecond;
constexpr int64_t kHourNs = 60 * kMinuteNs;
constexpr int64_t kKeepNs = kMaxStatsSpanSeconds * kNsPerSecond;
// Windows may end a little ahead of csd's clock (the agent's runs ahead);
// further ahead they are ignored, else they would land in a bucket that
// still holds windows of the span.
constexpr int64_t kMaxAheadNs = kMinuteNs;
// Each ring has two buckets more than its span: the oldest is partly
// outside the span, the newest may hold windows ending ahead of csd's clock.
constexpr int64_t kFineSpanNs = kHourNs;
constexpr int kFineBuckets = kFineSpanNs / kMinuteNs + 2;
constexpr int kCoarseBuckets = kKeepNs / kHourNs + 2;
constexpr int64_t kSweepEveryNs = 10 * kMinuteNs;

// A share's figures by their index in kSiblingShareFields: the rings hold
// thousands of these, so plain integers rather than a proto each.
struct ShareSums {
  std::array<int64_t, kSiblingShareFields.size()> figures{};
  bool forced_idle_known = false;

  void Add(const ShareSums& o) {
    for (size_t i = 0; i < figures.size(); ++i) {
      // Forced idle only counts where it was measured.
      if (i == kForcedIdleField && !o.forced_idle_known) continue;
      figures[i] = MergeFigure(kSiblingShareFields[i].merge, figures[i], o.figures[i]);
    }
    forced_idle_known = forced_idle_known || o.forced_idle_known;
  }
};

ShareSums FromProto(const v1::SiblingShare& s) {
  ShareSums r;
  for (size_t i = 0; i < r.figures.size(); ++i) r.figures[i] = (s.*kSiblingShareFields[i].get)();
  r.forced_idle_known = s.forced_idle_known();
  if (!r.forced_idle_known) r.figures[kForcedIdleField] = 0;
  return r;
}

void ToProto(const ShareSums& s, v1::SiblingShare* out) {
  for (size_t i = 0; i < s.figures.size(); ++i) (out->*kSiblingShareFields[i].set)(s.figures[i]);
  out->set_forced_idle_known(s.forced_idle_known);
}

struct CoreSums {
  int64_t both_busy_ns = 0;
  int64_t one_idle_ns = 0;
  int64_t both_idle_ns = 0;
  int64_t unknown_ns = 0;

  void Add(const CoreSums& o) {
    both_busy_ns = SaturatingAdd(both_busy_ns, o.both_busy_ns);
    one_idle_ns = SaturatingAdd(one_idle_ns, o.one_idle_ns);
    both_idle_ns = SaturatingAdd(both_idle_ns, o.both_idle_ns);
    unknown_ns = SaturatingAdd(unknown_ns, o.unknown_ns);
  }
};

// What every bucket keeps besides its figures: which time slot it holds
// and the span of the windows summed in it.
struct BucketHeader {
  int64_t slot = 0;  // end_ns / width
  int64_t first_start_ns = 0;
  int64_t last_end_ns = 0;

  void Cover(const v1::StatsWindow& w) {
    first_start_ns = last_end_ns == 0 ? w.start_unix_ns()
                                      : std::min(first_start_ns, w.start_unix_ns());
    last_end_ns = std::max(last_end_ns, w.end_unix_ns());
  }
};

struct VmBucket : BucketHeader {
  ShareSums share;
  void Add(const v1::StatsWindow& w, const v1::SiblingShare& s) {
    Cover(w);
    share.Add(FromProto(s));
  }
  // Another series' bucket of the same slot (a gone VM's, folded).
  void Merge(const VmBucket& o) {
    first_start_ns = last_end_ns == 0 ? o.first_start_ns : std::min(first_start_ns, o.first_start_ns);
    last_end_ns = std::max(last_end_ns, o.last_end_ns);
    share.Add(o.share);
  }
};

struct HostBucket : BucketHeader {
  int64_t windows = 0;
  int64_t lost_events = 0;
  int64_t dropped_windows = 0;
  std::vector<CoreSums> cores;  // by index into the host's topology

  void Add(const v1::StatsWindow& w) {
    Cover(w);
    ++windows;
    lost_events = SaturatingAdd(lost_events, w.lost_events());
    for (const v1::CoreShare& c : w.cores()) {
      if (static_cast<size_t>(c.core()) >= cores.size()) cores.resize(c.core() + 1);
      cores[c.core()].Add({c.both_busy_ns(), c.one_idle_ns(), c.both_idle_ns(),
                           c.unknown_ns()});
    }
  }
};

// A ring of `count` slots of `width_ns` each, by window end time. Only the
// slots that hold a window have a bucket, oldest first: a VM seen in one
// window costs one bucket of each ring, not the whole ring (issue #32: a
// host's new VMs must not make csd allocate ~8 KiB each up front).
template <typename Bucket>
class BucketRing {
 public:
  static constexpr size_t kGrowBuckets = 8;

  BucketRing(int64_t width_ns, int count) : width_ns_(width_ns), count_(count) {}

  // The bucket for a window ending at end_ns; nullptr when the ring has
  // moved past that slot already. A host's windows come in time order
  // (StatsAggregator::Add), so a new slot is always the newest: the slots
  // that fell out of the ring with it are freed.
  Bucket* For(int64_t end_ns) {
    const int64_t slot = end_ns / width_ns_;
    if (!buckets_.empty() && buckets_.back().slot >= slot) {
      auto it = std::lower_bound(buckets_.begin(), buckets_.end(), slot,
                                 [](const Bucket& b, int64_t s) { return b.slot < s; });
      return it != buckets_.end() && it->slot == slot ? &*it : nullptr;
    }
    auto kept = std::lower_bound(buckets_.begin(), buckets_.end(), slot - count_ + 1,
                                 [](const Bucket& b, int64_t s) { return b.slot < s; });
    buckets_.erase(buckets_.begin(), kept);
    // Doubled while small (a short-lived VM's series stays small), then
    // grown kGrowBuckets at a time up to the ring's length: a VM that runs
    // for hours holds its 62 minute buckets in room for 62, not 64, and
    // its 26 hour buckets in room for 26, not 32; and a fleet's VMs,
    // started together, do not all double their rings in the same minute.
    if (buckets_.size() == buckets_.capacity()) {
      const size_t grow = std::clamp<size_t>(buckets_.size(), 1, kGrowBuckets);
      buckets_.reserve(std::min<size_t>(buckets_.size() + grow, count_));
    }
    Bucket& b = buckets_.emplace_back();
    b.slot = slot;
    return &b;
  }

  // Frees the buckets that fell out of the ring by `now_ns` (and, when
  // none is left, the ring's storage): a VM that stopped reporting keeps
  // its minutes for an hour only, not until its series goes.
  void DropExpired(int64_t now_ns) {
    const int64_t oldest = now_ns / width_ns_ - count_ + 1;
    auto kept = std::lower_bound(buckets_.begin(), buckets_.end(), oldest,
                                 [](const Bucket& b, int64_t s) { return b.slot < s; });
    buckets_.erase(buckets_.begin(), kept);
    if (buckets_.empty()) std::vector<Bucket>().swap(buckets_);
  }

  size_t size() const { return buckets_.size(); }
  // Buckets allocated: those held and the room reserved beyond them.
  size_t capacity() const { return buckets_.capacity(); }

  // Adds the buckets of `other` (a ring of the same width and count) that
  // are still within the ring at `now_ns`, slot by slot.
  void MergeFrom(const BucketRing& other, int64_t now_ns) {
    const int64_t oldest = now_ns / width_ns_ - count_ + 1;
    for (const Bucket& b : other.buckets_) {
      if (b.slot < oldest) continue;
      auto it = std::lower_bound(buckets_.begin(), buckets_.end(), b.slot,
                                 [](const Bucket& x, int64_t s) { return x.slot < s; });
      if (it == buckets_.end() || it->slot != b.slot) {
        it = buckets_.emplace(it);
        it->slot = b.slot;
      }
      it->Merge(b);
    }
    DropExpired(now_ns);
  }

  // Calls fn for each bucket that is still within the ring at `now_ns` and
  // holds a window ending after `since_ns` (a window starting at or after
  // it, with `whole`).
  template <typename Fn>
  void ForEachSince(int64_t now_ns, int64_t since_ns, Fn fn, bool whole = false) const {
    const int64_t oldest = now_ns / width_ns_ - count_ + 1;
    for (const Bucket& b : buckets_) {
      if (b.slot < oldest || b.last_end_ns <= since_ns) continue;
      if (whole && b.first_start_ns < since_ns) continue;
      fn(b);
    }
  }

 private:
  int64_t width_ns_;
  int64_t count_;
  std::vector<Bucket> buckets_;  // by slot, oldest first
};

template <typename Bucket>
struct TwoRings {
  BucketRing<Bucket> fine{kMinuteNs, kFineBuckets};
  BucketRing<Bucket> coarse{kHourNs, kCoarseBuckets};

  // The ring that answers a span: minutes up to an hour, else hours.
  const BucketRing<Bucket>& For(int64_t span_ns) const {
    return span_ns <= kFineSpanNs ? fine : coarse;
  }
  void DropExpired(int64_t now_ns) {
    fine.DropExpired(now_ns);
    coarse.DropExpired(now_ns);
  }
  size_t size() const { return fine.size() + coarse.size(); }
  size_t capacity() const { return fine.capacity() + coarse.capacity(); }
  void MergeFrom(const TwoRings& other, int64_t now_ns) {
    fine.MergeFrom(other.fine, now_ns);
    coarse.MergeFrom(other.coarse, now_ns);
  }
};

// A VmSeries' tenant before it is learned, and once the VM is found untagged.
constexpr int32_t kTenantUnknown = -1;
constexpr int32_t kTenantNone = -2;

struct VmSeries {
  TwoRings<VmBucket> rings;
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

const size_t StatsAggregator::kVmBucketBytes = sizeof(VmBucket);

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
        for (auto* ring : {&series->rings.fine, &series->rings.coarse}) {
          if (VmBucket* b = ring->For(w.end_unix_ns())) b->Add(w, v.share());
        }
      }
    }
    if (ignored < stats.size()) host->last_added_ns = now;
    evicted = EvictOverLimit(*host, SeriesLimit(reported_vms));
  }
  if (!new_vms.empty() || !evicted.empty()) {
    std::lock_guard lock(index_mu_);
    for (const std::string& id : new_vms) hosts_of_vm_[id].emplace(host_id);
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
  it->second.erase(host_id);
  if (it->second.empty()) hosts_of_vm_.erase(it);
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
  return kVmBucketBytes * SumOverSeries([](const VmSeries& s) { return s.rings.capacity(); });
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
      it->second->rings.For(span_ns).ForEachSince(now, since, [&](const VmBucket& b) {
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
    series->rings.For(span_ns).ForEachSince(now, since, [&, &id = id](const VmBucket& b) {
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
