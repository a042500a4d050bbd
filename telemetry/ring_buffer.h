// The binary form of a trace: sched_switch records in the kernel's per-CPU
// ring-buffer pages (tracefs per_cpu/cpuN/trace_pipe_raw). Field offsets come
// from the text the kernel publishes (events/sched/sched_switch/format and
// events/header_page), never from constants here, so a kernel that moves a
// field keeps working. The fixed part is the ring buffer's event header
// (events/header_event: type_len 5 bits, time_delta 27 bits), which is ABI.
//
// Everything here is pure; reading the tracefs files and pages is the
// caller's (the agent's) job. Pages are read in host byte order: the kernel
// that wrote them runs on this machine.
#ifndef COSCHED_TELEMETRY_RING_BUFFER_H_
#define COSCHED_TELEMETRY_RING_BUFFER_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "telemetry/sched_switch.h"

namespace cosched::telemetry {

// One "field:TYPE NAME; offset:N; size:N; signed:N;" line of a format file.
struct FormatField {
  std::string name;  // "prev_pid", "prev_comm" (array suffix removed)
  std::string type;  // "pid_t", "char[16]"
  uint32_t offset = 0;
  uint32_t size = 0;
  bool is_signed = false;
};

// A parsed events/<system>/<event>/format (or events/header_page) text.
struct EventFormat {
  std::string name;  // empty for header_page
  int64_t id = -1;   // -1 when the text has no "ID:" line
  std::vector<FormatField> fields;

  const FormatField* Find(std::string_view field_name) const;
};

// INVALID_ARGUMENT naming the line when a field line cannot be read.
absl::StatusOr<EventFormat> ParseEventFormat(std::string_view text);

// Where an integer field is in a record.
struct FieldSlot {
  uint32_t offset = 0;
  uint32_t size = 0;  // 1, 2, 4 or 8
  bool is_signed = false;
};

// Where sched_switch's fields are, from its format text.
struct SchedSwitchLayout {
  uint32_t event_id = 0;
  FieldSlot common_type;
  FieldSlot prev_pid;
  FieldSlot prev_state;
  FieldSlot next_pid;
  // size 0 when the format has no such field.
  FieldSlot prev_comm;
  FieldSlot next_comm;
  // Records shorter than this are malformed.
  uint32_t min_record_size = 0;

  // INVALID_ARGUMENT when the text is not sched_switch's format, has no ID,
  // or lacks common_type, prev_pid, prev_state or next_pid (or one of them
  // has a size other than 1, 2, 4 or 8).
  static absl::StatusOr<SchedSwitchLayout> FromFormat(std::string_view format_text);
};

// The page header, from events/header_page.
struct PageHeaderLayout {
  FieldSlot timestamp;
  FieldSlot commit;
  uint32_t data_offset = 0;

  // INVALID_ARGUMENT when timestamp, commit or data is missing.
  static absl::StatusOr<PageHeaderLayout> FromHeaderPage(std::string_view header_page_text);
};

// The ring buffer's event header types (kernel/trace/ring_buffer.c).
inline constexpr uint32_t kRbTypeDataMax = 28;
inline constexpr uint32_t kRbTypePadding = 29;
inline constexpr uint32_t kRbTypeTimeExtend = 30;
inline constexpr uint32_t kRbTypeTimeStamp = 31;
inline constexpr uint32_t kRbTimeShift = 27;
// The commit word holds the data size in its low bits and flags above.
inline constexpr uint64_t kRbCommitSizeMask = (uint64_t{1} << 27) - 1;
inline constexpr uint64_t kRbMissedEvents = uint64_t{1} << 31;

// What a page reader saw so far.
struct RingBufferCounts {
  int64_t pages = 0;
  int64_t sched_switch = 0;
  int64_t other_events = 0;  // events of other types in the same buffer
  int64_t padding = 0;       // discarded events and padding records
  int64_t time_extends = 0;  // TIME_EXTEND and TIME_STAMP records
  // Pages whose header said the kernel dropped events before them.
  int64_t pages_after_loss = 0;
  int64_t malformed_pages = 0;
};

// Reads sched_switch records from ring-buffer pages. Cheap to copy;
// not thread-safe (one per reader thread, or one per CPU).
class RingBufferPageReader {
 public:
  RingBufferPageReader(const PageHeaderLayout& header, const SchedSwitchLayout& layout)
      : header_(header), layout_(layout) {}

  // Calls on_event(const SchedSwitch&, const SchedSwitchComms&) for every
  // sched_switch record of `page` (one page of CPU `cpu`), in order.
  // Other events are skipped. INVALID_ARGUMENT when the page is cut short
  // or a record runs past the committed data; the records before it have
  // been delivered.
  template <typename OnEvent>
  absl::Status ReadPage(std::span<const uint8_t> page, int32_t cpu, OnEvent&& on_event);

  const RingBufferCounts& counts() const { return counts_; }

 private:
  static uint64_t Load(const uint8_t* p, const FieldSlot& f) {
    switch (f.size) {
      case 1: return f.is_signed ? static_cast<uint64_t>(static_cast<int8_t>(*p)) : *p;
      case 2: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        return f.is_signed ? static_cast<uint64_t>(static_cast<int16_t>(v)) : v;
      }
      case 4: {
        uint32_t v;
        std::memcpy(&v, p, 4);
        return f.is_signed ? static_cast<uint64_t>(static_cast<int32_t>(v)) : v;
      }
      default: {
        uint64_t v;
        std::memcpy(&v, p, 8);
        return v;
      }
    }
  }
  static uint32_t Load32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  static std::string_view Comm(const uint8_t* data, const FieldSlot& f) {
    if (f.size == 0) return {};
    const char* s = reinterpret_cast<const char*>(data + f.offset);
    return std::string_view(s, strnlen(s, f.size));
  }
  absl::Status Malformed(int32_t cpu, size_t offset, const char* what);

  PageHeaderLayout header_;
  SchedSwitchLayout layout_;
  RingBufferCounts counts_;
};

template <typename OnEvent>
absl::Status RingBufferPageReader::ReadPage(std::span<const uint8_t> page, int32_t cpu,
                                            OnEvent&& on_event) {
  ++counts_.pages;
  if (page.size() < header_.data_offset) return Malformed(cpu, 0, "page shorter than its header");
  uint64_t ts = Load(page.data() + header_.timestamp.offset, header_.timestamp);
  const uint64_t commit = Load(page.data() + header_.commit.offset, header_.commit);
  if (commit & kRbMissedEvents) ++counts_.pages_after_loss;
  const uint64_t size = commit & kRbCommitSizeMask;
  if (size > page.size() - header_.data_offset)
    return Malformed(cpu, header_.commit.offset, "commit beyond the page");
  const uint8_t* const data = page.data() + header_.data_offset;
  const uint8_t* p = data;
  const uint8_t* const end = data + size;
  while (end - p >= 4) {
    const uint32_t word = Load32(p);
    const uint32_t type_len = word & 31;
    const uint32_t delta = word >> 5;
    if (type_len <= kRbTypeDataMax) {
      const uint8_t* record;
      uint32_t length;
      if (type_len == 0) {
        if (end - p < 8) return Malformed(cpu, p - data, "cut record length");
        length = Load32(p + 4);  // includes itself
        if (length < 4) return Malformed(cpu, p - data, "bad record length");
        length -= 4;
        record = p + 8;
      } else {
        length = type_len * 4;
        record = p + 4;
      }
      if (static_cast<uint64_t>(end - record) < length)
        return Malformed(cpu, p - data, "record past the committed data");
      ts += delta;
      p = record + length;
      if (length < layout_.min_record_size ||
          Load(record + layout_.common_type.offset, layout_.common_type) != layout_.event_id) {
        ++counts_.other_events;
        continue;
      }
      ++counts_.sched_switch;
      SchedSwitch ev;
      ev.ts_ns = static_cast<int64_t>(ts);
      ev.cpu = cpu;
      ev.prev_tid = static_cast<int32_t>(Load(record + layout_.prev_pid.offset, layout_.prev_pid));
      ev.next_tid = static_cast<int32_t>(Load(record + layout_.next_pid.offset, layout_.next_pid));
      ev.prev_state =
          static_cast<uint32_t>(Load(record + layout_.prev_state.offset, layout_.prev_state));
      on_event(static_cast<const SchedSwitch&>(ev),
               SchedSwitchComms{Comm(record, layout_.prev_comm), Comm(record, layout_.next_comm)});
    } else if (type_len == kRbTypePadding) {
      // A zero delta marks the end of the page's data; otherwise a discarded
      // record whose length follows. Neither moves the clock.
      ++counts_.padding;
      if (delta == 0) break;
      if (end - p < 8) return Malformed(cpu, p - data, "cut padding");
      const uint32_t length = Load32(p + 4);
      if (static_cast<uint64_t>(end - p - 4) < length)
        return Malformed(cpu, p - data, "padding past the committed data");
      p += 4 + length;
    } else {
      if (end - p < 8) return Malformed(cpu, p - data, "cut time record");
      ++counts_.time_extends;
      const uint64_t value = (static_cast<uint64_t>(Load32(p + 4)) << kRbTimeShift) | delta;
      if (type_len == kRbTypeTimeExtend) {
        ts += value;
      } else {
        // An absolute stamp of the low 59 bits; the top bits stay.
        constexpr uint64_t kMsb = ~((uint64_t{1} << 59) - 1);
        ts = value | (ts & kMsb);
      }
      p += 8;
    }
  }
  return absl::OkStatus();
}

}  // namespace cosched::telemetry

#endif  // COSCHED_TELEMETRY_RING_BUFFER_H_
