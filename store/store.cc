#include "store/store.h"

#include <future>
#include <utility>

namespace cosched::store {

absl::Status Store::WriteSync(TxnFn fn) {
  std::promise<absl::Status> promise;
  std::future<absl::Status> result = promise.get_future();
  Write(std::move(fn), [&promise](absl::Status status) {
    promise.set_value(std::move(status));
  });
  return result.get();
}

}  // namespace cosched::store
