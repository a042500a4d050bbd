#include "host/pseudo_fs.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "host/testing/pseudo_fs_fake.h"
#include "tests/testing/status_matchers.h"

namespace cosched::host {
namespace {

TEST(FakePseudoFs, ListsImpliedDirectories) {
  FakePseudoFs fs;
  fs.SetFile("/proc/10/task/11/comm", "a\n");
  fs.SetFile("/proc/10/task/12/comm", "b\n");
  fs.SetFile("/proc/9/stat", "x");
  EXPECT_EQ(*fs.ListDirectory("/proc"), (std::vector<std::string>{"10", "9"}));
  EXPECT_EQ(*fs.ListDirectory("/proc/10/task"), (std::vector<std::string>{"11", "12"}));
  EXPECT_EQ(fs.ListDirectory("/proc/10/task/13").status().code(), absl::StatusCode::kNotFound);
  fs.Remove("/proc/10/task/11");
  EXPECT_EQ(*fs.ListDirectory("/proc/10/task"), (std::vector<std::string>{"12"}));
}

TEST(LocalPseudoFs, ReadsAndMapsVanishedTasksToNotFound) {
  LocalPseudoFs fs;
  auto self = fs.ReadFile(absl::StrCat("/proc/", getpid(), "/stat"));
  ASSERT_OK(self);
  EXPECT_EQ(self->substr(0, std::to_string(getpid()).size()), std::to_string(getpid()));
  EXPECT_EQ(fs.ReadFile("/proc/999999999/comm").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(fs.ListDirectory("/proc/999999999/task").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cosched::host
