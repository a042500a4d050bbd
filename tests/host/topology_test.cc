#include "host/topology.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "host/pseudo_fs.h"
#include "host/testing/fake_host.h"
#include "host/testing/pseudo_fs_fake.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched::host {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kCpuDir[] = "/sys/devices/system/cpu";

void AddCpu(FakePseudoFs& fs, int cpu, const std::string& siblings, int core_id,
            int package_id = 0) {
  std::string dir = absl::StrCat(kCpuDir, "/cpu", cpu, "/topology");
  fs.SetFile(dir + "/thread_siblings_list", siblings + "\n");
  fs.SetFile(dir + "/core_id", absl::StrCat(core_id, "\n"));
  fs.SetFile(dir + "/physical_package_id", absl::StrCat(package_id, "\n"));
}

// Two cores with two siblings each, numbered the way x86 does it: the
// second sibling of core 0 is CPU 2.
FakePseudoFs TwoCoresTwoSiblings() {
  FakePseudoFs fs;
  fs.SetFile(absl::StrCat(kCpuDir, "/online"), "0-3\n");
  AddCpu(fs, 0, "0,2", 0);
  AddCpu(fs, 1, "1,3", 1);
  AddCpu(fs, 2, "0,2", 0);
  AddCpu(fs, 3, "1,3", 1);
  return fs;
}

TEST(ReadTopologyTest, TwoCoresTwoSiblings) {
  FakePseudoFs fs = TwoCoresTwoSiblings();
  absl::StatusOr<v1::Topology> topology = ReadTopology(fs, "/sys");
  ASSERT_OK(topology);
  ASSERT_EQ(topology->cores_size(), 2);
  EXPECT_THAT(topology->cores(0).cpus(), ElementsAre(0, 2));
  EXPECT_EQ(topology->cores(0).core_id(), 0);
  EXPECT_THAT(topology->cores(1).cpus(), ElementsAre(1, 3));
  EXPECT_EQ(topology->cores(1).core_id(), 1);
  EXPECT_EQ(topology->cores(1).package_id(), 0);

  absl::StatusOr<bool> smt = ReadSmtActive(fs, "/sys", *topology);
  ASSERT_OK(smt);
  EXPECT_TRUE(*smt);
}

TEST(FakeHostTest, BothSiblingNumberingsReadAsTheirShape) {
  absl::StatusOr<v1::Topology> x86 =
      ReadTopology(*MakeFakeHost({.cores = 3, .threads_per_core = 2}), "/sys");
  ASSERT_OK(x86);
  ASSERT_EQ(x86->cores_size(), 3);
  EXPECT_THAT(x86->cores(1).cpus(), ElementsAre(1, 4));
  absl::StatusOr<v1::Topology> adjacent = ReadTopology(
      *MakeFakeHost({.cores = 2, .threads_per_core = 4, .interleaved = false}), "/sys");
  ASSERT_OK(adjacent);
  ASSERT_EQ(adjacent->cores_size(), 2);
  EXPECT_THAT(adjacent->cores(1).cpus(), ElementsAre(4, 5, 6, 7));
  auto fs = MakeFakeHost({.smt_active = false});
  absl::StatusOr<bool> smt = ReadSmtActive(*fs, "/sys", *ReadTopology(*fs, "/sys"));
  ASSERT_OK(smt);
  EXPECT_FALSE(*smt);
}

TEST(ReadTopologyTest, NoSmt) {
  FakePseudoFs fs;
  fs.SetFile(absl::StrCat(kCpuDir, "/online"), "0-1\n");
  AddCpu(fs, 0, "0", 0);
  AddCpu(fs, 1, "1", 1);
  absl::StatusOr<v1::Topology> topology = ReadTopology(fs, "/sys");
  ASSERT_OK(topology);
  ASSERT_EQ(topology->cores_size(), 2);
  EXPECT_THAT(topology->cores(0).cpus(), ElementsAre(0));
  EXPECT_THAT(topology->cores(1).cpus(), ElementsAre(1));
  absl::StatusOr<bool> smt = ReadSmtActive(fs, "/sys", *topology);
  ASSERT_OK(smt);
  EXPECT_FALSE(*smt);
}

TEST(ReadTopologyTest, SmtActiveFileWins) {
  FakePseudoFs fs = TwoCoresTwoSiblings();
  fs.SetFile(absl::StrCat(kCpuDir, "/smt/active"), "0\n");
  absl::StatusOr<v1::Topology> topology = ReadTopology(fs, "/sys");
  ASSERT_OK(topology);
  EXPECT_FALSE(*ReadSmtActive(fs, "/sys", *topology));
}

TEST(ReadTopologyTest, OfflineSiblingIsLeftOut) {
  FakePseudoFs fs = TwoCoresTwoSiblings();
  fs.SetFile(absl::StrCat(kCpuDir, "/online"), "0-2\n");
  absl::StatusOr<v1::Topology> topology = ReadTopology(fs, "/sys");
  ASSERT_OK(topology);
  ASSERT_EQ(topology->cores_size(), 2);
  EXPECT_THAT(topology->cores(1).cpus(), ElementsAre(1));
}

TEST(ReadTopologyTest, CoreIdsRepeatingAcrossDiesStayApart) {
  FakePseudoFs fs;
  fs.SetFile(absl::StrCat(kCpuDir, "/online"), "0-1\n");
  AddCpu(fs, 0, "0", 0);
  AddCpu(fs, 1, "1", 0);
  absl::StatusOr<v1::Topology> topology = ReadTopology(fs, "/sys");
  ASSERT_OK(topology);
  EXPECT_EQ(topology->cores_size(), 2);
}

TEST(ReadTopologyTest, MissingFileIsNamed) {
  FakePseudoFs fs = TwoCoresTwoSiblings();
  fs.Remove(absl::StrCat(kCpuDir, "/cpu1/topology/core_id"));
  absl::StatusOr<v1::Topology> topology = ReadTopology(fs, "/sys");
  EXPECT_EQ(topology.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(topology.status().message(), HasSubstr("cpu1/topology/core_id"));
}

TEST(ReadTopologyTest, MalformedSiblingsAreNamed) {
  FakePseudoFs fs = TwoCoresTwoSiblings();
  AddCpu(fs, 2, "0,x", 0);
  absl::StatusOr<v1::Topology> topology = ReadTopology(fs, "/sys");
  EXPECT_EQ(topology.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(topology.status().message(),
              HasSubstr("cpu2/topology/thread_siblings_list"));
}

TEST(ReadTopologyTest, DisagreeingSiblingListsAreAnError) {
  FakePseudoFs fs = TwoCoresTwoSiblings();
  AddCpu(fs, 2, "1,2", 0);
  EXPECT_EQ(ReadTopology(fs, "/sys").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ReadTopologyTest, OtherSysfsRoot) {
  FakePseudoFs fs;
  fs.SetFile("/fake/sys/devices/system/cpu/online", "0\n");
  fs.SetFile("/fake/sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
             "0\n");
  fs.SetFile("/fake/sys/devices/system/cpu/cpu0/topology/core_id", "0\n");
  fs.SetFile("/fake/sys/devices/system/cpu/cpu0/topology/physical_package_id",
             "-1\n");
  absl::StatusOr<v1::Topology> topology = ReadTopology(fs, "/fake/sys");
  ASSERT_OK(topology);
  EXPECT_EQ(topology->cores(0).package_id(), -1);
}

TEST(SchedstatsTest, OnOffMissing) {
  FakePseudoFs fs;
  EXPECT_FALSE(*ReadSchedstatsEnabled(fs, "/proc"));
  fs.SetFile("/proc/sys/kernel/sched_schedstats", "0\n");
  EXPECT_FALSE(*ReadSchedstatsEnabled(fs, "/proc"));
  fs.SetFile("/proc/sys/kernel/sched_schedstats", "1\n");
  EXPECT_TRUE(*ReadSchedstatsEnabled(fs, "/proc"));
  fs.SetFile("/proc/sys/kernel/sched_schedstats", "yes\n");
  EXPECT_EQ(ReadSchedstatsEnabled(fs, "/proc").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FakePseudoFsTest, ListsImpliedDirectories) {
  FakePseudoFs fs = TwoCoresTwoSiblings();
  absl::StatusOr<std::vector<std::string>> names = fs.ListDirectory(kCpuDir);
  ASSERT_OK(names);
  EXPECT_THAT(*names, ElementsAre("cpu0", "cpu1", "cpu2", "cpu3", "online"));
  EXPECT_EQ(fs.ListDirectory("/nope").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(LocalPseudoFsTest, ReadsThisMachinesTopology) {
  LocalPseudoFs fs;
  absl::StatusOr<v1::Topology> topology = ReadTopology(fs, "/sys");
  ASSERT_OK(topology);
  EXPECT_GT(topology->cores_size(), 0);
  EXPECT_EQ(fs.ReadFile("/nonexistent/file").status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<std::string>> names =
      fs.ListDirectory("/sys/devices/system/cpu");
  ASSERT_OK(names);
  EXPECT_THAT(*names, ::testing::Contains("online"));
}

}  // namespace
}  // namespace cosched::host
