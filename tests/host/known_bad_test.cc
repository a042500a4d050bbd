#include "host/known_bad.h"

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/preflight.h"
#include "host/testing/pseudo_fs_fake.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::host {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::KnownBadEntry Entry(const std::string& id, const std::string& from,
                        const std::string& before, bool nested_only = false) {
  v1::KnownBadEntry e;
  e.set_id(id);
  e.set_kernel_from(from);
  e.set_kernel_before(before);
  e.set_nested_only(nested_only);
  e.set_reason("it hangs");
  return e;
}

v1::HostPreflight Host(const std::string& version, bool nested = false) {
  v1::HostPreflight p;
  p.set_kernel_version(version);
  p.set_nested(nested);
  return p;
}

TEST(KernelVersion, LeadingDottedNumbers) {
  EXPECT_THAT(*ParseKernelVersion("6.1.119-1"), ElementsAre(6, 1, 119));
  EXPECT_THAT(*ParseKernelVersion("6.12"), ElementsAre(6, 12));
  EXPECT_THAT(*ParseKernelVersion("6.12.0-rc3+"), ElementsAre(6, 12, 0));
  EXPECT_THAT(*ParseKernelVersion("6.1."), ElementsAre(6, 1));
  EXPECT_THAT(*ParseKernelVersion("1.2.3.4.5"), ElementsAre(1, 2, 3, 4));
  for (const char* bad : {"", "v6.1", "-6.1", "linux", ".6"}) {
    absl::StatusOr<std::vector<int>> v = ParseKernelVersion(bad);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(ParseKernelVersion("6.99999999999").status().message(), HasSubstr("out of range"));
}

TEST(KernelVersion, MissingPartsCountAsZero) {
  EXPECT_EQ(CompareKernelVersions({6, 12}, {6, 12, 0}), 0);
  EXPECT_LT(CompareKernelVersions({6, 1, 119}, {6, 12}), 0);
  EXPECT_GT(CompareKernelVersions({6, 12, 1}, {6, 12}), 0);
  EXPECT_LT(CompareKernelVersions({5, 15, 33}, {5, 15, 34}), 0);
}

TEST(KernelVersion, UpstreamVersionOfDebianUbuntuAndOthers) {
  // Debian names the ABI in osrelease; the version is in kernel/version.
  EXPECT_EQ(UpstreamKernelVersion("6.1.0-28-amd64",
                                  "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)", ""),
            "6.1.119");
  // Ubuntu: the last word of /proc/version_signature.
  EXPECT_EQ(UpstreamKernelVersion("6.8.0-45-generic", "#45-Ubuntu SMP PREEMPT_DYNAMIC",
                                  "Ubuntu 6.8.0-45.45-generic 6.8.12"),
            "6.8.12");
  // Anything else, such as the lab's own kernels: osrelease.
  EXPECT_EQ(UpstreamKernelVersion("6.12.118", "#1 SMP PREEMPT_DYNAMIC", ""), "6.12.118");
  EXPECT_EQ(UpstreamKernelVersion("", "", ""), "");
  EXPECT_EQ(UpstreamKernelVersion("", "Debian garbage", "Ubuntu"), "");
}

TEST(KnownBad, MatchesFromInclusiveBeforeExclusive) {
  const v1::KnownBadEntry e = Entry("x", "5.14", "5.15.34");
  EXPECT_FALSE(KnownBadMatches(e, Host("5.13.19")));
  EXPECT_TRUE(KnownBadMatches(e, Host("5.14")));
  EXPECT_TRUE(KnownBadMatches(e, Host("5.15.33")));
  EXPECT_FALSE(KnownBadMatches(e, Host("5.15.34")));
  EXPECT_FALSE(KnownBadMatches(e, Host("6.1.119")));
  // A version that cannot be read matches no entry with kernel bounds.
  EXPECT_FALSE(KnownBadMatches(e, Host("")));
  EXPECT_TRUE(KnownBadMatches(Entry("open-ended", "6.12", ""), Host("7.3")));
  EXPECT_TRUE(KnownBadMatches(Entry("up-to", "", "5.0"), Host("4.19.1")));
}

TEST(KnownBad, NestedOnlyEntriesNeedAGuestHost) {
  const v1::KnownBadEntry any_kernel = Entry("nested-vfio", "", "", /*nested_only=*/true);
  EXPECT_FALSE(KnownBadMatches(any_kernel, Host("6.12", false)));
  EXPECT_TRUE(KnownBadMatches(any_kernel, Host("6.12", true)));
  EXPECT_TRUE(KnownBadMatches(any_kernel, Host("", true)));
  const v1::KnownBadEntry ranged = Entry("nested-6.12", "6.12", "6.13", true);
  EXPECT_FALSE(KnownBadMatches(ranged, Host("6.12.5", false)));
  EXPECT_TRUE(KnownBadMatches(ranged, Host("6.12.5", true)));
  EXPECT_FALSE(KnownBadMatches(ranged, Host("6.13", true)));
}

TEST(KnownBad, ValidateNamesTheFieldAndTheRule) {
  struct Case {
    v1::KnownBadEntry entry;
    const char* message;
  };
  v1::KnownBadEntry no_reason = Entry("a", "6.1", "");
  no_reason.clear_reason();
  v1::KnownBadEntry bad_reason = Entry("a", "6.1", "");
  bad_reason.set_reason("tab\there");
  v1::KnownBadEntry long_source = Entry("a", "6.1", "");
  long_source.set_source(std::string(301, 'x'));
  const Case cases[] = {
      {Entry("", "6.1", ""), "entries[0].id '' must be 1-64 of a-z, 0-9, ., _ and -"},
      {Entry("Upper", "6.1", ""), "entries[0].id 'Upper' must be 1-64"},
      {Entry(std::string(65, 'a'), "6.1", ""), "must be 1-64"},
      {Entry("a", "six", ""), "entries[0].kernel_from version 'six' must start with a number"},
      {Entry("a", "", "x"), "entries[0].kernel_before version 'x' must start with a number"},
      {Entry("a", "6.12", "6.12.0"), "entries[0].kernel_before '6.12.0' must be newer than "
                                     "kernel_from '6.12'"},
      {Entry("a", "", ""), "entries[0] (a) covers every host: give kernel_from, kernel_before "
                           "or nested_only"},
      {no_reason, "entries[0].reason must be 1-300 printable ASCII characters"},
      {bad_reason, "entries[0].reason must be 1-300 printable"},
      {long_source, "entries[0].source must be at most 300"},
  };
  for (const Case& c : cases) {
    v1::KnownBadList list;
    *list.add_entries() = c.entry;
    absl::Status s = ValidateKnownBadList(list);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  v1::KnownBadList twice;
  *twice.add_entries() = Entry("a", "6.1", "");
  *twice.add_entries() = Entry("a", "6.2", "");
  EXPECT_THAT(ValidateKnownBadList(twice).message(),
              HasSubstr("entries[1].id 'a' is already an id of an earlier entry"));
  v1::KnownBadList good;
  *good.add_entries() = Entry("forceidle-5.15", "5.14", "5.15.34");
  *good.add_entries() = Entry("nested_vfio", "", "", true);
  EXPECT_OK(ValidateKnownBadList(good));
}

TEST(KnownBad, LoadNamesFileAndLine) {
  testing::TempDir dir;
  const std::string path = dir.Sub("known-bad.yaml");
  std::ofstream(path) << "entries:\n"
                         "  - id: ok\n"
                         "    kernel_from: \"6.1\"\n"
                         "    reason: fine\n"
                         "  - id: bad\n"
                         "    kernel_from: \"6.13\"\n"
                         "    kernel_before: \"6.12\"\n"
                         "    reason: backwards\n";
  absl::StatusOr<v1::KnownBadList> loaded = LoadKnownBadList(path, true);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(),
              HasSubstr(path + ":7: entries[1].kernel_before '6.12' must be newer"));

  std::ofstream(path) << "entries:\n  - id: x\n    kernel: \"6.1\"\n";
  loaded = LoadKnownBadList(path, true);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(loaded.status().message(), HasSubstr("known_bad_file: "));
  EXPECT_THAT(loaded.status().message(), HasSubstr("kernel"));

  std::ofstream(path) << "entries: [\n";
  EXPECT_EQ(LoadKnownBadList(path, true).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KnownBad, AMissingFileIsAnErrorOnlyWhenNamed) {
  testing::TempDir dir;
  const std::string missing = dir.Sub("nothing.yaml");
  absl::StatusOr<v1::KnownBadList> named = LoadKnownBadList(missing, /*required=*/true);
  EXPECT_EQ(named.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(named.status().message(), HasSubstr("known_bad_file"));
  absl::StatusOr<v1::KnownBadList> by_default = LoadKnownBadList(missing, /*required=*/false);
  ASSERT_OK(by_default.status());
  EXPECT_EQ(by_default->entries_size(), 0);
  absl::StatusOr<v1::KnownBadList> off = LoadKnownBadList(kKnownBadOff, true);
  ASSERT_OK(off.status());
  EXPECT_EQ(off->entries_size(), 0);
}

// The list the package ships loads, and covers what it says it does.
TEST(KnownBad, TheShippedListLoads) {
  absl::StatusOr<v1::KnownBadList> shipped =
      LoadKnownBadList(std::string(COSCHED_DEPLOY_DIR) + "/known-bad.yaml", true);
  ASSERT_OK(shipped.status());
  ASSERT_GT(shipped->entries_size(), 0);
  bool covers_5_15_33 = false;
  for (const v1::KnownBadEntry& e : shipped->entries()) {
    covers_5_15_33 |= KnownBadMatches(e, Host("5.15.33"));
    // The lab's kernels (6.1 and 6.12) are on no entry of the shipped list.
    EXPECT_FALSE(KnownBadMatches(e, Host("6.1.192"))) << e.id();
    EXPECT_FALSE(KnownBadMatches(e, Host("6.12.118"))) << e.id();
  }
  EXPECT_TRUE(covers_5_15_33);
}

TEST(KnownBad, AMatchingEntryIsAHazardTheOperatorCanAllow) {
  FakePseudoFs fs;
  fs.SetFile("/proc/sys/kernel/osrelease", "5.15.0-91-generic\n");
  fs.SetFile("/proc/version_signature", "Ubuntu 5.15.0-91.101-generic 5.15.20\n");
  v1::HostPreflight p = ReadPreflight(fs, PreflightPaths());
  EXPECT_EQ(p.kernel_version(), "5.15.20");
  HazardRules rules;
  rules.known_bad = {Entry("forceidle", "5.14", "5.15.34"), Entry("later", "6.0", "")};
  FindHazards(rules, p);
  ASSERT_EQ(p.hazards_size(), 1);
  EXPECT_EQ(p.hazards(0).name(), "known_bad:forceidle");
  EXPECT_THAT(p.hazards(0).detail(),
              HasSubstr("known-bad entry 'forceidle': kernel 5.15.20 is in [5.14, 5.15.34): "
                        "it hangs"));

  rules.allow.insert("known_bad:forceidle");
  FindHazards(rules, p);
  EXPECT_EQ(p.hazards_size(), 0);
  ASSERT_EQ(p.allowed_hazards_size(), 1);
  EXPECT_EQ(p.allowed_hazards(0).name(), "known_bad:forceidle");
}

TEST(KnownBad, AllowHazardsTakesKnownBadIds) {
  EXPECT_OK(ValidateHazardNames("allow_hazards", {"known_bad:forceidle-5.15", "nested"}));
  for (const char* bad : {"known_bad:", "known_bad:UPPER", "known_bad"}) {
    absl::Status s = ValidateHazardNames("allow_hazards", {bad});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("known_bad:ID (an entry of the known-bad list)"));
  }
}

}  // namespace
}  // namespace cosched::host
