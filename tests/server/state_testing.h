// The desired state (tests/server/test_state.h) on a real SQLite store in a
// temp dir, for tests that drive csd's domain logic without gRPC, and Wait
// for its callback API.
#ifndef COSCHED_TESTS_SERVER_STATE_TESTING_H_
#define COSCHED_TESTS_SERVER_STATE_TESTING_H_

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "store/sqlite_store.h"
#include "tests/server/test_state.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server::testing {

// The answer of a call of the desired state, waited for.
template <typename T>
absl::StatusOr<T> Wait(std::function<void(Done<T>)> call) {
  std::promise<absl::StatusOr<T>> promise;
  call([&](absl::StatusOr<T> r) { promise.set_value(std::move(r)); });
  return promise.get_future().get();
}

// Registers `host` with one core of two CPUs on `state`, as `actor`.
inline absl::Status RegisterHost(TestState& state, const std::string& host,
                                 const Actor& actor) {
  v1::RegisterRequest request;
  request.set_host_id(host);
  auto* core = request.mutable_topology()->add_cores();
  core->add_cpus(0);
  core->add_cpus(1);
  return Wait<v1::RegisterResponse>([&](auto done) {
           state.hosts.RegisterHost(request, actor, std::move(done));
         }).status();
}

// The VM ids of `host`'s snapshot (its first watch message from revision
// 0): what its agent is sent assignments for, and enforces.
inline std::vector<std::string> AssignedVmIds(TestState& state, const std::string& host) {
  auto snapshot = state.watches.FirstWatchMessage(host, 0);
  EXPECT_TRUE(snapshot.ok()) << snapshot.status();
  std::vector<std::string> ids;
  if (snapshot.ok()) {
    for (const auto& a : snapshot->assignments()) ids.push_back(a.vm_id());
  }
  return ids;
}

// A TestState over a fresh SQLite store in `data_dir`; a failure to open
// it fails the test (state() is then null).
class SqliteTestState {
 public:
  // `stats_clock`: the clock of the stats kept (nullptr: the system's).
  explicit SqliteTestState(const std::string& data_dir,
                           StatsAggregator::Clock stats_clock = nullptr) {
    store::SqliteStoreOptions options;
    options.data_dir = data_dir;
    auto store = store::SqliteStore::Open(options);
    if (!store.ok()) {
      ADD_FAILURE() << "cannot open the SQLite store: " << store.status();
      return;
    }
    store_ = std::move(*store);
    state_ = std::make_unique<TestState>(*store_, std::move(stats_clock));
    // Tests send Reports back to back; the rate limit has tests of its own.
    state_->reports.report_rate().set_options({.per_second = 0});
  }

  TestState* state() { return state_.get(); }
  store::Store* store() { return store_.get(); }

  // Registers `host` with one core of two CPUs, as `actor`.
  absl::Status RegisterHost(const std::string& host, const Actor& actor) {
    return testing::RegisterHost(*state_, host, actor);
  }

 private:
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<TestState> state_;
};

}  // namespace cosched::server::testing

#endif  // COSCHED_TESTS_SERVER_STATE_TESTING_H_
