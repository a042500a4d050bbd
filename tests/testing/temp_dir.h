// A directory under /tmp that is removed with everything in it at the end
// of a test.
#ifndef COSCHED_TESTS_TESTING_TEMP_DIR_H_
#define COSCHED_TESTS_TESTING_TEMP_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <string>

namespace cosched::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/cosched-test-XXXXXX";
    char* made = mkdtemp(pattern.data());
    path_ = made ? made : "";
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_TEMP_DIR_H_
