#include "server/api/unix_accounts.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cosched::server {
namespace {

// A uid or gid as csd.yaml may write it: decimal digits only, below the
// (uid_t)-1 that means "no id" to the kernel.
bool ParseId(absl::string_view value, uint32_t* id) {
  if (value.empty() || value.size() > 10) return false;
  for (char c : value) {
    if (c < '0' || c > '9') return false;
  }
  uint64_t parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed) || parsed >= 0xffffffffu) return false;
  *id = static_cast<uint32_t>(parsed);
  return true;
}

// getpwnam_r / getgrnam_r with a buffer that grows on ERANGE. Returns 0 and
// sets *found, or the errno of the lookup.
template <typename Entry, typename Lookup>
int LookUp(const std::string& name, Lookup lookup, Entry* entry, bool* found) {
  std::vector<char> buffer(4096);
  for (;;) {
    Entry* result = nullptr;
    int err = lookup(name.c_str(), entry, buffer.data(), buffer.size(), &result);
    if (err == ERANGE && buffer.size() < (1u << 20)) {
      buffer.resize(buffer.size() * 2);
      continue;
    }
    // "Not found" is 0 with no result, or one of these from some NSS modules.
    if (err == ENOENT || err == ESRCH || err == EBADF || err == EPERM) err = 0;
    *found = err == 0 && result != nullptr;
    return err;
  }
}

}  // namespace

absl::StatusOr<uint32_t> ResolveUnixUser(absl::string_view field, absl::string_view value) {
  uint32_t id = 0;
  if (ParseId(value, &id)) return id;
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  passwd entry{};
  bool found = false;
  int err = LookUp(std::string(value), getpwnam_r, &entry, &found);
  if (err != 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, " '", value,
                                                   "': the user database cannot be read: ",
                                                   std::strerror(err)));
  }
  if (!found) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " '", value, "' is not a user of this host: name an existing user or a uid"));
  }
  return static_cast<uint32_t>(entry.pw_uid);
}

absl::StatusOr<uint32_t> LookUpGroupName(absl::string_view field, absl::string_view name) {
  group entry{};
  bool found = false;
  int err = LookUp(std::string(name), getgrnam_r, &entry, &found);
  if (err != 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, " '", name,
                                                   "': the group database cannot be read: ",
                                                   std::strerror(err)));
  }
  if (!found) return absl::NotFoundError(absl::StrCat("no group '", name, "'"));
  return static_cast<uint32_t>(entry.gr_gid);
}

absl::StatusOr<uint32_t> ResolveUnixGroup(absl::string_view field, absl::string_view value) {
  uint32_t id = 0;
  if (ParseId(value, &id)) return id;
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " is empty"));
  absl::StatusOr<uint32_t> gid = LookUpGroupName(field, value);
  if (absl::IsNotFound(gid.status())) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " '", value,
        "' is not a group of this host: create it (groupadd) or name an existing group or a gid"));
  }
  return gid;
}

}  // namespace cosched::server
