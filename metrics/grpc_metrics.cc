#include "metrics/grpc_metrics.h"

#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cosched::metrics {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;

// Unary latencies span fast reads (sub-millisecond) to writes that wait for
// an fsync under load, up to the agents' 10 s deadline.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,  0.5,    1,     2.5,  5,     10};
  return *buckets;
}

std::string Prefix(GrpcMetrics::Side side) {
  return side == GrpcMetrics::Side::kServer ? "cosched_grpc_server_"
                                            : "cosched_grpc_client_";
}

// One call seen by a server interceptor: started when gRPC creates the
// interceptor (the call arrived), handled when the status is sent.
class ServerCallInterceptor : public grpc::experimental::Interceptor {
 public:
  ServerCallInterceptor(GrpcMetrics* metrics, grpc::experimental::ServerRpcInfo* info)
      : series_(metrics->SeriesFor(info->method())),
        unary_(info->type() ==
               grpc::experimental::ServerRpcInfo::Type::UNARY),
        start_(std::chrono::steady_clock::now()) {
    series_->Started();
  }

  // A call that ends without sending a status (the client went away before
  // the service finished) still counts, as CANCELLED.
  ~ServerCallInterceptor() override {
    if (!handled_) Handled(grpc::StatusCode::CANCELLED);
  }

  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      Handled(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  void Handled(int code) {
    handled_ = true;
    const std::chrono::duration<double> took =
        std::chrono::steady_clock::now() - start_;
    series_->Handled(code, took.count(), unary_);
  }

  GrpcMetrics::MethodSeries* const series_;
  const bool unary_;
  const std::chrono::steady_clock::time_point start_;
  bool handled_ = false;
};

class ServerFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ServerFactory(GrpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new ServerCallInterceptor(metrics_, info);
  }

 private:
  GrpcMetrics* const metrics_;
};

// One call seen by a client interceptor: handled when its status arrives
// (gRPC always delivers one on the client side).
class ClientCallInterceptor : public grpc::experimental::Interceptor {
 public:
  ClientCallInterceptor(GrpcMetrics* metrics, grpc::experimental::ClientRpcInfo* info)
      : series_(metrics->SeriesFor(info->method())),
        unary_(info->type() ==
               grpc::experimental::ClientRpcInfo::Type::UNARY),
        start_(std::chrono::steady_clock::now()) {
    series_->Started();
  }

  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_STATUS)) {
      const std::chrono::duration<double> took =
          std::chrono::steady_clock::now() - start_;
      series_->Handled(methods->GetRecvStatus()->error_code(), took.count(),
                       unary_);
    }
    methods->Proceed();
  }

 private:
  GrpcMetrics::MethodSeries* const series_;
  const bool unary_;
  const std::chrono::steady_clock::time_point start_;
};

class ClientFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ClientFactory(GrpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new ClientCallInterceptor(metrics_, info);
  }

 private:
  GrpcMetrics* const metrics_;
};

}  // namespace

std::pair<std::string, std::string> GrpcMetrics::Labels(
    absl::string_view path) const {
  if (path.size() > 1 && path.front() == '/') path.remove_prefix(1);
  const size_t slash = path.find('/');
  if (slash != absl::string_view::npos && known_methods_.count(path) > 0) {
    return {std::string(path.substr(0, slash)),
            std::string(path.substr(slash + 1))};
  }
  return {"unknown", "unknown"};
}

std::string RpcCodeLabel(int code) {
  if (code < 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return "UNKNOWN";
  }
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

GrpcMetrics::GrpcMetrics(
    prometheus::Registry& registry, Side side,
    const std::vector<const google::protobuf::FileDescriptor*>& api_files)
    : started_(prometheus::BuildCounter()
                   .Name(Prefix(side) + "started_total")
                   .Help(side == Side::kServer
                             ? "gRPC calls that reached the server."
                             : "gRPC calls started by this client.")
                   .Register(registry)),
      handled_(prometheus::BuildCounter()
                   .Name(Prefix(side) + "handled_total")
                   .Help("gRPC calls completed, by status code.")
                   .Register(registry)),
      handling_seconds_(
          prometheus::BuildHistogram()
              .Name(Prefix(side) + "handling_seconds")
              .Help(side == Side::kServer
                        ? "Time from a unary call's arrival to its status."
                        : "Time from a unary call's start to its status, as "
                          "the client sees it.")
              .Register(registry)) {
  for (const google::protobuf::FileDescriptor* file : api_files) {
    for (int i = 0; i < file->service_count(); ++i) {
      const google::protobuf::ServiceDescriptor* service = file->service(i);
      for (int j = 0; j < service->method_count(); ++j) {
        known_methods_.insert(
            absl::StrCat(service->full_name(), "/", service->method(j)->name()));
      }
    }
  }
  // gRPC implements health checking itself, outside the protobuf pool.
  known_methods_.insert("grpc.health.v1.Health/Check");
  known_methods_.insert("grpc.health.v1.Health/Watch");
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
GrpcMetrics::MakeServerInterceptorFactory() {
  return std::make_unique<ServerFactory>(this);
}

std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
GrpcMetrics::MakeClientInterceptorFactory() {
  return std::make_unique<ClientFactory>(this);
}

GrpcMetrics::MethodSeries* GrpcMetrics::SeriesFor(absl::string_view path) {
  auto labels = Labels(path);
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = series_.try_emplace(labels);
  MethodSeries& series = it->second;
  if (inserted) {
    series.metrics_ = this;
    series.service_ = labels.first;
    series.method_ = labels.second;
    const prometheus::Labels method_labels = {{"service", labels.first},
                                              {"method", labels.second}};
    series.started_ = &started_.Add(method_labels);
    series.handling_seconds_ =
        &handling_seconds_.Add(method_labels, LatencyBuckets());
  }
  return &series;
}

void GrpcMetrics::MethodSeries::Handled(int code, double seconds, bool unary) {
  const size_t index =
      code >= 0 && static_cast<size_t>(code) < handled_.size()
          ? static_cast<size_t>(code)
          : static_cast<size_t>(grpc::StatusCode::UNKNOWN);
  prometheus::Counter* counter;
  {
    std::lock_guard<std::mutex> lock(metrics_->mu_);
    if (handled_[index] == nullptr) {
      handled_[index] = &metrics_->handled_.Add(
          {{"service", service_},
           {"method", method_},
           {"code", RpcCodeLabel(static_cast<int>(index))}});
    }
    counter = handled_[index];
  }
  counter->Increment();
  if (unary) handling_seconds_->Observe(seconds);
}

}  // namespace cosched::metrics
