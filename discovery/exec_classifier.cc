#include "discovery/exec_classifier.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/log_every.h"
#include "discovery/procfs_discovery.h"
#include "glog/logging.h"

namespace cosched::discovery {

void ClassifyExec(const host::PseudoFs& fs, absl::string_view procfs_root,
                  host::ProcessEvent& event) {
  if (event.kind != host::ProcessEventKind::kExec) return;
  absl::StatusOr<bool> qemu = RunsQemu(fs, procfs_root, event.tgid);
  if (qemu.ok()) {
    event.may_be_qemu = *qemu;
  } else if (absl::IsNotFound(qemu.status())) {
    event.may_be_qemu = false;  // exited already: a cron job's `true`
  } else {
    COSCHED_LOG_EVERY_T(WARNING, 60) << "cannot tell what pid " << event.tgid
                             << " runs; treating its exec as one that may start a VM: "
                             << qemu.status();
    event.may_be_qemu = true;
  }
}

DelayedExecClassifier::DelayedExecClassifier(std::shared_ptr<const host::PseudoFs> fs,
                                             std::string procfs_root,
                                             std::chrono::milliseconds delay,
                                             host::ProcessEventListener listener)
    : fs_(std::move(fs)),
      procfs_root_(std::move(procfs_root)),
      delay_(delay),
      listener_(std::move(listener)) {}

namespace {

// kthreadd's pid: the parent of every kernel thread.
constexpr int kKthreadd = 2;
// How often a kernel thread's name is looked for (every `delay`): it is
// named by kthread_create once the new thread has run, which a busy or
// emulated host may take a while to get to.
constexpr int kKthreadNameTries = 40;

bool IsKthreadFork(const host::ProcessEvent& event) {
  return event.kind == host::ProcessEventKind::kFork && event.parent_tgid == kKthreadd &&
         event.tid == event.tgid;
}

}  // namespace

void DelayedExecClassifier::Add(const host::ProcessEvent& event, Clock::time_point now) {
  // A kernel thread is forked under kthreadd's name and named just after:
  // held like an exec, then passed on with its name (event.comm), so that a
  // vhost worker of a VM (Linux < 6.4) can be told from a kworker.
  if (event.kind == host::ProcessEventKind::kExec || IsKthreadFork(event)) {
    held_.push_back({event, now + delay_});
    last_held_[event.tgid] = &held_.back();
    return;
  }
  // Only an exit after the exec counts: the old leader of a process whose
  // other thread exec'd exits before the exec event, under the same pid.
  if (event.kind == host::ProcessEventKind::kExit && event.tid == event.tgid) {
    if (auto it = last_held_.find(event.tgid); it != last_held_.end()) it->second->exited = true;
  }
  listener_(event);
}

std::optional<DelayedExecClassifier::Clock::time_point> DelayedExecClassifier::Flush(
    Clock::time_point now) {
  while (!held_.empty() && held_.front().due <= now) {
    Held held = held_.front();
    if (auto it = last_held_.find(held.event.tgid);
        it != last_held_.end() && it->second == &held_.front()) {
      last_held_.erase(it);
    }
    held_.pop_front();
    if (held.exited) {
      ++dropped_;
      continue;
    }
    ++classified_;
    if (held.event.kind == host::ProcessEventKind::kFork) {
      absl::StatusOr<std::string> comm =
          fs_->ReadFile(absl::StrCat(procfs_root_, "/", held.event.tid, "/comm"));
      held.event.comm = comm.ok() ? std::string(absl::StripTrailingAsciiWhitespace(*comm)) : "";
      if (held.event.comm == "kthreadd" && ++held.name_tries < kKthreadNameTries) {
        held.due = now + delay_;  // not named yet
        held_.push_back(held);
        last_held_[held.event.tgid] = &held_.back();
        continue;
      }
    } else {
      ClassifyExec(*fs_, procfs_root_, held.event);
    }
    listener_(held.event);
  }
  if (held_.empty()) return std::nullopt;
  return held_.front().due;
}

host::ProcessEventStageFactory DelayedExecStage(std::shared_ptr<const host::PseudoFs> fs,
                                                std::string procfs_root,
                                                std::chrono::milliseconds delay) {
  return [fs = std::move(fs), procfs_root = std::move(procfs_root),
          delay](host::ProcessEventListener listener) -> std::unique_ptr<host::ProcessEventStage> {
    return std::make_unique<DelayedExecClassifier>(fs, procfs_root, delay, std::move(listener));
  };
}

}  // namespace cosched::discovery
