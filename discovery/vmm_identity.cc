#include "discovery/vmm_identity.h"

#include <fnmatch.h>
#include <pwd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cosched::discovery {

std::vector<std::string> VmmRule::DefaultBinaries() {
  return {"/usr/bin/qemu-system-*", "/usr/libexec/qemu-kvm", "/usr/bin/qemu-kvm"};
}

absl::StatusOr<ProcessUids> ParseStatusUids(absl::string_view status) {
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, "Uid:")) continue;
    std::vector<absl::string_view> ids = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    ProcessUids uids;
    if (ids.size() < 2 || !absl::SimpleAtoi(ids[0], &uids.real) ||
        !absl::SimpleAtoi(ids[1], &uids.effective)) {
      return absl::InvalidArgumentError(absl::StrCat("malformed Uid line: 'Uid:", line, "'"));
    }
    return uids;
  }
  return absl::InvalidArgumentError("no Uid line");
}

std::optional<std::string> VmmRuleViolation(const host::PseudoFs& fs, absl::string_view root,
                                            int pid, const VmmRule& rule) {
  absl::StatusOr<std::string> exe = fs.ReadLink(absl::StrCat(root, "/", pid, "/exe"));
  if (absl::IsPermissionDenied(exe.status())) {
    // The same ptrace access check as prctl(PR_SCHED_CORE): an agent that
    // cannot read it could not tag the process either.
    return absl::StrCat("its binary cannot be checked (cs-agent needs CAP_SYS_PTRACE for "
                        "another user's process): ", exe.status().message());
  }
  if (!exe.ok()) return absl::StrCat("its binary cannot be checked: ", exe.status().message());
  const std::string binary(absl::StripSuffix(*exe, " (deleted)"));
  const bool allowed_binary = std::any_of(rule.binaries.begin(), rule.binaries.end(),
                                          [&](const std::string& pattern) {
    return fnmatch(pattern.c_str(), binary.c_str(), FNM_PATHNAME) == 0;
  });
  if (!allowed_binary) {
    return absl::StrCat("it runs ", binary, ", not an allowed VMM binary (vmm_binaries: ",
                        absl::StrJoin(rule.binaries, ", "), ")");
  }
  absl::StatusOr<std::string> status = fs.ReadFile(absl::StrCat(root, "/", pid, "/status"));
  absl::StatusOr<ProcessUids> uids =
      status.ok() ? ParseStatusUids(*status) : absl::StatusOr<ProcessUids>(status.status());
  if (!uids.ok()) return absl::StrCat("its user cannot be checked: ", uids.status().message());
  auto allowed = [&](uint32_t uid) {
    return std::find(rule.uids.begin(), rule.uids.end(), uid) != rule.uids.end();
  };
  if (!allowed(uids->real) || !allowed(uids->effective)) {
    return absl::StrCat("it runs as uid ", uids->real, " (effective ", uids->effective,
                        "), not an allowed VMM user (vmm_users: uids ",
                        absl::StrJoin(rule.uids, ", "), ")");
  }
  return std::nullopt;
}

absl::StatusOr<std::vector<uint32_t>> ResolveUsers(const std::vector<std::string>& users,
                                                   absl::string_view field, bool skip_missing) {
  std::vector<uint32_t> uids;
  for (const std::string& user : users) {
    uint32_t uid = 0;
    // root is uid 0 even where no passwd file says so (an initramfs).
    if (user == "root" || absl::SimpleAtoi(user, &uid)) {
      uids.push_back(uid);
      continue;
    }
    struct passwd entry;
    struct passwd* found = nullptr;
    std::vector<char> buffer(16384);
    const int err = getpwnam_r(user.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (err == 0 && found != nullptr) {
      uids.push_back(found->pw_uid);
    } else if (!skip_missing) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": user '", user, "' does not exist on this host"));
    }
  }
  if (uids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must name at least one user"));
  }
  return uids;
}

}  // namespace cosched::discovery
