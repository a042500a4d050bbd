#include "cli/stats_output.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cli/output.h"

namespace cosched::cli {
namespace {

using nlohmann::json;

constexpr int64_t kMaxWindowSeconds = 86400;

double Pct(int64_t part, int64_t whole) {
  return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

// As `csctl analyze -o json` rounds them.
double RoundPct(double v) { return std::round(v * 10000.0) / 10000.0; }

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string SubjectText(const v1::GetStatsRequest& request) {
  switch (request.subject_case()) {
    case v1::GetStatsRequest::kVmId:
      return absl::StrCat("vm ", request.vm_id());
    case v1::GetStatsRequest::kHostId:
      return absl::StrCat("host ", request.host_id());
    case v1::GetStatsRequest::kTenant:
      return absl::StrCat("tenant ", request.tenant());
    case v1::GetStatsRequest::kTrustGroup:
      return absl::StrCat("trust group ", request.trust_group());
    case v1::GetStatsRequest::SUBJECT_NOT_SET:
      break;
  }
  return "nothing";
}

std::string TimeText(int64_t unix_ns) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixNanos(unix_ns),
                          absl::UTCTimeZone());
}

std::vector<std::string> Row(const std::string& vm, const v1::SiblingShare& s) {
  const int64_t run = s.run_ns();
  return {vm,
          Fixed(static_cast<double>(run) / 1e6, 3),
          Fixed(Pct(s.same_ns(), run), 2),
          Fixed(Pct(s.idle_ns(), run), 2),
          Fixed(Pct(s.foreign_ns(), run), 2),
          Fixed(Pct(s.unknown_ns(), run), 2),
          std::to_string(s.foreign_intervals()),
          Fixed(static_cast<double>(s.longest_foreign_ns()) / 1e3, 1),
          s.forced_idle_known() ? Fixed(static_cast<double>(s.forced_idle_ns()) / 1e6, 3)
                                : "-"};
}

}  // namespace

absl::StatusOr<int32_t> ParseStatsWindow(absl::string_view field,
                                         absl::string_view text) {
  const std::string rule = absl::StrCat(
      field, " '", text,
      "' must be a duration like 300s, 5m, 1h or 1d, from 1s to 24h");
  absl::string_view number = text;
  int64_t unit = 1;
  if (!text.empty()) {
    switch (absl::ascii_tolower(text.back())) {
      case 's': unit = 1; break;
      case 'm': unit = 60; break;
      case 'h': unit = 3600; break;
      case 'd': unit = 86400; break;
      default: unit = 0;
    }
    if (unit != 0) number.remove_suffix(1);
    if (unit == 0) unit = 1;
  }
  int64_t value = 0;
  if (number.empty() || !absl::SimpleAtoi(number, &value) || value < 1 ||
      value > kMaxWindowSeconds / unit) {
    return absl::InvalidArgumentError(rule);
  }
  return static_cast<int32_t>(value * unit);
}

json SiblingShareToJson(absl::string_view vm, const v1::SiblingShare& s) {
  json o = json::object();
  o["vm"] = std::string(vm);
  o["runtime_ns"] = s.run_ns();
  o["same_pct"] = RoundPct(Pct(s.same_ns(), s.run_ns()));
  o["idle_pct"] = RoundPct(Pct(s.idle_ns(), s.run_ns()));
  o["foreign_pct"] = RoundPct(Pct(s.foreign_ns(), s.run_ns()));
  o["unknown_pct"] = RoundPct(Pct(s.unknown_ns(), s.run_ns()));
  o["foreign_intervals"] = s.foreign_intervals();
  o["longest_foreign_ns"] = s.longest_foreign_ns();
  if (s.forced_idle_known()) o["forced_idle_ns"] = s.forced_idle_ns();
  return o;
}

json StatsToJson(const v1::GetStatsRequest& request,
                 const v1::GetStatsResponse& response) {
  json subject = json::object();
  switch (request.subject_case()) {
    case v1::GetStatsRequest::kVmId: subject["vm"] = request.vm_id(); break;
    case v1::GetStatsRequest::kHostId: subject["host"] = request.host_id(); break;
    case v1::GetStatsRequest::kTenant: subject["tenant"] = request.tenant(); break;
    case v1::GetStatsRequest::kTrustGroup:
      subject["trust_group"] = request.trust_group();
      break;
    case v1::GetStatsRequest::SUBJECT_NOT_SET: break;
  }
  json vms = json::array();
  for (const v1::VMStats& v : response.vms()) {
    vms.push_back(SiblingShareToJson(v.vm_id(), v.share()));
  }
  json o = {{"subject", subject},
            {"window_seconds", request.window_seconds()},
            {"start_unix_ns", response.start_unix_ns()},
            {"end_unix_ns", response.end_unix_ns()},
            {"windows", response.windows()},
            {"lost_events", response.lost_events()},
            {"dropped_windows", response.dropped_windows()},
            {"vms", vms},
            {"total", SiblingShareToJson("total", response.total())},
            {"partial", response.partial()}};
  if (response.has_gone_vms()) o["gone_vms"] = SiblingShareToJson("gone", response.gone_vms());
  if (response.partial()) {
    json missing = json::array();
    for (const v1::StatsReplicaGap& gap : response.missing_replicas()) {
      missing.push_back({{"replica", gap.replica()}, {"reason", gap.reason()}});
    }
    o["missing_replicas"] = missing;
  }
  if (request.has_host_id()) {
    json cores = json::array();
    for (const v1::CoreShare& c : response.cores()) {
      cores.push_back({{"core", c.core()},
                       {"both_busy_ns", c.both_busy_ns()},
                       {"one_idle_ns", c.one_idle_ns()},
                       {"both_idle_ns", c.both_idle_ns()},
                       {"unknown_ns", c.unknown_ns()}});
    }
    o["cores"] = cores;
  }
  return o;
}

void PrintStats(const v1::GetStatsRequest& request,
                const v1::GetStatsResponse& response, std::ostream& out) {
  out << SubjectText(request) << ": " << response.windows() << " window"
      << (response.windows() == 1 ? "" : "s") << " from "
      << TimeText(response.start_unix_ns()) << " to "
      << TimeText(response.end_unix_ns()) << " (last " << request.window_seconds()
      << " s asked)";
  if (response.lost_events() > 0) out << ", " << response.lost_events() << " lost events";
  if (response.dropped_windows() > 0) {
    out << ", agents dropped " << response.dropped_windows() << " window(s)";
  }
  out << "\n";
  // csd on etcd: these replicas' agents are not in the figures.
  for (const v1::StatsReplicaGap& gap : response.missing_replicas()) {
    out << "partial: csd replica " << gap.replica() << " is missing: " << gap.reason() << "\n";
  }
  if (request.has_host_id() && !response.cores().empty()) {
    int64_t busy = 0, one = 0, idle = 0, unknown = 0;
    for (const v1::CoreShare& c : response.cores()) {
      busy += c.both_busy_ns();
      one += c.one_idle_ns();
      idle += c.both_idle_ns();
      unknown += c.unknown_ns();
    }
    const int64_t all = busy + one + idle + unknown;
    out << "cores: both busy " << Fixed(Pct(busy, all), 1) << "%, one idle "
        << Fixed(Pct(one, all), 1) << "%, both idle " << Fixed(Pct(idle, all), 1)
        << "%, unknown " << Fixed(Pct(unknown, all), 1) << "%\n";
  }
  out << "\n";
  TextTable table({"VM", "RUNTIME_MS", "SAME%", "IDLE%", "FOREIGN%", "UNKNOWN%",
                   "FOREIGN_INTERVALS", "LONGEST_FOREIGN_US", "FORCED_IDLE_MS"});
  for (const v1::VMStats& v : response.vms()) table.AddRow(Row(v.vm_id(), v.share()));
  // The tenant's VMs gone from every host: counted in TOTAL, listed no more.
  if (response.has_gone_vms()) table.AddRow(Row("(gone VMs)", response.gone_vms()));
  if (!request.has_vm_id()) table.AddRow(Row("TOTAL", response.total()));
  table.Print(out);
}

}  // namespace cosched::cli
