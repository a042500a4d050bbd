#include "agent/forced_idle.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/log_every.h"
#include "glog/logging.h"

namespace cosched::agent {
namespace {

constexpr absl::string_view kField = "core_forceidle_sum";
constexpr absl::string_view kCgroupField = "core_sched.force_idle_usec";

bool AllDigits(absl::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == absl::string_view::npos;
}

}  // namespace

absl::StatusOr<std::optional<int64_t>> ParseCoreForceidleSum(absl::string_view sched_text) {
  for (absl::string_view line : absl::StrSplit(sched_text, '\n')) {
    absl::string_view rest = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&rest, kField)) continue;
    rest = absl::StripLeadingAsciiWhitespace(rest);
    if (!absl::ConsumePrefix(&rest, ":")) continue;  // a longer name
    const absl::string_view value = absl::StripAsciiWhitespace(rest);
    auto bad = [&] {
      return absl::InvalidArgumentError(absl::StrCat(
          kField, ": expected milliseconds like \"12.345678\" or nanoseconds, found \"",
          absl::StripAsciiWhitespace(line), "\""));
    };
    const size_t dot = value.find('.');
    if (dot == absl::string_view::npos) {
      int64_t ns;
      if (!AllDigits(value) || !absl::SimpleAtoi(value, &ns)) return bad();
      return std::optional<int64_t>(ns);
    }
    const absl::string_view ms_text = value.substr(0, dot);
    const absl::string_view frac = value.substr(dot + 1);
    int64_t ms, frac_ns;
    if (!AllDigits(ms_text) || !AllDigits(frac) || frac.size() > 6 ||
        !absl::SimpleAtoi(ms_text, &ms) || !absl::SimpleAtoi(frac, &frac_ns) ||
        ms > INT64_MAX / 1'000'000 - 1)
      return bad();
    for (size_t i = frac.size(); i < 6; ++i) frac_ns *= 10;
    return std::optional<int64_t>(ms * 1'000'000 + frac_ns);
  }
  return std::optional<int64_t>();
}

absl::StatusOr<std::optional<int64_t>> ParseCgroupForceIdle(absl::string_view cpu_stat_text) {
  for (absl::string_view line : absl::StrSplit(cpu_stat_text, '\n')) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, kCgroupField) || rest.empty() || rest[0] != ' ') continue;
    const absl::string_view value = absl::StripAsciiWhitespace(rest);
    int64_t usec;
    if (!AllDigits(value) || !absl::SimpleAtoi(value, &usec) || usec > INT64_MAX / 1000) {
      return absl::InvalidArgumentError(absl::StrCat(
          kCgroupField, ": expected microseconds, found \"", absl::StripAsciiWhitespace(line),
          "\""));
    }
    return std::optional<int64_t>(usec * 1000);
  }
  return std::optional<int64_t>();
}

ForcedIdleMeter::ForcedIdleMeter(const host::PseudoFs* fs, std::string procfs_root,
                                 std::string cgroupfs_root)
    : fs_(fs), procfs_root_(std::move(procfs_root)), cgroupfs_root_(std::move(cgroupfs_root)) {}

std::optional<int64_t> ForcedIdleMeter::ReadCgroup(const std::string& cgroup) const {
  for (absl::string_view mount : {"", "/unified"}) {
    absl::StatusOr<std::string> text =
        fs_->ReadFile(absl::StrCat(cgroupfs_root_, mount, cgroup, "/cpu.stat"));
    if (!text.ok()) continue;  // not v2 here, or the VM is gone
    absl::StatusOr<std::optional<int64_t>> ns = ParseCgroupForceIdle(*text);
    if (!ns.ok()) {
      COSCHED_LOG_EVERY_T(WARNING, 300) << "cgroup " << cgroup << ": " << ns.status();
      return std::nullopt;
    }
    return *ns;
  }
  return std::nullopt;
}

std::optional<int64_t> ForcedIdleMeter::ReadThread(int tid) const {
  absl::StatusOr<std::string> text =
      fs_->ReadFile(absl::StrCat(procfs_root_, "/", tid, "/task/", tid, "/sched"));
  if (!text.ok()) return std::nullopt;  // the thread ended: its time is lost with it
  absl::StatusOr<std::optional<int64_t>> sum = ParseCoreForceidleSum(*text);
  if (!sum.ok()) {
    COSCHED_LOG_EVERY_T(WARNING, 300) << "thread " << tid << ": " << sum.status();
    return std::nullopt;
  }
  return *sum;
}

namespace {

// The growth of a monotonic count since `last` (nullptr: first seen). A
// count lower than before belongs to a new owner of the same name (a tid
// reused, a cgroup recreated): count from its start.
int64_t Growth(int64_t now, const int64_t* last) {
  if (last == nullptr) return 0;
  return now >= *last ? now - *last : now;
}

}  // namespace

std::vector<std::optional<int64_t>> ForcedIdleMeter::Sample(
    const std::vector<ForcedIdleSource>& vms) {
  absl::flat_hash_map<int, int64_t> now_tid;
  absl::flat_hash_map<std::string, int64_t> now_cgroup;
  std::vector<std::optional<int64_t>> out;
  out.reserve(vms.size());
  for (const ForcedIdleSource& vm : vms) {
    if (vm.cgroup != nullptr && !vm.cgroup->empty()) {
      if (std::optional<int64_t> ns = ReadCgroup(*vm.cgroup)) {
        auto it = last_cgroup_.find(*vm.cgroup);
        if (it == last_cgroup_.end()) {
          LOG(INFO) << "forced idle of the VM in cgroup " << *vm.cgroup
                    << " comes from its cpu.stat";
        }
        out.push_back(Growth(*ns, it == last_cgroup_.end() ? nullptr : &it->second));
        now_cgroup[*vm.cgroup] = *ns;
        continue;
      }
    }
    std::optional<int64_t> growth;
    for (int tid : *vm.tids) {
      std::optional<int64_t> ns = ReadThread(tid);
      if (!ns) continue;
      now_tid[tid] = *ns;
      auto it = last_tid_.find(tid);
      growth = growth.value_or(0) + Growth(*ns, it == last_tid_.end() ? nullptr : &it->second);
    }
    out.push_back(growth);
  }
  last_tid_ = std::move(now_tid);
  last_cgroup_ = std::move(now_cgroup);
  return out;
}

}  // namespace cosched::agent
