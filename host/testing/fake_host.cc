#include "host/testing/fake_host.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cosched::host {

void AddFakeHost(FakePseudoFs& fs, const FakeHostShape& shape) {
  const std::string cpu = "/sys/devices/system/cpu";
  const int cpus = shape.cores * shape.threads_per_core;
  fs.SetFile(cpu + "/online", absl::StrCat("0-", cpus - 1, "\n"));
  for (int i = 0; i < cpus; ++i) {
    const int core = shape.interleaved ? i % shape.cores : i / shape.threads_per_core;
    std::vector<int> siblings;
    for (int t = 0; t < shape.threads_per_core; ++t) {
      siblings.push_back(shape.interleaved ? core + t * shape.cores
                                           : core * shape.threads_per_core + t);
    }
    const std::string dir = absl::StrCat(cpu, "/cpu", i, "/topology");
    fs.SetFile(dir + "/thread_siblings_list", absl::StrCat(absl::StrJoin(siblings, ","), "\n"));
    fs.SetFile(dir + "/core_id", absl::StrCat(core, "\n"));
    fs.SetFile(dir + "/physical_package_id", "0\n");
  }
  if (shape.smt_active) fs.SetFile(cpu + "/smt/active", *shape.smt_active ? "1\n" : "0\n");
  if (shape.schedstats) {
    fs.SetFile("/proc/sys/kernel/sched_schedstats", *shape.schedstats ? "1\n" : "0\n");
  }
}

std::shared_ptr<FakePseudoFs> MakeFakeHost(const FakeHostShape& shape) {
  auto fs = std::make_shared<FakePseudoFs>();
  AddFakeHost(*fs, shape);
  return fs;
}

}  // namespace cosched::host
