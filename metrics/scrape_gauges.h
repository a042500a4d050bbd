// Gauges whose values are read when Prometheus scrapes, from state the
// program already keeps (connected agents, a connection flag), so nothing
// has to push updates into them.
#ifndef COSCHED_METRICS_SCRAPE_GAUGES_H_
#define COSCHED_METRICS_SCRAPE_GAUGES_H_

#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/labels.h"
#include "prometheus/metric_family.h"

namespace cosched::metrics {

// Thread-safe. The read functions run on the scraping thread and must be
// thread-safe and cheap.
class ScrapeGauges : public prometheus::Collectable {
 public:
  // One series of a gauge family: its labels and value.
  using Sample = std::pair<prometheus::Labels, double>;
  using ReadFamily = std::function<std::vector<Sample>()>;

  // A family of gauges (one per label set `read` returns).
  void AddFamily(std::string name, std::string help, ReadFamily read);
  // A single unlabelled gauge.
  void Add(std::string name, std::string help, std::function<double()> read);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Family {
    std::string name;
    std::string help;
    ReadFamily read;
  };
  mutable std::mutex mu_;
  std::vector<Family> families_;
};

}  // namespace cosched::metrics

#endif  // COSCHED_METRICS_SCRAPE_GAUGES_H_
