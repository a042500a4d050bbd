// Internal to cosched_server: limits and store helpers shared by
// DesiredState's writes (desired_state.cc), reads (desired_state_reads.cc)
// and policy questions (policy_queries.cc).
#ifndef COSCHED_SERVER_DESIRED_STATE_INTERNAL_H_
#define COSCHED_SERVER_DESIRED_STATE_INTERNAL_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/control_plane.pb.h"
#include "store/store.h"

namespace cosched::server::internal {

// The most items one page of a List call holds.
inline constexpr int kMaxPageSize = 1000;
// Free-text fields of requests and reports (details, audit `who`).
inline constexpr size_t kMaxDetailLength = 1024;
inline constexpr size_t kMaxTrustGroupLength = 512;

// OK for an empty value (not given), else the id rule (common/validation.h).
absl::Status ValidateOptionalId(absl::string_view field, absl::string_view value);

// The tenant's stored policy, or the default one when it has none.
absl::StatusOr<v1::TenantPolicy> PolicyOf(store::Transaction& txn,
                                          const std::string& tenant_id);

// All VMs matching `filter`, page by page inside one transaction.
absl::StatusOr<std::vector<v1::VM>> AllVms(store::Transaction& txn,
                                           const store::VmFilter& filter);

}  // namespace cosched::server::internal

#endif  // COSCHED_SERVER_DESIRED_STATE_INTERNAL_H_
