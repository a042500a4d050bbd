// Fuzzes the parser of a libvirt domain's tenancy metadata (<nova:instance>,
// <cosched:vm>), which whoever defines domains writes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "discovery/domain_metadata_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto metadata = cosched::discovery::ParseDomainMetadata(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!metadata) return 0;
  // What the header promises: an error alone, or values within bounds.
  if (!metadata->error().empty()) {
    if (metadata->has_nova() || metadata->has_cosched()) std::abort();
    return 0;
  }
  using cosched::discovery::kMaxMetadataValue;
  const auto& nova = metadata->nova();
  const auto& cosched = metadata->cosched();
  for (const std::string* value : {&nova.project_uuid(), &nova.project_name(),
                                   &nova.flavor_name(), &cosched.tenant(), &cosched.isolation()}) {
    if (value->size() > kMaxMetadataValue) std::abort();
  }
  if (cosched.interference_classes_size() > cosched::discovery::kMaxMetadataClasses) std::abort();
  for (const std::string& c : cosched.interference_classes()) {
    if (c.size() > kMaxMetadataValue) std::abort();
  }
  return 0;
}
