#include "common/config_loader.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "yaml-cpp/yaml.h"

namespace cosched {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

class YamlToProto {
 public:
  YamlToProto(absl::string_view source, ConfigLocations* locations)
      : source_(source), locations_(locations) {
    if (locations_ != nullptr) locations_->source_ = source_;
  }

  absl::Status Fill(const YAML::Node& node, const std::string& path,
                    Message* message) {
    if (!node.IsMap()) {
      return Error(node, path.empty() ? "the document" : path,
                   "must be a mapping of keys to values");
    }
    const Descriptor* desc = message->GetDescriptor();
    std::set<std::string> seen;
    for (const auto& entry : node) {
      std::string key = entry.first.Scalar();
      std::string key_path = path.empty() ? key : absl::StrCat(path, ".", key);
      // YAML keeps only one of two equal keys, silently: refuse the file
      // rather than guess which the operator meant.
      if (!seen.insert(key).second) {
        return Error(entry.first, key_path, "is given twice");
      }
      Record(entry.first, key_path);
      const FieldDescriptor* field = desc->FindFieldByName(key);
      if (field == nullptr) {
        std::vector<std::string> known;
        for (int i = 0; i < desc->field_count(); ++i) {
          known.push_back(desc->field(i)->name());
        }
        return Error(entry.first, key_path,
                     absl::StrCat("is not a known key (known: ",
                                  absl::StrJoin(known, ", "), ")"));
      }
      absl::Status s = SetField(entry.second, key_path, field, message);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status SetField(const YAML::Node& value, const std::string& path,
                        const FieldDescriptor* field, Message* message) {
    if (value.IsNull()) return absl::OkStatus();  // `key:` with no value
    if (field->is_map()) {
      // A mapping in YAML, as in proto's JSON: `labels: {zone: a}`.
      if (!value.IsMap()) return Error(value, path, "must be a mapping of keys to values");
      const FieldDescriptor* key_field = field->message_type()->map_key();
      const FieldDescriptor* value_field = field->message_type()->map_value();
      std::set<std::string> seen;
      for (const auto& entry : value) {
        const std::string key = entry.first.Scalar();
        const std::string entry_path = absl::StrCat(path, ".", key);
        if (!seen.insert(key).second) return Error(entry.first, entry_path, "is given twice");
        Record(entry.first, entry_path);
        Message* pair = message->GetReflection()->AddMessage(message, field);
        RETURN_IF_ERROR(SetOne(entry.first, entry_path, key_field, pair));
        RETURN_IF_ERROR(SetOne(entry.second, entry_path, value_field, pair));
      }
      return absl::OkStatus();
    }
    if (field->is_repeated()) {
      if (!value.IsSequence()) return Error(value, path, "must be a list");
      for (size_t i = 0; i < value.size(); ++i) {
        const std::string item_path = absl::StrCat(path, "[", i, "]");
        Record(value[i], item_path);
        absl::Status s = SetOne(value[i], item_path, field, message);
        if (!s.ok()) return s;
      }
      return absl::OkStatus();
    }
    return SetOne(value, path, field, message);
  }

  absl::Status SetOne(const YAML::Node& value, const std::string& path,
                      const FieldDescriptor* field, Message* message) {
    const Reflection* r = message->GetReflection();
    bool rep = field->is_repeated();
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Message* sub = rep ? r->AddMessage(message, field)
                         : r->MutableMessage(message, field);
      return Fill(value, path, sub);
    }
    if (!value.IsScalar()) return Error(value, path, "must be a single value");
    const std::string& text = value.Scalar();
    try {
      switch (field->cpp_type()) {
        case FieldDescriptor::CPPTYPE_STRING:
          rep ? r->AddString(message, field, text)
              : r->SetString(message, field, text);
          return absl::OkStatus();
        case FieldDescriptor::CPPTYPE_BOOL: {
          bool v = value.as<bool>();
          rep ? r->AddBool(message, field, v) : r->SetBool(message, field, v);
          return absl::OkStatus();
        }
        case FieldDescriptor::CPPTYPE_INT32: {
          int32_t v = value.as<int32_t>();
          rep ? r->AddInt32(message, field, v) : r->SetInt32(message, field, v);
          return absl::OkStatus();
        }
        case FieldDescriptor::CPPTYPE_INT64: {
          int64_t v = value.as<int64_t>();
          rep ? r->AddInt64(message, field, v) : r->SetInt64(message, field, v);
          return absl::OkStatus();
        }
        case FieldDescriptor::CPPTYPE_UINT32: {
          uint32_t v = value.as<uint32_t>();
          rep ? r->AddUInt32(message, field, v)
              : r->SetUInt32(message, field, v);
          return absl::OkStatus();
        }
        case FieldDescriptor::CPPTYPE_UINT64: {
          uint64_t v = value.as<uint64_t>();
          rep ? r->AddUInt64(message, field, v)
              : r->SetUInt64(message, field, v);
          return absl::OkStatus();
        }
        case FieldDescriptor::CPPTYPE_DOUBLE: {
          double v = value.as<double>();
          rep ? r->AddDouble(message, field, v)
              : r->SetDouble(message, field, v);
          return absl::OkStatus();
        }
        case FieldDescriptor::CPPTYPE_FLOAT: {
          float v = value.as<float>();
          rep ? r->AddFloat(message, field, v) : r->SetFloat(message, field, v);
          return absl::OkStatus();
        }
        case FieldDescriptor::CPPTYPE_ENUM: {
          const auto* ev = field->enum_type()->FindValueByName(text);
          if (ev == nullptr) {
            return Error(value, path, "is not a value of its enum");
          }
          rep ? r->AddEnum(message, field, ev) : r->SetEnum(message, field, ev);
          return absl::OkStatus();
        }
        default:
          break;
      }
    } catch (const YAML::Exception&) {
      return Error(value, path,
                   absl::StrCat("must be ", TypeName(field), ", not '",
                                text.substr(0, 64), "'"));
    }
    return Error(value, path, "has a type this loader does not handle");
  }

  static std::string TypeName(const FieldDescriptor* field) {
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_BOOL: return "true or false";
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64: return "an integer";
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64: return "a non-negative integer";
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT: return "a number";
      default: return "a string";
    }
  }

  void Record(const YAML::Node& node, const std::string& path) {
    if (locations_ != nullptr && node.Mark().line >= 0) {
      locations_->lines_[path] = node.Mark().line + 1;
    }
  }

  absl::Status Error(const YAML::Node& node, absl::string_view what,
                     absl::string_view rule) const {
    std::string where(source_);
    if (node.Mark().line >= 0) {
      absl::StrAppend(&where, ":", node.Mark().line + 1);
    }
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": key '", what, "' ", rule));
  }

  std::string source_;
  ConfigLocations* locations_;
};

namespace {

// The field path an error message starts with: up to the first space or
// quote ("roles[0].role 'x' is not a role" -> "roles[0].role").
absl::string_view LeadingPath(absl::string_view message) {
  return message.substr(0, message.find_first_of(" '"));
}

}  // namespace

std::string ConfigLocations::Locate(absl::string_view message) const {
  absl::string_view path = LeadingPath(message);
  while (!path.empty()) {
    if (auto it = lines_.find(path); it != lines_.end()) {
      return absl::StrCat(source_, ":", it->second, ": ", message);
    }
    // The enclosing key: "a.b[2].c" -> "a.b[2]" -> "a.b" -> "a".
    size_t cut = path.find_last_of(".[");
    if (cut == absl::string_view::npos) break;
    path = path.substr(0, cut);
  }
  return std::string(message);
}

void ConfigLocations::Forget(absl::string_view key) {
  auto it = lines_.find(key);
  if (it != lines_.end()) lines_.erase(it);
}

absl::Status ParseYamlConfig(absl::string_view yaml, absl::string_view source,
                             Message* message, ConfigLocations* locations) {
  message->Clear();
  if (locations != nullptr) *locations = ConfigLocations();
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ": not valid YAML: ", e.msg));
  }
  if (root.IsNull()) return absl::OkStatus();
  YamlToProto converter(source, locations);
  absl::Status s = converter.Fill(root, "", message);
  if (!s.ok()) {  // nothing half-loaded
    message->Clear();
    if (locations != nullptr) *locations = ConfigLocations();
  }
  return s;
}

absl::Status LoadYamlConfigFile(const std::string& path, Message* message,
                                ConfigLocations* locations) {
  std::ifstream in(path);
  if (!in) {
    int err = errno;
    std::string why = absl::StrCat("cannot read config file ", path, ": ",
                                   std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(why)
                         : absl::FailedPreconditionError(why);
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseYamlConfig(buffer.str(), path, message, locations);
}

}  // namespace cosched
