// A client of etcd's v3 API (KV, Lease, Watch) for csd's etcd store: every
// call has a deadline and returns absl::Status, ranges are read page by page
// at one revision, and transactions are checked against etcd's request
// limits before they are sent, so that an oversized one is refused with the
// limit it broke rather than with etcd's terse error.
#ifndef COSCHED_ETCD_CLIENT_H_
#define COSCHED_ETCD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cosched/v1/config.pb.h"
#include "etcdserverpb/rpc.grpc.pb.h"
#include "etcdserverpb/rpc.pb.h"
#include "mvccpb/kv.pb.h"

namespace cosched::etcd {

// etcd's defaults for --max-txn-ops and --max-request-bytes.
inline constexpr int kDefaultMaxTxnOps = 128;
inline constexpr int64_t kDefaultMaxRequestBytes = 1536 * 1024;

struct ClientOptions {
  // host:port of each member; calls go to one and move to the next when it
  // cannot be reached.
  std::vector<std::string> endpoints;
  // Mutual TLS as the agent link (common/transport.h): with tls.ca_file set
  // the member's certificate is verified, and cert_file/key_file are
  // presented. Without it, plaintext, which is refused off loopback unless
  // `insecure`.
  v1::TlsConfig tls;
  bool insecure = false;
  // Deadline of each call.
  absl::Duration timeout = absl::Seconds(2);
  // The limits the members run with: transactions over them are refused
  // here, naming the limit.
  int max_txn_ops = kDefaultMaxTxnOps;
  int64_t max_request_bytes = kDefaultMaxRequestBytes;
  // Keys per page of a range read.
  int64_t range_page = 1000;
};

// A range read at one revision.
struct RangeResult {
  // The revision the range was read at (the store's at the first page).
  int64_t revision = 0;
  std::vector<mvccpb::KeyValue> kvs;
};

// The end of the range of every key that begins with `prefix`.
std::string PrefixEnd(absl::string_view prefix);

// Thread-safe.
//
// Errors: UNAVAILABLE naming etcd and the endpoint when no member answers
// within the deadline or the member says it cannot serve (no leader, a
// timed-out proposal); OUT_OF_RANGE when a read asks for a compacted
// revision; RESOURCE_EXHAUSTED for a transaction over the limits (before it
// is sent); otherwise etcd's code with its message, prefixed by the call.
class Client {
 public:
  // INVALID_ARGUMENT for no endpoint, a malformed one or bad limits;
  // FAILED_PRECONDITION for plaintext to a non-loopback endpoint or TLS
  // files that cannot be read. Does not connect: the first call does.
  static absl::StatusOr<std::unique_ptr<Client>> Create(const ClientOptions& options);

  // Keys in [key, range_end) (range_end empty: `key` only) at `revision`
  // (0: the newest, read linearizably), all pages of them. `limit` > 0
  // stops after that many keys. keys_only leaves values out.
  absl::StatusOr<RangeResult> Range(absl::string_view key, absl::string_view range_end,
                                    int64_t revision = 0, int64_t limit = 0,
                                    bool keys_only = false);
  // One request as given (no paging): for filters such as min_mod_revision.
  absl::StatusOr<etcdserverpb::RangeResponse> RangeOnce(
      const etcdserverpb::RangeRequest& request);

  // Returns the revision of the write.
  absl::StatusOr<int64_t> Put(absl::string_view key, absl::string_view value,
                              int64_t lease = 0);
  absl::StatusOr<etcdserverpb::DeleteRangeResponse> DeleteRange(
      absl::string_view key, absl::string_view range_end);

  // RESOURCE_EXHAUSTED, without sending it, when the request has more
  // compares or operations than max_txn_ops or more bytes than
  // max_request_bytes. Not retried on another member: its outcome is
  // unknown when the call fails on the way (see EtcdStore for how that is
  // resolved).
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& request);
  // Whether `request` fits the limits; the error says which it breaks.
  absl::Status CheckTxnLimits(const etcdserverpb::TxnRequest& request) const;

  // Compacts the history up to `revision`: once it returns, reads below it
  // fail OUT_OF_RANGE (the space is freed in the background).
  absl::Status Compact(int64_t revision);

  // Leases: returns the lease's id; its remaining TTL (<= 0: gone).
  absl::StatusOr<int64_t> LeaseGrant(int64_t ttl_seconds);
  absl::Status LeaseRevoke(int64_t id);
  absl::StatusOr<int64_t> LeaseKeepAliveOnce(int64_t id);

  // A watch stream on one member: Create, then Read until it fails.
  class WatchStream {
   public:
    virtual ~WatchStream() = default;
    // Blocks for the next response; UNAVAILABLE when the stream ended.
    virtual absl::StatusOr<etcdserverpb::WatchResponse> Read() = 0;
    // Ends the stream; a Read blocked in another thread returns.
    virtual void Cancel() = 0;
  };
  // Watches [key, range_end) from start_revision (0: now), with prev_kv and
  // progress notifications as asked, on the first member (from the current
  // one) that connects within the call deadline: UNAVAILABLE when none
  // does. The first response says `created`; one with compact_revision set
  // says start_revision was compacted away.
  absl::StatusOr<std::unique_ptr<WatchStream>> Watch(absl::string_view key,
                                                      absl::string_view range_end,
                                                      int64_t start_revision, bool prev_kv,
                                                      bool progress_notify);

  const ClientOptions& options() const { return options_; }
  // The endpoint calls go to now.
  std::string endpoint() const;

 private:
  struct Member {
    std::string endpoint;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Watch::Stub> watch;
  };

  explicit Client(ClientOptions options);
 public:
  ~Client();

 private:

  // Runs `call` on the current member; when it fails as unreachable and
  // `idempotent`, on each other member once. The error names the member.
  template <typename Call>
  absl::Status Invoke(absl::string_view method, bool idempotent, Call call);

  const ClientOptions options_;
  std::vector<Member> members_;
  std::atomic<size_t> current_{0};
};

}  // namespace cosched::etcd

#endif  // COSCHED_ETCD_CLIENT_H_
