// A directory under $TMPDIR (or /tmp) removed with everything in it.
#ifndef COSCHED_TESTS_AGENT_TEMP_DIR_H_
#define COSCHED_TESTS_AGENT_TEMP_DIR_H_

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace cosched::agent::testing {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr ? base : "/tmp") + "/cs-agent-test-XXXXXX";
    path_ = mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cosched::agent::testing

#endif  // COSCHED_TESTS_AGENT_TEMP_DIR_H_
