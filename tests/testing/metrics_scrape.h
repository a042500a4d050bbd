// Reading Prometheus metrics in tests: the text exposition of collectables
// (what /metrics serves), an HTTP GET of a loopback /metrics endpoint, and
// the value of one sample in such a text.
#ifndef COSCHED_TESTS_TESTING_METRICS_SCRAPE_H_
#define COSCHED_TESTS_TESTING_METRICS_SCRAPE_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/text_serializer.h"

namespace cosched::testing {

inline std::string ScrapeText(
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& c : collectables) {
    for (auto& f : c->Collect()) families.push_back(std::move(f));
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

// The whole HTTP response (status line, headers, body) of GET `path` on
// 127.0.0.1:`port`; empty when the connection fails.
inline std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET " + path +
                                " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                "Connection: close\r\n\r\n";
    if (write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, n);
    }
  }
  close(fd);
  return response;
}

// The value of sample `name{labels}` (labels exactly those given) in a text
// exposition; nullopt when absent.
inline std::optional<double> SampleValue(
    const std::string& text, const std::string& name,
    const std::map<std::string, std::string>& labels = {}) {
  std::string key = name;
  if (!labels.empty()) {
    key += "{";
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) key += ",";
      first = false;
      key += k + "=\"" + v + "\"";
    }
    key += "}";
  }
  key += " ";
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      return std::strtod(line.c_str() + key.size(), nullptr);
    }
  }
  return std::nullopt;
}

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_METRICS_SCRAPE_H_
