// The hard rules of a host's layout, checked in one place. Whatever
// decides a layout (the engine in `auto` mode, an operator's tags, a
// test's fleet), nothing that breaks one of these may be applied:
//   1. a trust group holds VMs of one tenant only, and its id is that
//      tenant's (it begins with "<tenant>/");
//   2. every VM's level is one its tenant's policy allows;
//   3. no trust group holds two classes that conflict;
//   4. a `dedicated` VM holds ceil(vCPUs / threads per core) whole cores
//      that no other VM may run on (it may use all their threads or, in a
//      layout that trades SMT away, only the first ones), and
//      all dedicated VMs together hold at most GiveableCores (the rule
//      Place and the agent use).
// `none` VMs have no group (cookie 0 is shared with every untagged task),
// so rules 1 and 3 do not apply to them: a tenant that allows `none` has
// opted out of isolation for those VMs. Pure; thread-safe.
#ifndef COSCHED_POLICY_LAYOUT_RULES_H_
#define COSCHED_POLICY_LAYOUT_RULES_H_

#include <vector>

#include "absl/status/status.h"
#include "policy/scenario.h"
#include "policy/tradeoff.h"

namespace cosched::policy {

// Checks `layout` (one decision per VM of ExpandInstances(scenario), in
// that order) against the rules above. FAILED_PRECONDITION naming the VM,
// the group and the rule broken; INVALID_ARGUMENT when the layout does not
// match the scenario's VMs.
absl::Status CheckLayout(const Scenario& scenario, const std::vector<VmDecision>& layout);

}  // namespace cosched::policy

#endif  // COSCHED_POLICY_LAYOUT_RULES_H_
