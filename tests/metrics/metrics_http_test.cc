#include "metrics/metrics_http.h"

#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "cosched/v1/agent.pb.h"
#include "cosched/v1/control_plane.pb.h"
#include "metrics/grpc_metrics.h"
#include "metrics/scrape_gauges.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "tests/testing/metrics_scrape.h"
#include "tests/testing/status_matchers.h"

namespace cosched::metrics {
namespace {

using ::testing::HasSubstr;
using cosched::testing::HttpGet;
using cosched::testing::SampleValue;
using cosched::testing::ScrapeText;

TEST(MetricsHttpServer, ServesEveryCollectableAtMetrics) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& counter = prometheus::BuildCounter()
                      .Name("cosched_test_things_total")
                      .Help("things")
                      .Register(*registry)
                      .Add({{"kind", "a"}});
  counter.Increment(3);
  auto gauges = std::make_shared<ScrapeGauges>();
  int reads = 0;
  gauges->Add("cosched_test_level", "level", [&reads] { return ++reads; });

  auto server = MetricsHttpServer::Start("127.0.0.1:0", {registry, gauges});
  ASSERT_OK(server);
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(),
            "127.0.0.1:" + std::to_string((*server)->port()));

  const std::string response = HttpGet((*server)->port(), "/metrics");
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_EQ(SampleValue(response, "cosched_test_things_total", {{"kind", "a"}}), 3);
  EXPECT_THAT(response, HasSubstr("# TYPE cosched_test_level gauge"));
  // Scrape-time gauges are read at each scrape.
  const std::string again = HttpGet((*server)->port(), "/metrics");
  EXPECT_EQ(SampleValue(again, "cosched_test_level"), 2);
}

TEST(MetricsHttpServer, BusyAddressIsAnErrorNamingIt) {
  // Hold a port with a plain listening socket.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string busy = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  auto server = MetricsHttpServer::Start(busy, {});
  close(fd);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(server.status().message(), HasSubstr(busy));
}

TEST(MetricsHttpServer, MalformedAddressIsInvalidArgument) {
  for (const char* bad : {"9464", "localhost:9464", "127.0.0.1:http",
                          "127.0.0.1:70000", "[::1:9464", ":9464"}) {
    auto server = MetricsHttpServer::Start(bad, {});
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(server.status().message(), HasSubstr("metrics_listen")) << bad;
  }
}

TEST(MetricsHttpServer, OffMeansNotServed) {
  EXPECT_EQ(NormalizeMetricsListen("off"), "");
  EXPECT_EQ(NormalizeMetricsListen(""), "");
  EXPECT_EQ(NormalizeMetricsListen("0.0.0.0:9464"), "0.0.0.0:9464");
}

TEST(ScrapeGauges, FamiliesCarryTheirLabels) {
  auto gauges = std::make_shared<ScrapeGauges>();
  gauges->AddFamily("cosched_test_vms", "vms", [] {
    return std::vector<ScrapeGauges::Sample>{{{{"state", "enforced"}}, 4},
                                             {{{"state", "failed"}}, 1}};
  });
  const std::string text = ScrapeText({gauges});
  EXPECT_EQ(SampleValue(text, "cosched_test_vms", {{"state", "enforced"}}), 4);
  EXPECT_EQ(SampleValue(text, "cosched_test_vms", {{"state", "failed"}}), 1);
}

std::vector<const google::protobuf::FileDescriptor*> ApiFiles() {
  return {v1::ReportRequest::descriptor()->file(),
          v1::TagVMRequest::descriptor()->file()};
}

TEST(GrpcMetrics, LabelsAreBoundedToKnownMethods) {
  prometheus::Registry registry;
  GrpcMetrics rpc(registry, GrpcMetrics::Side::kServer, ApiFiles());
  EXPECT_EQ(rpc.Labels("/cosched.v1.AgentService/Report"),
            std::make_pair(std::string("cosched.v1.AgentService"),
                           std::string("Report")));
  EXPECT_EQ(rpc.Labels("/cosched.v1.ControlPlane/TagVM").second, "TagVM");
  EXPECT_EQ(rpc.Labels("/grpc.health.v1.Health/Check").second, "Check");
  EXPECT_EQ(rpc.Labels("/cosched.v1.AgentService/NoSuchMethod").first, "unknown");
  EXPECT_EQ(rpc.Labels("/made.up.Service/X").second, "unknown");
  EXPECT_EQ(rpc.Labels("garbage").first, "unknown");
  // Only the services it was given.
  GrpcMetrics agent_side(registry, GrpcMetrics::Side::kClient,
                         {v1::ReportRequest::descriptor()->file()});
  EXPECT_EQ(agent_side.Labels("/cosched.v1.ControlPlane/TagVM").first, "unknown");
  EXPECT_EQ(RpcCodeLabel(0), "OK");
  EXPECT_EQ(RpcCodeLabel(3), "INVALID_ARGUMENT");
  EXPECT_EQ(RpcCodeLabel(99), "UNKNOWN");
}

TEST(GrpcMetrics, CountsByCodeAndObservesUnaryLatency) {
  auto registry = std::make_shared<prometheus::Registry>();
  GrpcMetrics rpc(*registry, GrpcMetrics::Side::kServer, ApiFiles());
  GrpcMetrics::MethodSeries* tag = rpc.SeriesFor("/cosched.v1.ControlPlane/TagVM");
  tag->Started();
  tag->Handled(0, 0.002, /*unary=*/true);
  tag->Started();
  tag->Handled(3, 0.001, /*unary=*/true);
  GrpcMetrics::MethodSeries* watch =
      rpc.SeriesFor("/cosched.v1.AgentService/WatchAssignments");
  watch->Started();
  watch->Handled(1, 3600, /*unary=*/false);
  // Two made-up paths share one series.
  EXPECT_EQ(rpc.SeriesFor("/x.Y/Z"), rpc.SeriesFor("/a.B/C"));

  const std::string text = ScrapeText({registry});
  const std::map<std::string, std::string> tag_labels = {
      {"service", "cosched.v1.ControlPlane"}, {"method", "TagVM"}};
  EXPECT_EQ(SampleValue(text, "cosched_grpc_server_started_total", tag_labels), 2);
  auto with_code = [&](const char* code) {
    auto labels = tag_labels;
    labels["code"] = code;
    return labels;
  };
  EXPECT_EQ(SampleValue(text, "cosched_grpc_server_handled_total", with_code("OK")), 1);
  EXPECT_EQ(SampleValue(text, "cosched_grpc_server_handled_total",
                        with_code("INVALID_ARGUMENT")), 1);
  EXPECT_EQ(SampleValue(text, "cosched_grpc_server_handling_seconds_count", tag_labels), 2);
  EXPECT_DOUBLE_EQ(*SampleValue(text, "cosched_grpc_server_handling_seconds_sum",
                                tag_labels), 0.003);
  // A stream is counted, but its lifetime is not a latency.
  const std::map<std::string, std::string> watch_labels = {
      {"service", "cosched.v1.AgentService"}, {"method", "WatchAssignments"}};
  EXPECT_EQ(SampleValue(text, "cosched_grpc_server_handling_seconds_count",
                        watch_labels), 0);
  auto cancelled = watch_labels;
  cancelled["code"] = "CANCELLED";
  EXPECT_EQ(SampleValue(text, "cosched_grpc_server_handled_total", cancelled), 1);
}

}  // namespace
}  // namespace cosched::metrics
