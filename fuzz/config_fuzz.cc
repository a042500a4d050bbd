// Fuzzes the YAML configuration loader (common/config_loader.h) with the
// three configuration messages of proto/cosched/v1/config.proto.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/config_loader.h"
#include "cosched/v1/config.pb.h"

namespace {

void FuzzOne(absl::string_view yaml, google::protobuf::Message* message) {
  absl::Status status = cosched::ParseYamlConfig(yaml, "fuzz.yaml", message);
  // A refused file leaves nothing half-loaded.
  if (!status.ok() && message->ByteSizeLong() != 0) std::abort();
  if (!status.ok() && status.code() != absl::StatusCode::kInvalidArgument) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view yaml(reinterpret_cast<const char*>(data), size);
  cosched::v1::CsdConfig csd;
  FuzzOne(yaml, &csd);
  cosched::v1::AgentConfig agent;
  FuzzOne(yaml, &agent);
  cosched::v1::CsctlConfig csctl;
  FuzzOne(yaml, &csctl);
  return 0;
}
