// Assertions on absl::Status, absl::StatusOr<T> and grpc::Status that print
// the status when they fail:
//   ASSERT_OK(store->WriteSync(fn));   EXPECT_OK(state.GetVm(request));
//   EXPECT_THAT(result.status(), StatusIs(absl::StatusCode::kNotFound, "vm-1"));
// The expression is evaluated once.
#ifndef COSCHED_TESTS_TESTING_STATUS_MATCHERS_H_
#define COSCHED_TESTS_TESTING_STATUS_MATCHERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cosched::testing {

inline absl::Status StatusOf(const absl::Status& status) { return status; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& result) {
  return result.status();
}
// A grpc::Status (without this header needing gRPC's): its codes are
// absl's.
template <typename GrpcStatus>
  requires requires(const GrpcStatus& s) {
    s.error_code();
    s.error_message();
  }
absl::Status StatusOf(const GrpcStatus& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

// A status of `code` whose message contains `substring`.
MATCHER_P2(StatusIs, code, substring,
           ::testing::PrintToString(code) + " containing \"" + std::string(substring) + "\"") {
  const absl::Status status = ::cosched::testing::StatusOf(arg);
  *result_listener << "which is " << status;
  return status.code() == code && absl::StrContains(status.message(), substring);
}

}  // namespace cosched::testing

#define COSCHED_STATUS_OK_(expr, fail)                                                 \
  if (const ::absl::Status cosched_status_ = ::cosched::testing::StatusOf(expr);       \
      cosched_status_.ok()) {                                                          \
  } else                                                                               \
    fail("Expected " #expr " to be OK") << "got " << cosched_status_

#define ASSERT_OK(expr) COSCHED_STATUS_OK_(expr, GTEST_FATAL_FAILURE_)
#define EXPECT_OK(expr) COSCHED_STATUS_OK_(expr, GTEST_NONFATAL_FAILURE_)

// `lhs` = the value of a StatusOr `expr`, or the test fails (and returns)
// with its status.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  COSCHED_ASSERT_OK_AND_ASSIGN_(COSCHED_CONCAT_(cosched_statusor_, __LINE__), lhs, expr)
#define COSCHED_ASSERT_OK_AND_ASSIGN_(tmp, lhs, expr)        \
  auto tmp = (expr);                                        \
  ASSERT_TRUE(tmp.ok()) << "Expected " #expr " to be OK: " << tmp.status(); \
  lhs = std::move(*tmp)

#endif  // COSCHED_TESTS_TESTING_STATUS_MATCHERS_H_
