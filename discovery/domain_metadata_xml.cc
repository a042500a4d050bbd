#include "discovery/domain_metadata_xml.h"

#include <libxml/parser.h>
#include <libxml/tree.h>

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace cosched::discovery {
namespace {

struct DocDeleter {
  void operator()(xmlDoc* doc) const { xmlFreeDoc(doc); }
};

bool IsElement(const xmlNode* node) { return node->type == XML_ELEMENT_NODE; }

bool InNamespace(const xmlNode* node, const char* href) {
  return node->ns != nullptr && node->ns->href != nullptr &&
         xmlStrcmp(node->ns->href, BAD_CAST href) == 0;
}

bool Named(const xmlNode* node, const char* name) {
  return IsElement(node) && xmlStrcmp(node->name, BAD_CAST name) == 0;
}

// `what` names an element or attribute in errors, e.g. "nova:flavor name".
absl::StatusOr<std::string> Bounded(const std::string& what, std::string value) {
  if (value.size() > kMaxMetadataValue) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", value.size(),
                                                   " bytes; at most ", kMaxMetadataValue,
                                                   " are allowed"));
  }
  return value;
}

// The element's text, trimmed. An element inside it means the writer put
// structure where a value belongs: refused rather than flattened.
absl::StatusOr<std::string> Text(const std::string& what, const xmlNode* node) {
  for (const xmlNode* n = node->children; n != nullptr; n = n->next) {
    if (IsElement(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " holds an element; it must hold text only"));
    }
  }
  xmlChar* content = xmlNodeGetContent(node);
  std::string text = content != nullptr
                         ? std::string(absl::StripAsciiWhitespace(
                               reinterpret_cast<const char*>(content)))
                         : "";
  if (content != nullptr) xmlFree(content);
  return Bounded(what, std::move(text));
}

absl::StatusOr<std::string> Attribute(const std::string& what, const xmlNode* node,
                                      const char* name) {
  xmlChar* value = xmlGetProp(node, BAD_CAST name);
  if (value == nullptr) return std::string();
  std::string text(absl::StripAsciiWhitespace(reinterpret_cast<const char*>(value)));
  xmlFree(value);
  return Bounded(what, std::move(text));
}

// Sets `*out` from the only child element `name` of `parent` in `ns`.
absl::Status Once(const xmlNode*& out, const xmlNode* parent, const char* ns,
                  const char* name, const std::string& what) {
  out = nullptr;
  for (const xmlNode* n = parent->children; n != nullptr; n = n->next) {
    if (!Named(n, name) || !InNamespace(n, ns)) continue;
    if (out != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is given more than once"));
    }
    out = n;
  }
  return absl::OkStatus();
}

absl::Status ParseNova(const xmlNode* instance, const char* ns, const char* version,
                       v1::DomainMetadata::Nova& nova) {
  nova.set_version(version);
  const xmlNode* owner = nullptr;
  RETURN_IF_ERROR(Once(owner, instance, ns, "owner", "nova:owner"));
  if (owner != nullptr) {
    const xmlNode* project = nullptr;
    RETURN_IF_ERROR(Once(project, owner, ns, "project", "nova:project"));
    if (project != nullptr) {
      ASSIGN_OR_RETURN(*nova.mutable_project_uuid(),
                          Attribute("nova:project uuid", project, "uuid"));
      ASSIGN_OR_RETURN(*nova.mutable_project_name(), Text("nova:project", project));
    }
  }
  const xmlNode* flavor = nullptr;
  RETURN_IF_ERROR(Once(flavor, instance, ns, "flavor", "nova:flavor"));
  if (flavor != nullptr) {
    ASSIGN_OR_RETURN(*nova.mutable_flavor_name(),
                        Attribute("nova:flavor name", flavor, "name"));
  }
  return absl::OkStatus();
}

absl::Status ParseCosched(const xmlNode* vm, v1::DomainMetadata::Cosched& cosched) {
  bool tenant = false, isolation = false;
  for (const xmlNode* n = vm->children; n != nullptr; n = n->next) {
    if (!IsElement(n)) continue;
    const std::string name = reinterpret_cast<const char*>(n->name);
    const std::string what = absl::StrCat("cosched:", name);
    // cosched's own schema: a misspelt element would silently give the
    // VM another level, so anything unknown is refused.
    if (!InNamespace(n, kCoschedNamespace)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cosched:vm holds <", name, "> outside cosched's namespace; only tenant, "
          "isolation and class are allowed"));
    }
    if (name == "tenant" || name == "isolation") {
      bool& seen = name == "tenant" ? tenant : isolation;
      if (seen) return absl::InvalidArgumentError(absl::StrCat(what, " is given more than once"));
      seen = true;
      ASSIGN_OR_RETURN(*(name == "tenant" ? cosched.mutable_tenant()
                                             : cosched.mutable_isolation()),
                          Text(what, n));
    } else if (name == "class") {
      if (cosched.interference_classes_size() >= kMaxMetadataClasses) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cosched:class is given more than ", kMaxMetadataClasses, " times"));
      }
      ASSIGN_OR_RETURN(*cosched.add_interference_classes(), Text(what, n));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "cosched:vm holds <", what, ">; only tenant, isolation and class are allowed"));
    }
  }
  return absl::OkStatus();
}

// nullopt: no tenancy metadata; an error names what is wrong.
absl::StatusOr<std::optional<v1::DomainMetadata>> Parse(absl::string_view xml) {
  if (xml.size() > kMaxDomainXml) {
    return absl::InvalidArgumentError(absl::StrCat("the domain XML is ", xml.size(),
                                                   " bytes; at most ", kMaxDomainXml,
                                                   " are read"));
  }
  static std::once_flag init;
  std::call_once(init, [] { xmlInitParser(); });
  // No network, no entity substitution (XML_PARSE_NOENT is not given), no
  // DTD loading: the XML is written by whoever defines domains.
  std::unique_ptr<xmlDoc, DocDeleter> doc(
      xmlReadMemory(xml.data(), static_cast<int>(xml.size()), "domain.xml", nullptr,
                    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING));
  if (doc == nullptr) {
    const xmlError* error = xmlGetLastError();
    return absl::InvalidArgumentError(absl::StrCat(
        "the domain XML is not well-formed: ",
        error != nullptr && error->message != nullptr
            ? absl::StripTrailingAsciiWhitespace(error->message)
            : "parse error"));
  }
  const xmlNode* root = xmlDocGetRootElement(doc.get());
  if (root == nullptr || !Named(root, "domain")) {
    return absl::InvalidArgumentError("the domain XML has no <domain> root");
  }
  const xmlNode* metadata = nullptr;
  for (const xmlNode* n = root->children; n != nullptr; n = n->next) {
    if (Named(n, "metadata") && n->ns == nullptr) metadata = n;
  }
  if (metadata == nullptr) return std::nullopt;

  v1::DomainMetadata out;
  const xmlNode* nova = nullptr;
  const char* nova_ns = nullptr;
  const xmlNode* cosched = nullptr;
  for (const xmlNode* n = metadata->children; n != nullptr; n = n->next) {
    if (Named(n, "instance") &&
        (InNamespace(n, kNovaNamespace11) || InNamespace(n, kNovaNamespace10))) {
      if (nova != nullptr) {
        return absl::InvalidArgumentError("nova:instance is given more than once");
      }
      nova = n;
      nova_ns = InNamespace(n, kNovaNamespace11) ? kNovaNamespace11 : kNovaNamespace10;
    } else if (Named(n, "vm") && InNamespace(n, kCoschedNamespace)) {
      if (cosched != nullptr) {
        return absl::InvalidArgumentError("cosched:vm is given more than once");
      }
      cosched = n;
    }
  }
  if (nova == nullptr && cosched == nullptr) return std::nullopt;
  if (nova != nullptr) {
    RETURN_IF_ERROR(ParseNova(nova, nova_ns, nova_ns == kNovaNamespace11 ? "1.1" : "1.0",
                               *out.mutable_nova()));
  }
  if (cosched != nullptr) RETURN_IF_ERROR(ParseCosched(cosched, *out.mutable_cosched()));
  return out;
}

}  // namespace

std::optional<v1::DomainMetadata> ParseDomainMetadata(absl::string_view xml) {
  absl::StatusOr<std::optional<v1::DomainMetadata>> parsed = Parse(xml);
  if (parsed.ok()) return *std::move(parsed);
  v1::DomainMetadata refused;
  refused.set_error(std::string(parsed.status().message()));
  return refused;
}

}  // namespace cosched::discovery
