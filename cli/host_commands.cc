// csctl: The host commands: hosts ls, get, drain, undrain, rm, traits. (cli/commands.h says how every command
// validates, calls csd and prints.)
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/host_traits.h"
#include "cli/output.h"
#include "common/labels.h"
#include "common/names.h"
#include "common/validation.h"

namespace cosched::cli {

namespace {

grpc::Status ListAllHosts(Stub& stub, const CommandOptions& options,
                          std::vector<v1::Host>* hosts, const std::string& selector = "") {
  return CollectPages(
      0,
      [&](const std::string& token, int page_size, std::vector<v1::Host>* items,
          std::string* next) {
        v1::ListHostsRequest request;
        request.set_page_size(page_size);
        request.set_page_token(token);
        request.set_selector(selector);
        v1::ListHostsResponse response;
        grpc::Status s =
            stub.ListHosts(MakeContext(options).get(), request, &response);
        if (!s.ok()) return s;
        items->insert(items->end(), response.hosts().begin(),
                      response.hosts().end());
        *next = response.next_page_token();
        return s;
      },
      hosts);
}

}  // namespace

int RunHostList(Stub& stub, const CommandOptions& options, std::ostream& out,
                std::ostream& err, const std::string& selector) {
  if (absl::Status valid = ParseLabelSelector("--selector", selector).status(); !valid.ok()) {
    return UsageError(valid, err);
  }
  std::vector<v1::Host> hosts;
  grpc::Status status = ListAllHosts(stub, options, &hosts, selector);
  if (!status.ok()) return RpcError(status, options, "listing hosts", err);
  if (options.format == OutputFormat::kJson) {
    PrintJson(ToJsonArray(hosts, &HostToJson), out);
  } else if (hosts.empty()) {
    out << (selector.empty() ? "no hosts registered\n"
                             : absl::StrCat("no hosts match ", selector, "\n"));
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

int RunHostEnforce(Stub& stub, const HostEnforceArgs& args, const CommandOptions& options,
                   std::ostream& out, std::ostream& err) {
  if (args.switch_to != "on" && args.switch_to != "off") {
    return UsageError(absl::InvalidArgumentError(absl::StrCat(
                          "enforce takes on or off, got '", args.switch_to, "'")),
                      err);
  }
  const int targets = !args.host_id.empty() + !args.selector.empty() + args.all;
  if (targets != 1) {
    return UsageError(absl::InvalidArgumentError(
                          "name exactly one of HOST, --selector and --all"),
                      err);
  }
  if (!args.host_id.empty()) {
    if (absl::Status valid = ValidateId("host_id", args.host_id); !valid.ok()) {
      return UsageError(valid, err);
    }
  }
  if (args.reason.empty()) {
    return UsageError(absl::InvalidArgumentError(
                          "--reason is required: say why, for the audit trail"),
                      err);
  }
  v1::SetHostEnforcementRequest request;
  request.set_host_id(args.host_id);
  request.set_selector(args.selector);
  request.set_all(args.all);
  request.set_off(args.switch_to == "off");
  request.set_reason(args.reason);
  v1::SetHostEnforcementResponse response;
  grpc::Status status = stub.SetHostEnforcement(MakeContext(options).get(), request, &response);
  const std::string target = args.all ? std::string("the fleet")
                             : args.host_id.empty() ? absl::StrCat("hosts matching ", args.selector)
                                                    : absl::StrCat("host '", args.host_id, "'");
  if (!status.ok()) {
    return RpcError(status, options,
                    absl::StrCat("switching enforcement ", args.switch_to, " on ", target), err);
  }
  if (options.format == OutputFormat::kJson) {
    nlohmann::json hosts = nlohmann::json::array();
    for (const v1::Host& host : response.hosts()) hosts.push_back(HostToJson(host));
    PrintJson({{"hosts", hosts}, {"fleet_off", response.fleet_off()}}, out);
    return kExitOk;
  }
  if (args.all) {
    out << "enforcement is " << (response.fleet_off() ? "off" : "on") << " for the whole fleet";
  } else {
    out << "enforcement " << args.switch_to << " on " << target << ": " << response.hosts_size()
        << " host(s) changed";
    if (response.fleet_off()) out << " (the fleet's off switch still holds: csctl hosts enforce on --all)";
  }
  out << (args.switch_to == "off"
              ? "; agents take every cookie off their VMs' threads at their next report\n"
              : "; agents tag their VMs again at their next report\n");
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

int RunHostTraits(Stub& stub, const HostTraitsArgs& args, const CommandOptions& options,
                  std::ostream& out, std::ostream& err) {
  if (!args.host_id.empty()) {
    absl::Status valid = ValidateId("host_id", args.host_id);
    if (!valid.ok()) return UsageError(valid, err);
  }
  if (args.compute_node && (args.host_id.empty() || args.format != "openstack-provider-yaml")) {
    return UsageError(absl::InvalidArgumentError(
                          "--compute-node is for one host (--host) with -o "
                          "openstack-provider-yaml: the file nova-compute reads on that host"),
                      err);
  }
  std::vector<v1::Host> hosts;
  if (args.host_id.empty()) {
    grpc::Status status = ListAllHosts(stub, options, &hosts);
    if (!status.ok()) return RpcError(status, options, "listing hosts", err);
  } else {
    v1::GetHostRequest request;
    request.set_host_id(args.host_id);
    v1::Host host;
    grpc::Status status = stub.GetHost(MakeContext(options).get(), request, &host);
    if (!status.ok()) {
      return RpcError(status, options, absl::StrCat("host '", args.host_id, "'"), err);
    }
    hosts.push_back(std::move(host));
  }
  std::vector<HostTraits> traits;
  for (const v1::Host& h : hosts) traits.push_back(TraitsOf(h));
  if (args.format == "openstack-provider-yaml") {
    PrintOpenstackProviderYaml(traits, args.compute_node, out);
  } else if (args.format == "k8s-labels") {
    PrintK8sLabels(traits, out);
  } else if (args.format == "json") {
    nlohmann::json array = nlohmann::json::array();
    for (const HostTraits& t : traits) {
      nlohmann::json labels = nlohmann::json::object();
      for (const auto& [key, value] : t.labels) labels[key] = value;
      array.push_back({{"host_id", t.host_id},
                       {"isolating", t.isolating},
                       {"why_not", t.why_not},
                       {"smt", t.smt},
                       {"cores", t.cores},
                       {"traits", t.traits},
                       {"labels", labels}});
    }
    PrintJson(array, out);
  } else if (traits.empty()) {
    out << "no hosts registered\n";
  } else {
    TextTable table({"HOST", "ISOLATING", "TRAITS", "WHY_NOT"});
    for (const HostTraits& t : traits) {
      table.AddRow({t.host_id, t.isolating ? "yes" : "no",
                    t.traits.empty() ? "-" : absl::StrJoin(t.traits, ","), t.why_not});
    }
    table.Print(out);
  }
  return kExitOk;
}

}  // namespace cosched::cli
