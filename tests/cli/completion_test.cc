// csctl completion bash: the script, sourced in a real bash, completes
// csctl's commands and options as csctl parses them.
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/csctl_fixture.h"
#include "tests/testing/temp_dir.h"

namespace cosched::cli {
namespace {

using ::testing::HasSubstr;

class CompletionTest : public CsctlFixture {
 protected:
  void SetUp() override {
    ASSERT_EQ(Run({"completion", "bash"}), kExitOk) << err_.str();
    script_ = dir_.Sub("csctl.bash");
    std::ofstream(script_) << out_.str();
  }

  // What the script offers after `line` (the words so far, the last one
  // being completed), as bash's COMPREPLY, space-separated.
  std::string Complete(const std::string& line) {
    const std::string command = absl::StrCat(
        "bash -c 'source ", script_, "; COMP_WORDS=(", line, "); ",
        // A line ending in a space completes a new, empty word.
        line.back() == ' ' ? "COMP_WORDS+=(\"\"); " : "",
        "COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _csctl; echo \"${COMPREPLY[*]}\"'");
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return "popen failed";
    std::string result;
    char buffer[4096];
    while (fgets(buffer, sizeof buffer, pipe) != nullptr) result += buffer;
    pclose(pipe);
    if (!result.empty() && result.back() == '\n') result.pop_back();
    return result;
  }

  cosched::testing::TempDir dir_;
  std::string script_;
};

TEST_F(CompletionTest, CompletesCommandsSubcommandsAndOptions) {
  EXPECT_THAT(out_.str(), HasSubstr("complete -F _csctl csctl"));
  EXPECT_EQ(Complete("csctl rollout st"), "start status");
  EXPECT_EQ(Complete("csctl sta"), "stats status");
  // Options of the command typed, after global ones and their values.
  EXPECT_EQ(Complete("csctl --server 10.0.0.1:7443 rollout start --so"), "--soak");
  EXPECT_THAT(Complete("csctl hosts "), HasSubstr("drain"));
  EXPECT_THAT(Complete("csctl hosts "), HasSubstr("traits"));
  // Every top-level command, the one completing them included.
  EXPECT_THAT(Complete("csctl "), HasSubstr("completion"));
  EXPECT_EQ(Complete("csctl nosuchcommand --se"), "--server");
}

TEST_F(CompletionTest, AnotherShellIsAUsageError) {
  EXPECT_EQ(Run({"completion", "zsh"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("zsh"));
}

}  // namespace
}  // namespace cosched::cli
