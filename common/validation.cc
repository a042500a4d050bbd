#include "common/validation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cosched {
namespace {

bool IsIdStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9');
}

bool IsIdChar(char c) {
  return IsIdStart(c) || c == '.' || c == '_' || c == ':' || c == '-';
}

}  // namespace

absl::Status ValidateId(absl::string_view field, absl::string_view value) {
  if (value.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is required: it ", kIdRule));
  }
  bool ok = value.size() <= kMaxIdLength && IsIdStart(value.front()) &&
            std::all_of(value.begin(), value.end(), IsIdChar);
  if (!ok) {
    // Quote at most a prefix: ids can be hostile or huge.
    std::string shown(value.substr(0, 64));
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    return absl::InvalidArgumentError(absl::StrCat(
        field, " '", shown, value.size() > 64 ? "...'" : "'", " ", kIdRule));
  }
  return absl::OkStatus();
}

absl::Status InElement(absl::string_view repeated, int index, absl::Status status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(repeated, "[", index, "].", status.message()));
}

absl::Status ValidateClasses(
    absl::string_view field,
    const google::protobuf::RepeatedPtrField<std::string>& classes,
    std::vector<std::string>* normalized) {
  // Duplicates do not count against the limit; a list far longer than it
  // is refused before any work on it.
  constexpr int kMaxEntries = 64 * kMaxInterferenceClasses;
  if (classes.size() > kMaxEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", classes.size(), " entries; at most ",
                     kMaxInterferenceClasses, " different classes are allowed"));
  }
  normalized->clear();
  for (int i = 0; i < classes.size(); ++i) {
    absl::Status s = ValidateId(absl::StrCat(field, "[", i, "]"), classes[i]);
    if (!s.ok()) return s;
    normalized->push_back(classes[i]);
  }
  std::sort(normalized->begin(), normalized->end());
  normalized->erase(std::unique(normalized->begin(), normalized->end()),
                    normalized->end());
  if (normalized->size() > static_cast<size_t>(kMaxInterferenceClasses)) {
    const size_t distinct = normalized->size();
    normalized->clear();
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", distinct, " different classes; at most ",
                     kMaxInterferenceClasses, " are allowed"));
  }
  return absl::OkStatus();
}

}  // namespace cosched
