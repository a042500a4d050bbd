// Loads YAML configuration files into the proto messages that describe them
// (cosched.v1.CsdConfig, AgentConfig, CsctlConfig), so every setting has one
// schema. Keys are the proto field names.
#ifndef COSCHED_COMMON_CONFIG_LOADER_H_
#define COSCHED_COMMON_CONFIG_LOADER_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace cosched {

// Where each key of a loaded file is, so that an error found after loading
// (a value out of range, an unknown role) names the file and line as the
// loader's own errors do. Keys are paths as in errors: "tls.cert_file",
// "roles[0].role".
class ConfigLocations {
 public:
  // `message` prefixed with "file:line: " of the key it starts with (by
  // the convention that errors start with the field they are about), or
  // of its nearest enclosing key in the file ("roles[0]" for
  // "roles[0].spiffe_ids entry ..."). Unchanged when the file has no such
  // key: the value is a default or came from a flag.
  std::string Locate(absl::string_view message) const;
  // The value of `key` came from a flag: never point at the file for it.
  void Forget(absl::string_view key);

 private:
  friend class YamlToProto;  // the loader, in config_loader.cc, fills it
  std::string source_;
  std::map<std::string, int, std::less<>> lines_;  // path -> 1-based line
};

// Parses `yaml` into `message` (cleared first). `source` names the input in
// errors ("/etc/cosched/csd.yaml"). An unknown key, a value of the wrong
// type or malformed YAML is INVALID_ARGUMENT naming the source, the line and
// the key. An empty document leaves the message empty.
absl::Status ParseYamlConfig(absl::string_view yaml, absl::string_view source,
                             google::protobuf::Message* message,
                             ConfigLocations* locations = nullptr);

// Reads `path` and parses it as above. NOT_FOUND when the file is missing.
// `locations`, when given, is filled with where each key is.
absl::Status LoadYamlConfigFile(const std::string& path,
                                google::protobuf::Message* message,
                                ConfigLocations* locations = nullptr);

}  // namespace cosched

#endif  // COSCHED_COMMON_CONFIG_LOADER_H_
