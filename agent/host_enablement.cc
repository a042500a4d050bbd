#include "agent/host_enablement.h"

#include <utility>

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
}

v1::HostEnablement HostEnablementState::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

bool HostEnablementState::Enforce() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_.state() != v1::HostEnablement::STATE_NOT_NEEDED &&
         current_.state() != v1::HostEnablement::STATE_NOT_ENABLED &&
         current_.state() != v1::HostEnablement::STATE_OFF;
}

bool HostEnablementState::Set(const v1::HostEnablement& enablement) {
  std::lock_guard<std::mutex> lock(mu_);
  if (google::protobuf::util::MessageDifferencer::Equals(current_, enablement)) return false;
  current_ = enablement;
  switch (enablement.state()) {
    case v1::HostEnablement::STATE_NOT_NEEDED:
      LOG(INFO) << "csd says cookies are not needed on this host: " << enablement.reason();
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
