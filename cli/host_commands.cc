// csctl: The host commands: hosts ls, get, drain, undrain, rm. (cli/commands.h says how every command
// validates, calls csd and prints.)
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "common/names.h"
#include "common/validation.h"

namespace cosched::cli {

int RunHostList(Stub& stub, const CommandOptions& options, std::ostream& out,
                std::ostream& err) {
  std::vector<v1::Host> hosts;
  grpc::Status status = CollectPages(
      0,
      [&](const std::string& token, int page_size, std::vector<v1::Host>* items,
          std::string* next) {
        v1::ListHostsRequest request;
        request.set_page_size(page_size);
        request.set_page_token(token);
        v1::ListHostsResponse response;
        grpc::Status s =
            stub.ListHosts(MakeContext(options).get(), request, &response);
        if (!s.ok()) return s;
        items->insert(items->end(), response.hosts().begin(),
                      response.hosts().end());
        *next = response.next_page_token();
        return s;
      },
      &hosts);
  if (!status.ok()) return RpcError(status, options, "listing hosts", err);
  if (options.format == OutputFormat::kJson) {
    PrintJson(ToJsonArray(hosts, &HostToJson), out);
  } else if (hosts.empty()) {
    out << "no hosts registered\n";
  } else {
    PrintHostTable(hosts, out);
  }
  return kExitOk;
}

int RunHostGet(Stub& stub, const std::string& host_id,
               const CommandOptions& options, std::ostream& out,
               std::ostream& err) {
  absl::Status valid = ValidateId("host_id", host_id);
  if (!valid.ok()) return UsageError(valid, err);
  v1::GetHostRequest request;
  request.set_host_id(host_id);
  v1::Host host;
  grpc::Status status = stub.GetHost(MakeContext(options).get(), request, &host);
  if (!status.ok()) {
    return RpcError(status, options, absl::StrCat("host '", host_id, "'"),
                    err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(HostToJson(host), out);
  } else {
    PrintHost(host, out);
  }
  return kExitOk;
}

int RunHostDrain(Stub& stub, const std::string& host_id, bool draining,
                 const CommandOptions& options, std::ostream& out, std::ostream& err) {
  absl::Status valid = ValidateId("host_id", host_id);
  if (!valid.ok()) return UsageError(valid, err);
  v1::DrainHostRequest request;
  request.set_host_id(host_id);
  v1::Host host;
  grpc::Status status =
      draining ? stub.DrainHost(MakeContext(options).get(), request, &host)
               : stub.UndrainHost(MakeContext(options).get(), request, &host);
  if (!status.ok()) {
    return RpcError(status, options,
                    absl::StrCat(draining ? "draining" : "undraining", " host '", host_id, "'"),
                    err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(HostToJson(host), out);
  } else if (draining) {
    out << "host " << host_id
        << " is draining: Place chooses no new VMs for it; its VMs stay enforced\n";
  } else {
    out << "host " << host_id << " is no longer draining\n";
  }
  return kExitOk;
}

int RunHostRemove(Stub& stub, const std::string& host_id, const CommandOptions& options,
                  std::ostream& out, std::ostream& err) {
  absl::Status valid = ValidateId("host_id", host_id);
  if (!valid.ok()) return UsageError(valid, err);
  v1::RemoveHostRequest request;
  request.set_host_id(host_id);
  v1::RemoveHostResponse response;
  grpc::Status status = stub.RemoveHost(MakeContext(options).get(), request, &response);
  if (!status.ok()) {
    return RpcError(status, options, absl::StrCat("removing host '", host_id, "'"), err);
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson({{"host_id", host_id}, {"revision", response.revision()}}, out);
  } else {
    out << "removed host " << host_id << " at revision " << response.revision() << "\n";
  }
  return kExitOk;
}

}  // namespace cosched::cli
