// The churn phase of csd_fanout_loadgen (--churn-per-minute): VMs deleted
// and created across the fleet as a cloud's are, each new one tagged by the
// control plane and each deleted one untagged, open loop, with csd's memory
// printed each minute: it must level off as series of deleted VMs are
// folded and freed.
#ifndef COSCHED_TESTS_BENCH_FANOUT_CHURN_H_
#define COSCHED_TESTS_BENCH_FANOUT_CHURN_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/bench/fanout_fleet.h"
#include "tests/bench/loadgen_support.h"

namespace cosched::bench {

// A TagVM call in flight (the tagging phase's and the churn's).
struct TagCall {
  grpc::ClientContext context;
  v1::TagVMRequest request;
  v1::TagVMResponse response;
};

// `per_minute` VMs replaced across the fleet for `seconds` (after
// `lifetime_minutes` each churn deletes the oldest VM churn created, so
// the churned VMs level off), a line a minute with csd's memory and CPU,
// then how its memory moved over the second half. False when a churn call
// failed or went unanswered.
bool RunChurn(v1::ControlPlane::Stub* stub, Fleet& fleet, double per_minute,
              double lifetime_minutes, double seconds_, const std::vector<pid_t>& csd_pids,
              const std::vector<std::string>& metrics, std::optional<ProcessUsage> before_agents);

}  // namespace cosched::bench

#endif  // COSCHED_TESTS_BENCH_FANOUT_CHURN_H_
