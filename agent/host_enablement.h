// What csd last said about setting cookies on this host (HostEnablement:
// enforce, waived, or not enabled by a staged rollout), from its
// Register and Report answers. Kept in
// the state dir, so that a restarted agent starts from it rather than
// making cookies csd waived until its first answer; an agent
// that never heard from csd enforces. Thread-safe.
#ifndef COSCHED_AGENT_HOST_ENABLEMENT_H_
#define COSCHED_AGENT_HOST_ENABLEMENT_H_

#include <memory>
#include <mutex>
#include <string>

#include "absl/time/time.h"
#include "cosched/v1/types.pb.h"
#include "host/state_fs.h"

namespace cosched::agent {

class HostEnablementState {
 public:
  // The file's name inside the state dir.
  static constexpr char kStateFileName[] = "enablement.pb";

  // `state_file` empty: kept in memory only.
  HostEnablementState(std::string state_file, std::shared_ptr<host::StateFs> fs);

  // Reads the state file; a missing or unreadable one leaves "enforce"
  // (logged when it is not simply missing).
  void Load();
  // A first start (nothing kept): until csd's first answer, or for `wait`
  // at most, Get() is NOT_ENABLED, so that a host csd holds (a staged
  // rollout's wait-for-rollout) never gets a cookie; past `wait` without
  // an answer, enforce. Call after Load, before the first pass.
  void AwaitFirstAnswer(absl::Duration wait);
  // Whether Load found csd's answer of an earlier run.
  bool kept() const;
  // What csd said last; UNSPECIFIED (an older csd, or none yet) is enforce.
  v1::HostEnablement Get() const;
  // Whether cookies are to be set.
  bool Enforce() const;
  // Takes csd's answer; true when it changed (the caller starts a pass).
  // Saved before it is returned; a failed save is logged and the value
  // used all the same.
  bool Set(const v1::HostEnablement& enablement);

 private:
  const std::string state_file_;
  const std::shared_ptr<host::StateFs> fs_;
  // NOT_ENABLED while a first start waits for csd's first answer.
  bool WaitingLocked() const;

  mutable std::mutex mu_;
  v1::HostEnablement current_;
  bool kept_ = false;
  bool answered_ = false;
  absl::Time first_answer_until_ = absl::InfinitePast();
  absl::Duration first_answer_wait_;
};

}  // namespace cosched::agent

#endif  // COSCHED_AGENT_HOST_ENABLEMENT_H_
