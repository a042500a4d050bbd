// Users and groups of csd's host, by name or number, as csd.yaml names them
// (roles[i].unix_users, roles[i].unix_groups, local_socket.group). The only
// place csd asks the user database (NSS), and only while it starts.
#ifndef COSCHED_SERVER_API_UNIX_ACCOUNTS_H_
#define COSCHED_SERVER_API_UNIX_ACCOUNTS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cosched::server {

// `value` is a decimal uid (taken as it is: a uid needs no account to
// connect) or a user name. INVALID_ARGUMENT naming `field` for an empty
// value or a name the user database does not know or cannot be read for.
absl::StatusOr<uint32_t> ResolveUnixUser(absl::string_view field, absl::string_view value);

// As ResolveUnixUser, for a decimal gid or a group name.
absl::StatusOr<uint32_t> ResolveUnixGroup(absl::string_view field, absl::string_view value);

// NOT_FOUND when the host has no group `name`; INVALID_ARGUMENT naming
// `field` when the group database cannot be read.
absl::StatusOr<uint32_t> LookUpGroupName(absl::string_view field, absl::string_view name);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_API_UNIX_ACCOUNTS_H_
