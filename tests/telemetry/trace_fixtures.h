// Traces for tests and benchmarks of telemetry/: the kernel's format texts,
// tracefs text lines, ring-buffer pages built byte by byte, and a random
// schedule of VM and host threads on an SMT host.
#ifndef COSCHED_TESTS_TELEMETRY_TRACE_FIXTURES_H_
#define COSCHED_TESTS_TELEMETRY_TRACE_FIXTURES_H_

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <queue>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/ring_buffer.h"
#include "telemetry/sched_switch.h"

namespace cosched::telemetry::testing {

// events/sched/sched_switch/format of Linux 6.12 (x86-64).
inline constexpr std::string_view kSchedSwitchFormat = R"(name: sched_switch
ID: 316
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:char prev_comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t prev_pid;	offset:24;	size:4;	signed:1;
	field:int prev_prio;	offset:28;	size:4;	signed:1;
	field:long prev_state;	offset:32;	size:8;	signed:1;
	field:char next_comm[16];	offset:40;	size:16;	signed:0;
	field:pid_t next_pid;	offset:56;	size:4;	signed:1;
	field:int next_prio;	offset:60;	size:4;	signed:1;

print fmt: "prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), "|", { 0x00000001, "S" }, { 0x00000002, "D" }) : "R", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? "+" : "", REC->next_comm, REC->next_pid, REC->next_prio
)";

// events/header_page of a 64-bit kernel.
inline constexpr std::string_view kHeaderPage = R"(	field: u64 timestamp;	offset:0;	size:8;	signed:0;
	field: local_t commit;	offset:8;	size:8;	signed:1;
	field: int overwrite;	offset:8;	size:1;	signed:1;
	field: char data;	offset:16;	size:4080;	signed:1;
)";

inline constexpr size_t kPageSize = 4096;

inline void Store(std::vector<uint8_t>* buf, size_t at, uint64_t v, size_t size) {
  std::memcpy(buf->data() + at, &v, size);  // little endian, as the kernel
}

// A sched_switch record laid out as `layout` says, `size` bytes.
inline std::vector<uint8_t> EncodeSchedSwitch(const SchedSwitchLayout& layout, uint32_t size,
                                              const SchedSwitch& ev, std::string_view prev_comm,
                                              std::string_view next_comm) {
  std::vector<uint8_t> rec(size, 0);
  Store(&rec, layout.common_type.offset, layout.event_id, layout.common_type.size);
  Store(&rec, layout.prev_pid.offset, static_cast<uint32_t>(ev.prev_tid), layout.prev_pid.size);
  Store(&rec, layout.next_pid.offset, static_cast<uint32_t>(ev.next_tid), layout.next_pid.size);
  Store(&rec, layout.prev_state.offset, ev.prev_state, layout.prev_state.size);
  auto comm = [&](const FieldSlot& f, std::string_view s) {
    if (f.size > 0) std::memcpy(rec.data() + f.offset, s.data(), std::min<size_t>(s.size(), f.size - 1));
  };
  comm(layout.prev_comm, prev_comm);
  comm(layout.next_comm, next_comm);
  return rec;
}

// One ring-buffer page, record by record, as the kernel writes it.
class PageBuilder {
 public:
  explicit PageBuilder(uint64_t page_ts, size_t page_size = kPageSize)
      : page_(page_size, 0) {
    Store(&page_, 0, page_ts, 8);
  }

  size_t room() const { return page_.size() - kData - used_; }

  // A data record: the header's type_len holds its length in words, or, for
  // records over 112 bytes (or when `length_word`), a length word follows.
  bool AddRecord(uint32_t delta, const std::vector<uint8_t>& payload, bool length_word = false) {
    const uint32_t padded = static_cast<uint32_t>((payload.size() + 3) & ~size_t{3});
    length_word = length_word || padded > 112;
    const size_t total = 4 + (length_word ? 4 : 0) + padded;
    if (total > room()) return false;
    Header(length_word ? 0 : padded / 4, delta);
    if (length_word) Word(padded + 4);
    std::memcpy(page_.data() + kData + used_, payload.data(), payload.size());
    used_ += padded;
    return true;
  }
  bool AddTimeExtend(uint64_t delta) { return Time(kRbTypeTimeExtend, delta); }
  bool AddTimeStamp(uint64_t ts) { return Time(kRbTypeTimeStamp, ts); }
  // A discarded record of `length` bytes after the header (delta != 0).
  bool AddDiscarded(uint32_t length) {
    if (4 + length > room()) return false;
    Header(kRbTypePadding, 1);
    Word(length);
    used_ += length - 4;
    return true;
  }
  // The page with its commit word; a null padding record when `pad_end`.
  std::vector<uint8_t> Finish(bool pad_end = false, bool missed_events = false) {
    size_t commit = used_;
    if (pad_end && room() >= 4) {
      Header(kRbTypePadding, 0);
      commit = used_;
    }
    Store(&page_, 8, commit | (missed_events ? kRbMissedEvents : 0), 8);
    return page_;
  }

 private:
  static constexpr size_t kData = 16;
  void Header(uint32_t type_len, uint32_t delta) { Word(type_len | (delta << 5)); }
  void Word(uint32_t w) {
    Store(&page_, kData + used_, w, 4);
    used_ += 4;
  }
  bool Time(uint32_t type, uint64_t v) {
    if (room() < 8) return false;
    Header(type, static_cast<uint32_t>(v & ((1u << kRbTimeShift) - 1)));
    Word(static_cast<uint32_t>(v >> kRbTimeShift));
    return true;
  }

  std::vector<uint8_t> page_;
  size_t used_ = 0;
};

// Pages of one CPU holding `events` (of that CPU, in time order), with
// TIME_EXTEND records where a delta does not fit 27 bits.
inline std::vector<std::vector<uint8_t>> BuildPages(const SchedSwitchLayout& layout,
                                                    const std::vector<SchedSwitch>& events) {
  std::vector<std::vector<uint8_t>> pages;
  if (events.empty()) return pages;
  const uint32_t record_size = (layout.min_record_size + 3) & ~3u;
  PageBuilder page(events.front().ts_ns);
  uint64_t last = events.front().ts_ns;
  for (const SchedSwitch& ev : events) {
    auto rec = EncodeSchedSwitch(layout, record_size, ev, "CPU 0/KVM", "worker");
    uint64_t delta = ev.ts_ns - last;
    bool extend = delta >= (1u << kRbTimeShift);
    if (page.room() < rec.size() + 4 + (extend ? 8 : 0)) {
      pages.push_back(page.Finish(true));
      page = PageBuilder(ev.ts_ns);
      delta = 0;
      extend = false;
    }
    if (extend) {
      page.AddTimeExtend(delta);
      delta = 0;
    }
    page.AddRecord(static_cast<uint32_t>(delta), rec);
    last = ev.ts_ns;
  }
  pages.push_back(page.Finish(true));
  return pages;
}

// A tracefs text line for `ev`, as the kernel prints it with the global
// clock (microseconds), optionally with the record-tgid column.
inline std::string TraceTextLine(const SchedSwitch& ev, std::string_view prev_comm,
                                 std::string_view next_comm, int32_t prev_tgid = -1,
                                 bool with_tgid = false) {
  char buf[320];
  std::string comm(prev_comm), next(next_comm);
  char tgid[16] = "";
  if (with_tgid) {
    if (prev_tgid > 0) {
      std::snprintf(tgid, sizeof tgid, "(%7d) ", prev_tgid);
    } else {
      std::snprintf(tgid, sizeof tgid, "(-------) ");
    }
  }
  const char* state = (ev.prev_state & 0x1) ? "S" : (ev.prev_state & 0x80) ? "I" : "R+";
  int n = std::snprintf(buf, sizeof buf,
                        "%16s-%-7d %s[%03d] d..2. %5lld.%06lld: sched_switch: prev_comm=%s "
                        "prev_pid=%d prev_prio=120 prev_state=%s ==> next_comm=%s next_pid=%d "
                        "next_prio=120\n",
                        comm.c_str(), ev.prev_tid, tgid, ev.cpu,
                        static_cast<long long>(ev.ts_ns / 1'000'000'000),
                        static_cast<long long>(ev.ts_ns % 1'000'000'000 / 1000), comm.c_str(),
                        ev.prev_tid, state, next.c_str(), ev.next_tid);
  return std::string(buf, n);
}

// A host of `cores` cores x 2 siblings (CPU c and c + cores are siblings, as
// on most x86 machines), `vms` VMs of `threads_per_vm` threads, and host
// tasks, scheduled at random. Events come sorted by time (ties by CPU).
struct GeneratedTrace {
  int num_cpus = 0;
  std::vector<std::vector<int>> sibling_lists;
  std::map<int32_t, std::string> tid_vm;      // VM threads only
  std::map<int32_t, int32_t> tid_tgid;        // every thread
  std::map<int32_t, std::string> comm;        // every thread
  std::vector<SchedSwitch> events;

  std::string TopologyText() const {
    std::string out;
    for (const auto& list : sibling_lists) {
      for (size_t i = 0; i < list.size(); ++i) out += (i ? "," : "") + std::to_string(list[i]);
      out += "\n";
    }
    return out;
  }
  std::string ThreadsText() const {
    std::string out;
    for (const auto& [tid, vm] : tid_vm) out += std::to_string(tid) + " " + vm + "\n";
    return out;
  }
  std::string CommOf(int32_t tid, int cpu) const {
    if (tid == 0) return "swapper/" + std::to_string(cpu);
    return comm.at(tid);
  }
  std::string Text(bool with_tgid = false) const {
    std::string out = "# tracer: nop\n#\n";
    for (const SchedSwitch& ev : events)
      out += TraceTextLine(ev, CommOf(ev.prev_tid, ev.cpu), CommOf(ev.next_tid, ev.cpu),
                           ev.prev_tid == 0 ? 0 : tid_tgid.at(ev.prev_tid), with_tgid);
    return out;
  }
};

struct GenerateOptions {
  int cores = 2;
  int vms = 3;
  int threads_per_vm = 3;
  int host_tasks = 4;
  int64_t events = 10000;
  uint64_t seed = 1;
  // Run lengths, uniform in [min, max] ns. Microsecond multiples keep text
  // timestamps exact.
  int64_t min_run_ns = 1'000;
  int64_t max_run_ns = 2'000'000;
  double idle_share = 0.3;
  int64_t start_ns = 100'000'000'000;
};

inline GeneratedTrace GenerateTrace(const GenerateOptions& o) {
  GeneratedTrace t;
  t.num_cpus = o.cores * 2;
  t.sibling_lists.resize(t.num_cpus);
  for (int c = 0; c < o.cores; ++c) t.sibling_lists[c] = t.sibling_lists[c + o.cores] = {c, c + o.cores};
  std::vector<int32_t> threads;
  int32_t next_tid = 1000;
  for (int v = 0; v < o.vms; ++v) {
    const int32_t tgid = next_tid;
    for (int i = 0; i < o.threads_per_vm; ++i) {
      const int32_t tid = next_tid++;
      t.tid_vm[tid] = "vm-" + std::to_string(v);
      t.tid_tgid[tid] = tgid;
      t.comm[tid] = i == 0 ? "qemu-system-x86" : "CPU " + std::to_string(i - 1) + "/KVM";
      threads.push_back(tid);
    }
    next_tid += 10;
  }
  for (int h = 0; h < o.host_tasks; ++h) {
    const int32_t tid = next_tid++;
    t.tid_tgid[tid] = tid;
    t.comm[tid] = "kworker/" + std::to_string(h) + ":1";
    threads.push_back(tid);
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int64_t> run_us(o.min_run_ns / 1000, o.max_run_ns / 1000);
  std::uniform_real_distribution<double> unit(0, 1);
  std::uniform_int_distribution<size_t> pick(0, threads.size() - 1);
  std::map<int32_t, int> running_on;
  std::vector<int32_t> current(t.num_cpus, 0);
  using Next = std::pair<int64_t, int>;  // (time, cpu)
  std::priority_queue<Next, std::vector<Next>, std::greater<>> queue;
  for (int c = 0; c < t.num_cpus; ++c) queue.push({o.start_ns + run_us(rng) * 1000, c});
  t.events.reserve(o.events);
  while (static_cast<int64_t>(t.events.size()) < o.events) {
    auto [ts, cpu] = queue.top();
    queue.pop();
    int32_t next = 0;
    if (unit(rng) >= o.idle_share) {
      for (int tries = 0; tries < 8; ++tries) {
        int32_t candidate = threads[pick(rng)];
        if (!running_on.count(candidate)) {
          next = candidate;
          break;
        }
      }
    }
    SchedSwitch ev;
    ev.ts_ns = ts;
    ev.cpu = cpu;
    ev.prev_tid = current[cpu];
    ev.next_tid = next;
    ev.prev_state = ev.prev_tid == 0 ? 0 : (unit(rng) < 0.5 ? 0x1 : kTaskStatePreempted);
    t.events.push_back(ev);
    running_on.erase(current[cpu]);
    current[cpu] = next;
    if (next != 0) running_on[next] = cpu;
    queue.push({ts + run_us(rng) * 1000, cpu});
  }
  return t;
}

}  // namespace cosched::telemetry::testing

#endif  // COSCHED_TESTS_TELEMETRY_TRACE_FIXTURES_H_
