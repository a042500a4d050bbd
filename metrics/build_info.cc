#include "metrics/build_info.h"

#include "common/version.h"
#include "prometheus/gauge.h"

namespace cosched::metrics {

void AddBuildInfo(prometheus::Registry& registry) {
  prometheus::BuildGauge()
      .Name("cosched_build_info")
      .Help("1, labelled with the version and commit of the running build.")
      .Register(registry)
      .Add({{"version", CoschedVersion()}, {"commit", CoschedCommit()}})
      .Set(1);
}

}  // namespace cosched::metrics
