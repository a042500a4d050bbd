#include "store/etcd_replicas.h"

#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/thread_name.h"

namespace cosched::store {
namespace {

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '-' || c == '_' || c == ':';
}

std::string DefaultName() {
  // Two replicas on one machine (tests) still get names of their own.
  std::mt19937 random{std::random_device{}()};
  return absl::StrFormat("%s-%06x", HostReplicaName(), random() & 0xffffff);
}

int64_t NowUnixNs() { return absl::ToUnixNanos(absl::Now()); }

}  // namespace

std::string HostReplicaName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    snprintf(host, sizeof(host), "csd");
  }
  std::string name;
  for (const char* c = host; *c != '\0' && name.size() < 128; ++c) {
    name.push_back(NameChar(*c) ? *c : '_');
  }
  return name;
}

bool IsReplicaKey(absl::string_view key) {
  return key == "leader" || key == "compact" || absl::StartsWith(key, "replicas/") ||
         absl::StartsWith(key, "seen/");
}

absl::Status ValidateEtcdReplicasOptions(const EtcdReplicasOptions& options) {
  if (options.name.size() > 128 ||
      !std::all_of(options.name.begin(), options.name.end(), NameChar)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store.etcd.replica_name '", options.name,
        "' must be at most 128 letters, digits, '.', '-', '_' or ':'"));
  }
  if (options.ttl < absl::Seconds(2) || options.ttl > absl::Seconds(300)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store.etcd.lease_ttl_s must be 2 to 300 seconds (unset: 10), got ",
        absl::ToInt64Seconds(options.ttl)));
  }
  if (options.seen_interval < absl::Milliseconds(200) ||
      options.seen_interval > absl::Seconds(60)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store.etcd.liveness_interval_ms must be 200 to 60000 (unset: 5000), got ",
        absl::ToInt64Milliseconds(options.seen_interval)));
  }
  if (options.poll <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the replicas' poll interval must be positive");
  }
  return absl::OkStatus();
}

EtcdReplicas::EtcdReplicas(etcd::Client& client, std::string prefix, EtcdReplicasOptions options)
    : client_(client),
      prefix_(std::move(prefix)),
      leader_key_(absl::StrCat(prefix_, "/leader")),
      options_(std::move(options)) {
  if (options_.name.empty()) options_.name = DefaultName();
  address_ = options_.address;
  own_key_ = absl::StrCat(prefix_, "/replicas/", options_.name);
  seen_key_ = absl::StrCat(prefix_, "/seen/", options_.name, "/");
  Round();
  thread_ = NamedThread("cs-replicas", [this] { Run(); });
  seen_thread_ = NamedThread("cs-seen", [this] { RunSeen(); });
}

EtcdReplicas::~EtcdReplicas() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    observer_ = nullptr;
  }
  stop_cv_.notify_all();
  seen_thread_.join();
  thread_.join();
  if (lease_ != 0) {
    absl::Status revoked = client_.LeaseRevoke(lease_);
    LOG_IF(WARNING, !revoked.ok())
        << "etcd replicas: resigning " << options_.name << ": " << revoked
        << "; the others wait for its lease to expire";
  }
}

int64_t EtcdReplicas::fence() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fence_;
}

std::string EtcdReplicas::leader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leader_;
}

void EtcdReplicas::SetObserver(LeadershipObserver observer) {
  std::lock_guard<std::mutex> lock(mu_);
  observer_ = std::move(observer);
}

EtcdReplicas::LeadershipObserver EtcdReplicas::SetFenceLocked(int64_t fence) {
  const bool was = fence_ != 0;
  fence_ = fence;
  if (fence != 0) leader_ = options_.name;
  if (was == (fence != 0)) return nullptr;
  LOG(INFO) << "etcd replicas: " << options_.name
            << (fence != 0 ? absl::StrCat(" leads the replicas on ", prefix_, " (fence ", fence, ")")
                           : absl::StrCat(" no longer leads the replicas on ", prefix_));
  return observer_;
}

void EtcdReplicas::LostFence(int64_t fence, const std::string& leader) {
  LeadershipObserver observer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fence_ == 0 || fence_ != fence) return;
    observer = SetFenceLocked(0);
    leader_ = leader;
  }
  if (observer) observer(false);
}

void EtcdReplicas::Run() {
  const absl::Duration wait = std::min(options_.poll, options_.ttl / 3);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    stop_cv_.wait_for(lock, absl::ToChronoMilliseconds(wait), [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    Round();
    lock.lock();
  }
}

void EtcdReplicas::Round() {
  if (lease_ == 0) {
    const Clock::time_point asked = Clock::now();
    absl::StatusOr<int64_t> lease = client_.LeaseGrant(absl::ToInt64Seconds(options_.ttl));
    if (!lease.ok()) {
      LOG_EVERY_N(WARNING, 30) << "etcd replicas: " << options_.name
                               << " cannot take a lease: " << lease.status();
      return;
    }
    lease_ = *lease;
    {
      std::lock_guard<std::mutex> lock(mu_);
      lease_id_ = lease_;
    }
    registered_ = false;
    renewed_ = asked;
    next_renewal_ = asked + absl::ToChronoMilliseconds(options_.ttl / 3);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (address_changed_) registered_ = false;
    address_changed_ = false;
  }
  if (!registered_) {
    absl::Status status = Register();
    LOG_IF_EVERY_N(WARNING, !status.ok(), 10)
        << "etcd replicas: registering " << options_.name << ": " << status;
    registered_ = status.ok();
    {
      std::lock_guard<std::mutex> lock(mu_);
      name_registered_ = registered_;
      register_status_ = status;
    }
    registered_cv_.notify_all();
  }
  // Only under its own name: a replica whose name another one holds
  // never leads.
  if (registered_ && fence() == 0) {
    absl::Status status = Campaign();
    LOG_IF_EVERY_N(WARNING, !status.ok(), 30)
        << "etcd replicas: " << options_.name << " campaigning: " << status;
  }
  if (Clock::now() >= next_renewal_) Renew();
  // Step down before etcd can expire the lease: it counts from a renewal's
  // arrival, after it was sent.
  if (lease_ != 0 && Clock::now() >= renewed_ + absl::ToChronoMilliseconds(options_.ttl * 0.9)) {
    LeadershipObserver observer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fence_ != 0) {
        LOG(WARNING) << "etcd replicas: " << options_.name << " could not renew its lease for "
                     << absl::FormatDuration(options_.ttl * 0.9) << ": stepping down";
        observer = SetFenceLocked(0);
      }
    }
    if (observer) observer(false);
  }
}

void EtcdReplicas::SetAddress(std::string address) {
  std::lock_guard<std::mutex> lock(mu_);
  if (address == address_) return;
  address_ = std::move(address);
  address_changed_ = true;
}

std::string EtcdReplicas::address() const {
  std::lock_guard<std::mutex> lock(mu_);
  return address_;
}

std::string EtcdReplicas::SelfRecord() const {
  EtcdReplica self;
  self.set_name(options_.name);
  self.set_address(address());
  self.set_since_unix_ns(NowUnixNs());
  self.set_record_format(kRecordFormat);
  return self.SerializeAsString();
}

etcdserverpb::TxnRequest EtcdReplicas::PutUnderLeaseIf(const std::string& key,
                                                       const std::string& value,
                                                       etcdserverpb::Compare compare) const {
  etcdserverpb::TxnRequest request;
  compare.set_key(key);
  compare.set_result(etcdserverpb::Compare::EQUAL);
  *request.add_compare() = std::move(compare);
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease_);
  request.add_failure()->mutable_request_range()->set_key(key);
  return request;
}

absl::Status EtcdReplicas::Register() {
  const std::string self = SelfRecord();
  // Put only while the name is absent or already under this lease: two
  // replicas of one name would overwrite each other's records.
  for (const auto target : {etcdserverpb::Compare::LEASE, etcdserverpb::Compare::CREATE}) {
    etcdserverpb::Compare compare;
    compare.set_target(target);
    if (target == etcdserverpb::Compare::LEASE) {
      compare.set_lease(lease_);
    } else {
      compare.set_create_revision(0);  // absent
    }
    const etcdserverpb::TxnRequest request = PutUnderLeaseIf(own_key_, self, compare);
    ASSIGN_OR_RETURN(etcdserverpb::TxnResponse response, client_.Txn(request));
    if (response.succeeded()) return absl::OkStatus();
    const auto& held = response.responses(0).response_range().kvs();
    if (!held.empty() && held[0].lease() != lease_) {
      EtcdReplica other;
      other.ParseFromString(held[0].value());
      return absl::FailedPreconditionError(absl::StrCat(
          "replica name '", options_.name, "' is held by another replica on ", prefix_,
          " (lease ", held[0].lease(), other.address().empty() ? "" : ", at ", other.address(),
          "): two csd replicas cannot share a name; set store.etcd.replica_name to one of its "
          "own (a replica that died keeps its name until its lease expires, lease_ttl_s)"));
    }
  }
  return absl::AbortedError(absl::StrCat("registering replica name '", options_.name,
                                         "' raced with its own expiry; trying again"));
}

absl::Status EtcdReplicas::WaitRegistered(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  registered_cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                          [this] { return name_registered_ || stopping_; });
  if (name_registered_) return absl::OkStatus();
  return register_status_;
}

absl::Status EtcdReplicas::Campaign() {
  etcdserverpb::Compare absent;
  absent.set_target(etcdserverpb::Compare::CREATE);
  absent.set_create_revision(0);
  const etcdserverpb::TxnRequest request = PutUnderLeaseIf(leader_key_, SelfRecord(), absent);
  ASSIGN_OR_RETURN(etcdserverpb::TxnResponse response, client_.Txn(request));
  int64_t fence = 0;
  std::string leader;
  if (response.succeeded()) {
    fence = response.header().revision();
    leader = options_.name;
  } else if (response.responses_size() == 1 &&
             response.responses(0).response_range().kvs_size() == 1) {
    const mvccpb::KeyValue& kv = response.responses(0).response_range().kvs(0);
    EtcdReplica current;
    if (current.ParseFromString(kv.value())) leader = current.name();
    // Its own key from before (a campaign whose answer was lost): still
    // its leadership, under the same fence.
    if (kv.lease() == lease_) fence = kv.create_revision();
  }
  LeadershipObserver observer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leader_ = leader;
    if (fence != 0) observer = SetFenceLocked(fence);
  }
  if (observer) observer(true);
  return absl::OkStatus();
}

void EtcdReplicas::Renew() {
  const Clock::time_point sent = Clock::now();
  absl::StatusOr<int64_t> ttl = client_.LeaseKeepAliveOnce(lease_);
  next_renewal_ = Clock::now() + absl::ToChronoMilliseconds(options_.ttl / 3);
  if (!ttl.ok()) {
    LOG_EVERY_N(WARNING, 10) << "etcd replicas: renewing " << options_.name
                             << "'s lease: " << ttl.status();
    // Sooner than ttl/3: the time left is running out.
    next_renewal_ = Clock::now() + absl::ToChronoMilliseconds(options_.poll);
    return;
  }
  if (*ttl > 0) {
    renewed_ = sent;
    return;
  }
  // Expired: its keys are gone; a new lease, registration and campaign.
  LOG(WARNING) << "etcd replicas: " << options_.name << "'s lease expired";
  lease_ = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lease_id_ = 0;
  }
  registered_ = false;
  LeadershipObserver observer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    observer = SetFenceLocked(0);
  }
  if (observer) observer(false);
}

absl::StatusOr<std::vector<EtcdReplica>> EtcdReplicas::List() const {
  const std::string base = absl::StrCat(prefix_, "/replicas/");
  ASSIGN_OR_RETURN(etcd::RangeResult range, client_.Range(base, etcd::PrefixEnd(base)));
  std::vector<EtcdReplica> replicas;
  for (const mvccpb::KeyValue& kv : range.kvs) {
    EtcdReplica replica;
    if (!replica.ParseFromString(kv.value())) {
      return absl::DataLossError(absl::StrCat("etcd store: value of key ", kv.key(),
                                              " does not parse as a replica record"));
    }
    replicas.push_back(std::move(replica));
  }
  return replicas;
}

absl::Status EtcdReplicas::CheckRecordFormat(int format) const {
  ASSIGN_OR_RETURN(std::vector<EtcdReplica> replicas, List());
  for (const EtcdReplica& replica : replicas) {
    if (replica.record_format() >= format) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "replica ", replica.name(), " runs an older csd (store record format ",
        replica.record_format(), ", this change needs ", format,
        ") that would misread it: upgrade every replica first"));
  }
  return absl::OkStatus();
}

void EtcdReplicas::SetSeenExchange(SeenSource source, SeenSink sink) {
  std::lock_guard<std::mutex> lock(seen_mu_);
  seen_source_ = std::move(source);
  seen_sink_ = std::move(sink);
}

void EtcdReplicas::RunSeen() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    stop_cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.seen_interval),
                      [this] { return stopping_; });
    if (stopping_ || lease_id_ == 0) continue;
    lock.unlock();
    ExchangeSeen();
    lock.lock();
  }
}

void EtcdReplicas::ExchangeSeen() {
  std::lock_guard<std::mutex> lock(seen_mu_);
  if (!seen_source_) return;
  absl::Status published = PublishSeen(seen_source_());
  LOG_IF_EVERY_N(WARNING, !published.ok(), 30)
      << "etcd replicas: writing which hosts " << options_.name << " hears: " << published;
  absl::StatusOr<std::vector<EtcdSeen>> others = ListSeen();
  if (!others.ok()) {
    // The last view stands: a host it had live goes stale by its own
    // times, never by a read that failed.
    LOG_EVERY_N(WARNING, 30) << "etcd replicas: reading which hosts the others hear: "
                             << others.status();
    return;
  }
  if (seen_sink_) seen_sink_(*std::move(others));
}

absl::Status EtcdReplicas::PublishSeen(const std::vector<EtcdSeenHost>& hosts) {
  int64_t lease = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lease = lease_id_;
  }
  if (lease == 0) {
    return absl::UnavailableError(absl::StrCat("etcd replicas: ", options_.name,
                                               " holds no lease yet to write its seen record"));
  }
  // Parts of at most kSeenPartBytes: etcd refuses a request over 1.5 MiB,
  // and a fleet's worth of hosts may be more. Always one part, possibly
  // empty, so that readers see the replica hears nobody.
  std::vector<EtcdSeen> parts(1);
  const int64_t now = NowUnixNs();
  for (const EtcdSeenHost& host : hosts) {
    if (parts.back().hosts_size() > 0 &&
        parts.back().ByteSizeLong() + host.ByteSizeLong() + 8 > kSeenPartBytes) {
      parts.emplace_back();
    }
    *parts.back().add_hosts() = host;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    parts[i].set_replica(options_.name);
    parts[i].set_written_unix_ns(now);
    RETURN_IF_ERROR(client_.Put(absl::StrFormat("%s%04d", seen_key_, i),
                                parts[i].SerializeAsString(), lease)
                        .status());
  }
  // Parts of a longer record before.
  return client_
      .DeleteRange(absl::StrFormat("%s%04d", seen_key_, parts.size()), etcd::PrefixEnd(seen_key_))
      .status();
}

absl::StatusOr<std::vector<EtcdSeen>> EtcdReplicas::ListSeen() const {
  const std::string base = absl::StrCat(prefix_, "/seen/");
  ASSIGN_OR_RETURN(etcd::RangeResult range, client_.Range(base, etcd::PrefixEnd(base)));
  std::vector<EtcdSeen> records;
  for (const mvccpb::KeyValue& kv : range.kvs) {
    if (absl::StartsWith(kv.key(), seen_key_)) continue;  // its own
    EtcdSeen part;
    if (!part.ParseFromString(kv.value())) {
      return absl::DataLossError(absl::StrCat("etcd store: value of key ", kv.key(),
                                              " does not parse as a seen record"));
    }
    // Parts of one replica are adjacent in key order.
    if (!records.empty() && records.back().replica() == part.replica()) {
      EtcdSeen& record = records.back();
      record.set_written_unix_ns(std::min(record.written_unix_ns(), part.written_unix_ns()));
      for (EtcdSeenHost& host : *part.mutable_hosts()) *record.add_hosts() = std::move(host);
    } else {
      records.push_back(std::move(part));
    }
  }
  return records;
}

}  // namespace cosched::store
