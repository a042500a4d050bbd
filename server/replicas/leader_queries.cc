#include "server/replicas/leader_queries.h"

#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/transport.h"
#include "grpcpp/client_context.h"

namespace cosched::server {
namespace {

// One question to the leader, alive until its answer.
template <typename Request>
struct Asking {
  std::unique_ptr<v1::ControlPlane::Stub> stub;
  std::unique_ptr<grpc::ClientContext> context;
  Request request;
};

}  // namespace

template <typename Request, typename Response, typename Method>
void LeaderQueries::Ask(const grpc::CallbackServerContext& context, const Request& request,
                        Response* response, Method method, Done done) {
  const std::string self = peers_.options().self;
  const std::string leader = leader_();
  if (leader.empty() || leader == self) {
    // No leader known, or this replica's leadership is changing hands.
    done(absl::UnavailableError(absl::StrCat(
        "this replica (", self, ") does not lead and knows no other leader yet "
        "(an election is in progress): ask again in a few seconds")));
    return;
  }
  auto fail = [&](const absl::Status& why) {
    done(absl::Status(why.code(), absl::StrCat("this replica (", self,
                                               ") does not lead and asks the leader: ",
                                               why.message())));
  };
  absl::StatusOr<std::string> address = peers_.LeaderAddress(leader);
  if (!address.ok()) return fail(address.status());
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = peers_.ChannelTo(*address);
  if (!channel.ok()) {
    return fail(absl::Status(channel.status().code(),
                             absl::StrCat("the leader ", leader, " at ", *address, ": ",
                                          channel.status().message())));
  }
  auto asking = std::make_shared<Asking<Request>>();
  asking->stub = v1::ControlPlane::NewStub(*channel);
  // The caller's deadline and cancellation carry over to the leader.
  asking->context = grpc::ClientContext::FromCallbackServerContext(context);
  const auto now = std::chrono::system_clock::now();
  if (context.deadline() - now > std::chrono::hours(24 * 365)) {
    asking->context->set_deadline(now + absl::ToChronoMilliseconds(default_deadline_));
  }
  asking->request = request;
  asking->request.set_local_only(true);
  method(asking->stub->async(), asking->context.get(), &asking->request, response,
         [asking, done = std::move(done), self, leader,
          address = *address](grpc::Status status) {
           absl::Status answer = FromGrpcStatus(status);
           switch (answer.code()) {
             case absl::StatusCode::kOk:
             case absl::StatusCode::kNotFound:
             case absl::StatusCode::kInvalidArgument:
             case absl::StatusCode::kFailedPrecondition:
               // The leader's own answer.
               done(answer);
               return;
             default:
               done(absl::Status(answer.code(),
                                 absl::StrCat("this replica (", self,
                                              ") does not lead and asked the leader ", leader,
                                              " at ", address, ": ", answer.message())));
           }
         });
}

void LeaderQueries::ExplainVM(const grpc::CallbackServerContext& context,
                              const v1::ExplainVMRequest& request,
                              v1::ExplainVMResponse* response, Done done) {
  Ask(context, request, response,
      [](auto* async, grpc::ClientContext* c, const v1::ExplainVMRequest* q,
         v1::ExplainVMResponse* r, std::function<void(grpc::Status)> then) {
        async->ExplainVM(c, q, r, std::move(then));
      },
      std::move(done));
}

void LeaderQueries::Plan(const grpc::CallbackServerContext& context,
                         const v1::PlanRequest& request, v1::PlanResponse* response, Done done) {
  Ask(context, request, response,
      [](auto* async, grpc::ClientContext* c, const v1::PlanRequest* q, v1::PlanResponse* r,
         std::function<void(grpc::Status)> then) { async->Plan(c, q, r, std::move(then)); },
      std::move(done));
}

}  // namespace cosched::server
