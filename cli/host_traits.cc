#include "cli/host_traits.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cosched::cli {

HostTraits TraitsOf(const v1::Host& host) {
  HostTraits t;
  t.host_id = host.host_id();
  t.isolating = host.unplaceable_reason().empty();
  t.why_not = host.unplaceable_reason();
  t.smt = host.capabilities().smt_active();
  t.cores = host.topology().cores_size();
  if (t.isolating) {
    t.traits.push_back(kIsolatingTrait);
    if (t.smt) t.traits.push_back(kSmtTrait);
  }
  t.labels = {{"cosched/isolating", t.isolating ? "true" : "false"},
              {"cosched/smt", t.smt ? "true" : "false"},
              {"cosched/whole-cores", std::to_string(t.cores)}};
  return t;
}

void PrintOpenstackProviderYaml(const std::vector<HostTraits>& hosts, bool compute_node,
                                std::ostream& out) {
  out << "# Nova provider config (compute.provider_config_location), from csctl hosts "
         "traits.\n"
         "# nova-compute reads it at start only: render it again and restart nova-compute\n"
         "# when a host starts or stops isolating.\n"
         "meta:\n"
         "  schema_version: '1.0'\n";
  bool any = false;
  for (const HostTraits& h : hosts) {
    if (!h.isolating) {
      out << "# " << h.host_id << ": not isolating: " << h.why_not << "\n";
      continue;
    }
    if (!any) out << "providers:\n";
    any = true;
    out << "  - identification:\n";
    if (compute_node) {
      out << "      uuid: '$COMPUTE_NODE'  # " << h.host_id << "\n";
    } else {
      out << "      name: '" << h.host_id << "'\n";
    }
    if (h.smt && h.cores > 0) {
      // A dedicated VM takes whole cores: Placement then never promises
      // more of them than the host has.
      out << "    inventories:\n"
             "      additional:\n"
             "        - "
          << kWholeCoreResource << ":\n"
          << "            total: " << h.cores << "\n"
          << "            reserved: 0\n"
             "            min_unit: 1\n"
          << "            max_unit: " << h.cores << "\n"
          << "            step_size: 1\n"
             "            allocation_ratio: 1.0\n";
    }
    out << "    traits:\n"
           "      additional:\n";
    for (const std::string& trait : h.traits) out << "        - '" << trait << "'\n";
  }
  // A file without providers is valid: nova-compute logs it and goes on.
  if (!any) out << "providers: []\n";
}

void PrintK8sLabels(const std::vector<HostTraits>& hosts, std::ostream& out) {
  for (const HostTraits& h : hosts) {
    out << h.host_id << " "
        << absl::StrJoin(h.labels, " ",
                         [](std::string* o, const std::pair<std::string, std::string>& l) {
                           absl::StrAppend(o, l.first, "=", l.second);
                         })
        << "\n";
  }
}

}  // namespace cosched::cli
