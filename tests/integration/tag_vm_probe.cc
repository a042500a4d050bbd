// tag_vm_probe TARGET VM: one ControlPlane.TagVM call to csd at TARGET
// (host:port or unix:PATH) over plaintext, printed as "<CODE> <message>"
// (OK, PERMISSION_DENIED, ...). Tests run it as another user: a process of
// its own, because a forked copy of a process with gRPC threads cannot use
// gRPC.
#include <chrono>
#include <iostream>

#include "absl/status/status.h"
#include "common/transport.h"
#include "cosched/v1/control_plane.grpc.pb.h"
#include "grpcpp/create_channel.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: tag_vm_probe TARGET VM\n";
    return 2;
  }
  auto stub = cosched::v1::ControlPlane::NewStub(
      grpc::CreateChannel(argv[1], grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  cosched::v1::TagVMRequest request;
  request.set_vm_id(argv[2]);
  cosched::v1::TagVMResponse response;
  grpc::Status status = stub->TagVM(&context, request, &response);
  std::cout << absl::StatusCodeToString(cosched::FromGrpcStatus(status).code()) << " "
            << status.error_message() << "\n";
  return 0;
}
