#include "telemetry/trace_text.h"

#include <cstring>

namespace cosched::telemetry {
namespace {

constexpr std::string_view kMarker = ": sched_switch: ";
constexpr std::string_view kPrevComm = "prev_comm=";
constexpr std::string_view kPrevPid = " prev_pid=";
constexpr std::string_view kPrevPrio = " prev_prio=";
constexpr std::string_view kPrevState = " prev_state=";
constexpr std::string_view kArrow = " ==> next_comm=";
constexpr std::string_view kNextPid = " next_pid=";
constexpr std::string_view kNextPrio = " next_prio=";

// A bounded cursor over the line; every read checks the end.
struct Cursor {
  const char* p;
  const char* end;

  bool Skip(std::string_view s) {
    if (static_cast<size_t>(end - p) < s.size() || std::memcmp(p, s.data(), s.size()) != 0)
      return false;
    p += s.size();
    return true;
  }

  // A decimal integer, optionally negative; at least one digit, at most 18.
  bool Int(int64_t* out) {
    bool neg = p < end && *p == '-';
    const char* q = p + (neg ? 1 : 0);
    const char* start = q;
    int64_t v = 0;
    while (q < end && static_cast<unsigned>(*q - '0') < 10 && q - start < 18) v = v * 10 + (*q++ - '0');
    if (q == start || (q < end && static_cast<unsigned>(*q - '0') < 10)) return false;
    p = q;
    *out = neg ? -v : v;
    return true;
  }

  bool Tid(int32_t* out) {
    int64_t v = 0;
    if (!Int(&v) || v < 0 || v > INT32_MAX) return false;
    *out = static_cast<int32_t>(v);
    return true;
  }
};

// First occurrence of `pat` in [p, end), or nullptr.
const char* Find(const char* p, const char* end, std::string_view pat) {
  while (static_cast<size_t>(end - p) >= pat.size()) {
    p = static_cast<const char*>(std::memchr(p, pat[0], end - p - pat.size() + 1));
    if (p == nullptr) return nullptr;
    if (std::memcmp(p, pat.data(), pat.size()) == 0) return p;
    ++p;
  }
  return nullptr;
}

// Last occurrence of `pat` starting in [begin, end - pat.size()], or nullptr.
const char* FindLast(const char* begin, const char* end, std::string_view pat) {
  if (static_cast<size_t>(end - begin) < pat.size()) return nullptr;
  for (size_t i = static_cast<size_t>(end - begin) - pat.size() + 1; i-- > 0;)
    if (begin[i] == pat[0] && std::memcmp(begin + i, pat.data(), pat.size()) == 0) return begin + i;
  return nullptr;
}

constexpr int64_t kPow10[] = {1,      10,      100,      1000,      10000,
                              100000, 1000000, 10000000, 100000000, 1000000000};

// "123.456789" -> ns; "123456789" (counter clocks) -> as is.
bool ParseTimestamp(const char* p, const char* end, int64_t* out) {
  // Digits past the most either part may have are scanned, not added up,
  // so that a long run of digits cannot overflow before it is refused.
  int64_t sec = 0;
  const char* start = p;
  for (; p < end && static_cast<unsigned>(*p - '0') < 10; ++p)
    if (p - start < 18) sec = sec * 10 + (*p - '0');
  if (p == start || p - start > 18) return false;
  if (p == end) {
    *out = sec;
    return true;
  }
  if (*p != '.') return false;
  ++p;
  const char* frac_start = p;
  int64_t frac = 0;
  for (; p < end && static_cast<unsigned>(*p - '0') < 10; ++p)
    if (p - frac_start < 9) frac = frac * 10 + (*p - '0');
  size_t digits = p - frac_start;
  if (p != end || digits == 0 || digits > 9 || sec > INT64_MAX / 1'000'000'000 - 1) return false;
  *out = sec * 1'000'000'000 + frac * kPow10[9 - digits];
  return true;
}

uint32_t StateBit(char c) {
  switch (c) {
    case 'S': return 0x1;
    case 'D': return 0x2;
    case 'T': return 0x4;
    case 't': return 0x8;
    case 'X': return 0x10;
    case 'Z': return 0x20;
    case 'P': return 0x40;
    case 'I': return 0x80;
    case '+': return kTaskStatePreempted;
    default: return 0;  // 'R', '|', and letters of other kernels
  }
}

// "  task-pid  (tgid) [cpu] flags timestamp", read from the right since task
// names may hold spaces, brackets and dashes.
bool ParsePrefix(const char* begin, const char* end, TraceLine* out) {
  const char* p = end;
  while (p > begin && p[-1] != ' ') --p;
  if (!ParseTimestamp(p, end, &out->event.ts_ns)) return false;
  auto skip_spaces = [&] {
    while (p > begin && p[-1] == ' ') --p;
  };
  skip_spaces();
  if (p > begin && p[-1] != ']') {  // the flags column ("d..2.")
    while (p > begin && p[-1] != ' ') --p;
    skip_spaces();
  }
  if (p == begin || p[-1] != ']') return false;
  const char* close = --p;
  while (p > begin && p[-1] != '[') --p;
  if (p == begin) return false;
  Cursor cpu{p, close};
  int32_t cpu_id = -1;
  if (!cpu.Tid(&cpu_id) || cpu.p != close) return false;
  out->event.cpu = cpu_id;
  --p;  // the '['
  skip_spaces();
  out->prev_tgid = -1;
  if (p > begin && p[-1] == ')') {
    const char* tgid_end = --p;
    while (p > begin && p[-1] != '(') --p;
    if (p == begin) return false;
    const char* q = p;
    while (q < tgid_end && *q == ' ') ++q;
    Cursor tgid{q, tgid_end};
    int32_t v = -1;
    if (tgid.Tid(&v) && tgid.p == tgid_end) out->prev_tgid = v;
  }
  return true;
}

bool ParseState(Cursor* c, uint32_t* state) {
  uint32_t bits = 0;
  const char* start = c->p;
  while (c->p < c->end && *c->p != ' ') bits |= StateBit(*c->p++);
  *state = bits;
  return c->p > start;
}

// "N prev_prio=N prev_state=S" up to `end`, after " prev_pid=".
bool ParsePrevFields(Cursor c, TraceLine* out) {
  int64_t prio = 0;
  return c.Tid(&out->event.prev_tid) && c.Skip(kPrevPrio) && c.Int(&prio) && c.Skip(kPrevState) &&
         ParseState(&c, &out->event.prev_state) && c.p == c.end;
}

bool ParseBody(const char* begin, const char* end, TraceLine* out) {
  Cursor c{begin, end};
  if (!c.Skip(kPrevComm)) return false;
  const char* prev_comm = c.p;

  // The next task, from the right: "... ==> next_comm=NAME next_pid=N next_prio=N".
  const char* np = FindLast(prev_comm, end, kNextPid);
  if (np == nullptr) return false;
  Cursor tail{np + kNextPid.size(), end};
  int64_t prio = 0;
  if (!tail.Tid(&out->event.next_tid) || !tail.Skip(kNextPrio) || !tail.Int(&prio) || tail.p != end)
    return false;
  const char* arrow = Find(prev_comm, np, kArrow);
  if (arrow == nullptr) return false;
  out->comms.next = std::string_view(arrow + kArrow.size(), np - arrow - kArrow.size());

  // The previous task: the common case reads forward; a name that itself
  // holds " prev_pid=" falls back to the last such marker before the arrow.
  const char* pp = Find(prev_comm, arrow, kPrevPid);
  if (pp == nullptr) return false;
  if (!ParsePrevFields(Cursor{pp + kPrevPid.size(), arrow}, out)) {
    pp = FindLast(prev_comm, arrow, kPrevPid);
    if (!ParsePrevFields(Cursor{pp + kPrevPid.size(), arrow}, out)) return false;
  }
  out->comms.prev = std::string_view(prev_comm, pp - prev_comm);
  return true;
}

bool ParseLost(std::string_view line, TraceLine* out) {
  constexpr std::string_view kCpu = "CPU:";
  constexpr std::string_view kLost = " [LOST ";
  constexpr std::string_view kEnd = " EVENTS]";
  while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  if (!line.starts_with(kCpu) || !line.ends_with(kEnd)) return false;
  Cursor c{line.data() + kCpu.size(), line.data() + line.size() - kEnd.size()};
  int32_t cpu = -1;
  int64_t n = 0;
  if (!c.Tid(&cpu) || !c.Skip(kLost) || !c.Int(&n) || c.p != c.end || n < 0) return false;
  out->lost_cpu = cpu;
  out->lost_events = n;
  return true;
}

}  // namespace

TraceLineKind ParseTraceLine(std::string_view line, TraceLine* out) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  out->kind = TraceLineKind::kOther;
  if (line.empty() || line.front() == '#') return out->kind;
  const char* begin = line.data();
  const char* end = begin + line.size();
  // Task names are at most 15 bytes, shorter than the marker, so the first
  // marker is the event's.
  const char* m = Find(begin, end, kMarker);
  if (m == nullptr) {
    if (ParseLost(line, out)) out->kind = TraceLineKind::kLostEvents;
    return out->kind;
  }
  out->kind = ParsePrefix(begin, m, out) && ParseBody(m + kMarker.size(), end, out)
                  ? TraceLineKind::kSchedSwitch
                  : TraceLineKind::kMalformed;
  return out->kind;
}

}  // namespace cosched::telemetry
