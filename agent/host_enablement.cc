#include "agent/host_enablement.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"

namespace cosched::agent {

HostEnablementState::HostEnablementState(std::string state_file,
                                         std::shared_ptr<host::StateFs> fs)
    : state_file_(std::move(state_file)), fs_(std::move(fs)) {}

void HostEnablementState::Load() {
  if (state_file_.empty()) return;
  absl::StatusOr<std::string> text = fs_->ReadFile(state_file_);
  if (!text.ok()) {
    if (!absl::IsNotFound(text.status())) {
      LOG(WARNING) << "cannot read " << state_file_ << " (" << text.status()
                   << "): setting cookies until csd says otherwise";
    }
    return;
  }
  v1::HostEnablement loaded;
  if (!loaded.ParseFromString(*text)) {
    LOG(WARNING) << state_file_ << " is corrupt: setting cookies until csd says otherwise";
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  current_ = std::move(loaded);
  kept_ = true;
}

void HostEnablementState::AwaitFirstAnswer(absl::Duration wait) {
  std::lock_guard<std::mutex> lock(mu_);
  first_answer_until_ = absl::Now() + wait;
  first_answer_wait_ = wait;
}

bool HostEnablementState::kept() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_;
}

bool HostEnablementState::WaitingLocked() const {
  return !answered_ && !kept_ && absl::Now() < first_answer_until_;
}

v1::HostEnablement HostEnablementState::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (WaitingLocked()) {
    v1::HostEnablement waiting;
    waiting.set_state(v1::HostEnablement::STATE_NOT_ENABLED);
    waiting.set_reason(absl::StrCat(
        "a first start: no cookie until csd's first answer, for at most ",
        absl::FormatDuration(first_answer_wait_),
        " (csd may hold this host for a staged rollout)"));
    return waiting;
  }
  return current_;
}

bool HostEnablementState::Enforce() const {
  const v1::HostEnablement now = Get();
  return now.state() != v1::HostEnablement::STATE_WAIVED &&
         now.state() != v1::HostEnablement::STATE_NOT_ENABLED &&
         now.state() != v1::HostEnablement::STATE_OFF;
}

bool HostEnablementState::Set(const v1::HostEnablement& enablement) {
  std::lock_guard<std::mutex> lock(mu_);
  // The first answer ends a first start's wait, even one that says what
  // was assumed: a pass must then follow.
  const bool was_waiting = WaitingLocked();
  answered_ = true;
  if (!was_waiting && google::protobuf::util::MessageDifferencer::Equals(current_, enablement)) {
    return false;
  }
  current_ = enablement;
  switch (enablement.state()) {
    case v1::HostEnablement::STATE_WAIVED:
      LOG(INFO) << "csd waives cookies on this host: " << enablement.reason();
      break;
    case v1::HostEnablement::STATE_NOT_ENABLED:
      LOG(INFO) << "csd has not enabled cookies on this host: " << enablement.reason();
      break;
    case v1::HostEnablement::STATE_OFF:
      LOG(WARNING) << "enforcement switched off on this host: " << enablement.reason()
                   << "; taking every cookie off its VMs' threads";
      break;
    default:
      LOG(INFO) << "csd says to set cookies on this host";
  }
  // Under the lock: two answers in a row are saved in their order.
  if (!state_file_.empty()) {
    if (absl::Status saved = fs_->WriteFileAtomically(state_file_, enablement.SerializeAsString());
        !saved.ok()) {
      LOG(WARNING) << "cannot save " << state_file_ << ": " << saved;
    }
  }
  return true;
}

}  // namespace cosched::agent
