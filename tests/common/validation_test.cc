#include "common/validation.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace cosched {
namespace {

TEST(ValidateId, AcceptsTheRule) {
  for (const char* id : {"vm-123", "a", "0", "550e8400-e29b-41d4-a716-446655440000",
                         "host.example.com", "t:a_b-c.d"}) {
    EXPECT_OK(ValidateId("vm_id", id)) << id;
  }
  EXPECT_OK(ValidateId("vm_id", std::string(128, 'a')));
}

TEST(ValidateId, RejectsAndNamesFieldAndRule) {
  for (const std::string& id :
       {std::string("bad id!"), std::string("-start"), std::string(".x"),
        std::string(129, 'a'), std::string("a/b"), std::string("a\0b", 3),
        std::string("\xff\xfe")}) {
    absl::Status s = ValidateId("vm_id", id);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << id;
    EXPECT_NE(s.message().find("vm_id"), std::string::npos);
    EXPECT_NE(s.message().find("[A-Za-z0-9._:-]"), std::string::npos);
  }
  absl::Status empty = ValidateId("tenant_id", "");
  EXPECT_NE(empty.message().find("tenant_id is required"), std::string::npos);
}

TEST(ValidateId, DoesNotEchoControlCharacters) {
  absl::Status s = ValidateId("vm_id", "a\nb");
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
}

TEST(ValidateClasses, SortsAndDeduplicates) {
  google::protobuf::RepeatedPtrField<std::string> in;
  *in.Add() = "latency-critical";
  *in.Add() = "avx512";
  *in.Add() = "avx512";
  std::vector<std::string> out;
  ASSERT_OK(ValidateClasses("interference_classes", in, &out));
  EXPECT_EQ(out, (std::vector<std::string>{"avx512", "latency-critical"}));
}

TEST(ValidateClasses, RejectsBadEntryAndTooMany) {
  google::protobuf::RepeatedPtrField<std::string> in;
  *in.Add() = "ok";
  *in.Add() = "not ok";
  std::vector<std::string> out;
  absl::Status s = ValidateClasses("interference_classes", in, &out);
  EXPECT_NE(s.message().find("interference_classes[1]"), std::string::npos);

  google::protobuf::RepeatedPtrField<std::string> many;
  for (int i = 0; i < 17; ++i) *many.Add() = "c" + std::to_string(i);
  s = ValidateClasses("interference_classes", many, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("has 17 different classes; at most 16"), std::string::npos) << s;
}

TEST(ValidateClasses, DuplicatesDoNotCountAgainstTheLimit) {
  google::protobuf::RepeatedPtrField<std::string> repeated;
  for (int i = 0; i < 40; ++i) *repeated.Add() = i % 2 ? "avx512" : "batch";
  std::vector<std::string> out;
  absl::Status s = ValidateClasses("interference_classes", repeated, &out);
  ASSERT_OK(s);
  EXPECT_EQ(out, (std::vector<std::string>{"avx512", "batch"}));
  google::protobuf::RepeatedPtrField<std::string> huge;
  for (int i = 0; i < 100000; ++i) *huge.Add() = "a";
  EXPECT_EQ(ValidateClasses("interference_classes", huge, &out).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cosched
