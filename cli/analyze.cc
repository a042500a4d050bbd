#include "cli/analyze.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cli/output.h"
#include "telemetry/topology.h"

namespace cosched::cli {
namespace {

using telemetry::GroupId;
using telemetry::SiblingShareStats;
using telemetry::TraceLine;
using telemetry::TraceLineKind;

absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

absl::StatusOr<File> Open(const std::string& path, std::string_view what) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int e = errno;
    std::string msg = absl::StrCat("cannot read ", Absl(what), " ", path, ": ", std::strerror(e));
    return e == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  return File(f);
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, std::string_view what) {
  auto f = Open(path, what);
  if (!f.ok()) return f.status();
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f->get())) > 0) text.append(buf, n);
  if (std::ferror(f->get()))
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", Absl(what), " ", path));
  return text;
}

// Feeds the trace to `reader` in blocks: memory stays bounded however long
// the trace is.
template <typename OnLine>
absl::StatusOr<telemetry::TraceTextCounts> ReadTrace(const std::string& path, OnLine&& on_line) {
  auto f = Open(path, "trace");
  if (!f.ok()) return f.status();
  telemetry::TraceTextReader reader;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f->get())) > 0)
    reader.Feed(std::string_view(buf.data(), n), on_line);
  if (std::ferror(f->get()))
    return absl::InvalidArgumentError(absl::StrCat("cannot read trace ", path));
  reader.Finish(on_line);
  return reader.counts();
}

// absl's strip on this file's std::string_views (absl 20220623 as Debian
// builds it has its own string_view).
std::string_view Trim(std::string_view s) {
  absl::string_view t = absl::StripAsciiWhitespace(absl::string_view(s.data(), s.size()));
  return std::string_view(t.data(), t.size());
}

// Group ids handed out on first sight, with their names.
class GroupTable {
 public:
  GroupTable() { names_.push_back("host"); }
  GroupId Add(std::string name) {
    names_.push_back(std::move(name));
    return static_cast<GroupId>(names_.size() - 1);
  }
  GroupId ForKey(int32_t key) {
    auto [it, inserted] = by_key_.try_emplace(key, 0);
    if (inserted) it->second = Add(std::to_string(key));
    return it->second;
  }
  const std::string& name(GroupId id) const { return names_[id]; }
  size_t size() const { return names_.size(); }

 private:
  std::vector<std::string> names_;
  std::unordered_map<int32_t, GroupId> by_key_;
};

double RoundPct(double v) { return std::round(v * 10000.0) / 10000.0; }

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

absl::StatusOr<ThreadsMap> ParseThreadsFile(std::string_view text, std::string_view source) {
  ThreadsMap map;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    line = Trim(line);
    if (line.empty() || line.front() == '#') continue;
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(Absl(source), ":", line_no, ": ", Absl(why), ": '", Absl(line), "'"));
    };
    size_t space = line.find_first_of(" \t");
    if (space == std::string_view::npos) return bad("expected 'TID VM_ID' or 'tgid:TGID VM_ID'");
    std::string_view id_text = line.substr(0, space);
    std::string_view vm = Trim(line.substr(space));
    constexpr std::string_view kTgid = "tgid:";
    const bool process = id_text.substr(0, kTgid.size()) == kTgid;
    if (process) id_text.remove_prefix(kTgid.size());
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
    if (ec != std::errc() || ptr != id_text.data() + id_text.size() || id <= 0)
      return bad(process ? "TGID must be a positive process id" : "TID must be a positive thread id");
    if (vm.empty() || vm.find_first_of(" \t") != std::string_view::npos)
      return bad("expected 'TID VM_ID' or 'tgid:TGID VM_ID'");
    if (vm == "host") return bad("'host' names the threads of no VM; it cannot be a VM id");
    auto [it, inserted] = (process ? map.tgids : map.tids).try_emplace(id, vm);
    if (!inserted && it->second != vm)
      return bad(absl::StrCat(process ? "process " : "thread ", id, " is already mapped to VM '",
                              it->second, "'"));
  }
  return map;
}

absl::StatusOr<int64_t> ParseTraceSeconds(std::string_view field, std::string_view text) {
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        absl::string_view(field.data(), field.size()), " must be seconds of the trace's clock "
        "with at most 9 decimals, e.g. 1234.567890, not '",
        absl::string_view(text.data(), text.size()), "'"));
  };
  const size_t dot = text.find('.');
  std::string_view whole = text.substr(0, dot);
  std::string_view fraction = dot == std::string_view::npos ? "" : text.substr(dot + 1);
  if (whole.empty() || whole.size() > 10 || fraction.size() > 9 ||
      (dot != std::string_view::npos && fraction.empty())) {
    return bad();
  }
  int64_t seconds = 0, nanos = 0;
  for (char c : whole) {
    if (c < '0' || c > '9') return bad();
    seconds = seconds * 10 + (c - '0');
  }
  for (size_t i = 0; i < 9; ++i) {
    const char c = i < fraction.size() ? fraction[i] : '0';
    if (c < '0' || c > '9') return bad();
    nanos = nanos * 10 + (c - '0');
  }
  return seconds * 1'000'000'000 + nanos;
}

absl::StatusOr<AnalyzeResult> AnalyzeTrace(const AnalyzeArgs& args) {
  auto topology_text = ReadSmallFile(args.topology_path, "topology file");
  if (!topology_text.ok()) return topology_text.status();
  auto topology = telemetry::CpuTopology::Parse(*topology_text, args.topology_path);
  if (!topology.ok()) return topology.status();

  AnalyzeResult result;
  result.num_cpus = topology->num_cpus();
  result.num_cores = topology->num_cores();
  GroupTable groups;
  std::unordered_map<int32_t, GroupId> tid_group;
  std::unordered_map<int32_t, int32_t> tid_tgid;
  std::vector<GroupId> listed;  // VMs of the threads file, by name
  telemetry::ThreadClassifier classify;

  if (!args.threads_path.empty()) {
    result.grouping = "threads file";
    auto text = ReadSmallFile(args.threads_path, "threads file");
    if (!text.ok()) return text.status();
    auto map = ParseThreadsFile(*text, args.threads_path);
    if (!map.ok()) return map.status();
    std::map<std::string, GroupId> vm_ids;
    for (const auto& [tid, vm] : map->tids) vm_ids.try_emplace(vm, 0);
    for (const auto& [tgid, vm] : map->tgids) vm_ids.try_emplace(vm, 0);
    for (auto& [vm, id] : vm_ids) {
      id = groups.Add(vm);
      listed.push_back(id);
    }
    for (const auto& [tid, vm] : map->tids) tid_group[tid] = vm_ids[vm];
    if (!map->tgids.empty()) {
      // A first pass learns each thread's process from the record-tgid
      // column: the threads of a "tgid:" line are those the trace saw.
      std::unordered_map<int32_t, GroupId> tgid_group;
      for (const auto& [tgid, vm] : map->tgids) tgid_group[tgid] = vm_ids[vm];
      auto counts = ReadTrace(args.trace_path, [&](const TraceLine& line) {
        if (line.kind != TraceLineKind::kSchedSwitch || line.prev_tgid <= 0) return;
        auto it = tgid_group.find(line.prev_tgid);
        if (it != tgid_group.end()) tid_group.try_emplace(line.event.prev_tid, it->second);
        tid_tgid.try_emplace(line.event.prev_tid, line.prev_tgid);
      });
      if (!counts.ok()) return counts.status();
      if (tid_tgid.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            args.threads_path, ": 'tgid:' lines need the trace's record-tgid column "
            "(echo 1 > options/record-tgid), which ", args.trace_path, " does not have"));
      }
    }
    classify = [&tid_group](int32_t tid) {
      auto it = tid_group.find(tid);
      return it == tid_group.end() ? telemetry::kHostGroup : it->second;
    };
  } else {
    // A first pass learns each thread's tgid from the record-tgid column.
    auto counts = ReadTrace(args.trace_path, [&](const TraceLine& line) {
      if (line.kind == TraceLineKind::kSchedSwitch && line.prev_tgid > 0)
        tid_tgid.try_emplace(line.event.prev_tid, line.prev_tgid);
    });
    if (!counts.ok()) return counts.status();
    if (!tid_tgid.empty()) {
      result.grouping = "tgid";
      classify = [&](int32_t tid) {
        auto it = tid_tgid.find(tid);
        return groups.ForKey(it == tid_tgid.end() ? tid : it->second);
      };
    } else {
      result.grouping = "thread";
      classify = [&](int32_t tid) { return groups.ForKey(tid); };
    }
  }

  std::optional<int64_t> from, to;
  if (!args.from.empty()) {
    auto ns = ParseTraceSeconds("--from", args.from);
    if (!ns.ok()) return ns.status();
    from = *ns;
  }
  if (!args.to.empty()) {
    auto ns = ParseTraceSeconds("--to", args.to);
    if (!ns.ok()) return ns.status();
    to = *ns;
  }
  if (from && to && *from >= *to) {
    return absl::InvalidArgumentError(
        absl::StrCat("--from ", args.from, " must be before --to ", args.to));
  }

  telemetry::SiblingShareCalculator calculator(*topology, classify);
  // Before `from`, events only set each CPU's state: the window taken at
  // `from` is dropped.
  bool counting = !from.has_value();
  auto counts = ReadTrace(args.trace_path, [&](const TraceLine& line) {
    if (line.kind != TraceLineKind::kSchedSwitch) return;
    if (to && line.event.ts_ns >= *to) return;
    if (!counting && line.event.ts_ns >= *from) {
      calculator.TakeWindow(*from);
      counting = true;
    }
    calculator.Add(line.event);
  });
  if (!counts.ok()) return counts.status();
  if (!counting) calculator.TakeWindow(*from);
  result.counts = *counts;
  result.window = to ? calculator.TakeWindow(*to) : calculator.TakeWindow();

  auto stats_of = [&](GroupId id) {
    return id < result.window.groups.size() ? result.window.groups[id] : SiblingShareStats{};
  };
  if (!args.threads_path.empty()) {
    for (GroupId id : listed) result.groups.push_back({groups.name(id), stats_of(id)});
    if (stats_of(telemetry::kHostGroup).run_ns > 0)
      result.groups.push_back({"host", stats_of(telemetry::kHostGroup)});
  } else {
    for (GroupId id = 1; id < groups.size(); ++id)
      if (stats_of(id).run_ns > 0) result.groups.push_back({groups.name(id), stats_of(id)});
    std::stable_sort(result.groups.begin(), result.groups.end(),
                     [](const AnalyzedGroup& a, const AnalyzedGroup& b) {
                       return a.stats.run_ns > b.stats.run_ns;
                     });
  }
  return result;
}

int RunAnalyze(const AnalyzeArgs& args, OutputFormat format, std::ostream& out, std::ostream& err) {
  auto result = AnalyzeTrace(args);
  if (!result.ok()) {
    err << "csctl: " << result.status().message() << "\n";
    return kExitUsage;
  }
  const auto& w = result->window;
  const auto& c = result->counts;
  auto warn = [&](auto&&... parts) {
    err << "csctl: warning: " << args.trace_path << ": ";
    (err << ... << parts);
    err << "\n";
  };
  if (c.events == 0) warn("no sched_switch events");
  if (c.malformed > 0)
    warn(c.malformed, " unreadable sched_switch line(s), first at line ", c.first_malformed_line);
  if (c.lost_events > 0)
    warn("the kernel lost ", c.lost_events, " event(s); figures of those CPUs are off until their next event");
  if (w.inconsistent_events > 0)
    warn(w.inconsistent_events, " event(s) switch out a task other than the one switched in before (lost events?)");
  if (w.out_of_order_events > 0)
    warn(w.out_of_order_events, " event(s) out of time order; use the global trace clock and a merged trace");
  if (w.ignored_events > 0)
    warn(w.ignored_events, " event(s) on CPUs beyond the ", result->num_cpus,
         " of the topology file were ignored");

  if (format == OutputFormat::kJson) {
    nlohmann::json list = nlohmann::json::array();
    for (const AnalyzedGroup& g : result->groups) {
      const SiblingShareStats& s = g.stats;
      nlohmann::json o = nlohmann::json::object();
      o["vm"] = g.vm;
      o["runtime_ns"] = s.run_ns;
      o["same_pct"] = RoundPct(s.Pct(s.same_ns));
      o["idle_pct"] = RoundPct(s.Pct(s.idle_ns));
      o["foreign_pct"] = RoundPct(s.Pct(s.foreign_ns));
      o["unknown_pct"] = RoundPct(s.Pct(s.unknown_ns));
      o["foreign_intervals"] = s.foreign_intervals;
      o["longest_foreign_ns"] = s.longest_foreign_ns;
      list.push_back(std::move(o));
    }
    PrintJson(list, out);
    return kExitOk;
  }

  out << c.events << " sched_switch events over " << Fixed((w.end_ns - w.start_ns) / 1e9, 3)
      << " s on " << result->num_cpus << " CPUs (" << result->num_cores
      << (result->num_cores == 1 ? " core" : " cores") << "); grouped by "
      << result->grouping << "\n";
  telemetry::CoreShareStats cores;
  for (const auto& core : w.cores) {
    cores.both_busy_ns += core.both_busy_ns;
    cores.one_idle_ns += core.one_idle_ns;
    cores.both_idle_ns += core.both_idle_ns;
    cores.unknown_ns += core.unknown_ns;
  }
  const int64_t core_total =
      cores.both_busy_ns + cores.one_idle_ns + cores.both_idle_ns + cores.unknown_ns;
  auto core_pct = [&](int64_t v) {
    return Fixed(core_total > 0 ? 100.0 * static_cast<double>(v) / static_cast<double>(core_total) : 0.0, 1);
  };
  out << "cores: both busy " << core_pct(cores.both_busy_ns) << "%, one idle "
      << core_pct(cores.one_idle_ns) << "%, both idle " << core_pct(cores.both_idle_ns)
      << "%, unknown " << core_pct(cores.unknown_ns) << "%\n\n";
  TextTable table({"VM", "RUNTIME_MS", "SAME%", "IDLE%", "FOREIGN%", "UNKNOWN%",
                   "FOREIGN_INTERVALS", "LONGEST_FOREIGN_US"});
  for (const AnalyzedGroup& g : result->groups) {
    const SiblingShareStats& s = g.stats;
    table.AddRow({g.vm, Fixed(static_cast<double>(s.run_ns) / 1e6, 3), Fixed(s.Pct(s.same_ns), 2),
                  Fixed(s.Pct(s.idle_ns), 2), Fixed(s.Pct(s.foreign_ns), 2),
                  Fixed(s.Pct(s.unknown_ns), 2), std::to_string(s.foreign_intervals),
                  Fixed(static_cast<double>(s.longest_foreign_ns) / 1e3, 1)});
  }
  table.Print(out);
  return kExitOk;
}

}  // namespace cosched::cli
