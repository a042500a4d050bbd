#include "server/state/metadata_tag.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/validation.h"
#include "glog/logging.h"
#include "policy/trust_group.h"
#include "server/state/vm_names.h"
#include "server/state/vm_presence.h"
#include "server/state/write_support.h"

namespace cosched::server {

absl::StatusOr<std::optional<MetadataTag>> MetadataTagOf(const v1::DomainMetadata& m) {
  if (!m.error().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata could not be read by the agent: ", m.error()));
  }
  const v1::DomainMetadata::Cosched& cosched = m.cosched();
  const bool asks = !cosched.isolation().empty() || cosched.interference_classes_size() > 0;
  MetadataTag tag;
  if (!cosched.tenant().empty()) {
    RETURN_IF_ERROR(ValidateId("metadata.cosched.tenant", cosched.tenant()));
    tag.tenant_id = cosched.tenant();
  } else if (m.has_nova()) {
    RETURN_IF_ERROR(ValidateId("metadata.nova.project_uuid", m.nova().project_uuid()));
    tag.tenant_id = m.nova().project_uuid();
  } else if (asks) {
    return absl::InvalidArgumentError(
        "metadata.cosched.tenant is required with an isolation level or classes "
        "(or Nova's <nova:owner><nova:project uuid=...>)");
  } else {
    return std::optional<MetadataTag>();
  }
  if (!cosched.isolation().empty()) {
    ASSIGN_OR_RETURN(tag.isolation,
                     ParseIsolation("metadata.cosched.isolation", cosched.isolation()));
    // Whoever can write a domain's XML (or a compromised host) could turn
    // a VM's isolation off: only an operator may (csctl tag --isolation
    // none, where the tenant's policy allows it).
    if (tag.isolation == v1::ISOLATION_LEVEL_NONE) {
      return absl::InvalidArgumentError(
          "metadata.cosched.isolation 'none' is never taken from metadata: an operator "
          "tags a VM at level none (csctl tag --isolation none) where its tenant's policy "
          "allows it");
    }
  }
  RETURN_IF_ERROR(ValidateClasses("metadata.cosched.interference_classes",
                                  cosched.interference_classes(), &tag.interference_classes));
  return std::optional<MetadataTag>(std::move(tag));
}

namespace {

// The refusal of `tag` by the tenant's policy, as TagVM would refuse it.
absl::Status PolicyRefusal(store::Transaction& txn, const std::string& vm_id,
                           const MetadataTag& tag) {
  ASSIGN_OR_RETURN(v1::TenantPolicy policy, internal::PolicyOf(txn, tag.tenant_id));
  return policy::DecideTrustGroup(vm_id, tag.isolation, tag.interference_classes, policy)
      .status();
}

// The tag `o`'s metadata asks for, judged by the tenant's policy too;
// nullopt when it asks for none.
absl::StatusOr<std::optional<MetadataTag>> JudgedTag(store::Transaction& txn,
                                                     const std::string& vm_id,
                                                     const v1::VMObservation& o) {
  if (!o.has_metadata()) return std::optional<MetadataTag>();
  ASSIGN_OR_RETURN(std::optional<MetadataTag> tag, MetadataTagOf(o.metadata()));
  if (tag) RETURN_IF_ERROR(PolicyRefusal(txn, vm_id, *tag));
  return tag;
}

// MetadataConflict's parts (defined below).
absl::StatusOr<std::map<std::string, std::string>> AsksOf(store::Transaction& txn,
                                                         const v1::VM& vm,
                                                         const std::string& host_id,
                                                         const v1::VMObservation* own);
std::string Disagreement(const v1::VM& vm, const std::map<std::string, std::string>& asks);

bool SameTag(const v1::VM& vm, const MetadataTag& tag) {
  return vm.tenant_id() == tag.tenant_id && vm.requested_isolation() == tag.isolation &&
         std::equal(vm.interference_classes().begin(), vm.interference_classes().end(),
                    tag.interference_classes.begin(), tag.interference_classes.end());
}

}  // namespace

absl::StatusOr<std::optional<v1::VM>> TagFromMetadata(store::Transaction& txn,
                                                      const std::string& host_id,
                                                      const v1::VMObservation& o,
                                                      std::optional<v1::VM> vm,
                                                      MetadataWrites& writes) {
  // A TagVM wins; and during a migration only the owner's metadata counts.
  if (vm && vm->metadata_host().empty()) return vm;
  // Hosts that report it disagree (MetadataConflict): nobody's metadata
  // retags it until that is settled.
  if (vm && vm->presence_size() > 1) {
    ASSIGN_OR_RETURN(auto asks, AsksOf(txn, *vm, host_id, &o));
    if (!Disagreement(*vm, asks).empty()) return vm;
  }
  if (vm && !vm->host_id().empty() && vm->host_id() != host_id) return vm;
  // The agent could not read the metadata now (libvirtd restarting, an XML
  // read that failed): that is not "metadata gone", so nothing changes.
  // Only metadata positively absent or refused untags.
  if (o.metadata_unknown()) return vm;
  const std::string vm_id = vm ? vm->vm_id() : MetadataVmId(o);
  const Actor actor{host_id, "host"};
  if (vm && o.has_metadata()) {
    // Most Reports repeat what tagged the VM: no policy read for them (a
    // policy that forbids a level in use is refused when it is set).
    absl::StatusOr<std::optional<MetadataTag>> same = MetadataTagOf(o.metadata());
    if (same.ok() && *same && SameTag(*vm, **same)) return vm;
  }
  absl::StatusOr<std::optional<MetadataTag>> tag = JudgedTag(txn, vm_id, o);
  if (!tag.ok() && !absl::IsInvalidArgument(tag.status()) &&
      !absl::IsFailedPrecondition(tag.status())) {
    return tag.status();  // the store's error: the Report's write fails
  }
  if (!tag.ok() || !*tag) {
    if (!vm) {
      LOG_IF_EVERY_N(WARNING, !tag.ok(), 100)
          << "host " << host_id << ": vm " << vm_id
          << " stays untagged (fail-closed): its domain metadata is refused: "
          << tag.status().message() << " (logged every 100th time)";
      return std::optional<v1::VM>();
    }
    const std::string reason =
        tag.ok() ? absl::StrCat("metadata on host ", host_id, " names no tenant any more")
                 : absl::StrCat("metadata on host ", host_id,
                                " refused: ", tag.status().message());
    LOG(WARNING) << "host " << host_id << ": untagging vm " << vm_id
                 << " (fail-closed): " << reason;
    v1::AuditRecord audit;
    RETURN_IF_ERROR(internal::WriteUntag(txn, *vm, actor, reason, &audit).status());
    writes.audits.push_back(std::move(audit));
    writes.hosts.merge(HostsOf(*vm));
    writes.untagged_vms.push_back(vm_id);
    return std::optional<v1::VM>();
  }
  v1::VM wanted;
  wanted.set_vm_id(vm_id);
  wanted.set_tenant_id((*tag)->tenant_id);
  wanted.set_requested_isolation((*tag)->isolation);
  for (const std::string& c : (*tag)->interference_classes) wanted.add_interference_classes(c);
  wanted.set_thread_scope(vm ? vm->thread_scope() : v1::THREAD_SCOPE_EMULATOR);
  wanted.set_metadata_host(host_id);
  internal::TagWrite write;
  RETURN_IF_ERROR(internal::WriteTag(txn, wanted, actor,
                                     absl::StrCat("from metadata on host ", host_id), write));
  if (!write.audit.method().empty()) writes.audits.push_back(std::move(write.audit));
  for (const auto& [host, reported_id] : write.new_hosts) writes.hosts.insert(host);
  return std::optional<v1::VM>(std::move(*write.response.mutable_vm()));
}

namespace {

// What one host's metadata asks for, in words; nullopt when it could not be
// read (which never disagrees).
std::optional<std::string> AskOf(const v1::VMObservation& o) {
  if (o.metadata_unknown()) return std::nullopt;
  if (!o.has_metadata()) return std::string("no tenant");
  absl::StatusOr<std::optional<MetadataTag>> tag = MetadataTagOf(o.metadata());
  if (!tag.ok()) return absl::StrCat("metadata that is refused (", tag.status().message(), ")");
  if (!*tag) return std::string("no tenant");
  return absl::StrCat("tenant '", (*tag)->tenant_id, "' at ",
                      (*tag)->isolation == v1::ISOLATION_LEVEL_UNSPECIFIED
                          ? std::string("its default level")
                          : absl::StrCat("level ", IsolationName((*tag)->isolation)),
                      (*tag)->interference_classes.empty()
                          ? ""
                          : absl::StrCat(", classes ",
                                         absl::StrJoin((*tag)->interference_classes, "+")));
}

}  // namespace

namespace {

// What each host reporting `vm` asks for, where it could be read: `own` for
// `host_id`, the stored observation for the others.
absl::StatusOr<std::map<std::string, std::string>> AsksOf(store::Transaction& txn,
                                                         const v1::VM& vm,
                                                         const std::string& host_id,
                                                         const v1::VMObservation* own) {
  std::map<std::string, std::string> asks;
  if (own != nullptr) {
    if (std::optional<std::string> ask = AskOf(*own)) asks[host_id] = *ask;
  }
  std::set<std::string> reporting;
  for (const v1::VMPresence& p : vm.presence()) reporting.insert(p.host_id());
  if (reporting.size() <= (own != nullptr ? 1u : 0u)) return asks;
  ASSIGN_OR_RETURN(std::vector<store::Observation> seen, txn.ListObservations(vm.vm_id()));
  for (const store::Observation& o : seen) {
    if (o.host_id == host_id || !reporting.contains(o.host_id)) continue;
    if (std::optional<std::string> ask = AskOf(o.vm)) asks.try_emplace(o.host_id, *ask);
  }
  return asks;
}

// Non-empty: the hosts disagree, each named with what it asks for.
std::string Disagreement(const v1::VM& vm, const std::map<std::string, std::string>& asks) {
  std::set<std::string> distinct;
  for (const auto& [host, ask] : asks) distinct.insert(ask);
  if (distinct.size() <= 1) return "";
  std::vector<std::string> said;
  for (const auto& [host, ask] : asks) said.push_back(absl::StrCat("host '", host, "' ", ask));
  return absl::StrCat("hosts disagree on the domain metadata of '", vm.vm_id(), "' (",
                      absl::StrJoin(said, "; "),
                      "): every copy stays on a cookie of its own until one host stops reporting "
                      "it or an operator tags it (csctl tag)");
}

// The VM's tag in AskOf's words.
std::string TagAsAsk(const v1::VM& vm) {
  v1::VMObservation o;
  v1::DomainMetadata::Cosched* c = o.mutable_metadata()->mutable_cosched();
  c->set_tenant(vm.tenant_id());
  if (vm.requested_isolation() != v1::ISOLATION_LEVEL_UNSPECIFIED) {
    c->set_isolation(IsolationName(vm.requested_isolation()));
  }
  for (const std::string& k : vm.interference_classes()) c->add_interference_classes(k);
  return AskOf(o).value_or("");
}

}  // namespace

absl::StatusOr<std::string> MetadataConflict(store::Transaction& txn, const v1::VM& vm,
                                             const std::string& host_id,
                                             const v1::VMObservation* own,
                                             std::set<std::string>& forget) {
  ASSIGN_OR_RETURN(auto asks, AsksOf(txn, vm, host_id, own));
  if (std::string disagreement = Disagreement(vm, asks); !disagreement.empty()) {
    return disagreement;
  }
  auto owner = asks.find(vm.host_id());
  if (owner == asks.end() || owner->second == TagAsAsk(vm)) return std::string();
  forget.insert(vm.host_id());
  return absl::StrCat("tagged from the domain metadata of host '", vm.metadata_host(),
                      "', which no longer reports it; its owner, host '", vm.host_id(), "', asks for ",
                      owner->second, ": it stays on a cookie of its own until that host's next Report "
                      "retags it");
}

absl::StatusOr<std::string> WhyNotTaggedFromMetadata(store::Transaction& txn,
                                                     const std::string& vm_id,
                                                     bool tag_from_metadata) {
  ASSIGN_OR_RETURN(std::vector<store::Observation> seen, txn.ListObservations(vm_id));
  std::vector<std::string> why;
  for (const store::Observation& o : seen) {
    if (!o.vm.has_metadata()) continue;
    absl::StatusOr<std::optional<MetadataTag>> tag = JudgedTag(txn, vm_id, o.vm);
    if (!tag.ok()) {
      if (!absl::IsInvalidArgument(tag.status()) && !absl::IsFailedPrecondition(tag.status())) {
        return tag.status();
      }
      why.push_back(absl::StrCat("host ", o.host_id,
                                 " reports it with domain metadata that is refused: ",
                                 tag.status().message()));
    } else if (*tag && !tag_from_metadata) {
      why.push_back(absl::StrCat("host ", o.host_id, " reports it with domain metadata for tenant '",
                                 (*tag)->tenant_id, "', but csd's tag_from_metadata is off"));
    } else if (*tag) {
      why.push_back(absl::StrCat("host ", o.host_id, " reports it with domain metadata for tenant '",
                                 (*tag)->tenant_id, "': it is tagged at that host's next Report"));
    }
  }
  return absl::StrJoin(why, "; ");
}

}  // namespace cosched::server
