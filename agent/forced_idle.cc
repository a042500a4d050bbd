#include "agent/forced_idle.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "glog/logging.h"

namespace cosched::agent {
namespace {

constexpr absl::string_view kField = "core_forceidle_sum";

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

ForcedIdleMeter::ForcedIdleMeter(const HostFs* fs, std::string procfs_root)
    : fs_(fs), procfs_root_(std::move(procfs_root)) {}

std::vector<std::optional<int64_t>> ForcedIdleMeter::Sample(
    const std::vector<const std::vector<int>*>& vms) {
  absl::flat_hash_map<int, int64_t> now;
  std::vector<std::optional<int64_t>> out;
  out.reserve(vms.size());
  for (const std::vector<int>* tids : vms) {
    std::optional<int64_t> growth;
    for (int tid : *tids) {
      absl::StatusOr<std::string> text =
          fs_->ReadFile(absl::StrCat(procfs_root_, "/", tid, "/task/", tid, "/sched"));
      if (!text.ok()) continue;  // the thread ended: its time is lost with it
      absl::StatusOr<std::optional<int64_t>> sum = ParseCoreForceidleSum(*text);
      if (!sum.ok()) {
        LOG_EVERY_T(WARNING, 300) << "thread " << tid << ": " << sum.status();
        continue;
      }
      if (!sum->has_value()) continue;
      now[tid] = **sum;
      auto it = last_.find(tid);
      const int64_t before = it == last_.end() ? **sum : it->second;
      // A tid reused by a new thread starts lower: count from its start.
      growth = growth.value_or(0) + (**sum >= before ? **sum - before : **sum);
    }
    out.push_back(growth);
  }
  last_ = std::move(now);
  return out;
}

}  // namespace cosched::agent
