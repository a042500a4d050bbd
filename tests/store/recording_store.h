// A Store that records which records each committed write function wrote
// ("PutVm vm-1", "PutObservation hv-1/vm-1", "PutHost hv-1", ...), for
// tests that count what a request costs the store record by record, not
// only in commits. Reads and everything else pass through.
#ifndef COSCHED_TESTS_STORE_RECORDING_STORE_H_
#define COSCHED_TESTS_STORE_RECORDING_STORE_H_

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "store/store.h"

namespace cosched::testing {

// Forwards to `inner`, noting each write in `writes`.
class RecordingTransaction final : public store::Transaction {
 public:
  RecordingTransaction(store::Transaction& inner, std::vector<std::string>& writes)
      : inner_(inner), writes_(writes) {}

  absl::StatusOr<int64_t> WriteRevision() override { return inner_.WriteRevision(); }
  absl::StatusOr<int64_t> ReadRevision() override { return inner_.ReadRevision(); }
  absl::StatusOr<std::optional<v1::VM>> GetVm(absl::string_view vm_id) override {
    return inner_.GetVm(vm_id);
  }
  absl::Status PutVm(const v1::VM& vm) override {
    return Noted(inner_.PutVm(vm), "PutVm ", vm.vm_id());
  }
  absl::Status DeleteVm(absl::string_view vm_id) override {
    return Noted(inner_.DeleteVm(vm_id), "DeleteVm ", vm_id);
  }
  absl::StatusOr<std::vector<v1::VM>> ListVms(const store::VmFilter& filter,
                                              const store::Page& page) override {
    return inner_.ListVms(filter, page);
  }
  absl::StatusOr<std::optional<v1::TenantPolicy>> GetTenantPolicy(
      absl::string_view tenant_id) override {
    return inner_.GetTenantPolicy(tenant_id);
  }
  absl::Status PutTenantPolicy(const v1::TenantPolicy& policy) override {
    return Noted(inner_.PutTenantPolicy(policy), "PutTenantPolicy ", policy.tenant_id());
  }
  absl::StatusOr<std::vector<v1::TenantPolicy>> ListTenantPolicies(
      const store::Page& page) override {
    return inner_.ListTenantPolicies(page);
  }
  absl::StatusOr<std::optional<v1::Host>> GetHost(absl::string_view host_id) override {
    return inner_.GetHost(host_id);
  }
  absl::Status PutHost(const v1::Host& host) override {
    return Noted(inner_.PutHost(host), "PutHost ", host.host_id());
  }
  absl::Status DeleteHost(absl::string_view host_id) override {
    return Noted(inner_.DeleteHost(host_id), "DeleteHost ", host_id);
  }
  absl::StatusOr<std::vector<v1::Host>> ListHosts(const store::Page& page) override {
    return inner_.ListHosts(page);
  }
  absl::Status PutObservation(absl::string_view host_id, const v1::VMObservation& vm) override {
    return Noted(inner_.PutObservation(host_id, vm), "PutObservation ", host_id, "/",
                 vm.vm_id());
  }
  absl::Status DeleteObservation(absl::string_view host_id, absl::string_view vm_id) override {
    return Noted(inner_.DeleteObservation(host_id, vm_id), "DeleteObservation ", host_id, "/",
                 vm_id);
  }
  absl::StatusOr<std::vector<v1::VMObservation>> ListHostObservations(
      absl::string_view host_id) override {
    return inner_.ListHostObservations(host_id);
  }
  absl::StatusOr<std::optional<store::Observation>> FindObservation(
      absl::string_view key) override {
    return inner_.FindObservation(key);
  }
  absl::StatusOr<std::vector<store::Observation>> ListObservations(
      absl::string_view key) override {
    return inner_.ListObservations(key);
  }
  absl::Status RecordChange(absl::string_view host_id, absl::string_view vm_id) override {
    return Noted(inner_.RecordChange(host_id, vm_id), "RecordChange ", host_id, "/", vm_id);
  }
  absl::StatusOr<store::HostChanges> ChangesSince(absl::string_view host_id,
                                                  int64_t revision) override {
    return inner_.ChangesSince(host_id, revision);
  }
  absl::StatusOr<std::optional<v1::Rollout>> GetRollout() override {
    return inner_.GetRollout();
  }
  absl::Status PutRollout(const v1::Rollout& rollout) override {
    return Noted(inner_.PutRollout(rollout), "PutRollout");
  }
  absl::Status RequireLeadership() override { return inner_.RequireLeadership(); }
  absl::Status AppendAudit(const v1::AuditRecord& record) override {
    return Noted(inner_.AppendAudit(record), "AppendAudit ", record.method());
  }
  absl::StatusOr<std::vector<v1::AuditRecord>> ListAudit(const store::AuditFilter& filter,
                                                         int64_t before_sequence,
                                                         int limit) override {
    return inner_.ListAudit(filter, before_sequence, limit);
  }
  absl::StatusOr<std::vector<v1::AuditRecord>> ListAuditAfter(int64_t after_sequence,
                                                              int limit) override {
    return inner_.ListAuditAfter(after_sequence, limit);
  }

 private:
  template <typename... Parts>
  absl::Status Noted(absl::Status status, const Parts&... parts) {
    if (status.ok()) writes_.push_back(absl::StrCat(parts...));
    return status;
  }

  store::Transaction& inner_;
  std::vector<std::string>& writes_;
};

// Thread-safe as its inner store is.
class RecordingStore final : public store::Store {
 public:
  explicit RecordingStore(std::unique_ptr<store::Store> inner) : inner_(std::move(inner)) {}

  // What each committed write function wrote, in commit order, and
  // forgets them.
  std::vector<std::vector<std::string>> TakeWrites() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(committed_, {});
  }

  void Write(TxnFn fn, DoneFn done) override {
    auto writes = std::make_shared<std::vector<std::string>>();
    inner_->Write(
        [fn = std::move(fn), writes](store::Transaction& txn) {
          writes->clear();  // a store may run a function again
          RecordingTransaction recording(txn, *writes);
          return fn(recording);
        },
        [this, writes, done = std::move(done)](absl::Status status) {
          if (status.ok()) {
            std::lock_guard<std::mutex> lock(mu_);
            committed_.push_back(*writes);
          }
          done(std::move(status));
        });
  }
  absl::Status Read(const TxnFn& fn) override { return inner_->Read(fn); }
  absl::Status ReadRecent(const TxnFn& fn) override { return inner_->ReadRecent(fn); }
  int64_t CurrentRevision() const override { return inner_->CurrentRevision(); }
  void SetCommitObserver(CommitObserver observer) override {
    inner_->SetCommitObserver(std::move(observer));
  }
  void SetExternalObserver(ExternalObserver observer) override {
    inner_->SetExternalObserver(std::move(observer));
  }
  void SetReachabilityObserver(ReachabilityObserver observer) override {
    inner_->SetReachabilityObserver(std::move(observer));
  }
  bool Leads() const override { return inner_->Leads(); }
  void SetLeadershipObserver(LeadershipObserver observer) override {
    inner_->SetLeadershipObserver(std::move(observer));
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<std::string>> committed_;  // guarded by mu_
  // Last: destroyed first, draining its writes while mu_ lives.
  const std::unique_ptr<store::Store> inner_;
};

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_STORE_RECORDING_STORE_H_
