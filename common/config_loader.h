// Loads YAML configuration files into the proto messages that describe them
// (cosched.v1.CsdConfig, AgentConfig, CsctlConfig), so every setting has one
// schema. Keys are the proto field names.
#ifndef COSCHED_COMMON_CONFIG_LOADER_H_
#define COSCHED_COMMON_CONFIG_LOADER_H_

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace cosched {

// Parses `yaml` into `message` (cleared first). `source` names the input in
// errors ("/etc/cosched/csd.yaml"). An unknown key, a value of the wrong
// type or malformed YAML is INVALID_ARGUMENT naming the source, the line and
// the key. An empty document leaves the message empty.
absl::Status ParseYamlConfig(absl::string_view yaml, absl::string_view source,
                             google::protobuf::Message* message);

// Reads `path` and parses it as above. NOT_FOUND when the file is missing.
absl::Status LoadYamlConfigFile(const std::string& path,
                                google::protobuf::Message* message);

}  // namespace cosched

#endif  // COSCHED_COMMON_CONFIG_LOADER_H_
