// Requests that gRPC parses into a protobuf arena of their own, so a large
// message (a Report: every VM of a host and its stats windows) costs a few
// block allocations instead of one per field, and is freed at once.
#ifndef COSCHED_SERVER_API_ARENA_MESSAGES_H_
#define COSCHED_SERVER_API_ARENA_MESSAGES_H_

#include <memory>

#include "google/protobuf/arena.h"
#include "grpcpp/support/message_allocator.h"
#include "grpcpp/support/server_callback.h"

namespace cosched::server {

// The first block of each call's arena, and the largest any grows to. A
// Report of 50 VMs with one stats window takes about 60 KiB parsed: a few
// blocks. Small requests keep one small block.
inline constexpr size_t kArenaStartBlock = 4096;
inline constexpr size_t kArenaMaxBlock = 64 * 1024;

// Installed with the service's SetMessageAllocatorFor_<Method>. Each call's
// request and response live in an arena that the call shares with whoever
// takes the request with SharedRequest: it is freed when the call is done
// and the last of them lets go.
template <typename Request, typename Response>
class ArenaAllocator final : public grpc::MessageAllocator<Request, Response> {
 public:
  class Holder final : public grpc::MessageHolder<Request, Response> {
   public:
    Holder() {
      google::protobuf::ArenaOptions options;
      options.start_block_size = kArenaStartBlock;
      options.max_block_size = kArenaMaxBlock;
      arena_ = std::make_shared<google::protobuf::Arena>(options);
      this->set_request(google::protobuf::Arena::CreateMessage<Request>(arena_.get()));
      this->set_response(google::protobuf::Arena::CreateMessage<Response>(arena_.get()));
    }
    // gRPC is done with the call: its messages live on while the arena is
    // shared.
    void Release() override { delete this; }

    std::shared_ptr<Request> SharedRequest() {
      return std::shared_ptr<Request>(arena_, this->request());
    }

   private:
    std::shared_ptr<google::protobuf::Arena> arena_;
  };

  grpc::MessageHolder<Request, Response>* AllocateMessages() override { return new Holder(); }
};

// The call's request, kept alive as long as the pointer is: its arena's
// when the call's messages came from an ArenaAllocator, else its contents
// moved to a message of its own (the request is then empty: nothing may
// read it after this).
template <typename Request, typename Response>
std::shared_ptr<Request> SharedRequest(grpc::CallbackServerContext* context,
                                       const Request* request) {
  using Holder = typename ArenaAllocator<Request, Response>::Holder;
  if (auto* holder = dynamic_cast<Holder*>(context->GetRpcAllocatorState())) {
    return holder->SharedRequest();
  }
  auto owned = std::make_shared<Request>();
  owned->Swap(const_cast<Request*>(request));
  return owned;
}

}  // namespace cosched::server

#endif  // COSCHED_SERVER_API_ARENA_MESSAGES_H_
