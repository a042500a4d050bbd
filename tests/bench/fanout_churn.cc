// The churn phase (fanout_churn.h).
#include "tests/bench/fanout_churn.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <random>
#include <thread>
#include <utility>

#include "tests/bench/fanout_measure.h"

namespace cosched::bench {
namespace {

struct ChurnCounters {
  std::atomic<int64_t> churned{0};
  std::atomic<int64_t> tagged{0}, tag_failed{0};
  // Untagged; not tagged (a VM of the fleet's start that the tagging phase
  // did not tag: NOT_FOUND); failed.
  std::atomic<int64_t> untagged{0}, untag_not_tagged{0}, untag_failed{0};

  bool Answered() const {
    return tagged + tag_failed == churned && untagged + untag_not_tagged + untag_failed == churned;
  }
};

struct UntagCall {
  grpc::ClientContext context;
  v1::UntagVMRequest request;
  v1::UntagVMResponse response;
};

// Which VM a churn deletes: while fewer than `live` churned VMs run, a
// VM of the fleet's start on a random host; after that the oldest churned
// VM, so that the churned (tagged) VMs level off at `live`, as in a fleet
// whose short-lived VMs last live / rate minutes.
class ChurnSlots {
 public:
  ChurnSlots(const Fleet::Options& options, int64_t live) : options_(options), live_(live) {}

  std::pair<int, int> Next(std::mt19937_64& random, int64_t sequence) {
    std::pair<int, int> slot;
    while (true) {
      if (static_cast<int64_t>(fifo_.size()) < live_) {
        slot = {static_cast<int>(random() % static_cast<uint64_t>(options_.agents)),
                static_cast<int>(random() % static_cast<uint64_t>(options_.vms_per_host))};
        break;
      }
      auto [oldest, oldest_sequence] = fifo_.front();
      fifo_.pop_front();
      // Not replaced since by a random pick.
      if (current_[oldest] == oldest_sequence) {
        slot = oldest;
        break;
      }
    }
    current_[slot] = sequence;
    fifo_.emplace_back(slot, sequence);
    return slot;
  }

 private:
  const Fleet::Options& options_;
  const int64_t live_;
  std::deque<std::pair<std::pair<int, int>, int64_t>> fifo_;
  std::map<std::pair<int, int>, int64_t> current_;
};

void ChurnOne(v1::ControlPlane::Stub* stub, Fleet& fleet, ChurnSlots& slots,
              std::mt19937_64& random, int64_t sequence, ChurnCounters& counters) {
  const auto [agent, slot] = slots.Next(random, sequence);
  auto [deleted, created] = fleet.ReplaceVm(agent, slot, sequence);
  ++counters.churned;
  auto* untag = new UntagCall();
  untag->request.set_vm_id(deleted);
  untag->context.set_deadline(DeadlineIn(seconds(30)));
  stub->async()->UntagVM(&untag->context, &untag->request, &untag->response,
                         [untag, &counters](grpc::Status status) {
                           if (status.ok()) {
                             ++counters.untagged;
                           } else if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
                             ++counters.untag_not_tagged;
                           } else {
                             ++counters.untag_failed;
                           }
                           delete untag;
                         });
  auto* tag = new TagCall();
  tag->request.set_vm_id(created);
  tag->request.add_interference_classes("churn");
  tag->context.set_deadline(DeadlineIn(seconds(30)));
  stub->async()->TagVM(&tag->context, &tag->request, &tag->response,
                       [tag, &counters](grpc::Status status) {
                         ++(status.ok() ? counters.tagged : counters.tag_failed);
                         delete tag;
                       });
}

}  // namespace

bool RunChurn(v1::ControlPlane::Stub* stub, Fleet& fleet, double per_minute,
              double lifetime_minutes, double seconds_, const std::vector<pid_t>& csd_pids,
              const std::vector<std::string>& metrics, std::optional<ProcessUsage> before_agents) {
  using Seconds = std::chrono::duration<double>;
  ChurnCounters counters;
  std::mt19937_64 random(7);
  const double rate = per_minute / 60.0;
  const int64_t total = static_cast<int64_t>(rate * seconds_);
  const auto live = static_cast<int64_t>(per_minute * lifetime_minutes);
  ChurnSlots slots(fleet.options(), std::max<int64_t>(live, 1));
  std::printf("churn: %.0f VMs a minute deleted and created across the fleet (each new one "
              "tagged, each deleted one untagged; from minute %.1f on the oldest of the %lld "
              "created, before that VMs of the start) for %.0f s\n",
              per_minute, lifetime_minutes, static_cast<long long>(live), seconds_);
  struct Minute {
    double rss_kib = 0, heap_bytes = 0, bucket_bytes = 0;
  };
  std::vector<Minute> minutes;
  const int agents = fleet.options().agents;
  Mark last = TakeMark(csd_pids, fleet, metrics);
  const Mark first = last;
  auto print_minute = [&] {
    Mark now = TakeMark(csd_pids, fleet, metrics);
    const double s = Seconds(now.at - last.at).count();
    Minute m;
    if (now.csd) m.rss_kib = static_cast<double>(now.csd->rss_kib);
    m.heap_bytes = now.heap_bytes.value_or(0);
    m.bucket_bytes = now.bucket_bytes;
    minutes.push_back(m);
    const double per_agent =
        before_agents ? (m.rss_kib - static_cast<double>(before_agents->rss_kib)) / agents : 0;
    std::printf("  minute %zu: csd RSS %.0f MiB (%.1f KiB per agent), heap %.0f MiB (stats "
                "buckets %.0f MiB, the rest %.0f MiB), CPU %.1f%%, Reports %.0f/s; VMs churned "
                "%lld, stats series %.0f held, %.0f folded\n",
                minutes.size(), m.rss_kib / 1024, per_agent, m.heap_bytes / (1 << 20),
                m.bucket_bytes / (1 << 20), (m.heap_bytes - m.bucket_bytes) / (1 << 20),
                CpuPercent(last.csd, now.csd, s),
                (now.agents.reports_ok - last.agents.reports_ok) / s,
                static_cast<long long>(counters.churned.load()), now.series, now.folded);
    last = std::move(now);
  };
  const auto begin = Clock::now();
  auto next_minute = begin + seconds(60);
  for (int64_t i = 0; i <= total; ++i) {
    const auto at = begin + std::chrono::duration_cast<Clock::duration>(
                                Seconds(i < total ? i / rate : seconds_));
    while (next_minute <= at) {
      std::this_thread::sleep_until(next_minute);
      print_minute();
      next_minute += seconds(60);
    }
    if (i == total) break;
    std::this_thread::sleep_until(at);
    ChurnOne(stub, fleet, slots, random, i, counters);
  }
  const auto deadline = Clock::now() + seconds(35);
  while (!counters.Answered() && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  // CPU by thread (the store writer's is what churn's writes cost) and the
  // store's writes over the whole phase.
  PrintPhase("churn", first, TakeMark(csd_pids, fleet, metrics));
  std::printf("churn: %lld VMs replaced; TagVM %lld ok, %lld failed; UntagVM %lld ok, %lld "
              "not tagged, %lld failed\n",
              static_cast<long long>(counters.churned.load()),
              static_cast<long long>(counters.tagged.load()),
              static_cast<long long>(counters.tag_failed.load()),
              static_cast<long long>(counters.untagged.load()),
              static_cast<long long>(counters.untag_not_tagged.load()),
              static_cast<long long>(counters.untag_failed.load()));
  if (minutes.size() >= 4) {
    // Flat or not: the change per minute over the second half, after the
    // first minutes' growth (series of new VMs, the first folds).
    const size_t half = minutes.size() / 2;
    const double span = static_cast<double>(minutes.size() - 1 - half);
    const Minute& from = minutes[half - 1];
    const Minute& to = minutes.back();
    // The live VMs' series grow a minute bucket a minute for their first
    // hour (and an hour bucket an hour for a day) whether VMs churn or not:
    // the heap besides those buckets is what churn could leak.
    std::printf("csd memory over minutes %zu-%zu: RSS %+.0f KiB per minute (%+.2f%% of it), "
                "heap %+.0f KiB per minute, of it stats buckets %+.0f and the rest %+.0f\n",
                half, minutes.size(), (to.rss_kib - from.rss_kib) / span,
                from.rss_kib > 0 ? 100 * (to.rss_kib - from.rss_kib) / span / from.rss_kib : 0.0,
                (to.heap_bytes - from.heap_bytes) / 1024 / span,
                (to.bucket_bytes - from.bucket_bytes) / 1024 / span,
                ((to.heap_bytes - to.bucket_bytes) - (from.heap_bytes - from.bucket_bytes)) / 1024 /
                    span);
  }
  return counters.Answered() && counters.tag_failed == 0 && counters.untag_failed == 0;
}

}  // namespace cosched::bench
