#include "host/testing/core_sched_fake.h"

#include <cerrno>

namespace cosched::host {

FakeCoreSched::FakeCoreSched(int default_caller_tid)
    : default_caller_tid_(default_caller_tid) {
  tasks_[default_caller_tid] = Task{default_caller_tid, default_caller_tid, 0};
}

void FakeCoreSched::AddTask(int tid, int tgid, int pgid, uint64_t cookie) {
  std::lock_guard<std::mutex> lock(mu_);
  tasks_[tid] = Task{tgid, pgid < 0 ? tgid : pgid, cookie};
  if (cookie >= next_cookie_) next_cookie_ = cookie + 1;
}

void FakeCoreSched::RemoveTask(int tid) {
  std::lock_guard<std::mutex> lock(mu_);
  tasks_.erase(tid);
}

void FakeCoreSched::SetCallerTid(int tid) {
  std::lock_guard<std::mutex> lock(mu_);
  caller_tids_[std::this_thread::get_id()] = tid;
  tasks_.try_emplace(tid, Task{tid, tid, 0});
}

void FakeCoreSched::OnCourierStart() {
  std::lock_guard<std::mutex> lock(mu_);
  const Task& creator = tasks_.at(default_caller_tid_);
  const int tid = next_courier_tid_++;
  tasks_[tid] = Task{creator.tgid, creator.pgid, creator.cookie};
  caller_tids_[std::this_thread::get_id()] = tid;
}

void FakeCoreSched::OnCourierEnd() {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = caller_tids_.find(std::this_thread::get_id());
  if (it == caller_tids_.end()) return;
  tasks_.erase(it->second);
  caller_tids_.erase(it);
}

void FakeCoreSched::SetMode(Mode mode) {
  std::lock_guard<std::mutex> lock(mu_);
  mode_ = mode;
}

void FakeCoreSched::SetTaskErrno(int tid, int err) {
  std::lock_guard<std::mutex> lock(mu_);
  if (err == 0) {
    task_errno_.erase(tid);
  } else {
    task_errno_[tid] = err;
  }
}

void FakeCoreSched::SetReadbackBlind(bool blind) {
  std::lock_guard<std::mutex> lock(mu_);
  readback_blind_ = blind;
}

uint64_t FakeCoreSched::CookieOf(int tid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tasks_.find(tid);
  return it == tasks_.end() ? 0 : it->second.cookie;
}

int FakeCoreSched::write_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return write_calls_;
}

int FakeCoreSched::get_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return get_calls_;
}

int FakeCoreSched::cookies_cleared() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cookies_cleared_;
}

void FakeCoreSched::ResetCallCounts() {
  std::lock_guard<std::mutex> lock(mu_);
  write_calls_ = 0;
  get_calls_ = 0;
}

int FakeCoreSched::CallerLocked() const {
  auto it = caller_tids_.find(std::this_thread::get_id());
  return it == caller_tids_.end() ? default_caller_tid_ : it->second;
}

int FakeCoreSched::CheckLocked(int tid) const {
  switch (mode_) {
    case Mode::kSupported: break;
    case Mode::kNoSmt: return ENODEV;
    case Mode::kNoKernelSupport: return EINVAL;
    case Mode::kNoPermission: return EPERM;
  }
  if (tasks_.find(tid) == tasks_.end()) return ESRCH;
  auto it = task_errno_.find(tid);
  return it == task_errno_.end() ? 0 : it->second;
}

std::vector<int> FakeCoreSched::TargetsLocked(int pid,
                                              CoreSchedScope scope) const {
  const Task& task = tasks_.at(pid);
  std::vector<int> targets;
  for (const auto& [tid, other] : tasks_) {
    bool match = false;
    switch (scope) {
      case CoreSchedScope::kThread: match = tid == pid; break;
      case CoreSchedScope::kThreadGroup: match = other.tgid == task.tgid; break;
      case CoreSchedScope::kProcessGroup: match = other.pgid == task.pgid; break;
    }
    if (match) targets.push_back(tid);
  }
  return targets;
}

absl::StatusOr<uint64_t> FakeCoreSched::Get(int tid) {
  std::lock_guard<std::mutex> lock(mu_);
  ++get_calls_;
  const int target = tid == 0 ? CallerLocked() : tid;
  if (int err = CheckLocked(target)) {
    return CoreSchedErrnoStatus(err, "GET", tid);
  }
  return readback_blind_ ? 0 : tasks_.at(target).cookie;
}

absl::Status FakeCoreSched::Create(int pid, CoreSchedScope scope) {
  std::lock_guard<std::mutex> lock(mu_);
  ++write_calls_;
  const int target = pid == 0 ? CallerLocked() : pid;
  if (int err = CheckLocked(target)) {
    return CoreSchedErrnoStatus(err, "CREATE", pid);
  }
  const uint64_t cookie = next_cookie_++;
  for (int tid : TargetsLocked(target, scope)) {
    if (cookie == 0 && tasks_[tid].cookie != 0) ++cookies_cleared_;
    tasks_[tid].cookie = cookie;
  }
  return absl::OkStatus();
}

absl::Status FakeCoreSched::ShareTo(int pid, CoreSchedScope scope) {
  std::lock_guard<std::mutex> lock(mu_);
  ++write_calls_;
  const int target = pid == 0 ? CallerLocked() : pid;
  if (int err = CheckLocked(target)) {
    return CoreSchedErrnoStatus(err, "SHARE_TO", pid);
  }
  auto caller = tasks_.find(CallerLocked());
  const uint64_t cookie = caller == tasks_.end() ? 0 : caller->second.cookie;
  for (int tid : TargetsLocked(target, scope)) tasks_[tid].cookie = cookie;
  return absl::OkStatus();
}

absl::Status FakeCoreSched::ShareFrom(int tid) {
  std::lock_guard<std::mutex> lock(mu_);
  ++write_calls_;
  if (int err = CheckLocked(tid)) {
    return CoreSchedErrnoStatus(err, "SHARE_FROM", tid);
  }
  tasks_[CallerLocked()].cookie = tasks_.at(tid).cookie;
  return absl::OkStatus();
}

CoreSchedProbe FakeCoreSched::Probe() {
  std::lock_guard<std::mutex> lock(mu_);
  return CoreSchedProbeFromErrno(CheckLocked(CallerLocked()));
}

}  // namespace cosched::host
