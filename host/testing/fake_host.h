// The sysfs and procfs files of a fake SMT host, for the tests that run an
// agent on one (they used to write the same files by hand, five times).
#ifndef COSCHED_HOST_TESTING_FAKE_HOST_H_
#define COSCHED_HOST_TESTING_FAKE_HOST_H_

#include <memory>
#include <optional>

#include "host/testing/pseudo_fs_fake.h"

namespace cosched::host {

struct FakeHostShape {
  int cores = 2;
  int threads_per_core = 2;
  // How the kernel numbers siblings: x86's "CPU c and c + cores share a
  // core" (0,2 and 1,3), or adjacent ids (0-1 and 2-3).
  bool interleaved = true;
  // /sys/devices/system/cpu/smt/active; none: the file is absent.
  std::optional<bool> smt_active = true;
  // /proc/sys/kernel/sched_schedstats; none: the file is absent.
  std::optional<bool> schedstats = std::nullopt;
};

// Writes `shape`'s topology into `fs`: cpu/online, each CPU's
// thread_siblings_list, core_id and physical_package_id (one package).
void AddFakeHost(FakePseudoFs& fs, const FakeHostShape& shape = {});

// A new fake pseudo filesystem holding only `shape`'s host.
std::shared_ptr<FakePseudoFs> MakeFakeHost(const FakeHostShape& shape = {});

}  // namespace cosched::host

#endif  // COSCHED_HOST_TESTING_FAKE_HOST_H_
