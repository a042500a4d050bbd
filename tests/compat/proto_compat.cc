#include "tests/compat/proto_compat.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace cosched::compat {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::ServiceDescriptor;

// What a field's value is on the wire and in JSON: its type, and the
// message or enum it names.
std::string TypeOf(const FieldDescriptor& field) {
  std::string type = field.type_name();
  if (field.message_type() != nullptr) absl::StrAppend(&type, " ", field.message_type()->full_name());
  if (field.enum_type() != nullptr) absl::StrAppend(&type, " ", field.enum_type()->full_name());
  if (field.is_repeated()) type = absl::StrCat("repeated ", type);
  return type;
}

bool Reserves(const Descriptor& message, int number) {
  for (int i = 0; i < message.reserved_range_count(); ++i) {
    const Descriptor::ReservedRange* range = message.reserved_range(i);
    if (number >= range->start && number < range->end) return true;
  }
  return false;
}

void CompareEnum(const EnumDescriptor& before, const EnumDescriptor* now,
                 std::vector<std::string>& out) {
  if (now == nullptr) {
    out.push_back(absl::StrCat(before.full_name(), ": enum removed"));
    return;
  }
  for (int i = 0; i < before.value_count(); ++i) {
    const auto* value = before.value(i);
    const auto* same_name = now->FindValueByName(value->name());
    if (same_name == nullptr) {
      out.push_back(absl::StrCat(before.full_name(), ".", value->name(), " = ", value->number(),
                                 ": value removed or renamed (keep the old name as an alias)"));
    } else if (same_name->number() != value->number()) {
      out.push_back(absl::StrCat(before.full_name(), ".", value->name(), " = ", value->number(),
                                 ": renumbered to ", same_name->number()));
    }
  }
}

void CompareMessage(const Descriptor& before, const Descriptor* now,
                    std::vector<std::string>& out) {
  if (now == nullptr) {
    out.push_back(absl::StrCat(before.full_name(), ": message removed"));
    return;
  }
  for (int i = 0; i < before.field_count(); ++i) {
    const FieldDescriptor& field = *before.field(i);
    const std::string where =
        absl::StrCat(before.full_name(), ".", field.name(), " = ", field.number());
    const FieldDescriptor* same = now->FindFieldByNumber(field.number());
    if (same == nullptr) {
      if (!Reserves(*now, field.number())) {
        out.push_back(absl::StrCat(where, ": removed without reserving its number"));
      }
      continue;
    }
    if (same->name() != field.name()) {
      out.push_back(absl::StrCat(where, ": renamed to ", same->name()));
    }
    if (TypeOf(*same) != TypeOf(field)) {
      out.push_back(absl::StrCat(where, ": type changed from ", TypeOf(field), " to ",
                                 TypeOf(*same)));
    }
    if (same->containing_oneof() != nullptr && field.containing_oneof() == nullptr) {
      out.push_back(absl::StrCat(where, ": moved into oneof ", same->containing_oneof()->name()));
    }
  }
  for (int i = 0; i < now->field_count(); ++i) {
    const FieldDescriptor& field = *now->field(i);
    if (before.FindFieldByNumber(field.number()) == nullptr && Reserves(before, field.number())) {
      out.push_back(absl::StrCat(now->full_name(), ".", field.name(), " = ", field.number(),
                                 ": takes a number the release reserved"));
    }
  }
  for (int i = 0; i < before.nested_type_count(); ++i) {
    if (before.nested_type(i)->options().map_entry()) continue;
    CompareMessage(*before.nested_type(i), now->FindNestedTypeByName(before.nested_type(i)->name()),
                   out);
  }
  for (int i = 0; i < before.enum_type_count(); ++i) {
    CompareEnum(*before.enum_type(i), now->FindEnumTypeByName(before.enum_type(i)->name()), out);
  }
}

void CompareService(const ServiceDescriptor& before, const ServiceDescriptor* now,
                    std::vector<std::string>& out) {
  if (now == nullptr) {
    out.push_back(absl::StrCat(before.full_name(), ": service removed"));
    return;
  }
  for (int i = 0; i < before.method_count(); ++i) {
    const auto& method = *before.method(i);
    const auto* same = now->FindMethodByName(method.name());
    const std::string where = absl::StrCat(before.full_name(), ".", method.name());
    if (same == nullptr) {
      out.push_back(absl::StrCat(where, ": method removed"));
      continue;
    }
    if (same->input_type()->full_name() != method.input_type()->full_name() ||
        same->output_type()->full_name() != method.output_type()->full_name() ||
        same->client_streaming() != method.client_streaming() ||
        same->server_streaming() != method.server_streaming()) {
      out.push_back(absl::StrCat(where, ": request, response or streaming changed"));
    }
  }
}

}  // namespace

std::vector<std::string> ProtoIncompatibilities(const DescriptorPool& release,
                                                const DescriptorPool& current,
                                                const google::protobuf::FileDescriptorSet& files,
                                                const std::string& package_prefix) {
  std::vector<std::string> out;
  for (const auto& proto : files.file()) {
    if (!absl::StartsWith(proto.package(), package_prefix)) continue;
    const auto* file = release.FindFileByName(proto.name());
    if (file == nullptr) continue;
    for (int i = 0; i < file->message_type_count(); ++i) {
      const Descriptor& message = *file->message_type(i);
      CompareMessage(message, current.FindMessageTypeByName(message.full_name()), out);
    }
    for (int i = 0; i < file->enum_type_count(); ++i) {
      const EnumDescriptor& e = *file->enum_type(i);
      CompareEnum(e, current.FindEnumTypeByName(e.full_name()), out);
    }
    for (int i = 0; i < file->service_count(); ++i) {
      const ServiceDescriptor& service = *file->service(i);
      CompareService(service, current.FindServiceByName(service.full_name()), out);
    }
  }
  return out;
}

absl::Status BuildPool(const google::protobuf::FileDescriptorSet& files, DescriptorPool& pool) {
  for (const auto& file : files.file()) {
    if (pool.BuildFile(file) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("descriptor of ", file.name(),
                                                     " does not build (its imports first?)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace cosched::compat
