// A staged rollout over a large fleet (issue #35 item 6): --hosts hosts
// that wait for a rollout are written straight into a fresh store (a local
// etcd member with fsync on and etcd's default limits, or SQLite with
// --sqlite), then a rollout of --stages is started through RolloutControl
// and driven stage by stage by the leader's check, the soak skipped by a
// clock of the bench's own. Prints the time to start it (the record and
// the first stage's hosts), each stage's check (the record's commit and
// the stage's hosts) and a check with nothing to do, with the hosts each
// enabled; fails when a step fails or a stage enables the wrong count.
//
//   build/tests/bench/rollout_bench [--hosts 200000] [--stages 1,10,50,100] [--sqlite]
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/names.h"
#include "glog/logging.h"
#include "server/state/rollout_control.h"
#include "store/etcd_store.h"
#include "store/sqlite_store.h"
#include "tests/server/state_testing.h"
#include "tests/server/test_state.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/temp_dir.h"

namespace cosched {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// `hosts` waiting hosts, `per_commit` a write, submitted all at once: the
// store's group commit packs them.
absl::Status WriteFleet(store::Store& store, int hosts, int per_commit) {
  google::protobuf::Timestamp seen;
  seen.set_seconds(absl::ToUnixSeconds(absl::Now()));
  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;
  absl::Status first;
  for (int at = 0; at < hosts; at += per_commit) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return pending < 256; });
      ++pending;
    }
    store.Write(
        [at, hosts, per_commit, seen](store::Transaction& txn) -> absl::Status {
          for (int h = at; h < std::min(hosts, at + per_commit); ++h) {
            v1::Host host;
            host.set_host_id(absl::StrCat("hv-", h));
            v1::Core* core = host.mutable_topology()->add_cores();
            core->add_cpus(0);
            core->add_cpus(1);
            (*host.mutable_labels())["zone"] = absl::StrCat("z", h % 4);
            host.set_waits_for_rollout(true);
            *host.mutable_last_seen_time() = seen;
            if (absl::Status put = txn.PutHost(host); !put.ok()) return put;
          }
          return absl::OkStatus();
        },
        [&](absl::Status status) {
          std::lock_guard<std::mutex> lock(mu);
          if (!status.ok() && first.ok()) first = status;
          --pending;
          cv.notify_all();
        });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return pending == 0; });
  return first;
}

int Run(int argc, char** argv) {
  int hosts = 200000;
  std::string stages_flag = "1,10,50,100";
  bool sqlite = false;
  CLI::App app{"A staged rollout over a large fleet, timed"};
  app.add_option("--hosts", hosts, "waiting hosts registered")->check(CLI::Range(1, 10000000));
  app.add_option("--stages", stages_flag, "stage percents, comma-separated");
  app.add_flag("--sqlite", sqlite, "SQLite instead of a local etcd member");
  CLI11_PARSE(app, argc, argv);
  std::vector<int> stages;
  for (absl::string_view s : absl::StrSplit(stages_flag, ',')) {
    int percent = 0;
    if (!absl::SimpleAtoi(s, &percent)) {
      std::fprintf(stderr, "--stages: '%s' is not a percent\n", std::string(s).c_str());
      return 2;
    }
    stages.push_back(percent);
  }

  cosched::testing::TempDir dir;
  std::unique_ptr<cosched::testing::EtcdMember> etcd;
  std::unique_ptr<store::Store> store;
  int per_commit = 500;
  if (sqlite) {
    store::SqliteStoreOptions options;
    options.data_dir = dir.Sub("data");
    auto opened = store::SqliteStore::Open(options);
    if (!opened.ok()) {
      std::fprintf(stderr, "SQLite: %s\n", opened.status().ToString().c_str());
      return 1;
    }
    store = std::move(*opened);
  } else {
    // etcd's defaults: 128 operations and 1.5 MiB a request; fsync on.
    cosched::testing::EtcdMemberOptions member;
    member.fsync = true;
    etcd = std::make_unique<cosched::testing::EtcdMember>(member);
    if (absl::Status s = etcd->Start(); !s.ok()) {
      std::fprintf(stderr, "etcd: %s\n", s.ToString().c_str());
      return 1;
    }
    store::EtcdStoreOptions options;
    options.client = etcd->ClientOptions();
    auto opened = store::EtcdStore::Open(options);
    if (!opened.ok()) {
      std::fprintf(stderr, "etcd store: %s\n", opened.status().ToString().c_str());
      return 1;
    }
    store = std::move(*opened);
    per_commit = 100;
  }

  Clock::time_point start = Clock::now();
  if (absl::Status s = WriteFleet(*store, hosts, per_commit); !s.ok()) {
    std::fprintf(stderr, "writing the fleet: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("%s: %d waiting hosts written in %.1f s\n", sqlite ? "SQLite" : "etcd (fsync on)",
              hosts, SecondsSince(start));
  server::TestState state(*store);
  start = Clock::now();
  if (absl::Status s = state.Load(); !s.ok()) {
    std::fprintf(stderr, "loading the views: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("views loaded in %.1f s\n", SecondsSince(start));

  // The stages move on the leader only: wait for this replica's campaign.
  for (int i = 0; i < 300 && !store->Leads(); ++i) absl::SleepFor(absl::Milliseconds(100));
  if (!store->Leads()) {
    std::fprintf(stderr, "the store's replica never became the leader\n");
    return 1;
  }
  absl::Time now = absl::Now();
  server::RolloutOptions options;
  options.min_soak_s = 60;
  // Its hosts were written, not registered, and report nothing: judged by
  // their records' last_seen_time, which the whole run stays within.
  options.no_report_halt = std::chrono::hours(24);
  server::RolloutControl control(*store, state.rollout, state.host_status, state.placement,
                                 options, [&now] { return now; });
  v1::StartRolloutRequest request;
  for (int p : stages) request.add_stage_percents(p);
  request.set_soak_seconds(60);
  start = Clock::now();
  absl::StatusOr<v1::Rollout> started = server::testing::Wait<v1::Rollout>([&](auto done) {
    control.StartRollout(request, server::Actor{"bench", "admin"}, std::move(done));
  });
  if (!started.ok()) {
    std::fprintf(stderr, "StartRollout: %s\n", started.status().ToString().c_str());
    return 1;
  }
  std::printf("StartRollout: %.2f s, stage 1 (%d%%) enabled %d host(s)\n", SecondsSince(start),
              stages[0], started->enabled_count());
  // StageHosts' count: ceil(N * percent / 100).
  auto want = [hosts](int percent) {
    return static_cast<int>((static_cast<int64_t>(hosts) * percent + 99) / 100);
  };
  int failures = started->enabled_count() == want(stages[0]) ? 0 : 1;
  for (size_t stage = 1; stage <= stages.size(); ++stage) {
    now += absl::Seconds(60);
    start = Clock::now();
    if (absl::Status s = control.RunPass(); !s.ok()) {
      std::fprintf(stderr, "check: %s\n", s.ToString().c_str());
      return 1;
    }
    const double took = SecondsSince(start);
    absl::StatusOr<v1::Rollout> r = control.GetRollout();
    if (!r.ok()) {
      std::fprintf(stderr, "GetRollout: %s\n", r.status().ToString().c_str());
      return 1;
    }
    const int percent = stage < stages.size() ? stages[stage] : 100;
    std::printf("check %zu: %.2f s, %s at stage %d, %d host(s) enabled (%d%%)\n", stage, took,
                std::string(RolloutStateName(r->state())).c_str(), r->stage() + 1,
                r->enabled_count(), percent);
    if (r->enabled_count() != want(percent)) ++failures;
    if (r->state() == v1::Rollout::STATE_HALTED) {
      std::fprintf(stderr, "halted: %s\n", r->halt_reason().c_str());
      return 1;
    }
  }
  start = Clock::now();
  if (absl::Status s = control.RunPass(); !s.ok()) {
    std::fprintf(stderr, "check: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("a check with nothing to do: %.2f s\n", SecondsSince(start));
  if (failures > 0) std::fprintf(stderr, "%d stage(s) enabled the wrong number of hosts\n", failures);
  return failures > 0 ? 1 : 0;
}

}  // namespace
}  // namespace cosched

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  return cosched::Run(argc, argv);
}
