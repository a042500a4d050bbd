// What every csctl command shares: the call's context (deadline, bearer
// token), one-line errors with their exit codes, and paging. Internal to
// cosched_cli.
#ifndef COSCHED_CLI_COMMAND_SUPPORT_H_
#define COSCHED_CLI_COMMAND_SUPPORT_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cli/commands.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/status.h"
#include "nlohmann/json.hpp"

namespace cosched::cli {

// The API's largest page; a --limit above it takes several pages.
inline constexpr int64_t kMaxPageSize = 1000;

std::unique_ptr<grpc::ClientContext> MakeContext(const CommandOptions& options);

// Prints a local check's failure (one line) and returns kExitUsage.
int UsageError(const absl::Status& status, std::ostream& err);

// Prints csd's answer (one line) and returns kExitRpcError. `what` names
// the object of the call ("vm 'vm-1'", "listing VMs") for answers that
// carry no message of their own.
int RpcError(const grpc::Status& status, const CommandOptions& options,
             absl::string_view what, std::ostream& err);

// Calls `fetch_page(token, page_size, items, &next_token)` until the last
// page or until `limit` items (0: no limit) were collected.
template <typename Item, typename FetchPage>
grpc::Status CollectPages(int64_t limit, FetchPage fetch_page,
                          std::vector<Item>* items) {
  std::string token;
  do {
    const int page_size =
        limit > 0 ? static_cast<int>(std::min<int64_t>(
                        limit - static_cast<int64_t>(items->size()),
                        kMaxPageSize))
                  : 0;
    std::string next;
    grpc::Status status = fetch_page(token, page_size, items, &next);
    if (!status.ok()) return status;
    // A server that hands back the token it was given would loop forever.
    if (!next.empty() && next == token) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "csd returned the same page token twice");
    }
    token = std::move(next);
  } while (!token.empty() &&
           (limit == 0 || static_cast<int64_t>(items->size()) < limit));
  if (limit > 0 && static_cast<int64_t>(items->size()) > limit) {
    items->resize(limit);
  }
  return grpc::Status::OK;
}

template <typename Item>
nlohmann::json ToJsonArray(const std::vector<Item>& items,
                           nlohmann::json (*to_json)(const Item&)) {
  nlohmann::json array = nlohmann::json::array();
  for (const Item& item : items) array.push_back(to_json(item));
  return array;
}

}  // namespace cosched::cli

#endif  // COSCHED_CLI_COMMAND_SUPPORT_H_
