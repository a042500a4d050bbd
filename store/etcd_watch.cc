// EtcdPrefixWatch: following the prefix, sorting each revision into the
// store's own commits and other writers' changes, and getting back on track
// after a broken stream or a compaction.
#include "store/etcd_watch.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/thread_name.h"
#include "cosched/store/etcd_records.pb.h"

namespace cosched::store {
namespace {

// The id a key is for: what follows "<kind>/" up to the next '/'.
std::string IdOf(absl::string_view rest) {
  return std::string(rest.substr(0, rest.find('/')));
}

template <typename Message>
absl::Status ParseValue(const std::string& key, const std::string& value, absl::string_view kind,
                        Message& message) {
  if (message.ParseFromString(value)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("etcd store: value of key ", key,
                                          " does not parse as a ", kind, " record"));
}

template <typename T>
void AddOnce(std::vector<T>& list, const T& value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

}  // namespace

absl::Status AddWatchEvent(absl::string_view prefix, const mvccpb::Event& event,
                           ExternalChange& change, WatchedRevision& revision) {
  const std::string& key = event.kv().key();
  revision.revision = event.kv().mod_revision();
  change.revision = std::max(change.revision, revision.revision);
  if (!absl::StartsWith(key, prefix) || key.size() <= prefix.size() ||
      key[prefix.size()] != '/') {
    return absl::OkStatus();  // not csd's: watched keys all start with "<prefix>/"
  }
  const absl::string_view rest = absl::string_view(key).substr(prefix.size() + 1);
  const bool put = event.type() == mvccpb::Event::PUT;
  if (rest == "meta") {
    if (!put) return absl::OkStatus();
    EtcdMeta meta;
    absl::Status parsed = ParseValue(key, event.kv().value(), "store metadata", meta);
    if (parsed.ok()) revision.commit_id = meta.commit_id();
    return parsed;
  }
  absl::string_view tail = rest;
  if (absl::ConsumePrefix(&tail, "vms/")) {
    const std::string vm_id(tail);
    for (const auto& [id, before] : change.vms) {
      if (id == vm_id) return absl::OkStatus();  // the first previous value stands
    }
    std::optional<v1::VM> before;
    absl::Status parsed = absl::OkStatus();
    if (event.has_prev_kv()) {
      v1::VM vm;
      parsed = ParseValue(key, event.prev_kv().value(), "VM", vm);
      if (parsed.ok()) before = std::move(vm);
    }
    change.vms.emplace_back(vm_id, std::move(before));
    return parsed;
  }
  if (absl::ConsumePrefix(&tail, "hosts/")) {
    AddOnce(change.hosts, std::string(tail));
    return absl::OkStatus();
  }
  if (absl::ConsumePrefix(&tail, "policies/")) {
    change.policies = true;
    return absl::OkStatus();
  }
  if (tail == "rollout") {
    change.rollout = true;
    return absl::OkStatus();
  }
  if (absl::ConsumePrefix(&tail, "changes/")) {
    // A delete is the leader's sweep of records no agent can ask for any
    // more (store/etcd_maintenance.h): no assignment changed.
    if (put) AddOnce(change.assignment_hosts, IdOf(tail));
    return absl::OkStatus();
  }
  if (absl::ConsumePrefix(&tail, "reports/")) {
    const std::string host_id(tail);
    std::vector<v1::VMObservation> vms;
    absl::Status parsed = absl::OkStatus();
    if (put) {
      EtcdReport report;
      parsed = ParseValue(key, event.kv().value(), "host report", report);
      vms.assign(report.vms().begin(), report.vms().end());
    }
    auto it = std::find_if(change.reports.begin(), change.reports.end(),
                           [&](const auto& r) { return r.first == host_id; });
    if (it == change.reports.end()) {
      change.reports.emplace_back(host_id, std::move(vms));
    } else {
      it->second = std::move(vms);  // the latest report stands
    }
    return parsed;
  }
  // obs/ (an index of reports), audit/, and the replicas' keys (replicas/,
  // leader, compact) change no view.
  return absl::OkStatus();
}

EtcdPrefixWatch::EtcdPrefixWatch(etcd::Client& client, std::string prefix, int64_t revision,
                                 EtcdCache& cache, Hooks hooks, EtcdWatchOptions options)
    : client_(client),
      prefix_(std::move(prefix)),
      cache_(cache),
      hooks_(std::move(hooks)),
      options_(options),
      revision_(revision) {
  thread_ = NamedThread("cs-etcd-watch", [this] { Run(); });
  delivery_ = NamedThread("cs-etcd-deliver", [this] { DeliveryLoop(); });
}

EtcdPrefixWatch::~EtcdPrefixWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (stream_ != nullptr) stream_->Cancel();
  }
  stop_cv_.notify_all();
  items_cv_.notify_all();
  thread_.join();
  delivery_.join();
}

void EtcdPrefixWatch::Enqueue(Item item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(std::move(item));
  }
  items_cv_.notify_one();
}

void EtcdPrefixWatch::DeliveryLoop() {
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      items_cv_.wait(lock, [this] { return stopping_ || !items_.empty(); });
      if (stopping_) return;  // what is left is the store's to drop: it closes
      item = std::move(items_.front());
      items_.pop_front();
    }
    if (item.resync == 0) {
      Deliver(item.response);
      continue;
    }
    absl::Status delivered = hooks_.resync(item.resync);
    if (delivered.ok()) {
      LOG(WARNING) << "etcd store: the watch of " << prefix_ << " was behind a compaction; "
                   << "every view was read again at revision " << item.resync;
    } else {
      LOG(WARNING) << "etcd store: the views of " << prefix_ << " could not be read again at "
                   << "revision " << item.resync << ": " << delivered;
    }
  }
}

bool EtcdPrefixWatch::Stopping() {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

bool EtcdPrefixWatch::Sleep(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  stop_cv_.wait_for(lock, std::chrono::milliseconds(absl::ToInt64Milliseconds(d)),
                    [this] { return stopping_; });
  return !stopping_;
}

void EtcdPrefixWatch::SetReachable(bool reachable, const std::string& why) {
  if (reachable == reachable_) return;
  reachable_ = reachable;
  if (reachable) {
    LOG(INFO) << "etcd store: watching " << prefix_ << " again from revision "
              << revision() + 1;
  } else {
    LOG(WARNING) << "etcd store: lost the watch of " << prefix_ << " at revision "
                 << revision() << ": " << why;
  }
  if (hooks_.reachability) hooks_.reachability(reachable, why);
}

void EtcdPrefixWatch::Run() {
  absl::Duration backoff = options_.min_backoff;
  bool resync = false;
  while (!Stopping()) {
    bool established = false;
    absl::Status ended;
    if (resync) {
      ended = Resync();
      if (ended.ok()) resync = false;
    } else {
      // OK when stopping, or after a compaction (resync set).
      ended = Follow(resync, established);
    }
    if (ended.ok()) {
      backoff = options_.min_backoff;
      continue;
    }
    if (established) backoff = options_.min_backoff;
    SetReachable(false, std::string(ended.message()));
    if (!Sleep(backoff)) return;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

absl::Status EtcdPrefixWatch::Resync() {
  // The cache read again at etcd's revision now (linearizably): the store
  // reads its views at or after it, and the watch goes on from just after.
  absl::StatusOr<int64_t> loaded = cache_.Load(client_);
  if (!loaded.ok()) return loaded.status();
  revision_.store(*loaded, std::memory_order_release);
  Item item;
  item.resync = *loaded;
  Enqueue(std::move(item));
  return absl::OkStatus();
}

absl::Status EtcdPrefixWatch::Follow(bool& resync, bool& established) {
  const std::string begin = absl::StrCat(prefix_, "/");
  absl::StatusOr<std::unique_ptr<etcd::Client::WatchStream>> stream =
      client_.Watch(begin, etcd::PrefixEnd(begin), revision() + 1, /*prev_kv=*/true,
                    /*progress_notify=*/true);
  if (!stream.ok()) return stream.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::OkStatus();
    stream_ = stream->get();
  }
  absl::Status ended;
  while (true) {
    absl::StatusOr<etcdserverpb::WatchResponse> response = (*stream)->Read();
    if (!response.ok()) {
      ended = response.status();
      break;
    }
    if (response->compact_revision() > 0) {
      LOG(WARNING) << "etcd store: revision " << revision() + 1 << " of " << prefix_
                   << " was compacted (etcd keeps from " << response->compact_revision()
                   << "): reading every view again";
      resync = true;
      break;
    }
    if (response->canceled()) {
      ended = absl::UnavailableError(absl::StrCat("etcd at ", client_.endpoint(),
                                                  " cancelled the watch of ", prefix_, ": ",
                                                  response->cancel_reason()));
      break;
    }
    if (response->created()) {
      established = true;
      SetReachable(true, "");
      continue;
    }
    if (options_.before_apply) options_.before_apply();
    Apply(*response);
    if (!response->events().empty()) Enqueue(Item{*std::move(response), 0});
  }
  std::lock_guard<std::mutex> lock(mu_);
  stream_ = nullptr;
  if (stopping_) return absl::OkStatus();
  return ended;
}

void EtcdPrefixWatch::Apply(const etcdserverpb::WatchResponse& response) {
  if (response.events().empty()) {
    // A progress notification: every event up to its revision was sent.
    if (response.header().revision() > revision()) {
      cache_.ApplyProgress(response.header().revision());
      revision_.store(response.header().revision(), std::memory_order_release);
    }
    return;
  }
  // Events come in revision order, a revision's all in one response.
  const auto& events = response.events();
  for (int i = 0; i < events.size();) {
    const int64_t at = events[i].kv().mod_revision();
    int end = i;
    while (end < events.size() && events[end].kv().mod_revision() == at) ++end;
    cache_.ApplyEvents(at, events, i, end);
    i = end;
  }
  const int64_t last = events.rbegin()->kv().mod_revision();
  if (last > revision()) revision_.store(last, std::memory_order_release);
}

void EtcdPrefixWatch::Deliver(const etcdserverpb::WatchResponse& response) {
  // Other writers' revisions between two of the store's own are delivered
  // as one change; each own commit waits for the store to have queued it.
  ExternalChange pending;
  auto flush = [&] {
    if (!pending.empty()) hooks_.deliver(std::move(pending));
    pending = ExternalChange();
  };
  const auto& events = response.events();
  for (int i = 0; i < events.size();) {
    const int64_t at = events[i].kv().mod_revision();
    ExternalChange change;
    WatchedRevision watched;
    for (; i < events.size() && events[i].kv().mod_revision() == at; ++i) {
      absl::Status added = AddWatchEvent(prefix_, events[i], change, watched);
      LOG_IF(ERROR, !added.ok()) << added;
    }
    if (watched.commit_id && hooks_.is_own(*watched.commit_id, at)) {
      // Other writers' changes before it may follow its completion: they
      // are read again when delivered, so the views still only go forward.
      flush();
      continue;
    }
    // Merge into what is pending.
    pending.revision = std::max(pending.revision, change.revision);
    for (std::string& host : change.assignment_hosts) AddOnce(pending.assignment_hosts, host);
    for (auto& [id, before] : change.vms) {
      // A structured binding is named in the lambda through a reference of
      // its own: clang 14 (the fuzz build) does not capture bindings.
      const std::string& vm_id = id;
      if (std::none_of(pending.vms.begin(), pending.vms.end(),
                       [&](const auto& v) { return v.first == vm_id; })) {
        pending.vms.emplace_back(id, std::move(before));
      }
    }
    for (std::string& host : change.hosts) AddOnce(pending.hosts, host);
    for (auto& [host, vms] : change.reports) {
      const std::string& host_id = host;
      auto it = std::find_if(pending.reports.begin(), pending.reports.end(),
                             [&](const auto& r) { return r.first == host_id; });
      if (it == pending.reports.end()) {
        pending.reports.emplace_back(host, std::move(vms));
      } else {
        it->second = std::move(vms);
      }
    }
    pending.policies |= change.policies;
    pending.rollout |= change.rollout;
  }
  flush();
}

}  // namespace cosched::store
