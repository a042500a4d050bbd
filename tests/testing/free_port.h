// Loopback ports for servers that tests start as processes of their own.
#ifndef COSCHED_TESTS_TESTING_FREE_PORT_H_
#define COSCHED_TESTS_TESTING_FREE_PORT_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace cosched::testing {

// A port that was free a moment ago (bound to port 0, then closed). Another
// process may take it before the server binds it: callers that can retry
// with a new port do (EtcdMember::Start).
inline int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_FREE_PORT_H_
