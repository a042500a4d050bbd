#include "tests/bench/loadgen_support.h"

#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/testing/trusted_plaintext.h"

namespace cosched::bench {
namespace {

using std::chrono::milliseconds;

// The value of a "Key:   123 kB" line of /proc/PID/status; 0 when absent.
int64_t StatusField(absl::string_view status, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) {
      continue;
    }
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    int64_t value = 0;
    if (absl::SimpleAtoi(line, &value)) return value;
  }
  return 0;
}

bool Serving(const std::string& address) {
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + milliseconds(500));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  return health->Check(&context, request, &response).ok();
}

}  // namespace

LatencySummary Summarize(std::vector<int64_t> micros) {
  LatencySummary summary;
  summary.count = micros.size();
  if (micros.empty()) return summary;
  std::sort(micros.begin(), micros.end());
  auto rank = [&](double q) {
    size_t i = static_cast<size_t>(q * static_cast<double>(micros.size()));
    return micros[std::min(i, micros.size() - 1)] / 1000.0;
  };
  summary.p50_ms = rank(0.50);
  summary.p99_ms = rank(0.99);
  summary.max_ms = micros.back() / 1000.0;
  return summary;
}

absl::StatusOr<ProcessUsage> ReadProcessUsage(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid);
  ASSIGN_OR_RETURN(std::string status, ReadFileToString(dir + "/status"));
  ASSIGN_OR_RETURN(std::string stat, ReadFileToString(dir + "/stat"));
  ProcessUsage usage;
  usage.rss_kib = StatusField(status, "VmRSS");
  usage.peak_rss_kib = StatusField(status, "VmHWM");
  usage.threads = static_cast<int>(StatusField(status, "Threads"));
  // The command name may hold spaces and parentheses: fields count from
  // the last ')'. After it come state (field 3) ... utime (14), stime (15).
  size_t close = stat.rfind(')');
  if (close == std::string::npos) {
    return absl::UnavailableError(absl::StrCat(dir, "/stat has no ')'"));
  }
  std::vector<absl::string_view> fields = absl::StrSplit(
      absl::string_view(stat).substr(close + 1), ' ', absl::SkipEmpty());
  int64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::UnavailableError(
        absl::StrCat(dir, "/stat has no utime and stime fields"));
  }
  usage.cpu_seconds =
      static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  return usage;
}

absl::Status RaiseOpenFileLimit(uint64_t wanted) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return ErrnoStatus(errno, "cannot read", "RLIMIT_NOFILE");
  }
  if (limit.rlim_cur >= wanted) return absl::OkStatus();
  limit.rlim_cur = wanted;
  const rlim_t hard = limit.rlim_max;
  limit.rlim_max = std::max<rlim_t>(hard, wanted);
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return ErrnoStatus(
        errno, absl::StrCat("cannot raise to ", wanted),
        absl::StrCat("RLIMIT_NOFILE (hard limit ", hard,
                     "; raising it needs CAP_SYS_RESOURCE)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return ErrnoStatus(errno, "cannot create", "a TCP socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  int err = errno;
  close(fd);
  if (!ok) return ErrnoStatus(err, "cannot bind", "127.0.0.1:0");
  return ntohs(addr.sin_port);
}

absl::StatusOr<std::string> HttpGet(const std::string& address,
                                    const std::string& path) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not HOST:PORT"));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not an IPv4 address"));
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return ErrnoStatus(errno, "cannot create", "a TCP socket");
  // A scrape of a busy csd takes a while; a hung one must not hang the run.
  timeval timeout{.tv_sec = 30, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    return ErrnoStatus(err, "cannot connect to", address);
  }
  // HTTP/1.0 and Connection: close, so the body ends with the connection.
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", address,
                   "\r\nConnection: close\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    int err = errno;
    close(fd);
    return ErrnoStatus(err, "cannot send a request to", address);
  }
  std::string response;
  char buffer[65536];
  while (true) {
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return ErrnoStatus(err, "cannot read the answer of", address);
    }
    if (n == 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (!absl::StartsWith(response, "HTTP/1.") || body == std::string::npos ||
      response.find(" 200 ") > response.find("\r\n")) {
    return absl::UnavailableError(absl::StrCat(
        "GET ", path, " from ", address, ": ", response.substr(0, response.find("\r\n"))));
  }
  return response.substr(body + 4);
}

double SumOfMetric(const std::string& text, const std::string& name) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, name)) continue;
    // "name 1", "name{labels} 1"; not "name_suffix ...".
    if (line.empty() || (line.front() != ' ' && line.front() != '{')) continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    if (space != absl::string_view::npos &&
        absl::SimpleAtod(line.substr(space + 1), &value)) {
      sum += value;
    }
  }
  return sum;
}

std::map<std::string, double> MetricByLabel(const std::string& text, const std::string& name,
                                            const std::string& label) {
  std::map<std::string, double> by_value;
  const std::string wanted = absl::StrCat(label, "=\"");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, "{")) continue;
    const size_t close = line.find('}');
    if (close == absl::string_view::npos) continue;
    const absl::string_view labels = line.substr(0, close);
    // At the start of the labels or after a comma: not a label ending in it.
    size_t at = labels.find(wanted);
    while (at != absl::string_view::npos && at != 0 && labels[at - 1] != ',') {
      at = labels.find(wanted, at + 1);
    }
    if (at == absl::string_view::npos) continue;
    const absl::string_view rest = labels.substr(at + wanted.size());
    const size_t end = rest.find('"');
    double value = 0;
    if (end == absl::string_view::npos ||
        !absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(close + 1)), &value)) {
      continue;
    }
    by_value[std::string(rest.substr(0, end))] += value;
  }
  return by_value;
}

absl::StatusOr<std::unique_ptr<CsdProcess>> CsdProcess::Start(
    const std::string& binary, bool serve_metrics, const std::string& extra_config) {
  std::string pattern = "/tmp/csd-load-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    return ErrnoStatus(errno, "cannot create", pattern);
  }
  std::unique_ptr<CsdProcess> csd(new CsdProcess());
  csd->dir_ = pattern;
  csd->log_path_ = csd->dir_ + "/csd.log";
  ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
  csd->address_ = absl::StrCat("127.0.0.1:", port);
  std::string metrics_listen = "off";
  if (serve_metrics) {
    ASSIGN_OR_RETURN(int metrics_port, FreeLoopbackPort());
    csd->metrics_address_ = metrics_listen = absl::StrCat("127.0.0.1:", metrics_port);
  }
  const std::string data_dir = csd->dir_ + "/data";
  // The load's clients and agents talk plaintext TCP: trusted explicitly,
  // as csd's defaults do not (tests/testing/trusted_plaintext.h).
  const std::string config = csd->dir_ + "/csd.yaml";
  std::ofstream(config) << cosched::testing::kTrustedPlaintextYaml
                        << "local_socket: {path: \"off\"}\n"
                        << extra_config;
  int log = open(csd->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (log < 0) return ErrnoStatus(errno, "cannot create", csd->log_path_);
  csd->pid_ = fork();
  if (csd->pid_ == 0) {
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    execl(binary.c_str(), "csd", "--config", config.c_str(), "--listen", csd->address_.c_str(),
          "--data-dir", data_dir.c_str(), "--metrics-listen", metrics_listen.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(log);
  if (csd->pid_ < 0) return ErrnoStatus(errno, "cannot fork for", binary);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!Serving(csd->address_)) {
    if (waitpid(csd->pid_, nullptr, WNOHANG) == csd->pid_) {
      csd->pid_ = -1;
      return absl::UnavailableError(
          absl::StrCat(binary, " exited at start: ", csd->LogTail()));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::UnavailableError(
          absl::StrCat(binary, " does not answer on ", csd->address_,
                       " after 20 s: ", csd->LogTail()));
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  return csd;
}

std::string CsdProcess::LogTail() const {
  auto log = ReadFileToString(log_path_);
  if (!log.ok()) return std::string(log.status().message());
  return log->size() > 2000 ? log->substr(log->size() - 2000) : *log;
}

CsdProcess::~CsdProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    // csd gives streams 2 s to end on shutdown; much more than that is a
    // hang.
    bool reaped = false;
    for (int i = 0; i < 100 && !reaped; ++i) {
      reaped = waitpid(pid_, nullptr, WNOHANG) == pid_;
      if (!reaped) std::this_thread::sleep_for(milliseconds(100));
    }
    if (!reaped) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

}  // namespace cosched::bench
