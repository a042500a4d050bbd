// Soak of csd's audit trail on etcd: audited writes at a steady rate for a
// while, printing etcd's backend size (what its quota counts), the records
// the store holds and the lines of the audit file as it goes. With the
// audit window (audit.window_records) the store's part stays bounded: etcd's
// size grows while the first window fills and the leader's compactions
// catch up, then stays flat, while the file takes every record.
//
//   audit_soak [--minutes 30] [--rate 50] [--window 10000] [--sample-s 60]
//              [--maintenance-s 60]
//
// One etcd member (fsync on) and an in-process csd on it, as one replica
// of a fleet; each write is a TagVM that changes a VM's interference class
// (one audit record), over 1000 VMs in turn.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"
#include "server/daemon/csd_server.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/trusted_plaintext.h"

namespace {

constexpr int kVms = 1000;

int64_t FileBytes(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

// Lines of the audit file and its rotated files (path.1, path.2, ...).
int64_t Lines(const std::string& path) {
  int64_t n = 0;
  for (int rotated = 0;; ++rotated) {
    const std::string file = rotated == 0 ? path : absl::StrCat(path, ".", rotated);
    if (rotated > 0 && FileBytes(file) < 0) return n;
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) ++n;
  }
}

// The records the store holds (ListAuditRecords, page by page).
int64_t StoredRecords(cosched::v1::ControlPlane::Stub& stub) {
  int64_t n = 0;
  cosched::v1::ListAuditRecordsRequest request;
  request.set_page_size(1000);
  while (true) {
    grpc::ClientContext context;
    cosched::v1::ListAuditRecordsResponse response;
    if (!stub.ListAuditRecords(&context, request, &response).ok()) return -1;
    n += response.records_size();
    if (response.next_page_token().empty()) return n;
    request.set_page_token(response.next_page_token());
  }
}

}  // namespace

int main(int argc, char** argv) {
  double minutes = 30;
  double rate = 50;
  int64_t window = 10000;
  int sample_s = 60;
  int maintenance_s = 60;
  CLI::App app{"csd's audit trail on etcd over a soak: etcd's size, the store's window, the file"};
  app.add_option("--minutes", minutes, "how long")->check(CLI::Range(0.1, 1440.0));
  app.add_option("--rate", rate, "audited writes a second")->check(CLI::Range(1.0, 5000.0));
  app.add_option("--window", window, "audit.window_records")->check(CLI::Range(1000, 10000000));
  app.add_option("--sample-s", sample_s, "seconds between samples")->check(CLI::Range(1, 3600));
  app.add_option("--maintenance-s", maintenance_s, "store.etcd.maintenance_interval_s")
      ->check(CLI::Range(10, 86400));
  CLI11_PARSE(app, argc, argv);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 2;
  google::InitGoogleLogging(argv[0]);

  cosched::testing::EtcdMemberOptions member_options;
  member_options.fsync = true;
  cosched::testing::EtcdMember member(member_options);
  if (absl::Status started = member.Start(); !started.ok()) {
    std::fprintf(stderr, "audit_soak: etcd: %s\n", started.ToString().c_str());
    return 1;
  }
  cosched::testing::TempDir dir;
  cosched::server::CsdOptions options;
  options.listen = "127.0.0.1:0";
  options.data_dir = dir.Sub("unused");
  options.metrics_listen = "";
  cosched::testing::TrustPlaintextCallers(options.authz);
  cosched::store::EtcdStoreOptions store;
  store.client = member.ClientOptions();
  store.prefix = "/cosched";
  store.maintenance.interval = absl::Seconds(maintenance_s);
  // The soak measures a cluster that is csd's alone, compacted by csd.
  store.maintenance.compact = true;
  options.etcd_store = store;
  options.audit.window_records = window;
  options.audit.file = dir.Sub("audit.jsonl");
  auto csd = cosched::server::CsdServer::Start(options);
  if (!csd.ok()) {
    std::fprintf(stderr, "audit_soak: csd: %s\n", csd.status().ToString().c_str());
    return 1;
  }
  auto stub = cosched::v1::ControlPlane::NewStub(
      grpc::CreateChannel((*csd)->address(), grpc::InsecureChannelCredentials()));
  std::printf("csd on etcd %s (fsync on), %.0f audited writes/s for %.1f min, window %lld "
              "records, compaction every %d s\n",
              member.endpoint().c_str(), rate, minutes, static_cast<long long>(window),
              maintenance_s);
  std::printf("%8s %10s %12s %12s %12s\n", "minute", "writes", "etcd db MiB", "in store",
              "in files");

  using Clock = std::chrono::steady_clock;
  const auto begin = Clock::now();
  const auto end = begin + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(minutes * 60));
  const auto period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(1.0 / rate));
  auto next_write = begin;
  auto next_sample = begin + std::chrono::seconds(sample_s);
  int64_t writes = 0;
  int64_t errors = 0;
  auto sample = [&] {
    const double minute = std::chrono::duration<double>(Clock::now() - begin).count() / 60;
    std::printf("%8.1f %10lld %12.2f %12lld %12lld\n", minute, static_cast<long long>(writes),
                static_cast<double>(FileBytes(member.db_path())) / (1 << 20),
                static_cast<long long>(StoredRecords(*stub)),
                static_cast<long long>(Lines(options.audit.file)));
    std::fflush(stdout);
  };
  while (Clock::now() < end) {
    std::this_thread::sleep_until(next_write);
    next_write += period;
    cosched::v1::TagVMRequest request;
    const int64_t vm = writes % kVms;
    request.set_vm_id(absl::StrCat("vm-", vm));
    request.set_tenant_id(absl::StrCat("tenant-", vm % 10));
    // Every pass over the VMs gives them the other interference class: a
    // change, so an audit record, each time.
    request.add_interference_classes((writes / kVms) % 2 == 0 ? "io" : "cpu");
    grpc::ClientContext context;
    cosched::v1::TagVMResponse response;
    if (!stub->TagVM(&context, request, &response).ok()) ++errors;
    ++writes;
    if (Clock::now() >= next_sample) {
      sample();
      next_sample += std::chrono::seconds(sample_s);
    }
  }
  // The file's last second.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  sample();
  std::printf("%lld writes, %lld failed\n", static_cast<long long>(writes),
              static_cast<long long>(errors));
  (*csd)->Shutdown();
  return errors == 0 ? 0 : 1;
}
