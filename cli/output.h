// How csctl shows API objects: JSON for programs (snake_case keys, short
// enum names from common/names.h) and aligned tables or "key: value" blocks
// for people.
#ifndef COSCHED_CLI_OUTPUT_H_
#define COSCHED_CLI_OUTPUT_H_

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cosched/v1/control_plane.pb.h"
#include "cosched/v1/types.pb.h"
#include "nlohmann/json.hpp"

namespace cosched::cli {

// Keys: vm_id, tenant_id, isolation (effective), requested_isolation,
// trust_group, revision (number), dedicated_cores, interference_classes,
// thread_scope, host_id, enforcement (object or null), create_time,
// update_time (RFC 3339 or null).
nlohmann::json VmToJson(const v1::VM& vm);
// Keys: tenant_id, default_isolation, allowed_isolation (empty: all),
// explicitly_set, revision, update_time.
nlohmann::json TenantPolicyToJson(const v1::TenantPolicy& policy);
// Keys: host_id, agent_version, connected, vm_count, applied_revision,
// registered_time, last_seen_time, capabilities, topology.
nlohmann::json HostToJson(const v1::Host& host);

// Pretty-printed, newline-terminated; invalid UTF-8 is replaced, not thrown.
void PrintJson(const nlohmann::json& value, std::ostream& out);

// A table for people: a header row, then rows, each column padded to its
// widest cell. Control characters in cells are shown as '?'.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header);
  // Missing cells print empty; extra cells are dropped.
  void AddRow(std::vector<std::string> row);
  void Print(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;  // rows_[0] is the header
};

using Fields = std::vector<std::pair<std::string, std::string>>;
// "key: value" lines with values aligned.
void PrintFields(const Fields& fields, std::ostream& out);

void PrintVm(const v1::VM& vm, std::ostream& out);
void PrintVmTable(const std::vector<v1::VM>& vms, std::ostream& out);
void PrintTenantPolicy(const v1::TenantPolicy& policy, std::ostream& out);
void PrintTenantPolicyTable(const std::vector<v1::TenantPolicy>& policies,
                            std::ostream& out);
void PrintHost(const v1::Host& host, std::ostream& out);
void PrintHostTable(const std::vector<v1::Host>& hosts, std::ostream& out);

// before/after become JSON values (null when empty).
nlohmann::json AuditRecordToJson(const v1::AuditRecord& record);
void PrintAuditTable(const std::vector<v1::AuditRecord>& records,
                     std::ostream& out);

}  // namespace cosched::cli

#endif  // COSCHED_CLI_OUTPUT_H_
