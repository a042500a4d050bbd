#include "agent/host_probe.h"

#include <string>

#include "absl/strings/str_join.h"
#include "common/names.h"
#include "cosched/v1/types.pb.h"
#include "google/protobuf/util/json_util.h"
#include "host/core_sched_prctl.h"
#include "host/preflight.h"
#include "host/pseudo_fs.h"
#include "host/topology.h"

namespace cosched::agent {
namespace {

void PrintText(const v1::Host& host, std::ostream& out) {
  const v1::HostCapabilities& caps = host.capabilities();
  const v1::HostPreflight& p = caps.preflight();
  out << "cores:           " << host.topology().cores_size() << "\n";
  for (const v1::Core& core : host.topology().cores()) {
    out << "  core " << core.package_id() << "/" << core.core_id() << ": cpus "
        << absl::StrJoin(core.cpus(), ",") << "\n";
  }
  auto or_unknown = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  out << "smt active:      " << (caps.smt_active() ? "yes" : "no") << " (control "
      << or_unknown(p.smt_control()) << ")\n"
      << "core scheduling: " << CoreSchedSupportName(caps.core_sched()) << " ("
      << caps.core_sched_detail() << ")\n"
      << "kernel:          " << or_unknown(p.kernel_release()) << " (version "
      << or_unknown(p.kernel_version()) << ")\n"
      << "sched_ext:       "
      << (p.sched_ext_state().empty() ? "not in this kernel" : p.sched_ext_state())
      << (p.sched_ext_ops().empty() ? "" : " (" + p.sched_ext_ops() + ")") << "\n"
      << "nested guest:    " << (p.nested() ? "yes (" + p.nested_detail() + ")" : "no") << "\n"
      << "forced idle:     cgroup " << (p.cgroup_forced_idle() ? "yes" : "no")
      << ", schedstats " << (caps.schedstats_enabled() ? "on" : "off") << "\n"
      << "libvirt:         "
      << (p.libvirt_sched_core().empty() ? "no qemu.conf"
                                         : "sched_core " + p.libvirt_sched_core())
      << "\n";
  std::vector<std::string> affected, clear;
  for (const v1::CpuVulnerability& v : p.vulnerabilities()) {
    if (!v.smt_relevant()) continue;
    (v.affected() ? affected : clear).push_back(v.name());
  }
  out << "smt cpu issues:  "
      << (affected.empty() ? "none affected" : "affected: " + absl::StrJoin(affected, ", "))
      << (clear.empty() ? "" : "; not affected: " + absl::StrJoin(clear, ", ")) << "\n";
  if (p.hazards_size() == 0) out << "hazards:         none\n";
  for (const v1::Hazard& h : p.hazards()) {
    out << "hazard:          " << h.name() << ": " << h.detail() << "\n";
  }
  for (const v1::Hazard& h : p.allowed_hazards()) {
    out << "allowed hazard:  " << h.name() << ": " << h.detail() << "\n";
  }
}

}  // namespace

host::HazardRules HazardRulesOf(const AgentOptions& options) {
  host::HazardRules rules;
  rules.allow.insert(options.allow_hazards.begin(), options.allow_hazards.end());
  rules.nested = options.nested_is_hazard;
  rules.known_bad = options.known_bad;
  return rules;
}

int PrintHostProbe(const host::HazardRules& rules, std::ostream& out, bool json) {
  host::LocalPseudoFs fs;
  auto topology = host::ReadTopology(fs, "/sys");
  if (!topology.ok()) {
    out << "cannot read the topology: " << topology.status().message() << "\n";
    return 1;
  }
  auto smt = host::ReadSmtActive(fs, "/sys", *topology);
  auto schedstats = host::ReadSchedstatsEnabled(fs, "/proc");
  host::PrctlCoreSched kernel;
  const host::CoreSchedProbe probe = kernel.Probe();
  v1::Host host;
  *host.mutable_topology() = *topology;
  v1::HostCapabilities* caps = host.mutable_capabilities();
  caps->set_smt_active(smt.ok() && *smt);
  caps->set_core_sched(probe.support);
  caps->set_core_sched_detail(probe.detail);
  caps->set_schedstats_enabled(schedstats.ok() && *schedstats);
  *caps->mutable_preflight() = host::ReadPreflight(fs, host::PreflightPaths());
  host::FindHazards(rules, *caps->mutable_preflight());
  if (json) {
    std::string text;
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.preserve_proto_field_names = true;
    options.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(host, &text, options);
    out << text;
  } else {
    PrintText(host, out);
  }
  const bool can_tag = caps->smt_active() &&
                       probe.support == v1::CORE_SCHED_SUPPORT_SUPPORTED &&
                       caps->preflight().hazards_size() == 0;
  return can_tag ? 0 : 3;
}

}  // namespace cosched::agent
