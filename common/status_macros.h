// Early-return helpers for absl::Status / absl::StatusOr.
#ifndef COSCHED_COMMON_STATUS_MACROS_H_
#define COSCHED_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define COSCHED_CONCAT_INNER_(a, b) a##b
#define COSCHED_CONCAT_(a, b) COSCHED_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    const absl::Status cosched_status_ = (expr);       \
    if (!cosched_status_.ok()) return cosched_status_; \
  } while (0)

// ASSIGN_OR_RETURN(auto x, MakeX()): declares x from an OK StatusOr, or
// returns its status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(COSCHED_CONCAT_(cosched_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(*tmp)

#endif  // COSCHED_COMMON_STATUS_MACROS_H_
