// The audit trail: every change's record is written by the change's own
// write (write_support.h, internal::Audit); this is what reads it, and the
// record of a reload of csd.yaml, which changes no record.
#ifndef COSCHED_SERVER_STATE_AUDIT_TRAIL_H_
#define COSCHED_SERVER_STATE_AUDIT_TRAIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cosched/v1/control_plane.pb.h"
#include "store/store.h"

namespace cosched::server {

// Thread-safe.
class AuditTrail {
 public:
  explicit AuditTrail(store::Store& store) : store_(store) {}

  // Puts a reload of csd.yaml on record (method ReloadConfig, by
  // csd:reload, `changed` as its reason); the store's error otherwise.
  absl::Status AuditConfigReload(const std::string& changed);
  // Newest first.
  absl::StatusOr<v1::ListAuditRecordsResponse> ListAuditRecords(
      const v1::ListAuditRecordsRequest& request);

 private:
  store::Store& store_;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_AUDIT_TRAIL_H_
