#include "discovery/libvirt_status_xml.h"

#include <libxml/parser.h>
#include <libxml/tree.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cosched::discovery {
namespace {

// Far more iothreads than any domain has (each is a QEMU thread).
constexpr int kMaxIothreads = 65536;

struct DocDeleter {
  void operator()(xmlDoc* doc) const { xmlFreeDoc(doc); }
};

bool Is(const xmlNode* node, const char* name) {
  return node->type == XML_ELEMENT_NODE && xmlStrcmp(node->name, BAD_CAST name) == 0;
}

const xmlNode* Child(const xmlNode* parent, const char* name) {
  for (const xmlNode* n = parent->children; n != nullptr; n = n->next) {
    if (Is(n, name)) return n;
  }
  return nullptr;
}

std::optional<std::string> Attribute(const xmlNode* node, const char* name) {
  xmlChar* value = xmlGetProp(node, BAD_CAST name);
  if (value == nullptr) return std::nullopt;
  std::string result(reinterpret_cast<const char*>(value));
  xmlFree(value);
  return result;
}

std::optional<int> IntAttribute(const xmlNode* node, const char* name) {
  std::optional<std::string> text = Attribute(node, name);
  int value = 0;
  if (!text || !absl::SimpleAtoi(*text, &value)) return std::nullopt;
  return value;
}

std::string Text(const xmlNode* node) {
  if (node == nullptr) return "";
  xmlChar* content = xmlNodeGetContent(node);
  if (content == nullptr) return "";
  std::string result(absl::StripAsciiWhitespace(reinterpret_cast<const char*>(content)));
  xmlFree(content);
  return result;
}

}  // namespace

absl::StatusOr<LibvirtDomainStatus> ParseLibvirtStatusXml(absl::string_view xml) {
  static std::once_flag init;
  std::call_once(init, [] { xmlInitParser(); });

  std::unique_ptr<xmlDoc, DocDeleter> doc(
      xmlReadMemory(xml.data(), static_cast<int>(xml.size()), "status.xml", nullptr,
                    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING));
  if (doc == nullptr) {
    const xmlError* error = xmlGetLastError();
    return absl::InvalidArgumentError(absl::StrCat(
        "libvirt status XML is not well-formed: ",
        error != nullptr && error->message != nullptr
            ? absl::StripTrailingAsciiWhitespace(error->message)
            : "parse error"));
  }
  const xmlNode* root = xmlDocGetRootElement(doc.get());
  if (root == nullptr || !Is(root, "domstatus")) {
    return absl::InvalidArgumentError("libvirt status XML has no <domstatus> root");
  }

  LibvirtDomainStatus status;
  status.state = Attribute(root, "state").value_or("");
  std::optional<int> pid = IntAttribute(root, "pid");
  if (!pid || *pid <= 0) {
    return absl::InvalidArgumentError("libvirt status XML: <domstatus> has no valid pid");
  }
  status.pid = *pid;
  if (const xmlNode* job = Child(root, "job")) {
    status.async_job = Attribute(job, "async").value_or("");
    if (status.async_job == "none") status.async_job.clear();
  }

  if (const xmlNode* vcpus = Child(root, "vcpus")) {
    for (const xmlNode* n = vcpus->children; n != nullptr; n = n->next) {
      if (!Is(n, "vcpu")) continue;
      std::optional<int> id = IntAttribute(n, "id");
      std::optional<int> tid = IntAttribute(n, "pid");
      if (!id || !tid || *tid <= 0) {
        return absl::InvalidArgumentError("libvirt status XML: <vcpu> without valid id and pid");
      }
      status.vcpus.push_back({*id, *tid});
    }
  }
  std::sort(status.vcpus.begin(), status.vcpus.end(),
            [](const auto& a, const auto& b) { return a.id < b.id; });

  const xmlNode* domain = Child(root, "domain");
  if (domain == nullptr) {
    return absl::InvalidArgumentError("libvirt status XML has no <domain>");
  }
  status.name = Text(Child(domain, "name"));
  if (status.name.empty()) {
    return absl::InvalidArgumentError("libvirt status XML: <domain> has no <name>");
  }
  status.uuid = absl::AsciiStrToLower(Text(Child(domain, "uuid")));

  if (const xmlNode* ids = Child(domain, "iothreadids")) {
    for (const xmlNode* n = ids->children; n != nullptr; n = n->next) {
      if (!Is(n, "iothread")) continue;
      if (std::optional<int> id = IntAttribute(n, "id")) status.iothread_ids.push_back(*id);
    }
  } else if (const xmlNode* count_node = Child(domain, "iothreads")) {
    int count = 0;
    if (absl::SimpleAtoi(Text(count_node), &count)) {
      // Bounded before the ids are made: a forged count of 2^31 would
      // otherwise take minutes and gigabytes.
      if (count > kMaxIothreads) {
        return absl::InvalidArgumentError(absl::StrCat(
            "libvirt status XML: <iothreads> is ", count, "; at most ", kMaxIothreads,
            " are allowed"));
      }
      for (int id = 1; id <= count; ++id) status.iothread_ids.push_back(id);
    }
  }
  return status;
}

}  // namespace cosched::discovery
