// Rules for identifiers and lists that come from outside (RPCs, configs).
#ifndef COSCHED_COMMON_VALIDATION_H_
#define COSCHED_COMMON_VALIDATION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_ptr_field.h"

namespace cosched {

inline constexpr size_t kMaxIdLength = 128;
inline constexpr int kMaxInterferenceClasses = 16;
// A trust group's name (policy/trust_group.h) as a request may give it.
inline constexpr size_t kMaxTrustGroupLength = 512;
inline constexpr char kIdRule[] =
    "must be 1-128 characters of [A-Za-z0-9._:-] starting with a letter or "
    "digit";

// OK when `value` follows the id rule; else INVALID_ARGUMENT naming `field`.
absl::Status ValidateId(absl::string_view field, absl::string_view value);

// A failed check of one element of a repeated field, named from the outer
// message: `status` names a field within the element ("vm_id ..."), the
// answer names it whole ("vms[3].vm_id ..."). OK stays OK, and the name is
// built only for an error: a message of thousands of valid elements costs
// no strings.
absl::Status InElement(absl::string_view repeated, int index, absl::Status status);

// Checks count and each entry against the id rule; returns the classes
// sorted and without duplicates in `normalized`.
absl::Status ValidateClasses(
    absl::string_view field,
    const google::protobuf::RepeatedPtrField<std::string>& classes,
    std::vector<std::string>* normalized);

}  // namespace cosched

#endif  // COSCHED_COMMON_VALIDATION_H_
