// csd's command line: flags over the config file, checks, start, and the
// wait for a stop, as one function that csd's main calls and tests call in
// process. Start-up is an ordered list of named steps over one state, as in
// Falco's app: each step says what it did wrong, and the first failure ends
// the run with its exit code.
#ifndef COSCHED_SERVER_DAEMON_CSD_MAIN_H_
#define COSCHED_SERVER_DAEMON_CSD_MAIN_H_

#include <functional>
#include <ostream>

#include "absl/status/status.h"

namespace cosched::server {

class CsdServer;

// Exit codes of RunCsdMain.
inline constexpr int kCsdExitOk = 0;
// The server could not start (a TLS file, an address in use, the store).
inline constexpr int kCsdExitStartFailed = 1;
// Bad flags, a bad config file or a bad value in it: nothing was started.
inline constexpr int kCsdExitUsage = 2;

// What the process gives RunCsdMain; tests give their own.
struct CsdMainEnvironment {
  // Runs once csd serves, and returns when it is to stop. The process's
  // default (ProcessCsdEnvironment) blocks SIGINT and SIGTERM before csd
  // starts and waits for one of them.
  // `reload` reads the config file again (with the same flags over it) and
  // applies it (CsdServer::Reload), logging what changed or why nothing
  // did; its status is for tests. The process's default reloads on SIGHUP.
  std::function<void(CsdServer& server, const std::function<absl::Status()>& reload)>
      serve_until_stopped;
  // Called before csd starts any thread (the process blocks its signals
  // there, so that only serve_until_stopped receives them). May be empty.
  std::function<void()> before_start;
};

CsdMainEnvironment ProcessCsdEnvironment();

// `csd [--config F] [--listen A] [--data-dir D] [--insecure]
// [--metrics-listen A|off] [--socket PATH|off]`: flags override the file. Prints errors as one
// line on `err` ("csd: <file>:<line>: <rule>" when the file set the value)
// and returns the exit code.
//
// `csd store backup|restore|migrate ...` runs the store tools instead
// (RunCsdStoreMain).
int RunCsdMain(int argc, const char* const* argv, const CsdMainEnvironment& env,
               std::ostream& out, std::ostream& err);

// Exit code of a store tool that ran and failed (the store or a file).
inline constexpr int kCsdExitToolFailed = 1;

// `csd store ...` (server/csd_main_store.cc), argv[0] being "store":
//   backup  (--config F | --from LOCATION) --to FILE
//   restore --from FILE (--config F | --to LOCATION) [--replace] [--resume-floor N]
//   migrate --from sqlite:DIR (--config F | --to etcd:...) [--replace]
// LOCATION is sqlite:DIR or etcd:HOST:PORT[,HOST:PORT...]/PREFIX
// (store/store_tools.h); --config uses the file's store (store.etcd, or
// SQLite in data_dir). Prints one line of what it did on `out`, errors as
// "csd store: ..." on `err`; exit 0, kCsdExitUsage for bad arguments or
// config, kCsdExitToolFailed when the tool failed.
int RunCsdStoreMain(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_DAEMON_CSD_MAIN_H_
