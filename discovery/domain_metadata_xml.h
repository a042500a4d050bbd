// Parser of the tenancy a libvirt domain's XML carries in its <metadata>:
// OpenStack Nova's <nova:instance> and cosched's own <cosched:vm>
// (docs/integrations.md). No I/O: the caller passes the XML libvirt gave
// (virDomainGetXMLDesc).
#ifndef COSCHED_DISCOVERY_DOMAIN_METADATA_XML_H_
#define COSCHED_DISCOVERY_DOMAIN_METADATA_XML_H_

#include <cstddef>
#include <optional>

#include "absl/strings/string_view.h"
#include "cosched/v1/types.pb.h"

namespace cosched::discovery {

inline constexpr char kNovaNamespace11[] = "http://openstack.org/xmlns/libvirt/nova/1.1";
inline constexpr char kNovaNamespace10[] = "http://openstack.org/xmlns/libvirt/nova/1.0";
inline constexpr char kCoschedNamespace[] = "https://cosched.dev/xmlns/libvirt/1.0";

// Bounds of what is read, so that a domain's metadata cannot make the
// agent's Reports grow without bound: each value, the classes, the
// document.
inline constexpr size_t kMaxMetadataValue = 256;
inline constexpr int kMaxMetadataClasses = 16;
inline constexpr size_t kMaxDomainXml = 4 << 20;

// What the domain XML `xml` (<domain>...</domain>) says of its tenancy:
// nullopt when its <metadata> holds neither a Nova nor a cosched element.
// Never fails: XML that does not parse, a value over its bound, an element
// given twice, an element where text belongs, or a document over
// kMaxDomainXml give a DomainMetadata whose `error` names the element and
// the rule (and whose nova and cosched are unset), so that csd can say why
// the VM stays on a cookie of its own.
std::optional<v1::DomainMetadata> ParseDomainMetadata(absl::string_view xml);

}  // namespace cosched::discovery

#endif  // COSCHED_DISCOVERY_DOMAIN_METADATA_XML_H_
