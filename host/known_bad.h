// The known-bad list: hosts where core-scheduling cookies are known to crash,
// hang or misbehave (kernel version ranges, nested hosts), shipped as a data
// file so that an entry can be added without a new agent. Each entry that
// matches the host is the hazard "known_bad:ID" (host/preflight.h's
// FindHazards), which stops tagging as an active sched_ext does.
#ifndef COSCHED_HOST_KNOWN_BAD_H_
#define COSCHED_HOST_KNOWN_BAD_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/config.pb.h"
#include "cosched/v1/types.pb.h"

namespace cosched::host {

// Where the package installs the list (deploy/known-bad.yaml).
inline constexpr char kDefaultKnownBadFile[] = "/usr/share/cosched/known-bad.yaml";
// AgentConfig.known_bad_file that reads no list.
inline constexpr char kKnownBadOff[] = "off";
// A matching entry's hazard is this prefix and the entry's id.
inline constexpr char kHazardKnownBadPrefix[] = "known_bad:";

// The leading dotted numbers of a kernel version ("6.1.119-1" -> 6, 1, 119;
// at most four). INVALID_ARGUMENT when it does not start with a number, or a
// part is out of range.
absl::StatusOr<std::vector<int>> ParseKernelVersion(absl::string_view text);
// <0, 0 or >0 as a is older, the same or newer; missing parts count as 0
// ("6.12" == "6.12.0").
int CompareKernelVersions(const std::vector<int>& a, const std::vector<int>& b);

// The kernel's upstream version from what the kernel says of itself:
// Ubuntu's /proc/version_signature ("Ubuntu 6.8.0-45.45-generic 6.8.12":
// its last word), Debian's /proc/sys/kernel/version ("#1 SMP ... Debian
// 6.1.119-1 (2024-11-22)": the version after "Debian "), else the leading
// numbers of osrelease. Distributions name the ABI in osrelease
// ("6.1.0-28-amd64" for every 6.1.y), which would match ranges of stable
// releases wrongly. Empty when none of them gives a version.
std::string UpstreamKernelVersion(absl::string_view osrelease, absl::string_view version,
                                  absl::string_view version_signature);

// Whether `name` is "known_bad:ID" with an id of the list's rule (for
// allow_hazards; whether the list holds that id is not checked).
bool IsKnownBadHazardName(absl::string_view name);

// INVALID_ARGUMENT naming entries[i].FIELD and the rule: ids 1-64 of
// [a-z0-9._-] and unique, bounds that parse and are in order, an entry that
// covers something (a bound or nested_only), a reason of 1-300 printable
// characters, a source of at most 300.
absl::Status ValidateKnownBadList(const v1::KnownBadList& list);

// Reads and checks the list at `path`, with file and line in errors.
// kKnownBadOff: an empty list. When the file is missing, NOT_FOUND if
// `required` (the operator named it), else an empty list (the default path
// of a host without the package's file).
absl::StatusOr<v1::KnownBadList> LoadKnownBadList(const std::string& path, bool required);

// Whether `entry` covers the host `preflight` describes (its kernel_version
// and nested). A host whose version is unknown matches no entry with kernel
// bounds.
bool KnownBadMatches(const v1::KnownBadEntry& entry, const v1::HostPreflight& preflight);

}  // namespace cosched::host

#endif  // COSCHED_HOST_KNOWN_BAD_H_
