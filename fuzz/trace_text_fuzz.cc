// Fuzzes the tracefs text parser (telemetry/trace_text.h) as `csctl analyze`
// uses it: the text is fed in chunks to a TraceTextReader, and the events go
// through the sibling-share computation. The same text is also read as the
// command's --threads file ("TID VM_ID" and "tgid:TGID VM_ID" lines,
// cli/analyze.h).
//
// Input: byte 0 sets the chunk size (1..256), the rest is the trace text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cli/analyze.h"
#include "fuzz/sibling_share_check.h"
#include "telemetry/trace_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cosched;
  if (size == 0) return 0;
  const size_t chunk = size_t{data[0]} + 1;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  // One line on its own, as a test would parse it.
  telemetry::TraceLine line;
  telemetry::ParseTraceLine(text.substr(0, text.find('\n')), &line);

  telemetry::SiblingShareCalculator calculator = fuzz::FuzzCalculator();
  telemetry::TraceTextReader reader;
  int64_t seen = 0;
  auto on_line = [&](const telemetry::TraceLine& l) {
    if (l.kind != telemetry::TraceLineKind::kSchedSwitch) return;
    calculator.Add(l.event);
    // Windows now and then, as the live collector takes them.
    if (++seen % 16 == 0) fuzz::CheckWindow(calculator.TakeWindow());
  };
  for (size_t pos = 0; pos < text.size(); pos += chunk) reader.Feed(text.substr(pos, chunk), on_line);
  reader.Finish(on_line);
  fuzz::CheckWindow(calculator.TakeWindow());

  const telemetry::TraceTextCounts& counts = reader.counts();
  if (counts.events + counts.malformed > counts.lines || counts.events != seen) std::abort();

  auto threads = cli::ParseThreadsFile(text, "threads.txt");
  if (threads.ok()) {
    for (const auto* ids : {&threads->tids, &threads->tgids}) {
      for (const auto& [id, vm] : *ids)
        if (id <= 0 || vm.empty() || vm == "host") std::abort();
    }
  }
  return 0;
}
