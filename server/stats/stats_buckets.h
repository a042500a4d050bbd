// The buckets csd's stats are summed into (StatsAggregator): a share's
// figures, a core's, a VM's and a host's bucket of one time slot, rings of
// them by slot, and the packed ring each (host, VM) series keeps. Internal
// to server/stats.
#ifndef COSCHED_SERVER_STATS_STATS_BUCKETS_H_
#define COSCHED_SERVER_STATS_STATS_BUCKETS_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "common/sibling_share.h"
#include "cosched/v1/agent.pb.h"
#include "server/stats/stats_aggregator.h"

namespace cosched::server::stats_buckets {

constexpr int64_t kNsPerSecond = 1000000000;
constexpr int64_t kMinuteNs = 60 * kNsPerSecond;
constexpr int64_t kHourNs = 60 * kMinuteNs;
constexpr int64_t kKeepNs = kMaxStatsSpanSeconds * kNsPerSecond;
// Each ring has two buckets more than its span: the oldest is partly
// outside the span, the newest may hold windows ending ahead of csd's clock.
constexpr int64_t kFineSpanNs = kHourNs;
constexpr int kFineBuckets = kFineSpanNs / kMinuteNs + 2;
constexpr int kCoarseBuckets = kKeepNs / kHourNs + 2;

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

inline ShareSums FromProto(const v1::SiblingShare& s) {
  ShareSums r;
  for (size_t i = 0; i < r.figures.size(); ++i) r.figures[i] = (s.*kSiblingShareFields[i].get)();
  r.forced_idle_known = s.forced_idle_known();
  if (!r.forced_idle_known) r.figures[kForcedIdleField] = 0;
  return r;
}

inline void ToProto(const ShareSums& s, v1::SiblingShare* out) {
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

// A ring of `count` slots of `width_ns` each, by window end time, of plain
// buckets: a host's, and a tenant's gone VMs' (a VM series' is packed,
// PackedVmRing below). Only the slots that hold a window have a bucket,
// oldest first, so a ring costs what its windows filled (issue #32).
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

  // Adds the buckets of `other` (a ring of the same width and count, e.g.
  // a VM's PackedVmRing) that are still within the ring at `now_ns`, slot
  // by slot.
  template <typename Other>
  void MergeFrom(const Other& other, int64_t now_ns) {
    const int64_t oldest = now_ns / width_ns_ - count_ + 1;
    other.ForEach([&](const Bucket& b) {
      if (b.slot < oldest) return;
      auto it = std::lower_bound(buckets_.begin(), buckets_.end(), b.slot,
                                 [](const Bucket& x, int64_t s) { return x.slot < s; });
      if (it == buckets_.end() || it->slot != b.slot) {
        it = buckets_.emplace(it);
        it->slot = b.slot;
      }
      it->Merge(b);
    });
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

// A minute ring of an hour and an hour ring of a day, of either kind.
template <typename Fine, typename Coarse>
struct TwoRingsOf {
  Fine fine;
  Coarse coarse;

  void DropExpired(int64_t now_ns) {
    fine.DropExpired(now_ns);
    coarse.DropExpired(now_ns);
  }
  size_t size() const { return fine.size() + coarse.size(); }
  template <typename Other>
  void MergeFrom(const Other& other, int64_t now_ns) {
    fine.MergeFrom(other.fine, now_ns);
    coarse.MergeFrom(other.coarse, now_ns);
  }
};

// Rings of plain buckets (hosts, and gone VMs folded by tenant).
template <typename Bucket>
struct TwoRings : TwoRingsOf<BucketRing<Bucket>, BucketRing<Bucket>> {
  TwoRings()
      : TwoRingsOf<BucketRing<Bucket>, BucketRing<Bucket>>{
            BucketRing<Bucket>(kMinuteNs, kFineBuckets), BucketRing<Bucket>(kHourNs, kCoarseBuckets)} {}
  const BucketRing<Bucket>& For(int64_t span_ns) const {
    return span_ns <= kFineSpanNs ? this->fine : this->coarse;
  }
  size_t capacity() const { return this->fine.capacity() + this->coarse.capacity(); }
};

// One (host, VM) series' ring, packed: each bucket is a few varints (its
// slot after the one before, its windows' span from the slot's start, a
// mask of its non-zero figures and those figures), about 40 bytes where a
// VmBucket takes 96, and decoded exactly (the answers do not change). A
// host's windows come in time order (StatsAggregator::Add), so only the
// newest bucket changes: it is decoded, added to and encoded again at the
// end of the bytes. The ring's storage grows by a little more than a bucket
// at a time, so a full ring holds little unused room.
class PackedVmRingBase {
 public:
  size_t size() const { return count_; }
  // Bytes allocated for the ring.
  size_t bytes() const { return bytes_.capacity(); }

 protected:
  // With the ring's width: adds the window and its share to the bucket of
  // its end (a new newest one, dropping those older than `oldest_kept`).
  void Add(int64_t width_ns, int64_t oldest_kept, const v1::StatsWindow& w,
           const v1::SiblingShare& s);
  // Drops the buckets of slots before `oldest`; frees the storage when none
  // is left and `free_when_empty`.
  void DropBefore(int64_t oldest, bool free_when_empty);
  // Calls fn(const VmBucket&) for each bucket, oldest first, that
  // wanted(slot, first_start_ns, last_end_ns) accepts; the figures of
  // the others are skipped, not decoded.
  template <typename Wanted, typename Fn>
  void ForEachIn(int64_t width_ns, Wanted wanted, Fn fn) const {
    const uint8_t* p = bytes_.data();
    int64_t slot = first_slot_;
    VmBucket b;
    for (uint32_t i = 0; i < count_; ++i) {
      p = DecodeSpan(p, width_ns, slot, b);
      slot = b.slot;
      if (wanted(b.slot, b.first_start_ns, b.last_end_ns)) {
        p = DecodeFigures(p, b);
        fn(static_cast<const VmBucket&>(b));
      } else {
        p = SkipFigures(p);
      }
    }
  }

 private:
  // Decodes the slot and span of the bucket at `p`, whose predecessor is at
  // `prev_slot` (the first's: first_slot_), and returns where its figures
  // begin; DecodeFigures and SkipFigures return where the next begins.
  static const uint8_t* DecodeSpan(const uint8_t* p, int64_t width_ns, int64_t prev_slot,
                                   VmBucket& b);
  static const uint8_t* DecodeFigures(const uint8_t* p, VmBucket& b);
  static const uint8_t* SkipFigures(const uint8_t* p);

  std::vector<uint8_t> bytes_;
  int32_t first_slot_ = 0;  // slots (end time / width) fit 32 bits for 4 000 years
  int32_t last_slot_ = 0;
  uint32_t last_offset_ = 0;  // where the newest bucket begins
  uint32_t count_ = 0;
};

template <int64_t kWidthNs, int kCount>
class PackedVmRing : public PackedVmRingBase {
 public:
  void Add(const v1::StatsWindow& w, const v1::SiblingShare& s) {
    PackedVmRingBase::Add(kWidthNs, w.end_unix_ns() / kWidthNs - kCount + 1, w, s);
  }
  // Frees the buckets that fell out of the ring by `now_ns` (and, when none
  // is left, the storage).
  void DropExpired(int64_t now_ns) { DropBefore(now_ns / kWidthNs - kCount + 1, true); }
  // As BucketRing::ForEachSince.
  template <typename Fn>
  void ForEachSince(int64_t now_ns, int64_t since_ns, Fn fn, bool whole = false) const {
    const int64_t oldest = now_ns / kWidthNs - kCount + 1;
    ForEachIn(
        kWidthNs,
        [&](int64_t slot, int64_t first_start_ns, int64_t last_end_ns) {
          return slot >= oldest && last_end_ns > since_ns &&
                 !(whole && first_start_ns < since_ns);
        },
        fn);
  }
  template <typename Fn>
  void ForEach(Fn fn) const {
    ForEachIn(kWidthNs, [](int64_t, int64_t, int64_t) { return true; }, fn);
  }
};

// A (host, VM) series' two rings.
struct VmRings : TwoRingsOf<PackedVmRing<kMinuteNs, kFineBuckets>,
                            PackedVmRing<kHourNs, kCoarseBuckets>> {
  void Add(const v1::StatsWindow& w, const v1::SiblingShare& s) {
    fine.Add(w, s);
    coarse.Add(w, s);
  }
  // ForEachSince of the ring that answers `span_ns`.
  template <typename Fn>
  void ForEachSince(int64_t span_ns, int64_t now_ns, int64_t since_ns, Fn fn) const {
    if (span_ns <= kFineSpanNs) {
      fine.ForEachSince(now_ns, since_ns, fn);
    } else {
      coarse.ForEachSince(now_ns, since_ns, fn);
    }
  }
  size_t bytes() const { return fine.bytes() + coarse.bytes(); }
};

}  // namespace cosched::server::stats_buckets

#endif  // COSCHED_SERVER_STATS_STATS_BUCKETS_H_
