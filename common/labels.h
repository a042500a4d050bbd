// Host labels: what an operator says of a hypervisor in cs-agent's config
// (zone, rack, hardware generation, anything), carried to csd at Register,
// and selectors over them (`zone=a,gen=icx`), as `csctl hosts ls
// --selector` and staged rollouts choose hosts.
#ifndef COSCHED_COMMON_LABELS_H_
#define COSCHED_COMMON_LABELS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/map.h"

namespace cosched {

using Labels = google::protobuf::Map<std::string, std::string>;

inline constexpr int kMaxLabels = 32;
inline constexpr size_t kMaxLabelLength = 63;

// At most kMaxLabels; each key 1-63 characters and each value 0-63 of
// letters, digits, '.', '_', '-' (a key may also hold '/', as in
// "example.com/rack"), starting with a letter or digit. INVALID_ARGUMENT
// naming `field`.key and the rule.
absl::Status ValidateLabels(absl::string_view field, const Labels& labels);

// Every pair must match: an empty selector selects every host.
struct LabelSelector {
  std::vector<std::pair<std::string, std::string>> equals;
};

// "key=value[,key=value...]"; empty selects all. INVALID_ARGUMENT naming
// `field` for a pair without '=', a key or value outside the label rules,
// or a key given twice.
absl::StatusOr<LabelSelector> ParseLabelSelector(absl::string_view field, absl::string_view text);

bool Matches(const LabelSelector& selector, const Labels& labels);

// "key=value,..." in key order; empty for none.
std::string LabelsText(const Labels& labels);

}  // namespace cosched

#endif  // COSCHED_COMMON_LABELS_H_
