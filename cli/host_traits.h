// csctl hosts traits (issue #18, item 4): what schedulers need to know of
// each host to steer VMs to those that isolate, in their own formats. A
// host is isolating when csd's Place would choose it for an isolated VM
// (its unplaceable_reason is empty): it is live, not draining, safe (no
// preflight hazard) and, where SMT is on, its kernel's core scheduling
// works.
//
//   -o openstack-provider-yaml  a Nova provider config (provider.yaml):
//       isolating hosts get the trait CUSTOM_COSCHED_ISOLATING (with
//       CUSTOM_COSCHED_SMT where SMT is on) and, with SMT on, an inventory
//       of CUSTOM_COSCHED_WHOLE_CORE (one per physical core) that flavors of
//       level `dedicated` can consume; the others are listed as comments
//       with the reason.
//   -o k8s-labels  one line per host: the host, then cosched/isolating,
//       cosched/smt and cosched/whole-cores labels, as `kubectl label node
//       --overwrite` takes them (xargs -L1).
#ifndef COSCHED_CLI_HOST_TRAITS_H_
#define COSCHED_CLI_HOST_TRAITS_H_

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cosched/v1/types.pb.h"

namespace cosched::cli {

inline constexpr char kIsolatingTrait[] = "CUSTOM_COSCHED_ISOLATING";
inline constexpr char kSmtTrait[] = "CUSTOM_COSCHED_SMT";
inline constexpr char kWholeCoreResource[] = "CUSTOM_COSCHED_WHOLE_CORE";

struct HostTraits {
  std::string host_id;
  bool isolating = false;
  // Why not (csd's unplaceable_reason); empty when isolating.
  std::string why_not;
  bool smt = false;
  // Physical cores (of the registered topology).
  int cores = 0;
  // Nova traits and node labels, in the order printed.
  std::vector<std::string> traits;
  std::vector<std::pair<std::string, std::string>> labels;
};

HostTraits TraitsOf(const v1::Host& host);

// `compute_node`: identify the (single) host as uuid '$COMPUTE_NODE', for
// a file rendered on the compute host itself; else by name (the host id,
// which must then be Nova's compute node name).
void PrintOpenstackProviderYaml(const std::vector<HostTraits>& hosts, bool compute_node,
                                std::ostream& out);
void PrintK8sLabels(const std::vector<HostTraits>& hosts, std::ostream& out);

}  // namespace cosched::cli

#endif  // COSCHED_CLI_HOST_TRAITS_H_
