// Silences the logs of the code under fuzzing: protobuf complains about
// every invalid UTF-8 string it refuses and the agent warns about odd
// streams, which would bury libFuzzer's own output (and slow it down).
// What an input does is checked by the fuzzer, not read from logs.
#ifndef COSCHED_FUZZ_QUIET_LOGS_H_
#define COSCHED_FUZZ_QUIET_LOGS_H_

#include "glog/logging.h"
#include "google/protobuf/stubs/logging.h"

namespace cosched::fuzz {

inline void QuietLogs() {
  google::protobuf::SetLogHandler(nullptr);
  FLAGS_minloglevel = google::GLOG_FATAL;
}

}  // namespace cosched::fuzz

#endif  // COSCHED_FUZZ_QUIET_LOGS_H_
