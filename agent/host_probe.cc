#include "agent/host_probe.h"

#include "absl/strings/str_join.h"
#include "host/core_sched_prctl.h"
#include "host/pseudo_fs.h"
#include "host/topology.h"
#include "common/names.h"

namespace cosched::agent {

int PrintHostProbe(std::ostream& out) {
  host::LocalPseudoFs fs;
  auto topology = host::ReadTopology(fs, "/sys");
  if (!topology.ok()) {
    out << "cannot read the topology: " << topology.status().message() << "\n";
    return 1;
  }
  auto smt = host::ReadSmtActive(fs, "/sys", *topology);
  host::PrctlCoreSched kernel;
  host::CoreSchedProbe probe = kernel.Probe();
  out << "cores:           " << topology->cores_size() << "\n";
  for (const v1::Core& core : topology->cores()) {
    out << "  core " << core.package_id() << "/" << core.core_id() << ": cpus "
        << absl::StrJoin(core.cpus(), ",") << "\n";
  }
  out << "smt active:      " << (smt.ok() && *smt ? "yes" : "no") << "\n"
      << "core scheduling: " << CoreSchedSupportName(probe.support) << " ("
      << probe.detail << ")\n";
  return smt.ok() && *smt && probe.support == v1::CORE_SCHED_SUPPORT_SUPPORTED ? 0 : 3;
}

}  // namespace cosched::agent
