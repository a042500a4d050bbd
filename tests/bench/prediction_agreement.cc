// How often the policy engine's decision from a short prediction agrees
// with the decision from a long one: for each host, every VM at level vm
// against every VM at its tenant's most relaxed level (PredictProposal, as
// csd's engine calls it), decided at min_gain 3%, against an 8-s
// prediction of the same two layouts. Prints, per prediction setting, the
// agreement, how many predictions the screen settled, and the simulated
// seconds spent per host relative to two whole 2-s predictions.
//
// Two fleets: `random` (8, 16 or 32 cores; 4 to 23 VMs of 1 to 4 vCPUs;
// loads spread so that busy threads are 0.2 to 1.5 per core, where layouts
// matter) and `bench` (engine_pass_bench's hosts: 32 cores, 20 VMs of 2
// vCPUs busy 20-90%).
//
//   build/tests/bench/prediction_agreement [--hosts 400]
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "policy/tradeoff.h"
#include "tests/testing/engine_hosts.h"

namespace cosched::policy {
namespace {

constexpr double kMinGain = 0.03;

Scenario RandomHost(std::mt19937_64& rng, uint64_t seed) {
  const int cores = std::vector<int>{8, 16, 32}[rng() % 3];
  const int vms = 4 + static_cast<int>(rng() % 20);
  const int vcpus = 1 + static_cast<int>(rng() % 4);
  const double busy_per_core = 0.2 + 1.3 * static_cast<double>(rng() % 1000) / 1000;
  return testing::EngineHost(
      cores, vms, vcpus, 4,
      [&](int) {
        const double spread = 0.5 + static_cast<double>(rng() % 1000) / 1000;
        return std::clamp(busy_per_core * cores / (vms * vcpus) * spread, 0.02, 1.0);
      },
      seed);
}

Scenario BenchHost(std::mt19937_64& rng, uint64_t seed) {
  return testing::EngineHost(
      32, 20, 2, 4, [&](int) { return 0.2 + 0.7 * static_cast<double>(rng() % 1000) / 1000; },
      seed);
}

struct Setting {
  double predict_s;
  double screen_s;
  int agree = 0;
  int settled = 0;
  double simulated_s = 0;  // per layout, warm-up included
};

int Run(int argc, char** argv) {
  int hosts = 400;
  CLI::App app{"Agreement of short predictions' decisions with 8-s ones."};
  app.add_option("--hosts", hosts, "hosts per fleet")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);

  for (const std::string fleet : {"random", "bench"}) {
    std::vector<Setting> settings = {{2, 0}, {2, 0.5}, {1, 0}, {1, 0.35}, {0.5, 0}};
    std::mt19937_64 rng(7);
    int planned = 0;
    for (int h = 1; h <= hosts; ++h) {
      Scenario s = fleet == "random" ? RandomHost(rng, h) : BenchHost(rng, h);
      s.duration_s = 8;
      auto groups = ChooseGroups(s);
      if (!groups.ok()) continue;
      std::vector<VmDecision> current = *groups;
      for (VmDecision& d : current) {
        d.isolation = v1::ISOLATION_LEVEL_VM;
        d.trust_group = d.tenant + "/vm/" + d.vm;
      }
      auto predict = [&](double predict_s, double screen_s) {
        LayoutProposal proposal;
        proposal.planned = *groups;
        PlanOptions options;
        options.predict_s = predict_s;
        options.screen_s = screen_s;
        options.level_min_gain = kMinGain;
        absl::Status predicted = PredictProposal(s, current, proposal, SimParams(), options);
        if (!predicted.ok()) {
          std::fprintf(stderr, "host %d: %s\n", h, predicted.ToString().c_str());
        }
        return proposal;
      };
      const bool long_changes = predict(8, 0).gain >= kMinGain;
      for (Setting& setting : settings) {
        const LayoutProposal p = predict(setting.predict_s, setting.screen_s);
        setting.agree += (p.gain >= kMinGain) == long_changes;
        setting.settled += p.screened;
        setting.simulated_s += p.screened ? setting.screen_s : setting.predict_s;
      }
      ++planned;
    }
    std::printf("fleet %s: %d hosts, decisions at min_gain %.0f%% against 8-s predictions\n",
                fleet.c_str(), planned, 100 * kMinGain);
    for (const Setting& setting : settings) {
      std::printf(
          "  predict_s %.2f screen_s %.2f: agree %d/%d (%.1f%%), settled by the screen %d, "
          "simulated time %.2f of two whole 2-s predictions\n",
          setting.predict_s, setting.screen_s, setting.agree, planned,
          100.0 * setting.agree / std::max(planned, 1), setting.settled,
          setting.simulated_s / std::max(planned, 1) / 2);
    }
  }
  return 0;
}

}  // namespace
}  // namespace cosched::policy

int main(int argc, char** argv) { return cosched::policy::Run(argc, argv); }
