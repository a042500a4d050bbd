#include "server/replicas/stats_forwarder.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log_every.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "common/transport.h"
#include "common/validation.h"
#include "glog/logging.h"
#include "google/protobuf/arena.h"
#include "grpcpp/client_context.h"

namespace cosched::server {
namespace {

// Bytes of one request at most, well under gRPC's 4 MiB default.
constexpr size_t kMaxRequestBytes = 2 * 1024 * 1024;

absl::Status Within(const std::string& field, absl::Status status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(field, ".", status.message()));
}

}  // namespace

absl::StatusOr<v1::ForwardStatsResponse> TakeForwardedStats(const v1::ForwardStatsRequest& request,
                                                            const ServedHost& served,
                                                            StatsAggregator& into) {
  RETURN_IF_ERROR(ValidateId("replica", request.replica()));
  if (request.reports_size() > kMaxForwardedReports) {
    return absl::InvalidArgumentError(absl::StrCat("reports has ", request.reports_size(),
                                                   " entries; at most ", kMaxForwardedReports,
                                                   " are allowed"));
  }
  std::vector<absl::flat_hash_map<std::string, std::string>> tagged(request.reports_size());
  for (int i = 0; i < request.reports_size(); ++i) {
    const v1::ForwardedStats& report = request.reports(i);
    const std::string field = absl::StrCat("reports[", i, "]");
    RETURN_IF_ERROR(ValidateId(absl::StrCat(field, ".host_id"), report.host_id()));
    RETURN_IF_ERROR(Within(field, ValidateStatsWindows(report.stats(), report.dropped_windows())));
    for (const auto& [reported, id] : report.tagged_id()) {
      RETURN_IF_ERROR(ValidateId(absl::StrCat(field, ".tagged_id key"), reported));
      RETURN_IF_ERROR(ValidateId(absl::StrCat(field, ".tagged_id['", reported, "']"), id));
      tagged[i].emplace(reported, id);
    }
  }
  v1::ForwardStatsResponse response;
  int64_t ignored = 0;
  int64_t unserved = 0;
  for (int i = 0; i < request.reports_size(); ++i) {
    const v1::ForwardedStats& report = request.reports(i);
    if (!served(report.host_id(), request.replica())) {
      ++unserved;
      response.add_unserved(i);
      continue;
    }
    absl::flat_hash_set<absl::string_view> vms;
    for (const v1::StatsWindow& w : report.stats()) {
      for (const v1::VMStats& v : w.vms()) vms.insert(v.vm_id());
    }
    ignored += into.Add(report.host_id(), report.stats(), report.dropped_windows(), tagged[i],
                        static_cast<int>(vms.size()));
  }
  response.set_ignored_windows(ignored);
  if (unserved > 0) {
    COSCHED_LOG_EVERY_T(INFO, 60) << "replica " << request.replica() << " forwarded stats of " << unserved
                          << " Report(s) of hosts whose latest Report it did not take, as far as "
                          << "this replica knows; not taken (logged once a minute)";
  }
  return response;
}

StatsForwarder::StatsForwarder(Leader leader, PeerDirectory& peers, StatsForwarderOptions options)
    : leader_(std::move(leader)), peers_(peers), options_(std::move(options)) {
  thread_ = NamedThread("cs-forward", [this] { Run(); });
}

StatsForwarder::~StatsForwarder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StatsForwarder::Enqueue(
    std::shared_ptr<const v1::ReportRequest> report,
    std::shared_ptr<const absl::flat_hash_map<std::string, std::string>> tagged_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() < options_.max_queued) {
      queue_.push_back(Item{std::move(report), std::move(tagged_id)});
      return;
    }
  }
  Drop(1, absl::ResourceExhaustedError(
              absl::StrCat("the queue to the leader is full (", options_.max_queued, " Reports)")));
}

void StatsForwarder::Drop(size_t n, const absl::Status& why) {
  dropped_ += static_cast<int64_t>(n);
  LOG_EVERY_N(WARNING, 100) << "stats forwarder: dropped " << n
                            << " Report(s) of stats for the leader's policy engine: " << why
                            << " (logged every 100th time; " << dropped_.load() << " so far)";
}

void StatsForwarder::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, absl::ToChronoMilliseconds(options_.flush_interval),
                   [this] { return stopping_; });
    if (stopping_ || queue_.empty()) continue;
    std::vector<Item> items(std::make_move_iterator(queue_.begin()),
                            std::make_move_iterator(queue_.end()));
    queue_.clear();
    lock.unlock();
    Send(std::move(items));
    lock.lock();
  }
}

void StatsForwarder::Send(std::vector<Item> items) {
  const absl::Time now = absl::Now();
  for (Item& item : items) {
    if (item.first_sent == absl::InfinitePast()) item.first_sent = now;
  }
  std::vector<Item> again;
  SendOnce(std::move(items), now, again);
  if (again.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  queue_.insert(queue_.begin(), std::make_move_iterator(again.begin()),
                std::make_move_iterator(again.end()));
}

void StatsForwarder::SendOnce(std::vector<Item> items, absl::Time now, std::vector<Item>& again) {
  const std::string leader = leader_();
  // The leader's own agents' windows are in its own aggregator.
  if (leader == peers_.options().self) return;
  if (leader.empty()) {
    return Drop(items.size(), absl::UnavailableError("no replica leads now"));
  }
  absl::StatusOr<std::string> address = peers_.LeaderAddress(leader);
  if (!address.ok()) return Drop(items.size(), address.status());
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = peers_.ChannelTo(*address);
  if (!channel.ok()) return Drop(items.size(), channel.status());
  std::unique_ptr<v1::Replica::Stub> stub = v1::Replica::NewStub(*channel);
  size_t next = 0;
  while (next < items.size()) {
    // Each Report's windows are copied once, into the request, which lives
    // in an arena: freed at once after the call, not field by field.
    google::protobuf::Arena arena;
    auto& request = *google::protobuf::Arena::CreateMessage<v1::ForwardStatsRequest>(&arena);
    request.set_replica(peers_.options().self);
    size_t bytes = 0;
    const size_t first = next;
    for (; next < items.size() && request.reports_size() < kMaxForwardedReports; ++next) {
      const v1::ReportRequest& report = *items[next].report;
      v1::ForwardedStats& forwarded = *request.add_reports();
      forwarded.set_host_id(report.host_id());
      *forwarded.mutable_stats() = report.stats();
      forwarded.set_dropped_windows(report.dropped_windows());
      if (items[next].tagged_id) {
        for (const auto& [reported, id] : *items[next].tagged_id) {
          (*forwarded.mutable_tagged_id())[reported] = id;
        }
      }
      const size_t size = forwarded.ByteSizeLong();
      if (request.reports_size() > 1 && bytes + size > kMaxRequestBytes) {
        request.mutable_reports()->RemoveLast();
        break;
      }
      bytes += size;
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         absl::ToChronoMilliseconds(options_.timeout));
    v1::ForwardStatsResponse response;
    const grpc::Status status = stub->ForwardStats(&context, request, &response);
    if (status.ok()) {
      std::set<size_t> unserved;
      for (int32_t i : response.unserved()) {
        if (i >= 0 && static_cast<size_t>(i) < next - first) unserved.insert(first + i);
      }
      forwarded_ += static_cast<int64_t>(next - first - unserved.size());
      size_t expired = 0;
      for (size_t i : unserved) {
        // The leader learns which hosts this replica hears from its next
        // record of them: sent again until then, in order, for a while.
        if (now - items[i].first_sent < options_.unserved_retry_for) {
          again.push_back(std::move(items[i]));
        } else {
          ++expired;
        }
      }
      if (expired > 0) {
        Drop(expired, absl::FailedPreconditionError(absl::StrCat(
                          "the leader ", leader, " does not take them as this replica's hosts' "
                          "(another replica took their latest Report, as far as it knows)")));
      }
      continue;
    }
    absl::Status error = FromGrpcStatus(status);
    Drop(next - first, absl::Status(error.code(), absl::StrCat("the leader ", leader, " at ",
                                                                *address, ": ", error.message())));
  }
}

}  // namespace cosched::server
