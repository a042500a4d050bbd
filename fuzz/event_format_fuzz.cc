// Fuzzes the parsers of tracefs format texts (events/header_page and
// events/sched/sched_switch/format, telemetry/ring_buffer.h), and reads a
// page with whatever layouts they accept: a layout that passes validation
// must never make the page reader read outside the page.
//
// Input: header_page text, NUL, format text, NUL, page bytes.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "telemetry/ring_buffer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cosched::telemetry;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t first = input.find('\0');
  std::string_view header_text = input.substr(0, first);
  std::string_view rest = first == input.npos ? std::string_view() : input.substr(first + 1);
  size_t second = rest.find('\0');
  std::string_view format_text = rest.substr(0, second);
  std::string_view page_bytes = second == rest.npos ? std::string_view() : rest.substr(second + 1);

  (void)ParseEventFormat(header_text);
  auto header = PageHeaderLayout::FromHeaderPage(header_text);
  auto layout = SchedSwitchLayout::FromFormat(format_text);
  if (!header.ok() || !layout.ok()) return 0;
  // Copied so that ASan sees exactly the page's bytes.
  std::vector<uint8_t> page(page_bytes.begin(), page_bytes.end());
  RingBufferPageReader reader(*header, *layout);
  (void)reader.ReadPage(std::span<const uint8_t>(page.data(), page.size()), 0,
                        [](const SchedSwitch&, const SchedSwitchComms&) {});
  return 0;
}
