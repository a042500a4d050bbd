#include "sibling_share.h"

#include <algorithm>
#include <charconv>
#include <set>

#include <nlohmann/json.hpp>

namespace cosched::lab {
namespace {

std::optional<int64_t> ParseInt(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// "123.456789" (seconds, any number of fraction digits) -> nanoseconds.
std::optional<int64_t> ParseTimestamp(std::string_view s) {
  size_t dot = s.find('.');
  std::string_view whole = s.substr(0, dot);
  auto sec = ParseInt(whole);
  if (!sec || *sec < 0) return std::nullopt;
  int64_t ns = 0;
  if (dot != std::string_view::npos) {
    std::string_view frac = s.substr(dot + 1);
    if (frac.empty() || frac.size() > 9) return std::nullopt;
    auto f = ParseInt(frac);
    if (!f || *f < 0) return std::nullopt;
    ns = *f;
    for (size_t i = frac.size(); i < 9; ++i) ns *= 10;
  }
  return *sec * 1'000'000'000 + ns;
}

// The integer at the start of `s`, up to the first space.
std::optional<int64_t> ParseLeadingInt(std::string_view s) {
  return ParseInt(s.substr(0, s.find(' ')));
}

std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<SchedSwitch> ParseSchedSwitchLine(std::string_view line) {
  constexpr std::string_view kMarker = ": sched_switch: ";
  size_t m = line.find(kMarker);
  if (m == std::string_view::npos) return std::nullopt;
  std::string_view prefix = TrimRight(line.substr(0, m));
  std::string_view body = TrimRight(line.substr(m + kMarker.size()));

  SchedSwitch ev;
  // The prefix ends "... [CPU] FLAGS TIMESTAMP"; the task name before it may
  // hold spaces and brackets, so read it from the right.
  size_t ts_start = prefix.rfind(' ');
  if (ts_start == std::string_view::npos) return std::nullopt;
  auto ts = ParseTimestamp(prefix.substr(ts_start + 1));
  if (!ts) return std::nullopt;
  ev.ts_ns = *ts;
  size_t close = prefix.rfind(']', ts_start);
  if (close == std::string_view::npos) return std::nullopt;
  size_t open = prefix.rfind('[', close);
  if (open == std::string_view::npos) return std::nullopt;
  auto cpu = ParseInt(prefix.substr(open + 1, close - open - 1));
  if (!cpu || *cpu < 0) return std::nullopt;
  ev.cpu = static_cast<int>(*cpu);

  constexpr std::string_view kArrow = " ==> next_comm=";
  constexpr std::string_view kPrevComm = "prev_comm=";
  constexpr std::string_view kPrevPid = " prev_pid=";
  constexpr std::string_view kNextPid = " next_pid=";
  size_t arrow = body.find(kArrow);
  if (arrow == std::string_view::npos || !body.starts_with(kPrevComm)) return std::nullopt;
  std::string_view left = body.substr(0, arrow);
  std::string_view right = body.substr(arrow + kArrow.size());
  size_t pp = left.rfind(kPrevPid);
  if (pp == std::string_view::npos || pp < kPrevComm.size()) return std::nullopt;
  ev.prev_comm = std::string(left.substr(kPrevComm.size(), pp - kPrevComm.size()));
  auto prev_pid = ParseLeadingInt(left.substr(pp + kPrevPid.size()));
  size_t np = right.rfind(kNextPid);
  if (!prev_pid || np == std::string_view::npos) return std::nullopt;
  ev.prev_pid = *prev_pid;
  ev.next_comm = std::string(right.substr(0, np));
  auto next_pid = ParseLeadingInt(right.substr(np + kNextPid.size()));
  if (!next_pid) return std::nullopt;
  ev.next_pid = *next_pid;
  return ev;
}

std::optional<LostEvents> ParseLostEventsLine(std::string_view line) {
  constexpr std::string_view kCpu = "CPU:";
  constexpr std::string_view kLost = " [LOST ";
  constexpr std::string_view kEnd = " EVENTS]";
  line = TrimRight(line);
  size_t c = line.find(kCpu);
  size_t l = line.find(kLost);
  if (c == std::string_view::npos || l == std::string_view::npos || l < c || !line.ends_with(kEnd))
    return std::nullopt;
  auto cpu = ParseInt(line.substr(c + kCpu.size(), l - c - kCpu.size()));
  size_t n_start = l + kLost.size();
  auto n = ParseInt(line.substr(n_start, line.size() - kEnd.size() - n_start));
  if (!cpu || !n) return std::nullopt;
  return LostEvents{static_cast<int>(*cpu), *n};
}

std::optional<std::vector<int>> ParseCpuList(std::string_view text) {
  text = TrimRight(text);
  while (!text.empty() && text.back() == '\n') text = TrimRight(text.substr(0, text.size() - 1));
  std::vector<int> cpus;
  if (text.empty()) return cpus;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string_view item = text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos);
    size_t dash = item.find('-');
    auto lo = ParseInt(item.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : ParseInt(item.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi > 65535) return std::nullopt;
    for (int64_t c = *lo; c <= *hi; ++c) cpus.push_back(static_cast<int>(c));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return cpus;
}

std::map<int, std::vector<int>> SiblingsFromLists(const std::map<int, std::vector<int>>& lists) {
  std::map<int, std::vector<int>> siblings;
  for (const auto& [cpu, list] : lists) {
    auto& out = siblings[cpu];
    for (int other : list)
      if (other != cpu) out.push_back(other);
  }
  return siblings;
}

void ParseTraceText(std::string_view text, SiblingShareInput* input) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (line.empty() || line.front() == '#') continue;
    if (auto ev = ParseSchedSwitchLine(line)) {
      input->events.push_back(std::move(*ev));
    } else if (auto lost = ParseLostEventsLine(line)) {
      input->lost_events += lost->count;
    }
  }
}

namespace {

enum class SiblingClass { kIdle, kSame, kUnknown, kForeign };

struct CpuState {
  bool known = false;
  int64_t tid = 0;
  // Open foreign interval: the group it belongs to, and since when.
  const std::string* foreign_group = nullptr;
  int64_t foreign_since = 0;
};

class Sweep {
 public:
  explicit Sweep(const SiblingShareInput& in, SiblingShareReport* report) : in_(in), report_(report) {
    for (const auto& [tid, group] : in.tid_group) report_->groups[group];
  }

  void Advance(int64_t to) {
    int64_t dt = to - now_;
    if (dt > 0) {
      for (auto& [cpu, st] : cpus_) {
        const std::string* g = RunningGroup(st);
        if (!g) continue;
        SiblingShareStats& s = report_->groups[*g];
        s.run_ns += dt;
        switch (Classify(cpu, *g)) {
          case SiblingClass::kIdle: s.idle_ns += dt; break;
          case SiblingClass::kSame: s.same_ns += dt; break;
          case SiblingClass::kUnknown: s.unknown_ns += dt; break;
          case SiblingClass::kForeign: s.foreign_ns += dt; break;
        }
      }
    }
    now_ = to;
  }

  void Apply(const SchedSwitch& ev) {
    CpuState& st = cpus_[ev.cpu];
    if (st.known && st.tid != ev.prev_pid) ++report_->inconsistent_events;
    st.known = true;
    st.tid = ev.next_pid;
    UpdateInterval(ev.cpu);
    auto it = in_.siblings.find(ev.cpu);
    if (it != in_.siblings.end())
      for (int sib : it->second) UpdateInterval(sib);
  }

  void Finish() {
    for (auto& [cpu, st] : cpus_) CloseInterval(st);
  }

 private:
  const std::string* RunningGroup(const CpuState& st) const {
    if (!st.known || st.tid == 0) return nullptr;
    auto it = in_.tid_group.find(st.tid);
    return it == in_.tid_group.end() ? nullptr : &it->second;
  }

  SiblingClass Classify(int cpu, const std::string& group) const {
    auto it = in_.siblings.find(cpu);
    if (it == in_.siblings.end()) return SiblingClass::kIdle;
    bool unknown = false, same = false;
    for (int sib : it->second) {
      auto st = cpus_.find(sib);
      if (st == cpus_.end() || !st->second.known) {
        unknown = true;
        continue;
      }
      if (st->second.tid == 0) continue;
      const std::string* g = RunningGroup(st->second);
      if (g && *g == group) {
        same = true;
      } else {
        return SiblingClass::kForeign;
      }
    }
    if (unknown) return SiblingClass::kUnknown;
    return same ? SiblingClass::kSame : SiblingClass::kIdle;
  }

  void CloseInterval(CpuState& st) {
    if (!st.foreign_group) return;
    SiblingShareStats& s = report_->groups[*st.foreign_group];
    ++s.foreign_intervals;
    s.longest_foreign_ns = std::max(s.longest_foreign_ns, now_ - st.foreign_since);
    st.foreign_group = nullptr;
  }

  // Opens or closes `cpu`'s foreign interval after something changed on it
  // or on a sibling. A switch between two threads of the same group with the
  // sibling still foreign continues the interval.
  void UpdateInterval(int cpu) {
    auto found = cpus_.find(cpu);
    if (found == cpus_.end()) return;
    CpuState& st = found->second;
    const std::string* g = RunningGroup(st);
    bool foreign = g && Classify(cpu, *g) == SiblingClass::kForeign;
    if (st.foreign_group && (!foreign || *st.foreign_group != *g)) CloseInterval(st);
    if (foreign && !st.foreign_group) {
      st.foreign_group = g;
      st.foreign_since = now_;
    }
  }

  const SiblingShareInput& in_;
  SiblingShareReport* report_;
  std::map<int, CpuState> cpus_;
  int64_t now_ = 0;
};

}  // namespace

SiblingShareReport ComputeSiblingShare(SiblingShareInput input) {
  SiblingShareReport report;
  report.lost_events = input.lost_events;
  report.events = static_cast<int64_t>(input.events.size());
  std::stable_sort(input.events.begin(), input.events.end(),
                   [](const SchedSwitch& a, const SchedSwitch& b) { return a.ts_ns < b.ts_ns; });
  Sweep sweep(input, &report);
  if (input.events.empty()) return report;
  report.first_ts_ns = input.events.front().ts_ns;
  report.last_ts_ns = input.events.back().ts_ns;
  sweep.Advance(report.first_ts_ns);
  for (const SchedSwitch& ev : input.events) {
    sweep.Advance(ev.ts_ns);
    sweep.Apply(ev);
  }
  sweep.Finish();
  return report;
}

namespace {
double Round3(double v) { return static_cast<double>(static_cast<int64_t>(v * 1000.0 + 0.5)) / 1000.0; }
}  // namespace

std::string ReportToJson(const SiblingShareReport& report) {
  nlohmann::ordered_json j;
  j["window_ns"] = report.last_ts_ns - report.first_ts_ns;
  j["events"] = report.events;
  j["lost_events"] = report.lost_events;
  j["inconsistent_events"] = report.inconsistent_events;
  nlohmann::ordered_json groups = nlohmann::ordered_json::object();
  for (const auto& [name, s] : report.groups) {
    nlohmann::ordered_json g;
    g["run_ns"] = s.run_ns;
    g["same_ns"] = s.same_ns;
    g["idle_ns"] = s.idle_ns;
    g["foreign_ns"] = s.foreign_ns;
    g["unknown_ns"] = s.unknown_ns;
    g["same_pct"] = Round3(s.Pct(s.same_ns));
    g["idle_pct"] = Round3(s.Pct(s.idle_ns));
    g["foreign_pct"] = Round3(s.Pct(s.foreign_ns));
    g["unknown_pct"] = Round3(s.Pct(s.unknown_ns));
    g["foreign_intervals"] = s.foreign_intervals;
    g["longest_foreign_ns"] = s.longest_foreign_ns;
    groups[name] = std::move(g);
  }
  j["groups"] = std::move(groups);
  return j.dump(2) + "\n";
}

std::string ReportToText(const SiblingShareReport& report) {
  std::string out;
  char buf[512];
  for (const auto& [name, s] : report.groups) {
    snprintf(buf, sizeof buf, "%s %.3f %.3f %.3f %.3f %.3f %lld %.1f\n", name.c_str(),
             static_cast<double>(s.run_ns) / 1e6, s.Pct(s.same_ns), s.Pct(s.idle_ns),
             s.Pct(s.foreign_ns), s.Pct(s.unknown_ns), static_cast<long long>(s.foreign_intervals),
             static_cast<double>(s.longest_foreign_ns) / 1e3);
    out += buf;
  }
  return out;
}

}  // namespace cosched::lab
