// EtcdCache: versions of held keys by etcd revision, added by the watch,
// the writer's own commits and loads, pruned once no snapshot reads them.
#include "store/etcd_cache.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace cosched::store {
namespace {

// The kinds of keys under the prefix the cache holds: folders of records
// and two single keys. The rest (audit/, replicas/, seen/, leader, compact,
// the restore marker) it does not.
constexpr std::array<absl::string_view, 7> kHeldFolders = {
    "vms", "vm_by", "policies", "hosts", "reports", "obs", "changes"};
constexpr std::array<absl::string_view, 2> kHeldKeys = {"meta", "rollout"};

bool HeldFolder(absl::string_view folder) {
  return std::find(kHeldFolders.begin(), kHeldFolders.end(), folder) != kHeldFolders.end();
}

}  // namespace

EtcdCache::EtcdCache(std::string prefix) : prefix_(std::move(prefix)) {}

bool EtcdCache::Holds(absl::string_view key) const {
  if (!absl::ConsumePrefix(&key, prefix_) || !absl::ConsumePrefix(&key, "/")) return false;
  const size_t slash = key.find('/');
  if (slash == absl::string_view::npos) {
    return std::find(kHeldKeys.begin(), kHeldKeys.end(), key) != kHeldKeys.end();
  }
  return HeldFolder(key.substr(0, slash));
}

bool EtcdCache::HoldsRange(absl::string_view begin, absl::string_view end) const {
  absl::string_view rest = begin;
  if (!absl::ConsumePrefix(&rest, prefix_) || !absl::ConsumePrefix(&rest, "/")) return false;
  const size_t slash = rest.find('/');
  if (slash == absl::string_view::npos || !HeldFolder(rest.substr(0, slash))) return false;
  const std::string folder_end =
      etcd::PrefixEnd(absl::StrCat(prefix_, "/", rest.substr(0, slash), "/"));
  return !end.empty() && end <= absl::string_view(folder_end);
}

absl::StatusOr<int64_t> EtcdCache::Load(etcd::Client& client, int64_t revision) {
  // Everything under the prefix but the audit trail, in two ranges at one
  // revision (the first read's); keys the cache does not hold are dropped.
  const std::string base = prefix_ + "/";
  const std::string audit = prefix_ + "/audit/";
  ASSIGN_OR_RETURN(etcd::RangeResult before_audit, client.Range(base, audit, revision));
  const int64_t at = before_audit.revision;
  ASSIGN_OR_RETURN(etcd::RangeResult after_audit,
                   client.Range(etcd::PrefixEnd(audit), etcd::PrefixEnd(base), at));
  std::unique_lock<std::shared_mutex> lock(mu_);
  std::set<absl::string_view> read;
  for (const etcd::RangeResult* part : {&before_audit, &after_audit}) {
    for (const mvccpb::KeyValue& kv : part->kvs) {
      if (!Holds(kv.key())) continue;
      read.insert(kv.key());
      AddVersion(kv.key(), kv.mod_revision(), kv.value());
    }
  }
  std::vector<std::string> gone;
  for (const auto& [key, versions] : keys_) {
    const Version* now = At(versions, at);
    if (now != nullptr && now->value && !read.count(key)) gone.push_back(key);
  }
  for (const std::string& key : gone) AddVersion(key, at, std::nullopt);
  Advance(at, /*watched=*/true);
  return at;
}

void EtcdCache::ApplyEvents(int64_t revision,
                            const google::protobuf::RepeatedPtrField<mvccpb::Event>& events,
                            int begin, int end) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  for (int i = begin; i < end; ++i) {
    const mvccpb::Event* event = &events[i];
    if (!Holds(event->kv().key())) continue;
    // A delete's kv carries the key and the deleting revision only.
    if (event->type() == mvccpb::Event::PUT) {
      AddVersion(event->kv().key(), revision, event->kv().value());
    } else {
      AddVersion(event->kv().key(), revision, std::nullopt);
    }
  }
  Advance(revision, /*watched=*/true);
}

void EtcdCache::ApplyProgress(int64_t revision) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  Advance(revision, /*watched=*/true);
}

void EtcdCache::ApplyCommit(int64_t revision,
                            const std::map<std::string, std::optional<std::string>>& writes) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  for (const auto& [key, value] : writes) {
    if (Holds(key)) AddVersion(key, revision, value);
  }
  Advance(revision, /*watched=*/false);
}

int64_t EtcdCache::revision() const { return revision_.load(std::memory_order_acquire); }

bool EtcdCache::WaitFor(int64_t revision, absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(wait_mu_);
  return advanced_.wait_for(lock, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)),
                            [&] { return this->revision() >= revision; });
}

const EtcdCache::Version* EtcdCache::At(const Versions& versions, int64_t revision) {
  // The newest version at or before `revision`.
  auto it = std::upper_bound(versions.begin(), versions.end(), revision,
                             [](int64_t r, const Version& v) { return r < v.revision; });
  return it == versions.begin() ? nullptr : &*std::prev(it);
}

void EtcdCache::AddVersion(const std::string& key, int64_t revision,
                           std::optional<std::string> value) {
  auto found = keys_.find(key);
  if (found == keys_.end()) {
    if (!value) return;  // deleting what the cache never had
    found = keys_.emplace(key, Versions()).first;
  }
  Versions& versions = found->second;
  auto pos = std::lower_bound(versions.begin(), versions.end(), revision,
                              [](const Version& v, int64_t r) { return v.revision < r; });
  if (pos != versions.end() && pos->revision == revision) return;  // applied before
  const bool deletion = !value;
  versions.insert(pos, Version{revision, std::move(value)});
  ++versions_;
  if (versions.size() > 1 || deletion) {
    prunable_.emplace_back(std::max(revision, revision_.load(std::memory_order_relaxed)), key);
  }
}

void EtcdCache::Advance(int64_t revision, bool watched) {
  if (watched) watched_ = std::max(watched_, revision);
  if (revision > revision_.load(std::memory_order_relaxed)) {
    revision_.store(revision, std::memory_order_release);
  }
  Prune();
  {
    std::lock_guard<std::mutex> lock(wait_mu_);
  }
  advanced_.notify_all();
}

void EtcdCache::Prune() {
  int64_t floor = watched_;
  {
    std::lock_guard<std::mutex> lock(readers_mu_);
    if (!readers_.empty()) floor = std::min(floor, *readers_.begin());
  }
  while (!prunable_.empty() && prunable_.front().first <= floor) {
    auto found = keys_.find(prunable_.front().second);
    prunable_.pop_front();
    if (found == keys_.end()) continue;
    Versions& versions = found->second;
    // Every snapshot reads the newest version at or before the floor, or a
    // later one: the older ones go.
    auto keep = std::upper_bound(versions.begin(), versions.end(), floor,
                                 [](int64_t r, const Version& v) { return r < v.revision; });
    if (keep != versions.begin()) --keep;
    versions_ -= static_cast<size_t>(keep - versions.begin());
    versions.erase(versions.begin(), keep);
    if (versions.size() == 1 && !versions[0].value && versions[0].revision <= floor) {
      --versions_;
      keys_.erase(found);
    }
  }
}

std::unique_ptr<EtcdCache::Snapshot> EtcdCache::Take() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  const int64_t at = revision();
  {
    std::lock_guard<std::mutex> readers(readers_mu_);
    readers_.insert(at);
  }
  return std::unique_ptr<Snapshot>(new Snapshot(*this, at));
}

EtcdCache::Snapshot::~Snapshot() {
  std::lock_guard<std::mutex> lock(cache_.readers_mu_);
  cache_.readers_.erase(cache_.readers_.find(revision_));
}

std::optional<CachedKv> EtcdCache::Snapshot::Get(absl::string_view key) const {
  std::shared_lock<std::shared_mutex> lock(cache_.mu_);
  auto found = cache_.keys_.find(std::string(key));
  if (found == cache_.keys_.end()) return std::nullopt;
  const Version* version = At(found->second, revision_);
  if (version == nullptr || !version->value) return std::nullopt;
  return CachedKv{found->first, *version->value, version->revision};
}

std::vector<CachedKv> EtcdCache::Snapshot::Range(absl::string_view begin, absl::string_view end,
                                                 size_t limit) const {
  std::vector<CachedKv> out;
  std::shared_lock<std::shared_mutex> lock(cache_.mu_);
  for (auto it = cache_.keys_.lower_bound(std::string(begin));
       it != cache_.keys_.end() && absl::string_view(it->first) < end && out.size() < limit;
       ++it) {
    const Version* version = At(it->second, revision_);
    if (version != nullptr && version->value) {
      out.push_back(CachedKv{it->first, *version->value, version->revision});
    }
  }
  return out;
}

size_t EtcdCache::keys() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return keys_.size();
}

size_t EtcdCache::versions() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return versions_;
}

}  // namespace cosched::store
