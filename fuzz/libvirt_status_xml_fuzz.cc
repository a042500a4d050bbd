// Fuzzes the parser of libvirt's QEMU status XML (/run/libvirt/qemu/<dom>.xml).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "discovery/libvirt_status_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto status = cosched::discovery::ParseLibvirtStatusXml(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  if (status.ok()) {
    // What the header promises of a parsed status.
    if (status->pid <= 0 || status->name.empty()) std::abort();
    if (!std::is_sorted(status->vcpus.begin(), status->vcpus.end(),
                        [](const auto& a, const auto& b) { return a.id < b.id; }))
      std::abort();
    for (const auto& vcpu : status->vcpus)
      if (vcpu.tid <= 0) std::abort();
  }
  return 0;
}
