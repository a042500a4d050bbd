// A loopback TCP proxy that can cut the network without closing anything:
// while partitioned, no byte crosses in either direction and new
// connections are accepted but go nowhere, as when packets are dropped on
// the way. Connections see neither a reset nor an end: only keepalives and
// deadlines can tell, which is what a partition tests.
#ifndef COSCHED_TESTS_TESTING_PARTITION_PROXY_H_
#define COSCHED_TESTS_TESTING_PARTITION_PROXY_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace cosched::testing {

class PartitionProxy {
 public:
  // Listens on 127.0.0.1 (a free port) and forwards to 127.0.0.1:target_port.
  explicit PartitionProxy(int target_port) : target_port_(target_port) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listener_ < 0 || bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listener_, 64) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~PartitionProxy() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (Link& l : links_) {
      close(l.client);
      close(l.server);
    }
    if (listener_ >= 0) close(listener_);
  }
  PartitionProxy(const PartitionProxy&) = delete;
  PartitionProxy& operator=(const PartitionProxy&) = delete;

  // 0 when the proxy could not listen.
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  void Partition() { partitioned_ = true; }
  void Heal() { partitioned_ = false; }
  // Closes every connection now, as a peer's restart would: each side sees
  // its connection end at once. Returns once they are closed.
  void Cut() {
    cut_ = true;
    while (cut_ && !stop_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Connections accepted so far.
  int connections() const { return connections_; }

 private:
  // One proxied connection; `pending[d]` holds bytes read from one side and
  // not yet written to the other (d = 0: client to server).
  struct Link {
    int client = -1;
    int server = -1;
    std::string pending[2];
    bool open = true;
  };

  int Connect() const {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd);
      return -1;
    }
    if (fd >= 0) fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
  }

  // Moves what `from` has to `to` through `buffer`; false when the link ends.
  static bool Pump(int from, int to, std::string& buffer, bool readable) {
    if (readable) {
      char chunk[16384];
      ssize_t n = read(from, chunk, sizeof chunk);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return false;
      if (n > 0) buffer.append(chunk, static_cast<size_t>(n));
    }
    while (!buffer.empty()) {
      ssize_t n = write(to, buffer.data(), buffer.size());
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      buffer.erase(0, static_cast<size_t>(n));
    }
    return true;
  }

  void Run() {
    while (!stop_) {
      if (cut_) {
        for (Link& l : links_) {
          close(l.client);
          close(l.server);
        }
        links_.clear();
        cut_ = false;
      }
      std::vector<pollfd> fds{{listener_, POLLIN, 0}};
      const bool flowing = !partitioned_;
      if (flowing) {
        for (Link& l : links_) {
          if (!l.open) continue;
          fds.push_back({l.client, static_cast<short>(POLLIN | (l.pending[1].empty() ? 0 : POLLOUT)), 0});
          fds.push_back({l.server, static_cast<short>(POLLIN | (l.pending[0].empty() ? 0 : POLLOUT)), 0});
        }
      }
      if (poll(fds.data(), fds.size(), 20) < 0) continue;
      if (fds[0].revents & POLLIN) {
        int client = accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (client >= 0) {
          ++connections_;
          int server = Connect();
          if (server < 0) {
            close(client);
          } else {
            links_.push_back({client, server, {}, true});
          }
        }
      }
      if (!flowing) continue;
      size_t i = 1;
      for (Link& l : links_) {
        if (!l.open) continue;
        const pollfd& c = fds[i++];
        const pollfd& s = fds[i++];
        const bool client_in = c.revents & (POLLIN | POLLHUP | POLLERR);
        const bool server_in = s.revents & (POLLIN | POLLHUP | POLLERR);
        if (!Pump(l.client, l.server, l.pending[0], client_in) ||
            !Pump(l.server, l.client, l.pending[1], server_in)) {
          close(l.client);
          close(l.server);
          l.client = l.server = -1;
          l.open = false;
        }
      }
      std::erase_if(links_, [](const Link& l) { return !l.open; });
    }
  }

  const int target_port_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> partitioned_{false};
  std::atomic<bool> cut_{false};
  std::atomic<int> connections_{0};
  std::vector<Link> links_;  // the proxy thread's only
  std::thread thread_;
};

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_PARTITION_PROXY_H_
