// What the desired state's modules share: who asks for a change (Actor),
// how a write answers (Done), and, internal to server/, the limits, audit,
// change-log and paging helpers their writes and reads are made of.
#ifndef COSCHED_SERVER_STATE_WRITE_SUPPORT_H_
#define COSCHED_SERVER_STATE_WRITE_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cosched/v1/control_plane.pb.h"
#include "policy/trust_group.h"
#include "server/state/placement_view.h"
#include "store/store.h"

namespace cosched::server {

// Who asks for a change: written to the audit trail with it.
struct Actor {
  std::string who;
  // The role acted with ("host" for an agent).
  std::string role;
};

// How an asynchronous call of the desired state answers: once the change
// is durable (on the store's completion thread) or has failed, with
// nothing half-written.
template <typename T>
using Done = std::function<void(absl::StatusOr<T>)>;

namespace internal {

// The most items one page of a List call holds.
inline constexpr int kMaxPageSize = 1000;
// Free-text fields of requests and reports (details, audit `who`).
inline constexpr size_t kMaxDetailLength = 1024;

// The reason an off switch (SetHostEnforcement) is given for the audit:
// required, at most kMaxDetailLength characters.
absl::Status ValidateSwitchReason(const std::string& reason);

// OK for an empty value (not given), else the id rule (common/validation.h).
absl::Status ValidateOptionalId(absl::string_view field, absl::string_view value);

// The tenant's stored policy, or the default one when it has none.
absl::StatusOr<v1::TenantPolicy> PolicyOf(store::Transaction& txn,
                                          const std::string& tenant_id);

// A page of a List call: page_size 0 means the default; the token is one a
// previous answer gave (TokenAfter). INVALID_ARGUMENT naming the field.
absl::StatusOr<store::Page> PageFrom(int32_t page_size, const std::string& page_token);
// The page token of the page after `last_key`.
std::string TokenAfter(const std::string& last_key);

// The next page's token of a page of `items`: empty unless the page is full
// and one more item follows its last key (read with `list`).
template <typename T, typename KeyFn, typename ListFn>
absl::StatusOr<std::string> NextToken(const std::vector<T>& items, const store::Page& page,
                                      KeyFn key, ListFn list) {
  if (items.empty() || static_cast<int>(items.size()) < page.limit) return std::string();
  store::Page probe;
  probe.after = key(items.back());
  probe.limit = 1;
  absl::StatusOr<std::vector<T>> more = list(probe);
  if (!more.ok()) return more.status();
  return more->empty() ? std::string() : TokenAfter(probe.after);
}

// Writes the audit record of a change inside the change's transaction, so
// that neither commits without the other, and keeps it in `logged` for the
// log line once it is durable. `actor` is who asked (role "host" for an
// agent).
// `reason` says why when `who` did not ask for the change in so many words
// (AuditRecord.reason).
absl::Status Audit(store::Transaction& txn, const std::string& who,
                   const std::string& role, absl::string_view method,
                   absl::string_view subject, const google::protobuf::Message* before,
                   const google::protobuf::Message* after, int64_t revision,
                   v1::AuditRecord* logged, absl::string_view reason = {});
// The log line of a durable change's audit record; nothing for an empty one.
void LogAudit(const v1::AuditRecord& record);

// Records the change of a VM's assignment for every host whose agent is
// sent it after the write but was not before, or the other way round (its
// watch then sends the upsert or the removal). `before` or `after` may be
// null (a VM tagged or untagged).
absl::Status RecordReceiverChanges(store::Transaction& txn, const v1::VM* before,
                                   const v1::VM* after);

// Records a change of the assignment itself for every host that receives it.
absl::Status RecordAssignmentChange(store::Transaction& txn, const v1::VM& vm);

std::vector<std::string> ClassesOf(const v1::VM& vm);
// Fills vm.assignment from the VM's request fields and the decision.
void SetAssignment(v1::VM& vm, const policy::TrustDecision& decision);
// The decision record of a level set by TagVM or a policy (decided_at is
// stamped when it is written).
v1::LayoutDecision OperatorDecision(const v1::VM& vm, const v1::TenantPolicy& policy);

// What one tag's write did, for its answer and for what follows its commit.
struct TagWrite {
  v1::TagVMResponse response;
  // Empty when nothing changed.
  v1::AuditRecord audit;
  // The VM as Place sees it now; unset when nothing changed.
  std::optional<PlacedVm> placed;
  // The hosts of a VM tagged anew, each with the id it reports the VM
  // under (its name, when the VM is tagged by UUID): what they report goes
  // under the VM's id now.
  std::vector<std::pair<std::string, std::string>> new_hosts;
  // Its owner host, when it has one and the VM changed.
  std::optional<std::string> layout_host;
};

// Tags `wanted` (vm_id, tenant_id, requested_isolation, sorted classes,
// thread_scope, metadata_host) inside `txn`, as TagVM does: idempotent,
// audited as method TagVM by `actor` with `reason`. FAILED_PRECONDITION
// when the tenant's policy forbids the level, or the VM is tagged by TagVM
// for another tenant (a VM tagged from metadata may change tenant).
absl::Status WriteTag(store::Transaction& txn, const v1::VM& wanted, const Actor& actor,
                      absl::string_view reason, TagWrite& out);

// Untags `existing` inside `txn` as UntagVM does, audited by `actor` with
// `reason`; answers the revision.
absl::StatusOr<int64_t> WriteUntag(store::Transaction& txn, const v1::VM& existing,
                                   const Actor& actor, absl::string_view reason,
                                   v1::AuditRecord* logged);

// Runs `done` with the outcome of a write whose result `fn` fills in.
template <typename T>
void WriteAndAnswer(store::Store* store,
                    std::function<absl::Status(store::Transaction&, T&)> fn,
                    Done<T> done) {
  auto result = std::make_shared<T>();
  store->Write(
      [fn = std::move(fn), result](store::Transaction& txn) {
        // A store may run the function again (EtcdStore, after losing a
        // race): each run answers afresh.
        *result = T();
        return fn(txn, *result);
      },
      [done = std::move(done), result](absl::Status status) {
        if (status.ok()) {
          done(std::move(*result));
        } else {
          done(status);
        }
      });
}

// `done`, after logging the audit record once the change is durable.
template <typename T>
Done<T> LoggingAudit(std::shared_ptr<v1::AuditRecord> record, Done<T> done) {
  return [record, done = std::move(done)](absl::StatusOr<T> result) {
    if (result.ok()) LogAudit(*record);
    done(std::move(result));
  };
}

}  // namespace internal
}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_WRITE_SUPPORT_H_
