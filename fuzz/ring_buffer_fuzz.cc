// Fuzzes the reader of binary sched_switch records (telemetry/ring_buffer.h)
// on arbitrary page bytes, with the layouts of a real kernel's format texts,
// then merges the events per core and runs the sibling-share computation on
// them, as the agent's live collector does.
//
// Input: byte 0 picks the page size (64 << (byte & 3): 64..512 bytes, so
// that small inputs hold several pages); the rest is cut into pages, page i
// being of CPU i % 9 (CPU 8 is outside the topology).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "fuzz/sibling_share_check.h"
#include "telemetry/event_merge.h"
#include "telemetry/ring_buffer.h"
#include "tests/telemetry/trace_fixtures.h"

namespace {

struct Layouts {
  cosched::telemetry::PageHeaderLayout header;
  cosched::telemetry::SchedSwitchLayout sched_switch;
};

const Layouts& RealLayouts() {
  static const Layouts layouts = [] {
    namespace t = cosched::telemetry;
    auto header = t::PageHeaderLayout::FromHeaderPage(t::testing::kHeaderPage);
    auto sched_switch = t::SchedSwitchLayout::FromFormat(t::testing::kSchedSwitchFormat);
    if (!header.ok() || !sched_switch.ok()) std::abort();
    return Layouts{*header, *sched_switch};
  }();
  return layouts;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cosched;
  if (size == 0) return 0;
  const size_t page_size = size_t{64} << (data[0] & 3);
  std::span<const uint8_t> pages(data + 1, size - 1);

  constexpr int kCpus = 9;
  telemetry::RingBufferPageReader reader(RealLayouts().header, RealLayouts().sched_switch);
  std::vector<std::vector<telemetry::SchedSwitch>> per_cpu(kCpus);
  int64_t delivered = 0;
  for (size_t i = 0; i * page_size < pages.size(); ++i) {
    const int cpu = static_cast<int>(i % kCpus);
    std::span<const uint8_t> page = pages.subspan(i * page_size);
    if (page.size() > page_size) page = page.first(page_size);
    (void)reader.ReadPage(page, cpu, [&](const telemetry::SchedSwitch& ev,
                                         const telemetry::SchedSwitchComms& comms) {
      if (ev.cpu != cpu || comms.prev.size() > 16 || comms.next.size() > 16) std::abort();
      per_cpu[cpu].push_back(ev);
      ++delivered;
    });
  }
  if (reader.counts().sched_switch != delivered) std::abort();

  // The agent merges per-CPU streams by core before the computation.
  telemetry::SiblingShareCalculator calculator = fuzz::FuzzCalculator();
  telemetry::SchedSwitchMerger merger(calculator.topology());
  for (int cpu = 0; cpu < calculator.topology().num_cpus(); ++cpu) merger.Append(cpu, per_cpu[cpu]);
  merger.EmitUntil(INT64_MAX, [&](const telemetry::SchedSwitch& ev) { calculator.Add(ev); });
  // Events of a CPU outside the topology reach the calculator directly.
  for (const telemetry::SchedSwitch& ev : per_cpu[kCpus - 1]) calculator.Add(ev);
  fuzz::CheckWindow(calculator.TakeWindow());
  return 0;
}
