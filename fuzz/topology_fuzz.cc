// Fuzzes the parsers of CPU topology text: the kernel's CPU lists (sysfs,
// as the agent, `csctl analyze` and scenarios read them), the topology file
// of `csctl analyze`, and the agent's whole sysfs topology walk over a fake
// sysfs whose files hold the input.
//
// Input: NUL-separated parts. Part 0 is given to every parser and is the
// fake sysfs's cpu/online; then, per CPU 0, 1, ...: thread_siblings_list,
// core_id and physical_package_id; then smt/active.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "host/pseudo_fs.h"
#include "host/testing/pseudo_fs_fake.h"
#include "common/cpu_list.h"
#include "host/topology.h"
#include "policy/scenario.h"
#include "telemetry/topology.h"

namespace cosched {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void FuzzCpuLists(absl::string_view text) {
  auto list = ParseCpuList(text);
  if (list.ok()) Check(std::adjacent_find(list->begin(), list->end(), std::greater_equal<int>()) == list->end());
  // The scenario's pins add only the field's name to the same rules.
  auto scenario_list = policy::ParseCpuList("pin.cpus", text);
  Check(scenario_list.ok() == (list.ok() && !list->empty()));

  auto topology = telemetry::CpuTopology::Parse(std::string_view(text.data(), text.size()),
                                                "topo.txt");
  if (topology.ok()) {
    // Every CPU is in exactly the core that claims it.
    for (int cpu = 0; cpu < topology->num_cpus(); ++cpu) {
      int core = topology->core_of(cpu);
      Check(core >= 0 && core < topology->num_cores());
      auto cpus = topology->core_cpus(core);
      Check(std::find(cpus.begin(), cpus.end(), cpu) != cpus.end());
    }
  }
}

void FuzzSysfs(const std::vector<absl::string_view>& parts) {
  constexpr char kRoot[] = "/sys";
  const std::string cpu_dir = absl::StrCat(kRoot, "/devices/system/cpu");
  host::FakePseudoFs fs;
  fs.SetFile(cpu_dir + "/online", parts[0]);
  size_t next = 1;
  for (int cpu = 0; next + 3 <= parts.size(); ++cpu, next += 3) {
    const std::string dir = absl::StrCat(cpu_dir, "/cpu", cpu, "/topology");
    fs.SetFile(dir + "/thread_siblings_list", parts[next]);
    fs.SetFile(dir + "/core_id", parts[next + 1]);
    fs.SetFile(dir + "/physical_package_id", parts[next + 2]);
  }
  if (next < parts.size()) fs.SetFile(cpu_dir + "/smt/active", parts[next]);

  auto topology = host::ReadTopology(fs, kRoot);
  if (!topology.ok()) return;
  std::vector<int> seen;
  for (const auto& core : topology->cores()) {
    Check(core.cpus_size() > 0);
    seen.insert(seen.end(), core.cpus().begin(), core.cpus().end());
  }
  std::sort(seen.begin(), seen.end());
  Check(std::adjacent_find(seen.begin(), seen.end()) == seen.end());
  (void)host::ReadSmtActive(fs, kRoot, *topology);
}

}  // namespace
}  // namespace cosched

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<absl::string_view> parts = absl::StrSplit(input, absl::ByChar('\0'));
  cosched::FuzzCpuLists(parts[0]);
  cosched::FuzzSysfs(parts);
  return 0;
}
