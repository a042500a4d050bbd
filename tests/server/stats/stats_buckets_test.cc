// PackedVmRing against BucketRing<VmBucket>, the plain ring it replaced for
// VM series: fed the same windows and expired at the same times, both must
// hold the same buckets, field for field, including at the edges of the
// encoding (gaps of many slots, figures at INT64_MAX, windows far longer
// than a slot, rings emptied and filled again).
#include "server/stats/stats_buckets.h"

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace cosched::server::stats_buckets {
namespace {

struct Flat {
  int64_t slot, first_start, last_end;
  std::array<int64_t, kSiblingShareFields.size()> figures;
  bool known;
  bool operator==(const Flat&) const = default;
};

template <typename Ring>
std::vector<Flat> Contents(const Ring& ring) {
  std::vector<Flat> out;
  ring.ForEach([&](const VmBucket& b) {
    out.push_back({b.slot, b.first_start_ns, b.last_end_ns, b.share.figures,
                   b.share.forced_idle_known});
  });
  return out;
}

// BucketRing has no ForEach of its own: read it through ForEachSince over
// everything.
struct PlainRing {
  BucketRing<VmBucket> ring{kMinuteNs, kFineBuckets};
  template <typename Fn>
  void ForEach(Fn fn) const {
    ring.ForEachSince(std::numeric_limits<int64_t>::min() / 2, std::numeric_limits<int64_t>::min(),
                      fn);
  }
};

class Numbers {
 public:
  explicit Numbers(uint64_t seed) : engine_(seed) {}
  int64_t Below(int64_t bound) {
    return static_cast<int64_t>(engine_() % static_cast<uint64_t>(bound));
  }

 private:
  std::mt19937_64 engine_;
};

TEST(PackedVmRing, HoldsWhatThePlainRingHolds) {
  Numbers n(7);
  PlainRing plain;
  PackedVmRing<kMinuteNs, kFineBuckets> packed;
  int64_t end = 1800000000LL * 1000000000 + 123;
  for (int i = 0; i < 20000; ++i) {
    // Mostly 10-s steps; sometimes a gap of minutes to hours (a header of
    // more than one byte), sometimes a window of a day.
    int64_t step = 10 * kNsPerSecond + n.Below(kNsPerSecond);
    if (n.Below(200) == 0) step = n.Below(200) * kMinuteNs;
    const int64_t start = n.Below(300) == 0 ? end - n.Below(86400) * kNsPerSecond : end;
    end += step;
    v1::StatsWindow w;
    w.set_start_unix_ns(start);
    w.set_end_unix_ns(end);
    v1::SiblingShare s;
    const bool huge = n.Below(100) == 0;
    for (const SiblingShareField& f : kSiblingShareFields) {
      (s.*f.set)(huge ? std::numeric_limits<int64_t>::max() - n.Below(3)
                      : (n.Below(3) == 0 ? 0 : n.Below(int64_t{1} << (1 + n.Below(50)))));
    }
    s.set_forced_idle_known(n.Below(2) == 0);
    if (VmBucket* b = plain.ring.For(end)) b->Add(w, s);
    packed.Add(w, s);
    if (n.Below(50) == 0) {
      // A sweep, at a time up to two hours after the last window.
      const int64_t now = end + n.Below(120) * kMinuteNs;
      plain.ring.DropExpired(now);
      packed.DropExpired(now);
    }
    ASSERT_EQ(Contents(packed), Contents(plain)) << "after window " << i;
    ASSERT_EQ(packed.size(), plain.ring.size());
  }
}

// A VM back after longer than the ring: its bucket starts the ring again,
// a sweep leaves it alone there, and the next windows of its minute must
// still find it.
TEST(PackedVmRing, ABucketAfterALongGapStaysFindableWhenItIsLeftAlone) {
  PlainRing plain;
  PackedVmRing<kMinuteNs, kFineBuckets> packed;
  const int64_t t0 = 1800000000LL * 1000000000;
  auto add = [&](int64_t end) {
    v1::StatsWindow w;
    w.set_start_unix_ns(end - 10 * kNsPerSecond);
    w.set_end_unix_ns(end);
    v1::SiblingShare s;
    s.set_run_ns(end % 1000003);
    plain.ring.For(end)->Add(w, s);
    packed.Add(w, s);
  };
  for (int m = 0; m < 10; ++m) add(t0 + m * kMinuteNs + kNsPerSecond);
  const int64_t back = t0 + 110 * kMinuteNs + kNsPerSecond;
  add(back);
  plain.ring.DropExpired(back);
  packed.DropExpired(back);
  ASSERT_EQ(packed.size(), 1u);
  add(back + 10 * kNsPerSecond);
  add(back + 20 * kNsPerSecond);
  EXPECT_EQ(Contents(packed), Contents(plain));
  EXPECT_EQ(packed.size(), 1u);
}

TEST(PackedVmRing, IsSmallerThanPlainBucketsAndFreesWhenEmpty) {
  PackedVmRing<kMinuteNs, kFineBuckets> packed;
  const int64_t t0 = 1800000000LL * 1000000000;
  for (int m = 0; m < kFineBuckets; ++m) {
    v1::StatsWindow w;
    w.set_start_unix_ns(t0 + m * kMinuteNs);
    w.set_end_unix_ns(t0 + (m + 1) * kMinuteNs - 1);
    v1::SiblingShare s;
    s.set_run_ns(2 * 59 * kNsPerSecond);
    s.set_same_ns(40 * kNsPerSecond);
    s.set_idle_ns(70 * kNsPerSecond);
    packed.Add(w, s);
  }
  EXPECT_EQ(packed.size(), static_cast<size_t>(kFineBuckets));
  EXPECT_LT(packed.bytes(), kFineBuckets * sizeof(VmBucket) / 3) << "a full minute ring, packed";
  packed.DropExpired(t0 + 3 * kHourNs);
  EXPECT_EQ(packed.size(), 0u);
  EXPECT_EQ(packed.bytes(), 0u);
}

}  // namespace
}  // namespace cosched::server::stats_buckets
