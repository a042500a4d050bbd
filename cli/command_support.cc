#include "cli/command_support.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/transport.h"

namespace cosched::cli {
namespace {

// Messages from gRPC or csd may span lines; the error must stay one line.
std::string OneLine(absl::string_view message) {
  return absl::StrReplaceAll(message, {{"\r\n", "; "}, {"\n", "; "}});
}

}  // namespace

std::unique_ptr<grpc::ClientContext> MakeContext(const CommandOptions& options) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + options.timeout);
  if (!options.bearer_token.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options.bearer_token));
  }
  return context;
}

int UsageError(const absl::Status& status, std::ostream& err) {
  err << "csctl: " << OneLine(status.message()) << "\n";
  return kExitUsage;
}

int RpcError(const grpc::Status& status, const CommandOptions& options,
             absl::string_view what, std::ostream& err) {
  const std::string message = OneLine(status.error_message());
  err << "csctl: ";
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      err << "cannot reach csd at " << options.server << ": " << message;
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      err << "csd at " << options.server << " did not answer within "
          << options.timeout.count() / 1000.0 << "s";
      if (!message.empty()) err << ": " << message;
      break;
    default:
      if (!message.empty()) {
        err << message;
      } else if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
        err << what << " not found";
      } else {
        err << what << ": "
            << absl::StatusCodeToString(FromGrpcStatus(status).code());
      }
  }
  err << "\n";
  return kExitRpcError;
}

}  // namespace cosched::cli
