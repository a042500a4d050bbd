// TagVM, UntagVM and the reads of VMs. The write of one tag or untag, which
// TagVM and tagging from metadata share, is in tag_writes.cc.
#include "server/state/vms.h"

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/validation.h"
#include "google/protobuf/util/time_util.h"
#include "server/state/metadata_tag.h"
#include "server/state/vm_names.h"
#include "server/state/vm_presence.h"

namespace cosched::server {
namespace {

using google::protobuf::util::TimeUtil;
using internal::NextToken;
using internal::PageFrom;
using internal::ValidateOptionalId;

absl::Status ValidateIsolationEnum(absl::string_view field, int value) {
  if (!v1::IsolationLevel_IsValid(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " must be one of vm, tenant, none, dedicated (or unset)"));
  }
  return absl::OkStatus();
}

// What the agent of the VM's owner host last reported for it: held by this
// csd when only enforcement changed since the host's last written Report
// (ReportMemory), else as written. An unchanged Report is not written
// (Reports::ApplyReport), so the time is that of the host's last Report
// when this csd has one.
absl::Status AddEnforcement(store::Transaction& txn, const ReportMemory& reports, v1::VM& vm,
                            const std::function<std::optional<absl::Time>(
                                absl::string_view)>& last_report) {
  if (vm.host_id().empty()) return absl::OkStatus();
  std::optional<v1::VMEnforcement> held = reports.HeldEnforcement(vm.host_id(), vm.vm_id());
  if (held) {
    *vm.mutable_enforcement() = *std::move(held);
  } else {
    ASSIGN_OR_RETURN(auto seen, txn.ListObservations(vm.vm_id()));
    for (const store::Observation& o : seen) {
      if (o.host_id != vm.host_id()) continue;
      *vm.mutable_enforcement() = o.vm.enforcement();
      break;
    }
  }
  if (!vm.has_enforcement()) return absl::OkStatus();
  std::optional<absl::Time> last = last_report(vm.host_id());
  if (last && absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(
                  vm.enforcement().report_time())) < *last) {
    *vm.mutable_enforcement()->mutable_report_time() =
        TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(*last));
  }
  return absl::OkStatus();
}

// The VMs of `named` (VmsNamed: tagged under their UUIDs), each with the
// host that owns it, for a message.
std::string ListNamed(const std::vector<v1::VM>& named) {
  std::vector<std::string> each;
  for (const v1::VM& vm : named) {
    each.push_back(absl::StrCat("'", vm.vm_id(), "' (host '", vm.host_id(), "')"));
  }
  return absl::StrJoin(each, ", ");
}

}  // namespace

void Vms::TagVm(const v1::TagVMRequest& request, const Actor& actor,
                Done<v1::TagVMResponse> done) {
  std::vector<std::string> classes;
  absl::Status valid = ValidateId("vm_id", request.vm_id());
  if (valid.ok()) valid = ValidateOptionalId("tenant_id", request.tenant_id());
  if (valid.ok()) valid = ValidateIsolationEnum("isolation", request.isolation());
  if (valid.ok() && !v1::ThreadScope_IsValid(request.thread_scope())) {
    valid = absl::InvalidArgumentError(
        "thread_scope must be one of vcpus, emulator, full (or unset)");
  }
  if (valid.ok()) {
    valid = ValidateClasses("interference_classes",
                            request.interference_classes(), &classes);
  }
  if (!valid.ok()) return done(valid);

  v1::VM wanted;
  wanted.set_vm_id(request.vm_id());
  wanted.set_tenant_id(request.tenant_id().empty() ? policy::kDefaultTenant
                                                   : request.tenant_id());
  wanted.set_requested_isolation(request.isolation());
  for (auto& c : classes) wanted.add_interference_classes(c);
  wanted.set_thread_scope(request.thread_scope() == v1::THREAD_SCOPE_UNSPECIFIED
                              ? v1::THREAD_SCOPE_EMULATOR
                              : request.thread_scope());

  auto audit = std::make_shared<v1::AuditRecord>();
  auto delta = std::make_shared<PlacementDelta>();
  auto reported = std::make_shared<std::vector<std::pair<std::string, std::string>>>();
  auto vm_id = std::make_shared<const std::string>(request.vm_id());
  auto layout_host = std::make_shared<std::optional<std::string>>();
  internal::WriteAndAnswer<v1::TagVMResponse>(
      &store_,
      [wanted = std::move(wanted), actor, audit, delta, reported, layout_host](
          store::Transaction& txn, v1::TagVMResponse& out) -> absl::Status {
        *delta = PlacementDelta();
        internal::TagWrite write;
        RETURN_IF_ERROR(internal::WriteTag(txn, wanted, actor, "", write));
        if (write.placed) delta->vms.push_back(*std::move(write.placed));
        *audit = std::move(write.audit);
        *reported = std::move(write.new_hosts);
        *layout_host = std::move(write.layout_host);
        out = std::move(write.response);
        return absl::OkStatus();
      },
      effects_.ApplyingPlacement(
          delta, internal::LoggingAudit(
                     audit, effects_.NotingTagged(vm_id, reported,
                                                  effects_.NotifyingLayout(layout_host,
                                                                           std::move(done))))));
}

void Vms::UntagVm(const v1::UntagVMRequest& request,
                  const Actor& actor, Done<v1::UntagVMResponse> done) {
  absl::Status valid = ValidateId("vm_id", request.vm_id());
  if (!valid.ok()) return done(valid);
  auto audit = std::make_shared<v1::AuditRecord>();
  auto delta = std::make_shared<PlacementDelta>();
  delta->removed_vms.push_back(request.vm_id());
  auto hosts = std::make_shared<std::set<std::string>>();
  auto layout_host = std::make_shared<std::optional<std::string>>();
  internal::WriteAndAnswer<v1::UntagVMResponse>(
      &store_,
      [vm_id = request.vm_id(), actor, audit, hosts, layout_host](
          store::Transaction& txn, v1::UntagVMResponse& out) -> absl::Status {
        ASSIGN_OR_RETURN(auto existing, txn.GetVm(vm_id));
        if (!existing) {
          // A write names its VM exactly: a domain name is only a hint.
          ASSIGN_OR_RETURN(std::vector<v1::VM> named, VmsNamed(txn, vm_id));
          return absl::NotFoundError(absl::StrCat(
              "vm '", vm_id, "' is not tagged",
              named.empty() ? ""
                            : absl::StrCat("; it is the domain name of ", ListNamed(named),
                                           ": untag by that id")));
        }
        ASSIGN_OR_RETURN(int64_t revision,
                         internal::WriteUntag(txn, *existing, actor, "", audit.get()));
        *hosts = HostsOf(*existing);
        if (!existing->host_id().empty()) *layout_host = existing->host_id();
        out.set_revision(revision);
        return absl::OkStatus();
      },
      effects_.ApplyingPlacement(
          delta, internal::LoggingAudit(
                     audit, effects_.NotingUntagged(
                                std::make_shared<const std::string>(request.vm_id()), hosts,
                                effects_.NotifyingLayout(layout_host, std::move(done))))));
}

absl::StatusOr<v1::VM> Vms::GetVm(const v1::GetVMRequest& request) {
  RETURN_IF_ERROR(ValidateId("vm_id", request.vm_id()));
  auto last_report = [this](absl::string_view host) { return hosts_.LastReport(host); };
  v1::VM result;
  RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto vm, txn.GetVm(request.vm_id()));
    if (!vm) {
      // Not an id: a domain name a host reports a VM tagged under its UUID
      // as. Names repeat across Nova cells; then the UUID must be given.
      ASSIGN_OR_RETURN(std::vector<v1::VM> named, VmsNamed(txn, request.vm_id()));
      if (named.size() > 1) {
        return absl::FailedPreconditionError(absl::StrCat(
            "vm_id '", request.vm_id(), "' is the domain name of ", named.size(),
            " tagged VMs: ", ListNamed(named), "; get one by its UUID"));
      }
      if (named.size() == 1) vm = std::move(named[0]);
    }
    if (!vm) {
      ASSIGN_OR_RETURN(std::string why,
                       WhyNotTaggedFromMetadata(txn, request.vm_id(), settings_.tag_from_metadata()));
      return absl::NotFoundError(absl::StrCat("vm '", request.vm_id(), "' not found",
                                              why.empty() ? "" : ": it is not tagged; ", why));
    }
    result = std::move(*vm);
    return AddEnforcement(txn, effects_.reports(), result, last_report);
  }));
  return result;
}

absl::StatusOr<v1::ListVMsResponse> Vms::ListVmsNamed(
    const v1::ListVMsRequest& request,
    const std::function<std::optional<absl::Time>(absl::string_view)>& last_report) {
  RETURN_IF_ERROR(ValidateId("domain_name", request.domain_name()));
  if (!request.tenant_id().empty() || !request.host_id().empty() ||
      !request.trust_group().empty() || !request.page_token().empty()) {
    return absl::InvalidArgumentError(
        "domain_name is a filter of its own: not with tenant_id, host_id, trust_group or "
        "page_token");
  }
  v1::ListVMsResponse response;
  RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(std::optional<v1::VM> own, txn.GetVm(request.domain_name()));
    ASSIGN_OR_RETURN(std::vector<v1::VM> named, VmsNamed(txn, request.domain_name()));
    if (own) named.insert(named.begin(), *std::move(own));
    for (v1::VM& vm : named) {
      RETURN_IF_ERROR(AddEnforcement(txn, effects_.reports(), vm, last_report));
      *response.add_vms() = std::move(vm);
    }
    return absl::OkStatus();
  }));
  return response;
}

absl::StatusOr<v1::ListVMsResponse> Vms::ListVms(
                                                 const v1::ListVMsRequest& request) {
  RETURN_IF_ERROR(ValidateOptionalId("tenant_id", request.tenant_id()));
  RETURN_IF_ERROR(ValidateOptionalId("host_id", request.host_id()));
  if (request.trust_group().size() > kMaxTrustGroupLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trust_group must be at most ", kMaxTrustGroupLength, " bytes"));
  }
  auto last_report = [this](absl::string_view host) { return hosts_.LastReport(host); };
  if (!request.domain_name().empty()) return ListVmsNamed(request, last_report);
  ASSIGN_OR_RETURN(store::Page page,
                   PageFrom(request.page_size(), request.page_token()));
  store::VmFilter filter;
  filter.tenant_id = request.tenant_id();
  filter.host_id = request.host_id();
  filter.trust_group = request.trust_group();
  v1::ListVMsResponse response;
  RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto vms, txn.ListVms(filter, page));
    ASSIGN_OR_RETURN(
        auto token,
        NextToken(vms, page, [](const v1::VM& vm) { return vm.vm_id(); },
                  [&](const store::Page& p) { return txn.ListVms(filter, p); }));
    response.set_next_page_token(token);
    for (auto& vm : vms) {
      RETURN_IF_ERROR(AddEnforcement(txn, effects_.reports(), vm, last_report));
      *response.add_vms() = std::move(vm);
    }
    return absl::OkStatus();
  }));
  return response;
}

}  // namespace cosched::server
