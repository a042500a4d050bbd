// A Store that reports how long each write took from submission to durable
// (or failed) and how it ended: the latency every write RPC of csd waits
// for, group commit included. Everything else passes through.
#ifndef COSCHED_STORE_INSTRUMENTED_STORE_H_
#define COSCHED_STORE_INSTRUMENTED_STORE_H_

#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "store/store.h"

namespace cosched::store {

// Thread-safe as its inner store is.
class InstrumentedStore final : public Store {
 public:
  // Called on the store's completion thread with each write's outcome and
  // seconds (from Write to its answer).
  using WriteObserver = std::function<void(absl::StatusCode, double seconds)>;

  InstrumentedStore(std::unique_ptr<Store> inner,
                    WriteObserver on_write);
  // Destroys the inner store, which drains pending writes (their observer
  // calls included).
  ~InstrumentedStore() override = default;

  void Write(TxnFn fn, DoneFn done) override;
  absl::Status Read(const TxnFn& fn) override;
  absl::Status ReadRecent(const TxnFn& fn) override { return inner_->ReadRecent(fn); }
  int64_t CurrentRevision() const override;
  void SetCommitObserver(CommitObserver observer) override;
  void SetExternalObserver(ExternalObserver observer) override;
  void SetReachabilityObserver(ReachabilityObserver observer) override;
  bool Leads() const override { return inner_->Leads(); }
  void SetLeadershipObserver(LeadershipObserver observer) override {
    inner_->SetLeadershipObserver(std::move(observer));
  }

 private:
  // Declared first so the inner store, destroyed last, can still call it.
  const WriteObserver on_write_;
  const std::unique_ptr<Store> inner_;
};

}  // namespace cosched::store

#endif  // COSCHED_STORE_INSTRUMENTED_STORE_H_
