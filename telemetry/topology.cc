#include "telemetry/topology.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/cpu_list.h"

namespace cosched::telemetry {
namespace {

// SMT-8 (POWER) is the most any CPU has; csd's topology check agrees.
constexpr size_t kMaxThreadsPerCore = 8;

absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

absl::StatusOr<CpuTopology> CpuTopology::FromSiblingLists(const std::vector<std::vector<int>>& lists) {
  const int n = static_cast<int>(lists.size());
  CpuTopology t;
  t.core_of_.assign(n, -1);
  t.core_begin_.push_back(0);
  for (int cpu = 0; cpu < n; ++cpu) {
    std::vector<int> list = lists[cpu];
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    if (!std::binary_search(list.begin(), list.end(), cpu))
      return absl::InvalidArgumentError(absl::StrCat("cpu ", cpu, ": its siblings list leaves it out"));
    if (list.back() >= n)
      return absl::InvalidArgumentError(
          absl::StrCat("cpu ", cpu, ": sibling ", list.back(), " is not among the ", n, " CPUs"));
    if (t.core_of_[cpu] >= 0) {
      std::span<const int> core = t.core_cpus(t.core_of_[cpu]);
      if (!std::equal(core.begin(), core.end(), list.begin(), list.end()))
        return absl::InvalidArgumentError(absl::StrCat(
            "cpu ", cpu, ": its siblings list disagrees with that of cpu ", core.front()));
      continue;
    }
    if (list.front() != cpu)  // a lower sibling would have claimed it already
      return absl::InvalidArgumentError(absl::StrCat(
          "cpu ", cpu, ": its siblings list disagrees with that of cpu ", list.front()));
    const int core = t.num_cores();
    for (int sib : list) {
      if (t.core_of_[sib] >= 0)
        return absl::InvalidArgumentError(absl::StrCat(
            "cpu ", cpu, ": sibling ", sib, " already belongs to the core of cpu ",
            t.core_cpus(t.core_of_[sib]).front()));
      t.core_of_[sib] = core;
      t.core_cpu_list_.push_back(sib);
    }
    t.core_begin_.push_back(static_cast<int>(t.core_cpu_list_.size()));
  }
  return t;
}

absl::StatusOr<CpuTopology> CpuTopology::Parse(std::string_view text, std::string_view source) {
  std::vector<std::vector<int>> lists;
  std::vector<int> line_of_cpu;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    if (absl::StripAsciiWhitespace(Absl(line)).empty()) {
      // Blank lines would shift every later CPU; only trailing ones are fine.
      if (absl::StripAsciiWhitespace(Absl(text.substr(pos))).empty()) break;
      return absl::InvalidArgumentError(absl::StrCat(
          Absl(source), ":", line_no, ": empty line (one line per CPU, in CPU order)"));
    }
    auto list = ParseCpuList(Absl(line));
    if (!list.ok())
      return absl::InvalidArgumentError(absl::StrCat(Absl(source), ":", line_no, ": cpu ",
                                                     lists.size(), ": ", list.status().message()));
    // Checked line by line: lists of thousands of CPUs on every line would
    // otherwise cost lines x CPUs before FromSiblingLists refuses them.
    if (list->size() > kMaxThreadsPerCore)
      return absl::InvalidArgumentError(absl::StrCat(
          Absl(source), ":", line_no, ": cpu ", lists.size(), ": ", list->size(),
          " siblings; a core has at most ", kMaxThreadsPerCore, " threads"));
    lists.push_back(std::move(*list));
    line_of_cpu.push_back(line_no);
  }
  if (lists.empty())
    return absl::InvalidArgumentError(absl::StrCat(Absl(source), ": no CPUs"));
  auto topology = FromSiblingLists(lists);
  if (!topology.ok()) {
    // Name the line of the CPU the message starts with.
    std::string_view msg(topology.status().message().data(), topology.status().message().size());
    int cpu = -1;
    if (msg.starts_with("cpu ")) {
      std::string_view num = msg.substr(4, msg.find(':') - 4);
      std::from_chars(num.data(), num.data() + num.size(), cpu);
    }
    int line = cpu >= 0 && cpu < static_cast<int>(line_of_cpu.size()) ? line_of_cpu[cpu] : 0;
    return absl::InvalidArgumentError(
        line > 0 ? absl::StrCat(Absl(source), ":", line, ": ", Absl(msg))
                 : absl::StrCat(Absl(source), ": ", Absl(msg)));
  }
  return topology;
}

CpuTopology CpuTopology::NoSmt(int num_cpus) {
  std::vector<std::vector<int>> lists(num_cpus);
  for (int c = 0; c < num_cpus; ++c) lists[c] = {c};
  return *FromSiblingLists(lists);
}

}  // namespace cosched::telemetry
