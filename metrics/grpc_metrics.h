// Counts and latencies of gRPC calls, by service, method and status code,
// recorded by interceptors so the services themselves stay unaware of them.
// Names follow go-grpc-prometheus with the cosched_ prefix:
//   cosched_grpc_<side>_started_total{service,method}
//   cosched_grpc_<side>_handled_total{service,method,code}
//   cosched_grpc_<side>_handling_seconds{service,method}  (unary calls only:
//     a stream's lifetime is not a latency)
// with <side> "server" (csd) or "client" (cs-agent's calls to csd) and code
// the upper-case gRPC code name ("OK", "INVALID_ARGUMENT", ...).
#ifndef COSCHED_METRICS_GRPC_METRICS_H_
#define COSCHED_METRICS_GRPC_METRICS_H_

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/client_interceptor.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace cosched::metrics {

// The label value of a gRPC status code: "OK", "INVALID_ARGUMENT", ...
std::string RpcCodeLabel(int code);

// Thread-safe. Must outlive every server or channel given its interceptors.
class GrpcMetrics {
 public:
  enum class Side { kServer, kClient };

  // Registers the three families in `registry`. Calls are labelled with
  // their service and method when the method belongs to a service of
  // `api_files` (or is gRPC's health check); any other path is labelled
  // ("unknown", "unknown"), so a client calling made-up paths cannot grow
  // the label set.
  GrpcMetrics(prometheus::Registry& registry, Side side,
              const std::vector<const google::protobuf::FileDescriptor*>& api_files);

  // Service and method labels of a call's path ("/pkg.Service/Method").
  std::pair<std::string, std::string> Labels(absl::string_view path) const;

  // For ServerBuilder::experimental().SetInterceptorCreators (kServer).
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  MakeServerInterceptorFactory();
  // For grpc::experimental::CreateCustomChannelWithInterceptors (kClient).
  std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
  MakeClientInterceptorFactory();

  // The series of one method, made on first use and kept: there are as
  // many as the program has methods (see Labels).
  class MethodSeries {
   public:
    void Started() { started_->Increment(); }
    // Its status `code` after `seconds` (latency observed when `unary`).
    void Handled(int code, double seconds, bool unary);

   private:
    friend class GrpcMetrics;
    GrpcMetrics* metrics_ = nullptr;
    std::string service_;
    std::string method_;
    prometheus::Counter* started_ = nullptr;
    prometheus::Histogram* handling_seconds_ = nullptr;
    // By code, made on first use (under metrics_->mu_).
    std::array<prometheus::Counter*, 17> handled_{};
  };

  // The series of a call's path ("/pkg.Service/Method").
  MethodSeries* SeriesFor(absl::string_view path);

 private:
  // "pkg.Service/Method" of every labelled method.
  std::set<std::string, std::less<>> known_methods_;
  std::mutex mu_;
  std::map<std::pair<std::string, std::string>, MethodSeries> series_;
  prometheus::Family<prometheus::Counter>& started_;
  prometheus::Family<prometheus::Counter>& handled_;
  prometheus::Family<prometheus::Histogram>& handling_seconds_;
};

}  // namespace cosched::metrics

#endif  // COSCHED_METRICS_GRPC_METRICS_H_
