#include "host/known_bad.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config_loader.h"

namespace cosched::host {
namespace {

constexpr size_t kMaxIdLength = 64;
constexpr size_t kMaxTextLength = 300;
constexpr int kMaxVersionParts = 4;
// No kernel version part comes near it; a bound beyond it is a typo.
constexpr int kMaxVersionPart = 100000;

bool ValidId(absl::string_view id) {
  if (id.empty() || id.size() > kMaxIdLength) return false;
  for (char c : id) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

bool Printable(absl::string_view text) {
  for (char c : text) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseKernelVersion(absl::string_view text) {
  // The dotted numbers up to the first character that is neither.
  size_t end = 0;
  while (end < text.size() && (absl::ascii_isdigit(text[end]) || text[end] == '.')) ++end;
  std::vector<int> parts;
  for (absl::string_view part : absl::StrSplit(text.substr(0, end), '.')) {
    int value = 0;
    if (part.empty()) break;  // "6.1." or "6..1": the numbers before it
    if (!absl::SimpleAtoi(part, &value) || value > kMaxVersionPart) {
      return absl::InvalidArgumentError(
          absl::StrCat("version '", text, "' has a part out of range (0-", kMaxVersionPart, ")"));
    }
    parts.push_back(value);
    if (parts.size() == kMaxVersionParts) break;
  }
  if (parts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("version '", text, "' must start with a number, as 6.1 or 6.1.119"));
  }
  return parts;
}

int CompareKernelVersions(const std::vector<int>& a, const std::vector<int>& b) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const int x = i < a.size() ? a[i] : 0;
    const int y = i < b.size() ? b[i] : 0;
    if (x != y) return x < y ? -1 : 1;
  }
  return 0;
}

std::string UpstreamKernelVersion(absl::string_view osrelease, absl::string_view version,
                                  absl::string_view version_signature) {
  auto numbers = [](absl::string_view text) -> std::string {
    absl::StatusOr<std::vector<int>> parts = ParseKernelVersion(text);
    if (!parts.ok()) return "";
    std::string out;
    for (int part : *parts) absl::StrAppend(&out, out.empty() ? "" : ".", part);
    return out;
  };
  // Ubuntu: "Ubuntu 6.8.0-45.45-generic 6.8.12".
  if (absl::StartsWith(version_signature, "Ubuntu ")) {
    std::vector<absl::string_view> words =
        absl::StrSplit(absl::StripAsciiWhitespace(version_signature), ' ', absl::SkipEmpty());
    if (std::string v = numbers(words.back()); !v.empty()) return v;
  }
  // Debian: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)".
  if (size_t at = version.find("Debian "); at != absl::string_view::npos) {
    if (std::string v = numbers(version.substr(at + 7)); !v.empty()) return v;
  }
  return numbers(osrelease);
}

bool IsKnownBadHazardName(absl::string_view name) {
  return absl::ConsumePrefix(&name, kHazardKnownBadPrefix) && ValidId(name);
}

absl::Status ValidateKnownBadList(const v1::KnownBadList& list) {
  std::set<std::string> ids;
  for (int i = 0; i < list.entries_size(); ++i) {
    const v1::KnownBadEntry& e = list.entries(i);
    const std::string field = absl::StrCat("entries[", i, "]");
    if (!ValidId(e.id())) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".id '", e.id(), "' must be 1-", kMaxIdLength, " of a-z, 0-9, ., _ and -"));
    }
    if (!ids.insert(e.id()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".id '", e.id(), "' is already an id of an earlier entry"));
    }
    std::vector<int> from, before;
    for (const auto& [name, text, parsed] :
         {std::tuple{"kernel_from", &e.kernel_from(), &from},
          std::tuple{"kernel_before", &e.kernel_before(), &before}}) {
      if (text->empty()) continue;
      absl::StatusOr<std::vector<int>> version = ParseKernelVersion(*text);
      if (!version.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".", name, " ", version.status().message()));
      }
      *parsed = *version;
    }
    if (!from.empty() && !before.empty() && CompareKernelVersions(from, before) >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".kernel_before '", e.kernel_before(),
                       "' must be newer than kernel_from '", e.kernel_from(), "'"));
    }
    if (from.empty() && before.empty() && !e.nested_only()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " (", e.id(), ") covers every host: give kernel_from, kernel_before or "
          "nested_only"));
    }
    if (e.reason().empty() || e.reason().size() > kMaxTextLength || !Printable(e.reason())) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".reason must be 1-", kMaxTextLength, " printable ASCII characters"));
    }
    if (e.source().size() > kMaxTextLength || !Printable(e.source())) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".source must be at most ", kMaxTextLength, " printable ASCII characters"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::KnownBadList> LoadKnownBadList(const std::string& path, bool required) {
  v1::KnownBadList list;
  if (path == kKnownBadOff) return list;
  ConfigLocations locations;
  absl::Status loaded = LoadYamlConfigFile(path, &list, &locations);
  if (absl::IsNotFound(loaded) && !required) return v1::KnownBadList();
  if (!loaded.ok()) {
    return absl::Status(loaded.code(),
                        absl::StrCat("known_bad_file: ", loaded.message()));
  }
  if (absl::Status valid = ValidateKnownBadList(list); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("known_bad_file: ", locations.Locate(valid.message())));
  }
  return list;
}

bool KnownBadMatches(const v1::KnownBadEntry& entry, const v1::HostPreflight& preflight) {
  if (entry.nested_only() && !preflight.nested()) return false;
  if (entry.kernel_from().empty() && entry.kernel_before().empty()) return true;
  absl::StatusOr<std::vector<int>> host = ParseKernelVersion(preflight.kernel_version());
  if (!host.ok()) return false;
  // A bound that does not parse (a list that was not validated) matches
  // nothing rather than everything.
  auto compare = [&](const std::string& bound) -> std::optional<int> {
    absl::StatusOr<std::vector<int>> version = ParseKernelVersion(bound);
    if (!version.ok()) return std::nullopt;
    return CompareKernelVersions(*host, *version);
  };
  if (!entry.kernel_from().empty()) {
    std::optional<int> c = compare(entry.kernel_from());
    if (!c || *c < 0) return false;
  }
  if (!entry.kernel_before().empty()) {
    std::optional<int> c = compare(entry.kernel_before());
    if (!c || *c >= 0) return false;
  }
  return true;
}

}  // namespace cosched::host
