#include "server/engine/plan_report.h"

#include <algorithm>
#include <cmath>

#include "google/protobuf/util/time_util.h"

namespace cosched::server {
namespace {

using google::protobuf::util::TimeUtil;

int64_t Nanos(const google::protobuf::Timestamp& t) {
  return TimeUtil::TimestampToNanoseconds(t);
}

// Running mean of the values added; unset when none was.
class Mean {
 public:
  void Add(double value) {
    sum_ += value;
    ++n_;
  }
  std::optional<double> get() const {
    return n_ == 0 ? std::nullopt : std::optional<double>(sum_ / n_);
  }

 private:
  double sum_ = 0;
  int n_ = 0;
};

}  // namespace

std::optional<v1::HostPlanReport> NewestPlan(const HostState& state) {
  const v1::LayoutDecision* newest = nullptr;
  for (const v1::VM& vm : state.vms) {
    const v1::LayoutDecision& d = vm.decision();
    if (d.decided_by() != v1::DECIDED_BY_ENGINE || !d.has_predicted()) continue;
    if (newest == nullptr || Nanos(d.decided_at()) > Nanos(newest->decided_at())) newest = &d;
  }
  if (newest == nullptr) return std::nullopt;
  v1::HostPlanReport report;
  report.set_host_id(state.host.host_id());
  *report.mutable_decided_at() = newest->decided_at();
  *report.mutable_predicted() = newest->predicted();
  *report.mutable_before() = newest->measured_before();
  int vms = 0;
  for (const v1::VM& vm : state.vms) {
    const v1::LayoutDecision& d = vm.decision();
    vms += d.decided_by() == v1::DECIDED_BY_ENGINE &&
           Nanos(d.decided_at()) == Nanos(newest->decided_at());
  }
  report.set_vms(vms);
  return report;
}

void CompareWithMeasured(const v1::MeasuredLayout& since, v1::HostPlanReport& report) {
  *report.mutable_since() = since;
  if (since.windows() == 0) return;
  const v1::PredictedLayout& predicted = report.predicted();
  if (since.has_throughput()) {
    if (report.before().has_throughput() && report.before().throughput() > 0) {
      report.set_measured_gain(since.throughput() / report.before().throughput() - 1);
    }
    if (predicted.throughput() > 0) {
      report.set_throughput_error(since.throughput() / predicted.throughput() - 1);
    }
    report.set_foreign_error_pct(since.foreign_pct() - predicted.foreign_pct());
  }
  if (since.has_forced_idle_pct()) {
    report.set_forced_idle_error_pct(since.forced_idle_pct() - predicted.forced_idle_pct());
  }
}

std::optional<v1::HostPlanReport> ReportHost(const HostState& state,
                                             const StatsSource& stats) {
  std::optional<v1::HostPlanReport> report = NewestPlan(state);
  if (!report) return std::nullopt;
  const absl::Time decided_at = absl::FromUnixNanos(Nanos(report->decided_at()));
  CompareWithMeasured(MeasuredOnHostSince(stats, state.host.host_id(),
                                          2 * state.host.topology().cores_size(), decided_at),
                      *report);
  return report;
}

v1::PlanReportSummary Summarize(std::vector<v1::HostPlanReport>& reports) {
  std::sort(reports.begin(), reports.end(),
            [](const v1::HostPlanReport& a, const v1::HostPlanReport& b) {
              if (a.predicted().gain() != b.predicted().gain()) {
                return a.predicted().gain() > b.predicted().gain();
              }
              return a.host_id() < b.host_id();
            });
  v1::PlanReportSummary summary;
  Mean predicted_gain, measured_gain, throughput_error, forced_idle_error;
  for (const v1::HostPlanReport& r : reports) {
    summary.set_hosts(summary.hosts() + 1);
    predicted_gain.Add(r.predicted().gain());
    if (r.since().windows() == 0) continue;
    summary.set_measured_hosts(summary.measured_hosts() + 1);
    if (r.has_measured_gain()) measured_gain.Add(r.measured_gain());
    if (r.has_throughput_error()) throughput_error.Add(std::abs(r.throughput_error()));
    if (r.has_forced_idle_error_pct()) forced_idle_error.Add(std::abs(r.forced_idle_error_pct()));
  }
  if (auto m = predicted_gain.get()) summary.set_mean_predicted_gain(*m);
  if (auto m = measured_gain.get()) summary.set_mean_measured_gain(*m);
  if (auto m = throughput_error.get()) summary.set_mean_abs_throughput_error(*m);
  if (auto m = forced_idle_error.get()) summary.set_mean_abs_forced_idle_error_pct(*m);
  return summary;
}

}  // namespace cosched::server
