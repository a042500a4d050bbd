#include "common/labels.h"

#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace cosched {
namespace {

bool LabelChar(char c, bool slash) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
         c == '-' || (slash && c == '/');
}

// Empty when `text` follows the rule for a key (or a value); else why not.
std::string BreaksRule(absl::string_view text, bool key) {
  if (text.empty()) return key ? "must not be empty" : "";
  if (text.size() > kMaxLabelLength) {
    return absl::StrCat("must be at most ", kMaxLabelLength, " characters");
  }
  if (!absl::ascii_isalnum(static_cast<unsigned char>(text.front()))) {
    return "must start with a letter or digit";
  }
  for (char c : text) {
    if (!LabelChar(c, key)) {
      return key ? "may hold only letters, digits, '.', '_', '-' and '/'"
                 : "may hold only letters, digits, '.', '_' and '-'";
    }
  }
  return "";
}

// One label, or one pair of a selector: "<field> key 'k' ..." or
// "<field>.k 'v' ...".
absl::Status CheckLabel(absl::string_view field, absl::string_view key,
                        absl::string_view value) {
  if (std::string why = BreaksRule(key, true); !why.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " key '", absl::CEscape(key), "' ", why));
  }
  if (std::string why = BreaksRule(value, false); !why.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".", key, " '", absl::CEscape(value), "' ", why));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateLabels(absl::string_view field, const Labels& labels) {
  if (labels.size() > kMaxLabels) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", labels.size(), " labels; at most ", kMaxLabels));
  }
  // In key order, so that the error is the same whatever the map's order.
  const std::map<std::string, std::string> sorted(labels.begin(), labels.end());
  for (const auto& [key, value] : sorted) RETURN_IF_ERROR(CheckLabel(field, key, value));
  return absl::OkStatus();
}

absl::StatusOr<LabelSelector> ParseLabelSelector(absl::string_view field,
                                                 absl::string_view text) {
  LabelSelector selector;
  if (text.empty()) return selector;
  std::set<std::string> keys;
  for (absl::string_view pair : absl::StrSplit(text, ',')) {
    pair = absl::StripAsciiWhitespace(pair);
    const size_t eq = pair.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " '", absl::CEscape(pair), "' must be key=value (several joined by ',')"));
    }
    std::string key(absl::StripAsciiWhitespace(pair.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(pair.substr(eq + 1)));
    RETURN_IF_ERROR(CheckLabel(field, key, value));
    if (!keys.insert(key).second) {
      return absl::InvalidArgumentError(absl::StrCat(field, " names ", key, " twice"));
    }
    selector.equals.emplace_back(std::move(key), std::move(value));
  }
  return selector;
}

bool Matches(const LabelSelector& selector, const Labels& labels) {
  for (const auto& [key, value] : selector.equals) {
    auto it = labels.find(key);
    if (it == labels.end() || it->second != value) return false;
  }
  return true;
}

std::string LabelsText(const Labels& labels) {
  const std::map<std::string, std::string> sorted(labels.begin(), labels.end());
  return absl::StrJoin(sorted, ",", absl::PairFormatter("="));
}

}  // namespace cosched
