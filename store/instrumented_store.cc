#include "store/instrumented_store.h"

#include <chrono>
#include <utility>

namespace cosched::store {

InstrumentedStore::InstrumentedStore(std::unique_ptr<Store> inner,
                                     WriteObserver on_write)
    : on_write_(std::move(on_write)), inner_(std::move(inner)) {}

void InstrumentedStore::Write(TxnFn fn, DoneFn done) {
  const auto submitted = std::chrono::steady_clock::now();
  inner_->Write(std::move(fn), [this, submitted, done = std::move(done)](
                                   absl::Status status) {
    const std::chrono::duration<double> took =
        std::chrono::steady_clock::now() - submitted;
    on_write_(status.code(), took.count());
    done(std::move(status));
  });
}

absl::Status InstrumentedStore::Read(const TxnFn& fn) { return inner_->Read(fn); }

int64_t InstrumentedStore::CurrentRevision() const {
  return inner_->CurrentRevision();
}

void InstrumentedStore::SetCommitObserver(CommitObserver observer) {
  inner_->SetCommitObserver(std::move(observer));
}

void InstrumentedStore::SetExternalObserver(ExternalObserver observer) {
  inner_->SetExternalObserver(std::move(observer));
}

void InstrumentedStore::SetReachabilityObserver(ReachabilityObserver observer) {
  inner_->SetReachabilityObserver(std::move(observer));
}

}  // namespace cosched::store
