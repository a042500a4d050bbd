#include "host/topology.h"

#include <algorithm>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/cpu_list.h"
#include "common/status_macros.h"

namespace cosched::host {
namespace {

absl::StatusOr<std::string> ReadTrimmed(const PseudoFs& fs,
                                        const std::string& path) {
  ASSIGN_OR_RETURN(std::string content, fs.ReadFile(path));
  return std::string(absl::StripAsciiWhitespace(content));
}

absl::StatusOr<int> ReadInt(const PseudoFs& fs, const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadTrimmed(fs, path));
  int value;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected an integer, found \"", text, "\""));
  }
  return value;
}

std::string CpuDir(absl::string_view sysfs_root) {
  return absl::StrCat(sysfs_root, "/devices/system/cpu");
}

}  // namespace

absl::StatusOr<v1::Topology> ReadTopology(const PseudoFs& fs,
                                          absl::string_view sysfs_root) {
  const std::string cpu_dir = CpuDir(sysfs_root);
  const std::string online_path = absl::StrCat(cpu_dir, "/online");
  ASSIGN_OR_RETURN(std::string online_text, fs.ReadFile(online_path));
  absl::StatusOr<std::vector<int>> online = ParseCpuList(online_text);
  if (!online.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(online_path, ": ", online.status().message()));
  }
  if (online->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(online_path, ": no CPU is online"));
  }

  // Keyed by the sibling set, not by core_id: core ids repeat across dies
  // of one package on some machines.
  std::map<std::vector<int>, v1::Core> cores;
  for (int cpu : *online) {
    const std::string dir = absl::StrCat(cpu_dir, "/cpu", cpu, "/topology");
    const std::string siblings_path = absl::StrCat(dir, "/thread_siblings_list");
    ASSIGN_OR_RETURN(std::string siblings_text, fs.ReadFile(siblings_path));
    absl::StatusOr<std::vector<int>> siblings = ParseCpuList(siblings_text);
    if (!siblings.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(siblings_path, ": ", siblings.status().message()));
    }
    if (!std::binary_search(siblings->begin(), siblings->end(), cpu)) {
      return absl::InvalidArgumentError(absl::StrCat(
          siblings_path, ": CPU ", cpu, " is not among its own siblings \"",
          absl::StripAsciiWhitespace(siblings_text), "\""));
    }
    std::vector<int> key;
    for (int sibling : *siblings) {
      if (std::binary_search(online->begin(), online->end(), sibling)) {
        key.push_back(sibling);
      }
    }
    auto [it, inserted] = cores.try_emplace(key);
    if (!inserted) continue;
    ASSIGN_OR_RETURN(int core_id, ReadInt(fs, absl::StrCat(dir, "/core_id")));
    ASSIGN_OR_RETURN(int package_id,
                     ReadInt(fs, absl::StrCat(dir, "/physical_package_id")));
    it->second.set_core_id(core_id);
    it->second.set_package_id(package_id);
    for (int sibling : key) it->second.add_cpus(sibling);
  }

  std::vector<v1::Core> ordered;
  for (auto& [key, core] : cores) ordered.push_back(std::move(core));
  std::sort(ordered.begin(), ordered.end(),
            [](const v1::Core& a, const v1::Core& b) {
              return a.cpus(0) < b.cpus(0);
            });
  // Two cores claiming one CPU means the sibling lists disagree.
  std::vector<int> seen;
  v1::Topology topology;
  for (v1::Core& core : ordered) {
    for (int cpu : core.cpus()) seen.push_back(cpu);
    *topology.add_cores() = std::move(core);
  }
  std::sort(seen.begin(), seen.end());
  if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        cpu_dir, ": the thread_siblings_list files of the CPUs disagree"));
  }
  return topology;
}

absl::StatusOr<bool> ReadSmtActive(const PseudoFs& fs,
                                   absl::string_view sysfs_root,
                                   const v1::Topology& topology) {
  const std::string path = absl::StrCat(CpuDir(sysfs_root), "/smt/active");
  absl::StatusOr<int> active = ReadInt(fs, path);
  if (active.ok()) return *active == 1;
  if (!absl::IsNotFound(active.status())) return active.status();
  return std::any_of(topology.cores().begin(), topology.cores().end(),
                     [](const v1::Core& core) { return core.cpus_size() > 1; });
}

absl::StatusOr<bool> ReadSchedstatsEnabled(const PseudoFs& fs,
                                           absl::string_view procfs_root) {
  const std::string path =
      absl::StrCat(procfs_root, "/sys/kernel/sched_schedstats");
  absl::StatusOr<int> enabled = ReadInt(fs, path);
  if (enabled.ok()) return *enabled == 1;
  if (absl::IsNotFound(enabled.status())) return false;
  return enabled.status();
}

}  // namespace cosched::host
