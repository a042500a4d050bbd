// PackedVmRing's encoding (stats_buckets.h). A bucket is, in order:
//   varint  (slots after the bucket before it) << 1 | forced_idle_known
//           (the first bucket's is 0: its slot is the ring's first_slot_)
//   varint  zigzag(slot start - first_start_ns)
//   varint  zigzag(last_end_ns - slot start)
//   byte    which of the 8 figures are not zero (bit i: kSiblingShareFields[i])
//   varint  each of those figures, in field order
// Every value is kept whole, so a decoded bucket is the one encoded.
#include "server/stats/stats_buckets.h"

#include <bit>

namespace cosched::server::stats_buckets {
namespace {

static_assert(kSiblingShareFields.size() <= 8, "a bucket's figure mask is one byte");

// The longest bucket: three 10-byte varints, the mask and 8 figures.
constexpr size_t kMaxBucketBytes = 3 * 10 + 1 + 8 * 10;
// Room added beyond a bucket when the ring's storage grows: one more
// typical bucket, so that a ring filling a bucket a minute reallocates about
// every other minute rather than every minute, and a full ring keeps at most
// this much unused.
constexpr size_t kGrowBytes = 48;

uint8_t* PutVarint(uint8_t* out, uint64_t v) {
  while (v >= 0x80) {
    *out++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *out++ = static_cast<uint8_t>(v);
  return out;
}

const uint8_t* GetVarint(const uint8_t* p, uint64_t& v) {
  v = 0;
  for (int shift = 0;; shift += 7) {
    const uint8_t byte = *p++;
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return p;
  }
}

uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
int64_t UnZigZag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

// Encodes `b`, `delta` slots after the bucket before it, into `out`
// (kMaxBucketBytes of room); returns its length.
size_t Encode(const VmBucket& b, int64_t delta, int64_t width_ns, uint8_t* out) {
  uint8_t* p = out;
  const int64_t slot_start = b.slot * width_ns;
  p = PutVarint(p, static_cast<uint64_t>(delta) << 1 | (b.share.forced_idle_known ? 1 : 0));
  p = PutVarint(p, ZigZag(slot_start - b.first_start_ns));
  p = PutVarint(p, ZigZag(b.last_end_ns - slot_start));
  uint8_t* mask = p++;
  *mask = 0;
  for (size_t i = 0; i < b.share.figures.size(); ++i) {
    if (b.share.figures[i] == 0) continue;
    *mask |= static_cast<uint8_t>(1u << i);
    p = PutVarint(p, static_cast<uint64_t>(b.share.figures[i]));
  }
  return static_cast<size_t>(p - out);
}

}  // namespace

const uint8_t* PackedVmRingBase::DecodeSpan(const uint8_t* p, int64_t width_ns,
                                            int64_t prev_slot, VmBucket& b) {
  uint64_t v;
  p = GetVarint(p, v);
  b.slot = prev_slot + static_cast<int64_t>(v >> 1);
  b.share.forced_idle_known = (v & 1) != 0;
  const int64_t slot_start = b.slot * width_ns;
  p = GetVarint(p, v);
  b.first_start_ns = slot_start - UnZigZag(v);
  p = GetVarint(p, v);
  b.last_end_ns = slot_start + UnZigZag(v);
  return p;
}

const uint8_t* PackedVmRingBase::DecodeFigures(const uint8_t* p, VmBucket& b) {
  const uint8_t mask = *p++;
  for (size_t i = 0; i < b.share.figures.size(); ++i) {
    if ((mask & (1u << i)) == 0) {
      b.share.figures[i] = 0;
      continue;
    }
    uint64_t v;
    p = GetVarint(p, v);
    b.share.figures[i] = static_cast<int64_t>(v);
  }
  return p;
}

const uint8_t* PackedVmRingBase::SkipFigures(const uint8_t* p) {
  const int figures = std::popcount(static_cast<unsigned>(*p++));
  for (int i = 0; i < figures; ++i) {
    while ((*p++ & 0x80) != 0) {
    }
  }
  return p;
}

void PackedVmRingBase::Add(int64_t width_ns, int64_t oldest_kept, const v1::StatsWindow& w,
                           const v1::SiblingShare& s) {
  const int64_t slot = w.end_unix_ns() / width_ns;
  VmBucket b;
  int64_t delta = 0;
  if (count_ > 0 && slot < last_slot_) return;  // moved past (see BucketRing::For)
  if (count_ > 0 && slot == last_slot_) {
    uint64_t header;
    GetVarint(bytes_.data() + last_offset_, header);
    delta = static_cast<int64_t>(header >> 1);
    DecodeFigures(DecodeSpan(bytes_.data() + last_offset_, width_ns, last_slot_ - delta, b), b);
  } else {
    DropBefore(oldest_kept, /*free_when_empty=*/false);
    delta = count_ == 0 ? 0 : slot - last_slot_;
    if (count_ == 0) first_slot_ = static_cast<int32_t>(slot);
    last_offset_ = static_cast<uint32_t>(bytes_.size());
    last_slot_ = static_cast<int32_t>(slot);
    ++count_;
    b.slot = slot;
  }
  b.Add(w, s);
  uint8_t encoded[kMaxBucketBytes];
  const size_t length = Encode(b, delta, width_ns, encoded);
  const size_t size = last_offset_ + length;
  if (size > bytes_.capacity()) bytes_.reserve(size + kGrowBytes);
  bytes_.resize(last_offset_);
  bytes_.insert(bytes_.end(), encoded, encoded + length);
}

void PackedVmRingBase::DropBefore(int64_t oldest, bool free_when_empty) {
  if (count_ == 0 || first_slot_ >= oldest) return;
  const uint8_t* begin = bytes_.data();
  const uint8_t* p = begin;
  int64_t slot = first_slot_;
  uint32_t dropped = 0;
  while (dropped < count_) {
    uint64_t header;
    const uint8_t* body = GetVarint(p, header);
    const int64_t this_slot = slot + static_cast<int64_t>(header >> 1);
    if (this_slot >= oldest) {
      // The first kept becomes the ring's first: its header says 0 slots
      // after, in one byte, over the last byte of what goes.
      const size_t cut = static_cast<size_t>(body - begin) - 1;
      bytes_[cut] = static_cast<uint8_t>(header & 1);
      bytes_.erase(bytes_.begin(), bytes_.begin() + static_cast<ptrdiff_t>(cut));
      first_slot_ = static_cast<int32_t>(this_slot);
      count_ -= dropped;
      // The buckets after the first kept moved by `cut`; the first kept
      // itself, when it is the newest, begins the bytes now. (Its header
      // was one byte too: a bucket is fewer slots after the one before it
      // than the ring is long, at most 61, and 61 << 1 | 1 < 128. The
      // encoding does not rely on it.)
      last_offset_ = count_ == 1 ? 0 : last_offset_ - static_cast<uint32_t>(cut);
      return;
    }
    slot = this_slot;
    VmBucket ignored;
    p = SkipFigures(DecodeSpan(p, 0, 0, ignored));
    ++dropped;
  }
  count_ = 0;
  last_offset_ = 0;
  if (free_when_empty) {
    std::vector<uint8_t>().swap(bytes_);
  } else {
    bytes_.clear();
  }
}

}  // namespace cosched::server::stats_buckets
