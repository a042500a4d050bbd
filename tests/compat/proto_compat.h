// The proto's compatibility rules (docs/compatibility.md), checked between
// the descriptors of a release and the current ones: every message, field,
// enum value, service and method of the release is still there under the
// same number, name and type; a removed field's number is reserved; no
// field takes a number the release reserved. What may change: fields,
// values, messages and methods added, comments, and enum values given a
// new name beside the old (allow_alias).
#ifndef COSCHED_TESTS_COMPAT_PROTO_COMPAT_H_
#define COSCHED_TESTS_COMPAT_PROTO_COMPAT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"

namespace cosched::compat {

// Each way `current` breaks the rules against `release`, one line each,
// naming the element and the rule ("cosched.v1.VM.vm_id = 1: renamed to
// id"). Only files whose package starts with `package_prefix` are compared.
// Empty when compatible.
std::vector<std::string> ProtoIncompatibilities(const google::protobuf::DescriptorPool& release,
                                                const google::protobuf::DescriptorPool& current,
                                                const google::protobuf::FileDescriptorSet& files,
                                                const std::string& package_prefix);

// Builds a pool from a FileDescriptorSet written by protoc
// --include_imports (dependencies first). INVALID_ARGUMENT naming the file
// that does not build.
absl::Status BuildPool(const google::protobuf::FileDescriptorSet& files,
                       google::protobuf::DescriptorPool& pool);

}  // namespace cosched::compat

#endif  // COSCHED_TESTS_COMPAT_PROTO_COMPAT_H_
