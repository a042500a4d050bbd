#include "metrics/scrape_gauges.h"

namespace cosched::metrics {

void ScrapeGauges::AddFamily(std::string name, std::string help,
                             ReadFamily read) {
  std::lock_guard<std::mutex> lock(mu_);
  families_.push_back({std::move(name), std::move(help), std::move(read)});
}

void ScrapeGauges::Add(std::string name, std::string help,
                       std::function<double()> read) {
  AddFamily(std::move(name), std::move(help),
            [read = std::move(read)]() -> std::vector<Sample> {
              return {{{}, read()}};
            });
}

std::vector<prometheus::MetricFamily> ScrapeGauges::Collect() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<prometheus::MetricFamily> out;
  for (const Family& family : families_) {
    prometheus::MetricFamily f;
    f.name = family.name;
    f.help = family.help;
    f.type = prometheus::MetricType::Gauge;
    for (const auto& [labels, value] : family.read()) {
      prometheus::ClientMetric m;
      for (const auto& [name, label_value] : labels) {
        m.label.push_back({name, label_value});
      }
      m.gauge.value = value;
      f.metric.push_back(std::move(m));
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace cosched::metrics
