#include "server/state/agent_input.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace cosched::server::internal {
namespace {

constexpr int kMaxCores = 4096;
constexpr int kMaxSiblings = 8;
constexpr int kMaxCpuId = 65535;
// KVM's limit of vCPUs per VM on x86.
constexpr int kMaxVcpus = 4096;
constexpr size_t kMaxErrorLength = 1024;
// What an agent's preflight may hold (host/preflight.cc keeps far less).
constexpr int kMaxHazards = 32;
constexpr int kMaxVulnerabilities = 128;
constexpr size_t kMaxPreflightValue = 1024;

}  // namespace

absl::Status ValidatePreflight(const std::string& field, const v1::HostPreflight& p) {
  auto too_long = [&](const std::string& what, const std::string& value) -> absl::Status {
    if (value.size() <= kMaxPreflightValue) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, ".", what, " must be at most ",
                                                   kMaxPreflightValue, " bytes"));
  };
  if (p.hazards_size() > kMaxHazards || p.allowed_hazards_size() > kMaxHazards) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".hazards must have at most ", kMaxHazards, " entries"));
  }
  if (p.vulnerabilities_size() > kMaxVulnerabilities) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".vulnerabilities must have at most ", kMaxVulnerabilities, " entries"));
  }
  for (const auto& [what, value] :
       {std::pair<const char*, const std::string*>{"kernel_release", &p.kernel_release()},
        {"kernel_version", &p.kernel_version()},
        {"smt_control", &p.smt_control()},
        {"sched_ext_state", &p.sched_ext_state()},
        {"sched_ext_ops", &p.sched_ext_ops()},
        {"nested_detail", &p.nested_detail()},
        {"libvirt_sched_core", &p.libvirt_sched_core()}}) {
    RETURN_IF_ERROR(too_long(what, *value));
  }
  for (const auto& [name, list] :
       {std::pair{"hazards", &p.hazards()}, {"allowed_hazards", &p.allowed_hazards()}}) {
    for (int i = 0; i < list->size(); ++i) {
      const std::string at = absl::StrCat(name, "[", i, "]");
      if ((*list)[i].name().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(field, ".", at, ".name must be set"));
      }
      RETURN_IF_ERROR(too_long(at + ".name", (*list)[i].name()));
      RETURN_IF_ERROR(too_long(at + ".detail", (*list)[i].detail()));
    }
  }
  for (int i = 0; i < p.vulnerabilities_size(); ++i) {
    const std::string at = absl::StrCat("vulnerabilities[", i, "]");
    RETURN_IF_ERROR(too_long(at + ".name", p.vulnerabilities(i).name()));
    RETURN_IF_ERROR(too_long(at + ".status", p.vulnerabilities(i).status()));
  }
  return absl::OkStatus();
}

absl::Status ValidateImpostors(const v1::ReportRequest& report) {
  constexpr int kMaxListed = 32;
  constexpr int kMaxCount = 1000000;
  constexpr size_t kMaxClaim = 256;
  constexpr size_t kMaxReason = 512;
  if (report.impostors_size() > kMaxListed) {
    return absl::InvalidArgumentError(
        absl::StrCat("impostors must have at most ", kMaxListed, " entries"));
  }
  if (report.impostor_count() < report.impostors_size() || report.impostor_count() > kMaxCount) {
    return absl::InvalidArgumentError(absl::StrCat(
        "impostor_count must be between the number of impostors listed (",
        report.impostors_size(), ") and ", kMaxCount));
  }
  for (int i = 0; i < report.impostors_size(); ++i) {
    const v1::ImpostorProcess& p = report.impostors(i);
    const std::string field = absl::StrCat("impostors[", i, "]");
    if (p.pid() <= 0) return absl::InvalidArgumentError(absl::StrCat(field, ".pid must be positive"));
    for (const auto& [name, value, limit] :
         {std::tuple{"claimed_vm_id", &p.claimed_vm_id(), kMaxClaim},
          {"claimed_uuid", &p.claimed_uuid(), kMaxClaim},
          {"reason", &p.reason(), kMaxReason}}) {
      if (value->size() > limit) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".", name, " must be at most ", limit, " bytes"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTopology(const v1::Topology& topology) {
  if (topology.cores_size() > kMaxCores) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology.cores has ", topology.cores_size(),
                     " entries; at most ", kMaxCores, " are allowed"));
  }
  std::set<int> seen;
  for (int i = 0; i < topology.cores_size(); ++i) {
    const v1::Core& core = topology.cores(i);
    if (core.cpus_size() < 1 || core.cpus_size() > kMaxSiblings) {
      return absl::InvalidArgumentError(
          absl::StrCat("topology.cores[", i, "].cpus must list 1 to ",
                       kMaxSiblings, " CPU ids"));
    }
    for (int cpu : core.cpus()) {
      if (cpu < 0 || cpu > kMaxCpuId) {
        return absl::InvalidArgumentError(absl::StrCat(
            "topology.cores[", i, "].cpus has ", cpu,
            "; CPU ids must be between 0 and ", kMaxCpuId));
      }
      if (!seen.insert(cpu).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "topology.cores[", i, "].cpus has CPU ", cpu,
            " which another core lists too"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateStatsCores(
    const google::protobuf::RepeatedPtrField<v1::StatsWindow>& stats,
    const v1::Topology& topology) {
  if (topology.cores().empty()) return absl::OkStatus();
  for (int i = 0; i < stats.size(); ++i) {
    for (int j = 0; j < stats[i].cores_size(); ++j) {
      const int32_t core = stats[i].cores(j).core();
      if (core >= topology.cores_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "stats[", i, "].cores[", j, "].core is ", core,
            "; it must index the host's registered topology, which has ",
            topology.cores_size(), " cores (register again after a CPU change)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateDomainMetadata(absl::string_view field, const v1::DomainMetadata& m) {
  constexpr size_t kMaxValue = 256;
  constexpr int kMaxClasses = 16;
  auto bounded = [&](absl::string_view what, const std::string& value,
                     size_t limit) -> absl::Status {
    if (value.size() <= limit) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".", what, " must be at most ", limit, " bytes"));
  };
  RETURN_IF_ERROR(bounded("nova.version", m.nova().version(), kMaxValue));
  RETURN_IF_ERROR(bounded("nova.project_uuid", m.nova().project_uuid(), kMaxValue));
  RETURN_IF_ERROR(bounded("nova.project_name", m.nova().project_name(), kMaxValue));
  RETURN_IF_ERROR(bounded("nova.flavor_name", m.nova().flavor_name(), kMaxValue));
  RETURN_IF_ERROR(bounded("cosched.tenant", m.cosched().tenant(), kMaxValue));
  RETURN_IF_ERROR(bounded("cosched.isolation", m.cosched().isolation(), kMaxValue));
  if (m.cosched().interference_classes_size() > kMaxClasses) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".cosched.interference_classes must have at most ", kMaxClasses, " entries"));
  }
  for (int i = 0; i < m.cosched().interference_classes_size(); ++i) {
    RETURN_IF_ERROR(bounded(absl::StrCat("cosched.interference_classes[", i, "]"),
                            m.cosched().interference_classes(i), kMaxValue));
  }
  return bounded("error", m.error(), kMaxErrorLength);
}

absl::Status ValidateEnforcement(absl::string_view field,
                                 const v1::VMEnforcement& e) {
  if (!v1::EnforcementState_IsValid(e.state())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".state is not a known enforcement state"));
  }
  if (e.threads_found() < 0 || e.threads_tagged() < 0 ||
      e.threads_wrong() < 0 || e.threads_untaggable() < 0 || e.vcpus() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " thread and vcpus counts must not be negative"));
  }
  if (e.vcpus() > kMaxVcpus) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".vcpus must be at most ", kMaxVcpus));
  }
  if (e.last_error().size() > kMaxErrorLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".last_error must be at most ", kMaxErrorLength, " bytes"));
  }
  if (e.applied_trust_group().size() > kMaxErrorLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".applied_trust_group must be at most ", kMaxErrorLength,
        " bytes"));
  }
  return absl::OkStatus();
}

absl::flat_hash_set<absl::string_view> ListedVms(const v1::ReportRequest& report) {
  absl::flat_hash_set<absl::string_view> listed;
  listed.reserve(report.vms_size());
  for (const v1::VMObservation& vm : report.vms()) listed.insert(vm.vm_id());
  return listed;
}

int64_t DropUnlistedStats(v1::ReportRequest& report, std::vector<std::string>* sample,
                          size_t max_sample) {
  // Ids copied: the set's views point into report.vms(), which this does
  // not change.
  const absl::flat_hash_set<absl::string_view> listed = ListedVms(report);
  std::set<std::string> sampled;
  int64_t dropped = 0;
  for (v1::StatsWindow& window : *report.mutable_stats()) {
    auto* vms = window.mutable_vms();
    const auto kept = std::stable_partition(vms->begin(), vms->end(), [&](const v1::VMStats& v) {
      return listed.contains(v.vm_id());
    });
    for (auto it = kept; it != vms->end(); ++it) {
      ++dropped;
      if (sample != nullptr && sampled.size() < max_sample && sampled.insert(it->vm_id()).second) {
        sample->push_back(it->vm_id());
      }
    }
    vms->DeleteSubrange(static_cast<int>(kept - vms->begin()),
                        static_cast<int>(vms->end() - kept));
  }
  return dropped;
}

}  // namespace cosched::server::internal
