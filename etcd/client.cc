#include "etcd/client.h"

#include <glog/logging.h>

#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/transport.h"
#include "grpc/grpc.h"
#include "grpcpp/grpcpp.h"

namespace cosched::etcd {
namespace {

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout));
}

bool Unreachable(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED;
}

// etcd's own words for "cannot serve now" come with other codes in 3.4
// (a proposal that timed out, no leader, stopping): all mean try later.
bool MemberCannotServe(const grpc::Status& status) {
  const std::string& m = status.error_message();
  return absl::StrContains(m, "etcdserver: request timed out") ||
         absl::StrContains(m, "etcdserver: no leader") ||
         absl::StrContains(m, "etcdserver: server stopped") ||
         absl::StrContains(m, "etcdserver: leader changed");
}

absl::Status ToStatus(const grpc::Status& status, absl::string_view method,
                      absl::string_view endpoint, absl::Duration timeout) {
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::UnavailableError(absl::StrCat("etcd at ", endpoint, " is unavailable: it did not answer ",
                                               method, " within ",
                                               absl::FormatDuration(timeout)));
  }
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE || MemberCannotServe(status)) {
    return absl::UnavailableError(absl::StrCat("etcd at ", endpoint, " is unavailable (",
                                               method, "): ", status.error_message()));
  }
  absl::Status converted = FromGrpcStatus(status);
  return absl::Status(converted.code(), absl::StrCat("etcd at ", endpoint, ": ", method,
                                                     ": ", status.error_message()));
}

}  // namespace

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  // The first key after every key with this prefix: the last byte that can
  // be incremented is, and what follows it is dropped.
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// gRPC stays initialized while a client lives: a shutdown and a new init
// in one process (a client closed, then another made) left connections
// that never saw their connect complete (gRPC 1.51, epoll1).
Client::Client(ClientOptions options) : options_(std::move(options)) { grpc_init(); }

Client::~Client() {
  members_.clear();
  grpc_shutdown();
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("etcd endpoints: at least one host:port is needed");
  }
  if (options.max_txn_ops < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd max_txn_ops must be at least 2, got ", options.max_txn_ops));
  }
  if (options.max_request_bytes < 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "etcd max_request_bytes must be at least 4096, got ", options.max_request_bytes));
  }
  if (options.timeout <= absl::ZeroDuration() || options.range_page < 1) {
    return absl::InvalidArgumentError("etcd timeout and range_page must be positive");
  }
  std::unique_ptr<Client> client(new Client(options));
  for (size_t i = 0; i < options.endpoints.size(); ++i) {
    const std::string& endpoint = options.endpoints[i];
    RETURN_IF_ERROR(ValidateListenAddress(absl::StrCat("etcd endpoints[", i, "]"), endpoint));
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        MakeChannelCredentials(endpoint, options.tls, options.insecure);
    if (!credentials.ok()) {
      return absl::Status(credentials.status().code(),
                          absl::StrCat("etcd endpoints[", i, "] ", endpoint, ": ",
                                       credentials.status().message()));
    }
    grpc::ChannelArguments args;
    // Back quickly once a member returns: the store is all csd writes to.
    // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is also the connect timeout: 1 s
    // gives up on a member that accepted the connection but does not
    // answer (one still starting holds handshakes for 10 s), not 20 s.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(-1);  // a page of records may pass 4 MiB
    // A member that vanishes without a reset (a partition) ends the watch
    // within 15 s. Only while calls are open: etcd (--grpc-keepalive-min-time
    // 5 s) answers pings on an idle connection with GOAWAY.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // a quiet watch sends none
    Member member;
    member.endpoint = endpoint;
    member.channel = grpc::CreateCustomChannel(endpoint, *credentials, args);
    member.kv = etcdserverpb::KV::NewStub(member.channel);
    member.lease = etcdserverpb::Lease::NewStub(member.channel);
    member.watch = etcdserverpb::Watch::NewStub(member.channel);
    client->members_.push_back(std::move(member));
  }
  return client;
}

std::string Client::endpoint() const {
  return members_[current_.load() % members_.size()].endpoint;
}

template <typename Call>
absl::Status Client::Invoke(absl::string_view method, bool idempotent, Call call) {
  const size_t first = current_.load();
  const size_t tries = idempotent ? members_.size() : 1;
  absl::Status last;
  for (size_t i = 0; i < tries; ++i) {
    const size_t index = (first + i) % members_.size();
    Member& member = members_[index];
    grpc::ClientContext context;
    context.set_deadline(Deadline(options_.timeout));
    // Waiting for the connection, within the deadline, is what makes it
    // progress: a fail-fast call on a reconnecting channel fails at once,
    // and nothing polls the connect until gRPC's 5 s backup poller does.
    context.set_wait_for_ready(true);
    grpc::Status status = call(member, context);
    if (status.ok()) {
      if (index != first % members_.size()) current_.store(index);
      return absl::OkStatus();
    }
    last = ToStatus(status, method, member.endpoint, options_.timeout);
    if (!Unreachable(status.error_code()) && !MemberCannotServe(status)) return last;
    // The next call starts at the next member, whatever this one was.
    current_.store(index + 1);
  }
  return last;
}

absl::StatusOr<etcdserverpb::RangeResponse> Client::RangeOnce(
    const etcdserverpb::RangeRequest& request) {
  etcdserverpb::RangeResponse response;
  RETURN_IF_ERROR(Invoke("Range", true, [&](Member& m, grpc::ClientContext& c) {
    return m.kv->Range(&c, request, &response);
  }));
  return response;
}

absl::StatusOr<RangeResult> Client::Range(absl::string_view key, absl::string_view range_end,
                                          int64_t revision, int64_t limit, bool keys_only) {
  RangeResult result;
  etcdserverpb::RangeRequest request;
  request.set_key(std::string(key));
  request.set_range_end(std::string(range_end));
  request.set_revision(revision);
  request.set_keys_only(keys_only);
  while (true) {
    int64_t page = options_.range_page;
    if (limit > 0) page = std::min<int64_t>(page, limit - static_cast<int64_t>(result.kvs.size()));
    request.set_limit(page);
    ASSIGN_OR_RETURN(etcdserverpb::RangeResponse response, RangeOnce(request));
    // Every later page at the first one's revision: one consistent read.
    if (result.revision == 0) {
      result.revision = response.header().revision();
      request.set_revision(revision > 0 ? revision : result.revision);
    }
    for (mvccpb::KeyValue& kv : *response.mutable_kvs()) result.kvs.push_back(std::move(kv));
    const bool full = limit > 0 && static_cast<int64_t>(result.kvs.size()) >= limit;
    if (!response.more() || full || response.kvs_size() == 0 || range_end.empty()) break;
    // Continue just after the last key read.
    request.set_key(result.kvs.back().key() + std::string(1, '\0'));
  }
  return result;
}

absl::StatusOr<int64_t> Client::Put(absl::string_view key, absl::string_view value,
                                    int64_t lease) {
  etcdserverpb::PutRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  request.set_lease(lease);
  etcdserverpb::PutResponse response;
  RETURN_IF_ERROR(Invoke("Put", false, [&](Member& m, grpc::ClientContext& c) {
    return m.kv->Put(&c, request, &response);
  }));
  return response.header().revision();
}

absl::StatusOr<etcdserverpb::DeleteRangeResponse> Client::DeleteRange(
    absl::string_view key, absl::string_view range_end) {
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(std::string(key));
  request.set_range_end(std::string(range_end));
  etcdserverpb::DeleteRangeResponse response;
  RETURN_IF_ERROR(Invoke("DeleteRange", false, [&](Member& m, grpc::ClientContext& c) {
    return m.kv->DeleteRange(&c, request, &response);
  }));
  return response;
}

absl::Status Client::CheckTxnLimits(const etcdserverpb::TxnRequest& request) const {
  const int ops = std::max({request.compare_size(), request.success_size(),
                            request.failure_size()});
  if (ops > options_.max_txn_ops) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "etcd transaction of ", ops, " operations is over etcd's limit of ",
        options_.max_txn_ops, " operations per transaction (etcd --max-txn-ops)"));
  }
  const size_t bytes = request.ByteSizeLong();
  if (static_cast<int64_t>(bytes) > options_.max_request_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "etcd transaction of ", bytes, " bytes is over etcd's limit of ",
        options_.max_request_bytes, " bytes per request (etcd --max-request-bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<etcdserverpb::TxnResponse> Client::Txn(const etcdserverpb::TxnRequest& request) {
  RETURN_IF_ERROR(CheckTxnLimits(request));
  etcdserverpb::TxnResponse response;
  RETURN_IF_ERROR(Invoke("Txn", false, [&](Member& m, grpc::ClientContext& c) {
    return m.kv->Txn(&c, request, &response);
  }));
  return response;
}

absl::Status Client::Compact(int64_t revision) {
  etcdserverpb::CompactionRequest request;
  request.set_revision(revision);
  // Not physical: etcd has applied the compaction when it answers (older
  // revisions are refused from then on); freeing the space may take longer
  // than a call's deadline on a large database.
  request.set_physical(false);
  etcdserverpb::CompactionResponse response;
  return Invoke("Compact", true, [&](Member& m, grpc::ClientContext& c) {
    return m.kv->Compact(&c, request, &response);
  });
}

absl::StatusOr<int64_t> Client::LeaseGrant(int64_t ttl_seconds) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  etcdserverpb::LeaseGrantResponse response;
  RETURN_IF_ERROR(Invoke("LeaseGrant", false, [&](Member& m, grpc::ClientContext& c) {
    return m.lease->LeaseGrant(&c, request, &response);
  }));
  if (!response.error().empty()) {
    return absl::UnavailableError(absl::StrCat("etcd at ", endpoint(),
                                               ": LeaseGrant: ", response.error()));
  }
  return response.id();
}

absl::Status Client::LeaseRevoke(int64_t id) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(id);
  etcdserverpb::LeaseRevokeResponse response;
  return Invoke("LeaseRevoke", true, [&](Member& m, grpc::ClientContext& c) {
    return m.lease->LeaseRevoke(&c, request, &response);
  });
}

absl::StatusOr<int64_t> Client::LeaseKeepAliveOnce(int64_t id) {
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(id);
  etcdserverpb::LeaseKeepAliveResponse response;
  RETURN_IF_ERROR(Invoke("LeaseKeepAlive", true, [&](Member& m, grpc::ClientContext& c) {
    auto stream = m.lease->LeaseKeepAlive(&c);
    if (!stream->Write(request) || !stream->Read(&response)) return stream->Finish();
    stream->WritesDone();
    c.TryCancel();  // one answer is all this call wants
    stream->Finish().ok();
    return grpc::Status::OK;
  }));
  return response.ttl();
}

namespace {

class GrpcWatchStream final : public Client::WatchStream {
 public:
  GrpcWatchStream(std::string endpoint, std::unique_ptr<grpc::ClientContext> context,
                  std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest,
                                                           etcdserverpb::WatchResponse>>
                      stream)
      : endpoint_(std::move(endpoint)), context_(std::move(context)), stream_(std::move(stream)) {}
  ~GrpcWatchStream() override {
    Cancel();
    stream_->Finish().ok();
  }

  absl::StatusOr<etcdserverpb::WatchResponse> Read() override {
    etcdserverpb::WatchResponse response;
    if (stream_->Read(&response)) return response;
    return absl::UnavailableError(absl::StrCat("etcd at ", endpoint_, ": watch stream ended"));
  }
  void Cancel() override { context_->TryCancel(); }

 private:
  const std::string endpoint_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::WatchRequest,
                                           etcdserverpb::WatchResponse>>
      stream_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Client::WatchStream>> Client::Watch(
    absl::string_view key, absl::string_view range_end, int64_t start_revision, bool prev_kv,
    bool progress_notify) {
  etcdserverpb::WatchRequest request;
  etcdserverpb::WatchCreateRequest* create = request.mutable_create_request();
  create->set_key(std::string(key));
  create->set_range_end(std::string(range_end));
  create->set_start_revision(start_revision);
  create->set_prev_kv(prev_kv);
  create->set_progress_notify(progress_notify);
  const size_t first = current_.load();
  absl::Status last;
  for (size_t i = 0; i < members_.size(); ++i) {
    const size_t index = (first + i) % members_.size();
    Member& member = members_[index];
    // The stream has no deadline (a watch lasts as long as its owner wants
    // it), so its start would wait for a member that is down for ever: a
    // member that does not connect within the call deadline is skipped.
    if (!member.channel->WaitForConnected(Deadline(options_.timeout))) {
      last = absl::UnavailableError(absl::StrCat("etcd at ", member.endpoint,
                                                 " is unavailable (Watch): no connection within ",
                                                 absl::FormatDuration(options_.timeout)));
      continue;
    }
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_wait_for_ready(true);
    auto stream = member.watch->Watch(context.get());
    if (!stream->Write(request)) {
      last = ToStatus(stream->Finish(), "Watch", member.endpoint, options_.timeout);
      continue;
    }
    if (index != first % members_.size()) current_.store(index);
    return std::unique_ptr<WatchStream>(
        new GrpcWatchStream(member.endpoint, std::move(context), std::move(stream)));
  }
  current_.store(first + 1);  // the next attempt starts at the next member
  return last;
}

}  // namespace cosched::etcd
