#include "common/rollout_spec.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace cosched {

absl::StatusOr<std::vector<int>> ParseStagePercents(absl::string_view field,
                                                    absl::string_view text) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is empty; give percents such as 1%,10%,50%,100%"));
  }
  std::vector<int> percents;
  int i = 0;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    absl::string_view number = absl::StripAsciiWhitespace(entry);
    int percent = 0;
    if (!absl::ConsumeSuffix(&number, "%") || number.empty() ||
        !std::all_of(number.begin(), number.end(),
                     [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) ||
        !absl::SimpleAtoi(number, &percent)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", i, "] '", entry, "' must be a whole percent of the form N% (e.g. 10%)"));
    }
    percents.push_back(percent);
    ++i;
  }
  RETURN_IF_ERROR(ValidateStagePercents(field, percents));
  return percents;
}

absl::Status ValidateStagePercents(absl::string_view field, const std::vector<int>& percents) {
  if (percents.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is empty; give 1 to ",
                                                   kMaxRolloutStages, " stages"));
  }
  if (percents.size() > static_cast<size_t>(kMaxRolloutStages)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", percents.size(),
                                                   " stages; at most ", kMaxRolloutStages,
                                                   " are allowed"));
  }
  for (size_t i = 0; i < percents.size(); ++i) {
    if (percents[i] < 1 || percents[i] > 100) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "] ", percents[i],
                                                     "% must be 1% to 100%"));
    }
    if (i > 0 && percents[i] <= percents[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", i, "] ", percents[i], "% must be more than the stage before it (",
          percents[i - 1], "%): stages strictly increase"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseSoak(absl::string_view field, absl::string_view text,
                                  int64_t min_seconds) {
  absl::string_view number = absl::StripAsciiWhitespace(text);
  int64_t unit = 0;
  if (absl::ConsumeSuffix(&number, "s")) {
    unit = 1;
  } else if (absl::ConsumeSuffix(&number, "m")) {
    unit = 60;
  } else if (absl::ConsumeSuffix(&number, "h")) {
    unit = 3600;
  } else if (absl::ConsumeSuffix(&number, "d")) {
    unit = 86400;
  }
  int64_t value = 0;
  if (unit == 0 || number.empty() ||
      !std::all_of(number.begin(), number.end(),
                   [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) ||
      !absl::SimpleAtoi(number, &value) || value > kMaxSoakSeconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " '", text, "' must be a whole number and a unit: s, m, h or d (e.g. 30m)"));
  }
  const int64_t seconds = value * unit;
  RETURN_IF_ERROR(ValidateSoak(field, seconds, min_seconds));
  return seconds;
}

absl::Status ValidateSoak(absl::string_view field, int64_t seconds, int64_t min_seconds) {
  if (seconds < min_seconds || seconds > kMaxSoakSeconds) {
    return absl::InvalidArgumentError(absl::StrCat(field, " ", SoakText(seconds),
                                                   " is out of range: ", SoakText(min_seconds),
                                                   " to ", SoakText(kMaxSoakSeconds)));
  }
  return absl::OkStatus();
}

std::string SoakText(int64_t seconds) {
  if (seconds <= 0) return absl::StrCat(seconds, "s");
  std::string text;
  for (const auto& [unit, name] : {std::pair<int64_t, const char*>{86400, "d"},
                                   {3600, "h"}, {60, "m"}, {1, "s"}}) {
    if (seconds >= unit) {
      absl::StrAppend(&text, seconds / unit, name);
      seconds %= unit;
    }
  }
  return text;
}

}  // namespace cosched
