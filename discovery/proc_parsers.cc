#include "discovery/proc_parsers.h"

#include <cctype>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cosched::discovery {
namespace {

using Kind = DiscoveredThread::Kind;

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Splits a QEMU option value at single commas; ",," stands for a comma.
std::vector<std::string> SplitQemuOptions(absl::string_view value) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] != ',') {
      parts.back().push_back(value[i]);
    } else if (i + 1 < value.size() && value[i + 1] == ',') {
      parts.back().push_back(',');
      ++i;
    } else {
      parts.emplace_back();
    }
  }
  return parts;
}

// The guest name in a -name value: "guest=NAME" anywhere, or a first part
// without '=' (QEMU's implied key).
std::string GuestName(absl::string_view value) {
  std::vector<std::string> parts = SplitQemuOptions(value);
  for (size_t i = 0; i < parts.size(); ++i) {
    absl::string_view part = parts[i];
    if (absl::ConsumePrefix(&part, "guest=")) return std::string(part);
    if (i == 0 && !absl::StrContains(part, '=')) return std::string(part);
  }
  return "";
}

}  // namespace

bool IsQemuBinary(absl::string_view argv0) {
  size_t slash = argv0.rfind('/');
  absl::string_view base = slash == absl::string_view::npos ? argv0 : argv0.substr(slash + 1);
  return absl::StartsWith(base, "qemu-system-") || absl::StartsWith(base, "qemu-kvm");
}

namespace {

std::vector<absl::string_view> SplitCommandLine(absl::string_view cmdline) {
  // A trailing NUL ends the last argument; it does not start an empty one.
  absl::ConsumeSuffix(&cmdline, absl::string_view("\0", 1));
  if (cmdline.empty()) return {};
  return absl::StrSplit(cmdline, absl::ByChar('\0'));
}

}  // namespace

QemuCommandLine ParseQemuArguments(absl::string_view cmdline) {
  std::vector<absl::string_view> argv = SplitCommandLine(cmdline);
  QemuCommandLine result;
  for (size_t i = 1; i + 1 < argv.size(); ++i) {
    absl::string_view option = argv[i];
    // QEMU accepts "--name" as well as "-name".
    if (absl::StartsWith(option, "--")) option.remove_prefix(1);
    if (option == "-name") {
      result.name = GuestName(argv[++i]);
    } else if (option == "-uuid") {
      result.uuid = absl::AsciiStrToLower(argv[++i]);
    }
  }
  return result;
}

std::optional<QemuCommandLine> ParseQemuCommandLine(absl::string_view cmdline) {
  std::vector<absl::string_view> argv = SplitCommandLine(cmdline);
  if (argv.empty() || !IsQemuBinary(argv[0])) return std::nullopt;
  return ParseQemuArguments(cmdline);
}

Kind ClassifyQemuThread(absl::string_view comm, int qemu_pid) {
  absl::string_view rest = comm;
  if (absl::ConsumePrefix(&rest, "CPU ")) {
    size_t slash = rest.find('/');
    if (slash != absl::string_view::npos && AllDigits(rest.substr(0, slash))) {
      absl::string_view accel = rest.substr(slash + 1);
      if (accel == "KVM" || accel == "TCG") return Kind::kVcpu;
    }
  }
  if (absl::StartsWith(comm, "IO ") && comm.size() > 3) return Kind::kIothread;
  if (comm == VhostWorkerName(qemu_pid)) return Kind::kVhostWorker;
  return Kind::kEmulator;
}

std::string VhostWorkerName(int qemu_pid) { return absl::StrCat("vhost-", qemu_pid); }

absl::StatusOr<ProcStat> ParseProcStat(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a /proc/<pid>/stat line (", why, "): '", text.substr(0, 80), "'"));
  };
  size_t open = text.find(" (");
  size_t close = text.rfind(')');
  if (open == absl::string_view::npos || close == absl::string_view::npos || close < open) {
    return bad("no (comm)");
  }
  ProcStat stat;
  if (!absl::SimpleAtoi(text.substr(0, open), &stat.pid)) return bad("pid");
  stat.comm = std::string(text.substr(open + 2, close - open - 2));
  std::vector<absl::string_view> fields =
      absl::StrSplit(text.substr(close + 1), absl::ByChar(' '), absl::SkipEmpty());
  if (fields.size() < 2 || fields[0].size() != 1) return bad("state");
  stat.state = fields[0][0];
  if (!absl::SimpleAtoi(fields[1], &stat.ppid)) return bad("ppid");
  return stat;
}

absl::StatusOr<std::vector<CgroupEntry>> ParseCgroupFile(absl::string_view text) {
  std::vector<CgroupEntry> entries;
  for (absl::string_view line : absl::StrSplit(text, absl::ByChar('\n'), absl::SkipEmpty())) {
    // The path may contain ':'; only the first two separate fields.
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    CgroupEntry entry;
    if (fields.size() != 3 || !absl::SimpleAtoi(fields[0], &entry.hierarchy) ||
        !absl::StartsWith(fields[2], "/")) {
      return absl::InvalidArgumentError(absl::StrCat("bad cgroup line '", line, "'"));
    }
    if (!fields[1].empty()) {
      entry.controllers = absl::StrSplit(fields[1], absl::ByChar(','));
    }
    entry.path = std::string(fields[2]);
    entries.push_back(std::move(entry));
  }
  return entries;
}

std::string PlacementCgroup(const std::vector<CgroupEntry>& entries) {
  const CgroupEntry* unified = nullptr;
  const CgroupEntry* cpu = nullptr;
  for (const CgroupEntry& e : entries) {
    if (e.hierarchy == 0 && e.controllers.empty()) unified = &e;
    for (const std::string& c : e.controllers) {
      if (c == "cpu") cpu = &e;
    }
  }
  if (unified != nullptr && unified->path != "/") return unified->path;
  if (cpu != nullptr) return cpu->path;
  return unified != nullptr ? unified->path : "";
}

std::optional<std::string> VmCgroup(absl::string_view path,
                                    const std::vector<std::string>& vm_parents) {
  std::vector<absl::string_view> parts = absl::StrSplit(path, absl::ByChar('/'), absl::SkipEmpty());
  auto inner = [](absl::string_view name) {
    if (name == "emulator" || name == "libvirt") return true;
    for (absl::string_view prefix : {"vcpu", "iothread"}) {
      absl::string_view rest = name;
      if (absl::ConsumePrefix(&rest, prefix) && AllDigits(rest)) return true;
    }
    return false;
  };
  while (!parts.empty() && inner(parts.back())) parts.pop_back();
  std::string vm = absl::StrCat("/", absl::StrJoin(parts, "/"));
  for (const std::string& parent : vm_parents) {
    std::string prefix = absl::StrCat(absl::StripSuffix(parent, "/"), "/");
    if (absl::StartsWith(vm, prefix) && vm.size() > prefix.size()) return vm;
  }
  return std::nullopt;
}

}  // namespace cosched::discovery
