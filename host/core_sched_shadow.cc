#include "host/core_sched_shadow.h"

#include "absl/strings/str_cat.h"

namespace cosched::host {
namespace {

// The kernel's hashes are pointer hashes; these are numbered from a value
// with the low bits clear, far from any pointer-hash a test would see, and
// are only ever compared with each other within one pass.
constexpr uint64_t kFirstShadowCookie = 0x5ad0'0000'0000'0000ULL;

}  // namespace

ShadowCoreSched::ShadowCoreSched(CoreSched* kernel)
    : kernel_(kernel), next_cookie_(kFirstShadowCookie) {}

int ShadowCoreSched::writes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writes_;
}

absl::Status ShadowCoreSched::ThreadScopeOnly(CoreSchedScope scope, const char* command,
                                              int pid) {
  if (scope == CoreSchedScope::kThread) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      "observe: ", command, " of task ", pid,
      " beyond its own thread is not modelled (the agent writes thread by thread)"));
}

absl::StatusOr<uint64_t> ShadowCoreSched::CallerCookie() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = callers_.find(std::this_thread::get_id());
    if (it != callers_.end()) return it->second;
  }
  return kernel_->Get(0);
}

absl::StatusOr<uint64_t> ShadowCoreSched::Get(int tid) {
  if (tid == 0) return CallerCookie();
  absl::StatusOr<uint64_t> real = kernel_->Get(tid);
  if (!real.ok()) return real;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tasks_.find(tid);
  return it == tasks_.end() ? *real : it->second;
}

absl::Status ShadowCoreSched::Create(int pid, CoreSchedScope scope) {
  if (absl::Status scoped = ThreadScopeOnly(scope, "CREATE", pid); !scoped.ok()) return scoped;
  // The kernel checks the same access for a GET as for a write (ptrace
  // read access to the task), so a GET fails where CREATE would.
  if (absl::StatusOr<uint64_t> real = kernel_->Get(pid); !real.ok()) return real.status();
  std::lock_guard<std::mutex> lock(mu_);
  tasks_[pid] = next_cookie_++;
  ++writes_;
  return absl::OkStatus();
}

absl::Status ShadowCoreSched::ShareTo(int pid, CoreSchedScope scope) {
  if (absl::Status scoped = ThreadScopeOnly(scope, "SHARE_TO", pid); !scoped.ok()) return scoped;
  if (absl::StatusOr<uint64_t> real = kernel_->Get(pid); !real.ok()) return real.status();
  absl::StatusOr<uint64_t> own = CallerCookie();
  if (!own.ok()) return own.status();
  std::lock_guard<std::mutex> lock(mu_);
  tasks_[pid] = *own;
  ++writes_;
  return absl::OkStatus();
}

absl::Status ShadowCoreSched::ShareFrom(int tid) {
  absl::StatusOr<uint64_t> theirs = Get(tid);
  if (!theirs.ok()) return theirs.status();
  std::lock_guard<std::mutex> lock(mu_);
  callers_[std::this_thread::get_id()] = *theirs;
  ++writes_;
  return absl::OkStatus();
}

CoreSchedProbe ShadowCoreSched::Probe() { return kernel_->Probe(); }

void ShadowCoreSched::OnCourierStart() {
  kernel_->OnCourierStart();
  absl::StatusOr<uint64_t> own = kernel_->Get(0);
  std::lock_guard<std::mutex> lock(mu_);
  callers_[std::this_thread::get_id()] = own.ok() ? *own : 0;
}

void ShadowCoreSched::OnCourierEnd() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    callers_.erase(std::this_thread::get_id());
  }
  kernel_->OnCourierEnd();
}

}  // namespace cosched::host
