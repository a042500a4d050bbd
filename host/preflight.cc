#include "host/preflight.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "host/known_bad.h"

namespace cosched::host {
namespace {

// Longest value a probe keeps: sysfs files are short, and a garbage file
// must not blow up the Register message.
constexpr size_t kMaxValue = 256;

// Bounded and printable ASCII only: the value is shown in csctl and logs.
std::string Bounded(absl::string_view value) {
  std::string out(value.substr(0, kMaxValue));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return out;
}

// The file's first line, trimmed and bounded; empty when unreadable.
std::string FirstLine(const PseudoFs& fs, const std::string& path) {
  absl::StatusOr<std::string> text = fs.ReadFile(path);
  if (!text.ok()) return "";
  return Bounded(absl::StripAsciiWhitespace(
      absl::string_view(*text).substr(0, text->find('\n'))));
}

// The host is a guest: the CPU's hypervisor flag (x86 cpuinfo), a
// hypervisor's sysfs node, or a DMI vendor/product of a known hypervisor.
void ReadNested(const PseudoFs& fs, const PreflightPaths& paths, v1::HostPreflight& out) {
  std::vector<std::string> signs;
  if (absl::StatusOr<std::string> cpuinfo = fs.ReadFile(paths.procfs_root + "/cpuinfo");
      cpuinfo.ok()) {
    for (absl::string_view line : absl::StrSplit(*cpuinfo, '\n')) {
      if (!absl::StartsWith(line, "flags")) continue;
      for (absl::string_view flag : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
        if (flag == "hypervisor") {
          signs.push_back("cpu flag 'hypervisor'");
          break;
        }
      }
      break;  // every CPU lists the same flags
    }
  }
  if (std::string type = FirstLine(fs, paths.sysfs_root + "/hypervisor/type"); !type.empty()) {
    signs.push_back(absl::StrCat("/sys/hypervisor/type '", type, "'"));
  }
  // DMI strings of virtual machines (a physical server never shows these;
  // "Microsoft Corporation" alone would also match Surface laptops, so
  // Hyper-V is recognised by its product name).
  struct GuestDmi {
    const char* file;
    absl::string_view value;
  };
  static constexpr GuestDmi kGuestDmi[] = {
      {"sys_vendor", "QEMU"},          {"sys_vendor", "VMware"},
      {"sys_vendor", "innotek"},       {"sys_vendor", "Xen"},
      {"sys_vendor", "Amazon EC2"},    {"product_name", "KVM"},
      {"product_name", "Virtual Machine"}, {"product_name", "VirtualBox"},
      {"product_name", "HVM domU"},
  };
  for (const char* file : {"sys_vendor", "product_name"}) {
    const std::string value = FirstLine(fs, paths.sysfs_root + "/class/dmi/id/" + file);
    if (value.empty()) continue;
    const std::string lower = absl::AsciiStrToLower(value);
    for (const GuestDmi& guest : kGuestDmi) {
      if (absl::string_view(guest.file) == file &&
          absl::StrContains(lower, absl::AsciiStrToLower(guest.value))) {
        signs.push_back(absl::StrCat("DMI ", file, " '", value, "'"));
        break;
      }
    }
  }
  out.set_nested(!signs.empty());
  out.set_nested_detail(absl::StrJoin(signs, ", "));
}

void ReadVulnerabilities(const PseudoFs& fs, const PreflightPaths& paths,
                         v1::HostPreflight& out) {
  const std::string dir = paths.sysfs_root + "/devices/system/cpu/vulnerabilities";
  absl::StatusOr<std::vector<std::string>> names = fs.ListDirectory(dir);
  if (!names.ok()) return;
  std::sort(names->begin(), names->end());
  for (const std::string& name : *names) {
    const std::string status = FirstLine(fs, dir + "/" + name);
    if (status.empty()) continue;
    v1::CpuVulnerability* v = out.add_vulnerabilities();
    v->set_name(name.substr(0, kMaxValue));
    v->set_status(status);
    v->set_affected(!absl::StartsWithIgnoreCase(status, "Not affected"));
    v->set_smt_relevant(SmtRelevantVulnerability(name));
  }
}

}  // namespace

absl::Status ValidateHazardNames(absl::string_view field, const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] != kHazardSchedExt && names[i] != kHazardNested &&
        !IsKnownBadHazardName(names[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", i, "] '", names[i], "' is not a hazard; known: ", kHazardSchedExt, ", ",
          kHazardNested, ", ", kHazardKnownBadPrefix, "ID (an entry of the known-bad list)"));
    }
  }
  return absl::OkStatus();
}

bool SmtRelevantVulnerability(absl::string_view name) {
  return name == "l1tf" || name == "mds" || name == "tsx_async_abort" ||
         name == "mmio_stale_data";
}

std::string LibvirtSchedCore(absl::string_view qemu_conf) {
  // libvirt's config syntax: `name = value`, '#' to the end of a line is a
  // comment, strings in double quotes; a later setting wins.
  std::string value = "none";
  for (absl::string_view line : absl::StrSplit(qemu_conf, '\n')) {
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (!absl::ConsumePrefix(&line, "sched_core")) continue;
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "=")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (line.size() >= 2 && line.front() == '"' && line.back() == '"') {
      line = line.substr(1, line.size() - 2);
    }
    value = Bounded(line);
  }
  return value;
}

void ReadSchedExt(const PseudoFs& fs, const PreflightPaths& paths, v1::HostPreflight& out) {
  out.set_sched_ext_state(FirstLine(fs, paths.sched_ext_dir + "/state"));
  out.set_sched_ext_ops(out.sched_ext_state().empty() || out.sched_ext_state() == "disabled"
                            ? ""
                            : FirstLine(fs, paths.sched_ext_dir + "/root/ops"));
}

v1::HostPreflight ReadPreflight(const PseudoFs& fs, const PreflightPaths& paths) {
  v1::HostPreflight out;
  out.set_kernel_release(FirstLine(fs, paths.procfs_root + "/sys/kernel/osrelease"));
  out.set_kernel_version(UpstreamKernelVersion(
      out.kernel_release(), FirstLine(fs, paths.procfs_root + "/sys/kernel/version"),
      FirstLine(fs, paths.procfs_root + "/version_signature")));
  out.set_smt_control(FirstLine(fs, paths.sysfs_root + "/devices/system/cpu/smt/control"));
  ReadSchedExt(fs, paths, out);
  ReadNested(fs, paths, out);
  ReadVulnerabilities(fs, paths, out);
  if (absl::StatusOr<std::string> stat = fs.ReadFile(paths.cgroupfs_root + "/cpu.stat");
      stat.ok()) {
    out.set_cgroup_forced_idle(absl::StrContains(*stat, "core_sched.force_idle_usec"));
  }
  if (absl::StatusOr<std::string> conf = fs.ReadFile(paths.libvirt_qemu_conf); conf.ok()) {
    out.set_libvirt_sched_core(LibvirtSchedCore(*conf));
  }
  return out;
}

void FindHazards(const HazardRules& rules, v1::HostPreflight& preflight) {
  preflight.clear_hazards();
  preflight.clear_allowed_hazards();
  auto add = [&](const std::string& name, std::string detail) {
    v1::Hazard hazard;
    hazard.set_name(name);
    hazard.set_detail(std::move(detail));
    *(rules.allow.count(name) ? preflight.add_allowed_hazards() : preflight.add_hazards()) =
        std::move(hazard);
  };
  const std::string& state = preflight.sched_ext_state();
  if (!state.empty() && state != "disabled") {
    add(kHazardSchedExt,
        absl::StrCat("sched_ext state '", state, "'",
                     preflight.sched_ext_ops().empty()
                         ? std::string()
                         : absl::StrCat(", scheduler '", preflight.sched_ext_ops(), "'"),
                     ": sched_ext with core-scheduling cookies can hang an SMT host "
                     "(sched-ext/scx issue 3715)"));
  }
  if (rules.nested && preflight.nested()) {
    add(kHazardNested, absl::StrCat("the host is itself a guest (", preflight.nested_detail(),
                                    ") and nested_is_hazard is set"));
  }
  for (const v1::KnownBadEntry& entry : rules.known_bad) {
    if (!KnownBadMatches(entry, preflight)) continue;
    std::string covers;
    if (!entry.kernel_from().empty() || !entry.kernel_before().empty()) {
      covers = absl::StrCat("kernel ", preflight.kernel_version(), " is in [",
                            entry.kernel_from().empty() ? "any" : entry.kernel_from(), ", ",
                            entry.kernel_before().empty() ? "any" : entry.kernel_before(), ")");
    }
    if (entry.nested_only()) {
      absl::StrAppend(&covers, covers.empty() ? "" : " on ", "a host that is itself a guest");
    }
    add(absl::StrCat(kHazardKnownBadPrefix, entry.id()),
        absl::StrCat("known-bad entry '", entry.id(), "': ", covers, ": ", entry.reason(),
                     entry.source().empty() ? "" : absl::StrCat(" (", entry.source(), ")")));
  }
}

}  // namespace cosched::host
