// EtcdStore: the writer thread that runs write functions in batches on a
// snapshot of the cache and commits each batch as one etcd Txn (see
// etcd_store.h for why one compare on <prefix>/meta), resolving commits
// whose answer was lost, and snapshot reads. The records themselves are in
// etcd_transaction.cc, the cache in etcd_cache.cc.
#include "store/etcd_store.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "store/etcd_transaction.h"

namespace cosched::store {
namespace {

uint64_t NewCommitId() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  uint64_t id = 0;
  while (id == 0) id = random();
  return id;
}

absl::Status ValidatePrefix(const std::string& prefix) {
  if (prefix.empty()) {
    return absl::InvalidArgumentError(
        "store.etcd.prefix is empty: it must be an absolute key prefix such as /cosched");
  }
  if (prefix[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "store.etcd.prefix '", prefix, "' is relative: it must start with '/' (e.g. /cosched)"));
  }
  if (prefix.size() > 1 && prefix.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("store.etcd.prefix '", prefix, "' must not end with '/'"));
  }
  if (prefix == "/") {
    return absl::InvalidArgumentError(
        "store.etcd.prefix '/' would make csd own every key: name a prefix such as /cosched");
  }
  return absl::OkStatus();
}

// What a commit request writes: key -> value, nullopt for a delete.
std::map<std::string, std::optional<std::string>> WritesOf(
    const etcdserverpb::TxnRequest& request) {
  std::map<std::string, std::optional<std::string>> writes;
  for (const etcdserverpb::RequestOp& op : request.success()) {
    if (op.has_request_put()) {
      writes[op.request_put().key()] = op.request_put().value();
    } else if (op.has_request_delete_range()) {
      writes[op.request_delete_range().key()] = std::nullopt;
    }
  }
  return writes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(const EtcdStoreOptions& options) {
  RETURN_IF_ERROR(ValidatePrefix(options.prefix));
  if (options.max_batch < 1 || options.max_attempts < 1) {
    return absl::InvalidArgumentError("etcd store max_batch and max_attempts must be positive");
  }
  RETURN_IF_ERROR(ValidateEtcdReplicasOptions(options.replicas));
  ASSIGN_OR_RETURN(std::unique_ptr<etcd::Client> client, etcd::Client::Create(options.client));
  if (!options.ignore_restore_marker) {
    const std::string marker = absl::StrCat(options.prefix, "/", kRestoreMarkerKey);
    ASSIGN_OR_RETURN(etcd::RangeResult found, client->Range(marker, "", 0, 1, true));
    if (!found.kvs.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "etcd store under ", options.prefix, " is half-written: a restore or migration "
          "into it did not finish (", marker, " is present); run it again with --replace"));
    }
  }
  std::unique_ptr<EtcdStore> store(new EtcdStore(options, std::move(client)));
  store->cache_ = std::make_unique<EtcdCache>(options.prefix);
  ASSIGN_OR_RETURN(store->opened_revision_, store->cache_->Load(*store->client_));
  absl::StatusOr<EtcdSnapshot> opened;
  {
    std::unique_ptr<EtcdCache::Snapshot> view = store->cache_->Take();
    opened = TakeSnapshot(*store->client_, options.prefix, *store->cache_, *view);
  }
  RETURN_IF_ERROR(opened.status());
  const EtcdSnapshot& snapshot = *opened;
  store->committed_revision_.store(snapshot.meta_revision);
  store->replicas_ = std::make_unique<EtcdReplicas>(*store->client_, options.prefix,
                                                    options.replicas);
  // Under its own name, or not at all: a predecessor that died holds the
  // name until its lease expires; a live replica of the same name, for good.
  RETURN_IF_ERROR(store->replicas_->WaitRegistered(options.replicas.ttl + absl::Seconds(2)));
  store->maintenance_ = std::make_unique<EtcdMaintenance>(
      *store->client_, options.prefix, *store->replicas_, options.maintenance,
      options.client.max_txn_ops);
  store->writer_ = std::make_unique<GroupCommitWriter>(
      options.max_batch, absl::StrCat("etcd store under ", options.prefix, " is closing"),
      [s = store.get()](std::vector<PendingWrite>& batch) { return s->RunBatch(batch); });
  store->StartWatch();
  if (snapshot.meta_revision != 0 && snapshot.meta.layout_version() < kLayoutVersion) {
    RETURN_IF_ERROR(store->BuildVmIndex());
  }
  LOG(INFO) << "store: etcd at " << store->client_->endpoint() << " under "
            << options.prefix << ", revision " << snapshot.meta_revision;
  return store;
}

absl::Status EtcdStore::BuildVmIndex() {
  // In commits of a few VMs each (their keys must fit etcd's Txn limit),
  // each reading what it indexes: a VM another replica writes meanwhile is
  // indexed by that write. The layout changes with the last commit, so a
  // build cut short is done again whole at the next open.
  const int per_commit = std::max(1, (options_.client.max_txn_ops - 2) / 6);
  std::string after;
  int64_t indexed = 0;
  while (true) {
    std::string last;
    RETURN_IF_ERROR(WriteSync([&](Transaction& txn) -> absl::Status {
      ASSIGN_OR_RETURN(last, static_cast<EtcdTransaction&>(txn).IndexVms(after, per_commit));
      return absl::OkStatus();
    }));
    if (last.empty()) break;
    after = last;
    indexed += per_commit;
  }
  RETURN_IF_ERROR(WriteSync([](Transaction& txn) {
    static_cast<EtcdTransaction&>(txn).SetLayoutVersion(kLayoutVersion);
    return absl::OkStatus();
  }));
  LOG(INFO) << "store: etcd under " << options_.prefix << ": the index of VMs by host and "
            << "tenant is built (about " << indexed << " VMs), layout " << kLayoutVersion;
  return absl::OkStatus();
}

EtcdStore::EtcdStore(EtcdStoreOptions options, std::unique_ptr<etcd::Client> client)
    : options_(std::move(options)), client_(std::move(client)) {}

EtcdStore::~EtcdStore() {
  maintenance_.reset();
  SetExternalObserver(nullptr);  // a watch waiting for an own commit goes on
  if (writer_ != nullptr) writer_->Stop();
  watch_.reset();
  replicas_.reset();
}

void EtcdStore::SetLeadershipObserver(LeadershipObserver observer) {
  replicas_->SetObserver(std::move(observer));
}

void EtcdStore::Write(TxnFn fn, DoneFn done) { writer_->Submit(std::move(fn), std::move(done)); }

void EtcdStore::SetCommitObserver(CommitObserver observer) {
  writer_->SetCommitObserver(std::move(observer));
}

void EtcdStore::SetExternalObserver(ExternalObserver observer) {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    external_observer_ = std::move(observer);
    watching_ = external_observer_ != nullptr;
  }
  own_cv_.notify_all();
}

void EtcdStore::StartWatch() {
  EtcdPrefixWatch::Hooks hooks;
  hooks.is_own = [this](uint64_t id, int64_t revision) { return IsOwnCommit(id, revision); };
  hooks.deliver = [this](ExternalChange change) { DeliverExternal(std::move(change)); };
  hooks.resync = [this](int64_t revision) { return DeliverResync(revision); };
  hooks.reachability = [this](bool reachable, const std::string& why) {
    NoteReachability(reachable, why);
  };
  watch_ = std::make_unique<EtcdPrefixWatch>(*client_, options_.prefix, opened_revision_, *cache_,
                                             std::move(hooks), options_.watch);
}

absl::Status EtcdStore::CatchUp(int64_t revision) {
  if (cache_->WaitFor(revision, options_.client.timeout)) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "etcd store: this replica's copy of ", options_.prefix, " is at revision ",
      cache_->revision(), ", behind etcd's ", revision, " after ",
      absl::FormatDuration(options_.client.timeout),
      ": its watch of the prefix is not keeping up (is etcd at ", client_->endpoint(),
      " reachable?)"));
}

void EtcdStore::SetReachabilityObserver(ReachabilityObserver observer) {
  std::lock_guard<std::mutex> lock(watch_mu_);
  reachability_observer_ = std::move(observer);
}

void EtcdStore::NoteReachability(bool reachable, const std::string& why) {
  ReachabilityObserver observer;
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    watch_lost_ = reachable ? std::nullopt : std::optional<std::string>(why);
    observer = reachability_observer_;
  }
  if (observer) observer(reachable, why);
}

absl::Status EtcdStore::CheckWatch() {
  std::lock_guard<std::mutex> lock(watch_mu_);
  if (!watch_lost_) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "etcd store under ", options_.prefix, ": etcd at ", client_->endpoint(),
      " is unreachable, its watch of the prefix broke (", *watch_lost_,
      "); nothing was written"));
}

void EtcdStore::RegisterCommit(uint64_t commit_id) {
  std::lock_guard<std::mutex> lock(watch_mu_);
  if (watching_) own_commits_[commit_id] = OwnCommit();
}

void EtcdStore::SettleCommit(uint64_t commit_id, bool maybe_applied) {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    auto it = own_commits_.find(commit_id);
    if (it == own_commits_.end()) return;
    if (maybe_applied) {
      it->second.state = OwnCommit::kUnknown;
    } else {
      own_commits_.erase(it);  // not applied: the watch never sees it
    }
  }
  own_cv_.notify_all();
}

bool EtcdStore::IsOwnCommit(uint64_t commit_id, int64_t revision) {
  std::unique_lock<std::mutex> lock(watch_mu_);
  auto it = own_commits_.find(commit_id);
  if (it == own_commits_.end()) return false;
  // Its Txn's answer may still be on its way to the writer: another
  // replica's change after it must wait for its done callbacks.
  own_cv_.wait(lock, [&] {
    it = own_commits_.find(commit_id);
    return !watching_ || it == own_commits_.end() || it->second.state != OwnCommit::kInFlight;
  });
  if (it == own_commits_.end()) return false;
  const bool queued = it->second.state == OwnCommit::kQueued;
  own_commits_.erase(it);
  if (!queued) {
    LOG(WARNING) << "etcd store: commit at revision " << revision
                 << " whose outcome was unknown was applied; taking it as another replica's";
  }
  return queued;
}

void EtcdStore::DeliverExternal(ExternalChange change) {
  NoteRevision(change.revision);
  std::lock_guard<std::mutex> lock(watch_mu_);
  if (!external_observer_) return;
  writer_->QueueCompletion(
      [observer = external_observer_, change = std::move(change)] { observer(change); });
}

absl::Status EtcdStore::DeliverResync(int64_t revision) {
  {
    // Own commits up to `revision` will never be echoed: the watch goes on
    // after it.
    std::lock_guard<std::mutex> lock(watch_mu_);
    std::erase_if(own_commits_, [&](const auto& entry) {
      return entry.second.state != OwnCommit::kInFlight && entry.second.revision <= revision;
    });
  }
  NoteRevision(revision);
  // Through the writer: a write that changes nothing completes after every
  // write submitted before it, so every commit of this store up to
  // `revision` has had its done callbacks when the views are read again.
  auto delivered = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> answer = delivered->get_future();
  Write([](Transaction&) { return absl::OkStatus(); },
        [this, revision, delivered](absl::Status status) {
          if (status.ok()) {
            ExternalObserver observer;
            {
              std::lock_guard<std::mutex> lock(watch_mu_);
              observer = external_observer_;
            }
            ExternalChange change;
            change.revision = revision;
            change.resync = true;
            if (observer) observer(change);
          }
          delivered->set_value(status);
        });
  return answer.get();
}

int64_t EtcdStore::CurrentRevision() const {
  return committed_revision_.load(std::memory_order_acquire);
}

void EtcdStore::NoteRevision(int64_t revision) {
  int64_t seen = committed_revision_.load();
  while (revision > seen && !committed_revision_.compare_exchange_weak(seen, revision)) {
  }
}

BatchOutcome EtcdStore::RunBatch(std::vector<PendingWrite>& batch) {
  BatchOutcome outcome;
  std::vector<std::pair<uint64_t, int64_t>> committed;
  RunRounds(batch, outcome, committed);
  outcome.revision = CurrentRevision();
  if (!committed.empty()) {
    outcome.queued = [this, committed = std::move(committed)] { MarkQueued(committed); };
  }
  return outcome;
}

void EtcdStore::MarkQueued(const std::vector<std::pair<uint64_t, int64_t>>& committed) {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    for (const auto& [id, at] : committed) {
      auto it = own_commits_.find(id);
      if (it == own_commits_.end()) continue;
      it->second.state = OwnCommit::kQueued;
      it->second.revision = at;
    }
  }
  own_cv_.notify_all();
}

void EtcdStore::RunRounds(std::vector<PendingWrite>& batch, BatchOutcome& outcome,
                          std::vector<std::pair<uint64_t, int64_t>>& committed_ids) {
  std::vector<absl::Status>& results = outcome.results;
  results.assign(batch.size(), absl::OkStatus());
  // Indexes still to run, in submission order: a round runs them on one
  // snapshot, commits those that fit, and leaves the rest (and, after a
  // lost race, all of them) to the next round.
  std::vector<size_t> pending(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) pending[i] = i;
  std::mt19937 jitter{std::random_device{}()};
  while (!pending.empty()) {
    if (absl::Status watching = CheckWatch(); !watching.ok()) {
      for (size_t i : pending) results[i] = watching;
      return;
    }
    std::unique_ptr<EtcdCache::Snapshot> view = cache_->Take();
    absl::StatusOr<EtcdSnapshot> snapshot =
        TakeSnapshot(*client_, options_.prefix, *cache_, *view);
    if (!snapshot.ok()) {
      for (size_t i : pending) results[i] = snapshot.status();
      return;
    }
    NoteRevision(snapshot->meta_revision);
    snapshot->replicas = replicas_.get();
    EtcdWriteState state;
    state.meta = snapshot->meta;
    std::vector<size_t> ran, later;
    const uint64_t commit_id = NewCommitId();
    for (size_t k = 0; k < pending.size(); ++k) {
      const size_t i = pending[k];
      if (!later.empty()) {
        later.push_back(i);  // after one that waits, to keep submission order
        continue;
      }
      EtcdWriteState saved = state;
      EtcdTransaction txn(*snapshot, &state);
      absl::Status status = batch[i].fn(txn);
      if (status.ok()) {
        txn.FinishWrites();
        absl::Status fits = client_->CheckTxnLimits(CommitRequest(*snapshot, state, commit_id));
        if (!fits.ok()) {
          state = std::move(saved);
          if (ran.empty()) {
            // Alone it does not fit: atomic, it cannot be split.
            status = absl::ResourceExhaustedError(absl::StrCat(
                "this write is too large for one etcd transaction, and a write is never "
                "split: ", fits.message(), "; raise the limit on every etcd member and in "
                "store.etcd (max_txn_ops, max_request_bytes)"));
          } else {
            later.push_back(i);
            continue;
          }
        }
      } else {
        state = std::move(saved);
      }
      results[i] = std::move(status);
      ran.push_back(i);
    }
    const bool writes = !state.writes.empty() || state.revision_taken ||
                        state.meta.audit_sequence() != snapshot->meta.audit_sequence() ||
                        state.meta.observation_sequence() != snapshot->meta.observation_sequence() ||
                        state.meta.layout_version() != snapshot->meta.layout_version();
    if (!writes) {
      // Nothing to commit: what the functions read was one consistent
      // snapshot, and what they answered stands.
      pending = std::move(later);
      continue;
    }
    const etcdserverpb::TxnRequest request = CommitRequest(*snapshot, state, commit_id);
    RegisterCommit(commit_id);
    absl::StatusOr<etcdserverpb::TxnResponse> response = client_->Txn(request);
    int64_t committed = 0;
    bool lost_race = false;
    int64_t meta_now = 0;  // after a lost race: meta's revision at etcd
    bool maybe_applied = false;
    absl::Status failure;
    if (response.ok()) {
      if (response->succeeded()) {
        committed = response->header().revision();
      } else {
        lost_race = true;
        if (response->responses_size() > 0 &&
            response->responses(0).response_range().kvs_size() > 0) {
          meta_now = response->responses(0).response_range().kvs(0).mod_revision();
        }
      }
    } else if (absl::IsUnavailable(response.status())) {
      // Sent or not, applied or not: ask etcd before answering anyone.
      absl::StatusOr<int64_t> resolved =
          ResolveCommit(snapshot->meta_revision, snapshot->meta_value, commit_id);
      if (resolved.ok() && *resolved > 0) {
        committed = *resolved;
      } else if (resolved.ok()) {
        failure = response.status();
      } else {
        failure = absl::UnavailableError(absl::StrCat(
            response.status().message(), "; whether the write was applied is unknown: ",
            resolved.status().message()));
        maybe_applied = true;
      }
    } else {
      failure = response.status();  // refused by etcd: nothing was applied
    }
    if (committed > 0) {
      if (committed != snapshot->revision + 1) {
        VLOG(1) << "etcd store: commit at revision " << committed << ", snapshot "
                << snapshot->revision << ": keys outside csd's writes changed in between";
      }
      cache_->ApplyCommit(committed, WritesOf(request));
      NoteRevision(committed);
      committed_ids.emplace_back(commit_id, committed);
      outcome.changed_hosts.insert(state.changed_hosts.begin(), state.changed_hosts.end());
      pending = std::move(later);
      continue;
    }
    // Not applied, or (UNAVAILABLE after a lost answer) perhaps applied.
    SettleCommit(commit_id, maybe_applied);
    view.reset();  // a wait for the cache must not hold back its pruning
    if (lost_race) {
      // Another writer committed after the snapshot: every function of the
      // round runs again on what it wrote, its own failures included (they
      // may not hold any more), once the cache has it.
      if (absl::Status caught_up = CatchUp(meta_now); !caught_up.ok()) {
        for (size_t i : ran) results[i] = caught_up;
        for (size_t i : later) results[i] = caught_up;
        return;
      }
      std::vector<size_t> again;
      for (size_t i : ran) {
        if (++batch[i].attempts >= options_.max_attempts) {
          results[i] = absl::AbortedError(absl::StrCat(
              "etcd store: the write lost ", batch[i].attempts,
              " races in a row with other writers under ", options_.prefix, "; retry it"));
        } else {
          again.push_back(i);
        }
      }
      again.insert(again.end(), later.begin(), later.end());
      pending = std::move(again);
      std::this_thread::sleep_for(std::chrono::microseconds(
          std::uniform_int_distribution<int>(0, 2000)(jitter)));
      continue;
    }
    for (size_t i : ran) {
      if (results[i].ok()) results[i] = failure;
    }
    for (size_t i : later) results[i] = failure;
    return;
  }
}

absl::StatusOr<int64_t> EtcdStore::ResolveCommit(int64_t meta_revision,
                                                 const std::string& meta_value,
                                                 uint64_t commit_id) {
  const std::string meta_key = absl::StrCat(options_.prefix, "/meta");
  // Our commit can only ever apply as the first change of meta after
  // meta_revision. A fence that rewrites meta unchanged, under the same
  // compare, makes sure it never will; when the fence loses, meta's
  // history says whether ours was the change that beat it.
  EtcdMeta fence_meta;
  if (!meta_value.empty() && !fence_meta.ParseFromString(meta_value)) {
    return absl::DataLossError(absl::StrCat("etcd store: value of key ", meta_key,
                                            " does not parse as the store's metadata"));
  }
  // Unchanged but for its commit id: a store of layout 1 stays one.
  if (meta_value.empty()) fence_meta.set_layout_version(kLayoutVersion);
  fence_meta.set_commit_id(NewCommitId());
  etcdserverpb::TxnRequest fence;
  etcdserverpb::Compare* compare = fence.add_compare();
  compare->set_key(meta_key);
  compare->set_target(etcdserverpb::Compare::MOD);
  compare->set_result(etcdserverpb::Compare::EQUAL);
  compare->set_mod_revision(meta_revision);
  etcdserverpb::PutRequest* put = fence.add_success()->mutable_request_put();
  put->set_key(meta_key);
  put->set_value(fence_meta.SerializeAsString());
  fence.add_failure()->mutable_request_range()->set_key(meta_key);

  absl::Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    absl::StatusOr<etcdserverpb::TxnResponse> fenced = client_->Txn(fence);
    if (!fenced.ok()) {
      last = fenced.status();
      // With the watch down too, etcd is gone: asking again would only
      // keep the caller waiting for the same unknown.
      if (!CheckWatch().ok()) break;
      continue;  // the fence's own outcome is as unknown: ask again
    }
    if (fenced->succeeded()) return 0;
    const auto& kvs = fenced->responses(0).response_range().kvs();
    if (kvs.empty()) return 0;
    mvccpb::KeyValue kv = kvs[0];
    // Back through meta's versions to the first one after meta_revision.
    constexpr int kMaxSteps = 64;
    for (int step = 0; step < kMaxSteps && kv.mod_revision() > meta_revision; ++step) {
      EtcdMeta meta;
      if (meta.ParseFromString(kv.value()) && meta.commit_id() == commit_id) {
        return kv.mod_revision();
      }
      absl::StatusOr<etcd::RangeResult> older =
          client_->Range(meta_key, "", kv.mod_revision() - 1);
      if (!older.ok()) return older.status();
      if (older->kvs.empty()) return 0;
      kv = older->kvs[0];
    }
    if (kv.mod_revision() > meta_revision) {
      // The walk stopped before it reached the first change after
      // meta_revision: ours may be further back.
      return absl::UnavailableError(absl::StrCat(
          "meta changed more than ", kMaxSteps, " times since revision ", meta_revision,
          ", the walk back stopped before it could tell"));
    }
    return 0;
  }
  return last;
}

absl::Status EtcdStore::Read(const TxnFn& fn) {
  // Linearizable: every commit acknowledged before this read began is at or
  // below meta's revision now, and the read waits until the cache has it.
  ASSIGN_OR_RETURN(etcd::RangeResult meta,
                   client_->Range(absl::StrCat(options_.prefix, "/meta"), ""));
  RETURN_IF_ERROR(CatchUp(meta.kvs.empty() ? 0 : meta.kvs[0].mod_revision()));
  std::unique_ptr<EtcdCache::Snapshot> view = cache_->Take();
  ASSIGN_OR_RETURN(EtcdSnapshot snapshot,
                   TakeSnapshot(*client_, options_.prefix, *cache_, *view));
  // What the cache does not hold (the audit trail) is read from etcd at the
  // revision of that read: the held keys are the same there as in the view,
  // as no csd commit lies between.
  snapshot.revision = std::max(snapshot.revision, meta.revision);
  NoteRevision(snapshot.meta_revision);
  EtcdTransaction txn(snapshot, nullptr);
  return fn(txn);
}

absl::Status EtcdStore::ReadRecent(const TxnFn& fn) {
  std::unique_ptr<EtcdCache::Snapshot> view = cache_->Take();
  ASSIGN_OR_RETURN(EtcdSnapshot snapshot,
                   TakeSnapshot(*client_, options_.prefix, *cache_, *view));
  EtcdTransaction txn(snapshot, nullptr);
  return fn(txn);
}

}  // namespace cosched::store
