#include "store/etcd_maintenance.h"

#include <glog/logging.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "cosched/store/etcd_records.pb.h"
#include "cosched/v1/control_plane.pb.h"
#include "store/etcd_transaction.h"

namespace cosched::store {
namespace {

// Audit records read per page while looking for the oldest to keep.
constexpr int64_t kAuditPage = 500;

void FenceOn(etcdserverpb::TxnRequest& request, const std::string& leader_key, int64_t fence) {
  etcdserverpb::Compare* compare = request.add_compare();
  compare->set_key(leader_key);
  compare->set_target(etcdserverpb::Compare::CREATE);
  compare->set_result(etcdserverpb::Compare::EQUAL);
  compare->set_create_revision(fence);
}

absl::Status NotLeading(const std::string& prefix) {
  return absl::FailedPreconditionError(absl::StrCat(
      "this csd replica lost the leadership of ", prefix, " on the way: its job stopped"));
}

}  // namespace

EtcdMaintenance::EtcdMaintenance(etcd::Client& client, std::string prefix,
                                 EtcdReplicas& replicas, EtcdMaintenanceOptions options,
                                 int max_txn_ops)
    : client_(client),
      prefix_(std::move(prefix)),
      replicas_(replicas),
      options_(options),
      max_txn_ops_(std::max(2, max_txn_ops)) {
  if (options_.interval > absl::ZeroDuration()) {
    thread_ = NamedThread("cs-maintenance", [this] { Loop(); });
  }
}

EtcdMaintenance::~EtcdMaintenance() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EtcdMaintenance::Loop() {
  // Full runs every interval; between them, the audit window's trim every
  // audit_window_interval (when there is a window).
  const bool trims = options_.audit_window_records > 0 &&
                     options_.audit_window_interval > absl::ZeroDuration() &&
                     options_.audit_window_interval < options_.interval;
  const absl::Duration tick = trims ? options_.audit_window_interval : options_.interval;
  absl::Time next_full = absl::Now() + options_.interval;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    stop_cv_.wait_for(lock, absl::ToChronoMilliseconds(tick), [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    if (absl::Now() < next_full) {
      absl::StatusOr<int64_t> trimmed = TrimAuditWindowOnce();
      LOG_IF(WARNING, !trimmed.ok())
          << "etcd store maintenance under " << prefix_ << ": audit window: " << trimmed.status();
      VLOG_IF(1, trimmed.ok() && *trimmed > 0)
          << "etcd store under " << prefix_ << ": " << *trimmed
          << " audit records beyond the window deleted";
      lock.lock();
      continue;
    }
    next_full = absl::Now() + options_.interval;
    absl::StatusOr<MaintenanceRun> run = RunOnce();
    if (!run.ok()) {
      LOG(WARNING) << "etcd store maintenance under " << prefix_ << ": " << run.status();
    } else if (run->compacted_to != 0 || run->horizon_raised_to != 0 ||
               run->changes_swept != 0 || run->audit_pruned != 0 || run->audit_trimmed != 0) {
      LOG(INFO) << "etcd store maintenance under " << prefix_ << ": "
                << (options_.compact ? "compacted to revision " : "change-log horizon raised to ")
                << (options_.compact ? run->compacted_to : run->horizon_raised_to) << ", "
                << run->changes_swept
                << " change records swept, " << run->audit_pruned << " audit records pruned, "
                << run->audit_trimmed << " beyond the audit window";
    }
    lock.lock();
  }
}

absl::StatusOr<MaintenanceRun> EtcdMaintenance::RunOnce() {
  std::lock_guard<std::mutex> lock(run_mu_);
  MaintenanceRun run;
  const int64_t fence = replicas_.fence();
  if (fence == 0) {
    previous_fence_ = 0;
    return run;
  }
  run.led = true;
  int64_t sweep_below = 0;
  if (options_.compact) {
    ASSIGN_OR_RETURN(run.compacted_to, Compact(fence));
    sweep_below = run.compacted_to;
  } else {
    ASSIGN_OR_RETURN(run.horizon_raised_to, RaiseHorizon(fence));
    sweep_below = run.horizon_raised_to;
  }
  if (sweep_below > swept_to_) {
    ASSIGN_OR_RETURN(run.changes_swept, SweepChanges(fence, sweep_below));
    swept_to_ = sweep_below;
  }
  if (options_.audit_retention != absl::InfiniteDuration()) {
    ASSIGN_OR_RETURN(run.audit_pruned, PruneAudit(fence));
  }
  ASSIGN_OR_RETURN(run.audit_trimmed, TrimAuditWindow(fence));
  RETURN_IF_ERROR(CheckHistory(run));
  return run;
}

absl::Status EtcdMaintenance::CheckHistory(MaintenanceRun& run) {
  // Whether etcd still serves `revision`: a read there, counting only.
  const std::string key = absl::StrCat(prefix_, "/meta");
  auto served = [&](int64_t revision) -> absl::StatusOr<bool> {
    etcdserverpb::RangeRequest request;
    request.set_key(key);
    request.set_revision(revision);
    request.set_count_only(true);
    absl::StatusOr<etcdserverpb::RangeResponse> response = client_.RangeOnce(request);
    if (absl::IsOutOfRange(response.status())) return false;  // compacted away
    if (!response.ok()) return response.status();
    return true;
  };
  etcdserverpb::RangeRequest now_request;
  now_request.set_key(key);
  now_request.set_count_only(true);
  ASSIGN_OR_RETURN(etcdserverpb::RangeResponse now, client_.RangeOnce(now_request));
  const int64_t current = now.header().revision();
  // Below the last oldest nothing is served; the current revision is.
  int64_t low = std::max<int64_t>(1, oldest_revision_.load());
  int64_t oldest = low;
  ASSIGN_OR_RETURN(bool low_served, served(low));
  if (!low_served) {
    int64_t high = current;
    while (high - low > 1) {
      const int64_t mid = low + (high - low) / 2;
      ASSIGN_OR_RETURN(bool mid_served, served(mid));
      (mid_served ? high : low) = mid;
    }
    oldest = high;
  }
  const absl::Time now_time = absl::Now();
  if (oldest != oldest_revision_.load() || oldest_since_ == absl::Time()) {
    oldest_since_ = now_time;
  }
  oldest_revision_.store(oldest);
  run.oldest_revision = oldest;
  run.uncompacted = current - oldest > options_.uncompacted_revisions &&
                    now_time - oldest_since_ >= options_.uncompacted_warning;
  LOG_IF(WARNING, run.uncompacted)
      << "etcd's history has not been compacted for "
      << absl::FormatDuration(now_time - oldest_since_) << " and holds "
      << current - oldest << " revisions (" << oldest << " to " << current
      << "): its database grows until etcd's quota refuses every write, csd's included. "
      << (options_.compact
              ? "This replica compacts it (store.etcd.compact_history) but its compactions "
                "have not taken: see the errors above"
              : "Nothing compacts this etcd cluster: run etcd with --auto-compaction-mode and "
                "--auto-compaction-retention, or set store.etcd.compact_history: true if the "
                "cluster is csd's alone")
      << " (docs/operating.md, \"etcd's history\")";
  return absl::OkStatus();
}

absl::StatusOr<int64_t> EtcdMaintenance::TrimAuditWindowOnce() {
  std::lock_guard<std::mutex> lock(run_mu_);
  const int64_t fence = replicas_.fence();
  if (fence == 0) return 0;
  return TrimAuditWindow(fence);
}

absl::StatusOr<int64_t> EtcdMaintenance::TrimAuditWindow(int64_t fence) {
  if (options_.audit_window_records <= 0) return 0;
  const std::string base = absl::StrCat(prefix_, "/audit/");
  const std::string base_end = etcd::PrefixEnd(base);
  // The newest record is the first key.
  etcdserverpb::RangeRequest newest;
  newest.set_key(base);
  newest.set_range_end(base_end);
  newest.set_limit(1);
  ASSIGN_OR_RETURN(etcdserverpb::RangeResponse first, client_.RangeOnce(newest));
  if (first.kvs().empty()) return 0;
  v1::AuditRecord record;
  if (!record.ParseFromString(first.kvs(0).value())) {
    return absl::DataLossError(absl::StrCat("etcd store: value of key ", first.kvs(0).key(),
                                            " does not parse as an audit record"));
  }
  // Sequences are dense (one per record, from meta), so the records beyond
  // the window are those at or below newest - window: each delete takes
  // prune_rows of them, oldest last in key order, until none is left.
  int64_t deleted = 0;
  for (int64_t top = record.sequence() - options_.audit_window_records; top > 0;
       top -= options_.prune_rows) {
    etcdserverpb::TxnRequest request;
    FenceOn(request, replicas_.leader_key(), fence);
    etcdserverpb::DeleteRangeRequest* remove =
        request.add_success()->mutable_request_delete_range();
    remove->set_key(absl::StrCat(base, EtcdAuditId(top)));
    const int64_t bottom = top - options_.prune_rows;
    remove->set_range_end(bottom > 0 ? absl::StrCat(base, EtcdAuditId(bottom)) : base_end);
    ASSIGN_OR_RETURN(etcdserverpb::TxnResponse response, client_.Txn(request));
    if (!response.succeeded()) {
      replicas_.LostFence(fence);  // the fence was its only compare
      return NotLeading(prefix_);
    }
    const int64_t n = response.responses_size() == 1
                          ? response.responses(0).response_delete_range().deleted()
                          : 0;
    deleted += n;
    // Nothing in this span: those below it were deleted before.
    if (n == 0) break;
  }
  return deleted;
}

absl::StatusOr<bool> EtcdMaintenance::FenceHolds(int64_t fence) {
  ASSIGN_OR_RETURN(etcd::RangeResult leader, client_.Range(replicas_.leader_key(), ""));
  const bool holds = leader.kvs.size() == 1 && leader.kvs[0].create_revision() == fence;
  if (!holds) replicas_.LostFence(fence);
  return holds;
}

absl::StatusOr<int64_t> EtcdMaintenance::Compact(int64_t fence) {
  const std::string key = absl::StrCat(prefix_, "/compact");
  ASSIGN_OR_RETURN(etcd::RangeResult current, client_.Range(key, ""));
  const int64_t target = NextTarget(fence, current.revision);
  EtcdCompaction last;
  int64_t version = 0;
  if (current.kvs.size() == 1) {
    version = current.kvs[0].version();
    if (!last.ParseFromString(current.kvs[0].value())) {
      return absl::DataLossError(absl::StrCat("etcd store: value of key ", key,
                                              " does not parse as a compaction record"));
    }
  }
  if (target <= last.revision()) return 0;
  EtcdCompaction next;
  next.set_revision(target);
  next.set_time_unix_ns(absl::ToUnixNanos(absl::Now()));
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* unchanged = request.add_compare();
  unchanged->set_key(key);
  unchanged->set_target(etcdserverpb::Compare::VERSION);
  unchanged->set_result(etcdserverpb::Compare::EQUAL);
  unchanged->set_version(version);
  FenceOn(request, replicas_.leader_key(), fence);
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(next.SerializeAsString());
  ASSIGN_OR_RETURN(etcdserverpb::TxnResponse response, client_.Txn(request));
  if (!response.succeeded()) {
    ASSIGN_OR_RETURN(bool holds, FenceHolds(fence));
    if (!holds) return NotLeading(prefix_);
    return 0;  // another compaction got there first
  }
  absl::Status compacted = client_.Compact(target);
  // Compacted already (by etcd's own auto-compaction, say): nothing lost.
  if (!compacted.ok() && !absl::IsOutOfRange(compacted)) return compacted;
  return target;
}

int64_t EtcdMaintenance::NextTarget(int64_t fence, int64_t now) {
  // A new leader (or one that led before under another fence) waits one
  // whole interval: it keeps at least an interval of history, as the
  // previous leader did.
  const int64_t target = previous_fence_ == fence ? previous_revision_ : 0;
  previous_fence_ = fence;
  previous_revision_ = now;
  return target;
}

absl::StatusOr<int64_t> EtcdMaintenance::RaiseHorizon(int64_t fence) {
  const std::string key = absl::StrCat(prefix_, "/meta");
  ASSIGN_OR_RETURN(etcd::RangeResult current, client_.Range(key, ""));
  const int64_t target = NextTarget(fence, current.revision);
  if (current.kvs.size() != 1) return 0;  // nothing written yet
  EtcdMeta meta;
  if (!meta.ParseFromString(current.kvs[0].value())) {
    return absl::DataLossError(
        absl::StrCat("etcd store: value of key ", key, " does not parse as the store's meta"));
  }
  if (target <= meta.changes_horizon()) return 0;
  meta.set_changes_horizon(target);
  etcdserverpb::TxnRequest request;
  // Meta as read: a writer that committed meanwhile wrote its own meta
  // (with the horizon as it was), and this run waits for the next.
  etcdserverpb::Compare* unchanged = request.add_compare();
  unchanged->set_key(key);
  unchanged->set_target(etcdserverpb::Compare::MOD);
  unchanged->set_result(etcdserverpb::Compare::EQUAL);
  unchanged->set_mod_revision(current.kvs[0].mod_revision());
  FenceOn(request, replicas_.leader_key(), fence);
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(meta.SerializeAsString());
  ASSIGN_OR_RETURN(etcdserverpb::TxnResponse response, client_.Txn(request));
  if (!response.succeeded()) {
    ASSIGN_OR_RETURN(bool holds, FenceHolds(fence));
    if (!holds) return NotLeading(prefix_);
    return 0;
  }
  return target;
}

absl::StatusOr<int64_t> EtcdMaintenance::SweepChanges(int64_t fence, int64_t below) {
  const std::string base = absl::StrCat(prefix_, "/changes/");
  const std::string end_of_base = etcd::PrefixEnd(base);
  // One compare for the fence, and one per key on its mod_revision: a page
  // is one Txn. etcd reads the whole range to apply the revision filter, but
  // answers a page at a time, so no answer grows with the fleet.
  const int page_size = max_txn_ops_ - 1;
  int64_t swept = 0;
  int64_t at_revision = 0;  // every page at the first page's revision
  std::string from = base;
  while (true) {
    etcdserverpb::RangeRequest page;
    page.set_key(from);
    page.set_range_end(end_of_base);
    page.set_keys_only(true);
    page.set_max_mod_revision(below);
    page.set_limit(page_size);
    page.set_revision(at_revision);
    ASSIGN_OR_RETURN(etcdserverpb::RangeResponse stale, client_.RangeOnce(page));
    if (at_revision == 0) at_revision = stale.header().revision();
    if (stale.kvs_size() == 0) break;
    etcdserverpb::TxnRequest request;
    FenceOn(request, replicas_.leader_key(), fence);
    for (const mvccpb::KeyValue& kv : stale.kvs()) {
      etcdserverpb::Compare* unchanged = request.add_compare();
      unchanged->set_key(kv.key());
      unchanged->set_target(etcdserverpb::Compare::MOD);
      unchanged->set_result(etcdserverpb::Compare::EQUAL);
      unchanged->set_mod_revision(kv.mod_revision());
      request.add_success()->mutable_request_delete_range()->set_key(kv.key());
    }
    ASSIGN_OR_RETURN(etcdserverpb::TxnResponse response, client_.Txn(request));
    if (response.succeeded()) {
      swept += stale.kvs_size();
    } else {
      ASSIGN_OR_RETURN(bool holds, FenceHolds(fence));
      if (!holds) return NotLeading(prefix_);
      // A change was recorded on one of these keys meanwhile: the page
      // waits for the next sweep, which will not list that key.
    }
    if (!stale.more()) break;
    from = stale.kvs(stale.kvs_size() - 1).key() + std::string(1, '\0');
  }
  return swept;
}

absl::StatusOr<int64_t> EtcdMaintenance::PruneAudit(int64_t fence) {
  const std::string base = absl::StrCat(prefix_, "/audit/");
  const std::string base_end = etcd::PrefixEnd(base);
  const int64_t cutoff = absl::ToUnixNanos(absl::Now() - options_.audit_retention);
  // Keys are newest first: read from the end, oldest first, until a record
  // to keep. Every key from the last one to go onwards is older.
  std::string first_to_go;
  std::string end = base_end;
  int64_t count = 0;
  bool done = false;
  int64_t revision = 0;
  while (!done && count < options_.prune_rows) {
    etcdserverpb::RangeRequest page;
    page.set_key(base);
    page.set_range_end(end);
    page.set_revision(revision);
    page.set_sort_order(etcdserverpb::RangeRequest::DESCEND);
    page.set_sort_target(etcdserverpb::RangeRequest::KEY);
    page.set_limit(std::min(kAuditPage, options_.prune_rows - count));
    ASSIGN_OR_RETURN(etcdserverpb::RangeResponse response, client_.RangeOnce(page));
    revision = response.header().revision();
    for (const mvccpb::KeyValue& kv : response.kvs()) {
      v1::AuditRecord record;
      if (!record.ParseFromString(kv.value())) {
        return absl::DataLossError(absl::StrCat("etcd store: value of key ", kv.key(),
                                                " does not parse as an audit record"));
      }
      if (record.time_unix_ns() >= cutoff) {
        done = true;
        break;
      }
      first_to_go = kv.key();
      ++count;
    }
    if (!response.more() || response.kvs().empty()) break;
    end = response.kvs(response.kvs_size() - 1).key();
  }
  if (count == 0) return 0;
  etcdserverpb::TxnRequest request;
  FenceOn(request, replicas_.leader_key(), fence);
  etcdserverpb::DeleteRangeRequest* remove = request.add_success()->mutable_request_delete_range();
  remove->set_key(first_to_go);
  remove->set_range_end(base_end);
  ASSIGN_OR_RETURN(etcdserverpb::TxnResponse response, client_.Txn(request));
  if (!response.succeeded()) {
    replicas_.LostFence(fence);  // the fence was its only compare
    return NotLeading(prefix_);
  }
  return response.responses_size() == 1 ? response.responses(0).response_delete_range().deleted()
                                        : count;
}

}  // namespace cosched::store
