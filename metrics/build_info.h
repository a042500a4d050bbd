// cosched_build_info{version, commit} 1: which build a daemon runs, so that
// a fleet's dashboards and alerts see an upgrade's progress host by host.
#ifndef COSCHED_METRICS_BUILD_INFO_H_
#define COSCHED_METRICS_BUILD_INFO_H_

#include "prometheus/registry.h"

namespace cosched::metrics {

// Registers the gauge, set to 1, in `registry`.
void AddBuildInfo(prometheus::Registry& registry);

}  // namespace cosched::metrics

#endif  // COSCHED_METRICS_BUILD_INFO_H_
