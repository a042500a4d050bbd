#include "telemetry/trace_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cosched::telemetry {
namespace {

TraceLine Parse(std::string_view line, TraceLineKind expected = TraceLineKind::kSchedSwitch) {
  TraceLine out;
  EXPECT_EQ(ParseTraceLine(line, &out), expected) << line;
  return out;
}

TEST(ParseTraceLine, ReadsTheIssueExample) {
  TraceLine l = Parse(
      "  <idle>-0     [001] d..2.  123.456789: sched_switch: prev_comm=swapper/1 prev_pid=0 "
      "prev_prio=120 prev_state=R ==> next_comm=CPU 1/KVM next_pid=73 next_prio=120");
  EXPECT_EQ(l.event.ts_ns, 123'456'789'000);
  EXPECT_EQ(l.event.cpu, 1);
  EXPECT_EQ(l.event.prev_tid, 0);
  EXPECT_EQ(l.event.next_tid, 73);
  EXPECT_EQ(l.event.prev_state, 0u);
  EXPECT_EQ(l.comms.prev, "swapper/1");
  EXPECT_EQ(l.comms.next, "CPU 1/KVM");
  EXPECT_EQ(l.prev_tgid, -1);
}

TEST(ParseTraceLine, ReadsNamesWithSpacesBracketsAndMarkers) {
  TraceLine l = Parse(
      "   odd [1] name-7       (    7) [002] d..2. 5.123456789: sched_switch: prev_comm=odd [1] name "
      "prev_pid=7 prev_prio=120 prev_state=S|D ==> next_comm=a ==> b next_pid=9 next_prio=-1\r");
  EXPECT_EQ(l.event.cpu, 2);
  EXPECT_EQ(l.event.ts_ns, 5'123'456'789);
  EXPECT_EQ(l.event.prev_tid, 7);
  EXPECT_EQ(l.event.prev_state, 0x3u);
  EXPECT_EQ(l.prev_tgid, 7);
  EXPECT_EQ(l.comms.prev, "odd [1] name");
  EXPECT_EQ(l.comms.next, "a ==> b");
  EXPECT_EQ(l.event.next_tid, 9);

  // A name holding " prev_pid=" falls back to the last marker.
  TraceLine tricky = Parse(
      "  x-5 [000] 1.000000: sched_switch: prev_comm=a prev_pid=1 prev_pid=5 prev_prio=120 "
      "prev_state=R+ ==> next_comm=b next_pid=1 next_pid=6 next_prio=120");
  EXPECT_EQ(tricky.comms.prev, "a prev_pid=1");
  EXPECT_EQ(tricky.event.prev_tid, 5);
  EXPECT_EQ(tricky.event.prev_state, kTaskStatePreempted);
  EXPECT_EQ(tricky.comms.next, "b next_pid=1");
  EXPECT_EQ(tricky.event.next_tid, 6);
}

TEST(ParseTraceLine, OptionalColumnsAndClocks) {
  // No flags column (irq-info off), unknown tgid, a counter clock.
  TraceLine l = Parse(
      "  sh-1 (-------) [003] 987654321: sched_switch: prev_comm=sh prev_pid=1 prev_prio=120 "
      "prev_state=I ==> next_comm=swapper/3 next_pid=0 next_prio=120");
  EXPECT_EQ(l.event.cpu, 3);
  EXPECT_EQ(l.event.ts_ns, 987654321);
  EXPECT_EQ(l.prev_tgid, -1);
  EXPECT_EQ(l.event.prev_state, 0x80u);
  // trace_pipe lines look the same; three fraction digits.
  TraceLine ms = Parse(
      "  kworker/0:1-12 [000] .... 7.5: sched_switch: prev_comm=kworker/0:1 prev_pid=12 "
      "prev_prio=120 prev_state=I ==> next_comm=swapper/0 next_pid=0 next_prio=120");
  EXPECT_EQ(ms.event.ts_ns, 7'500'000'000);
}

TEST(ParseTraceLine, SkipsOtherLines) {
  for (std::string_view line :
       {"", "# tracer: nop", "##### CPU 2 buffer started ####",
        "  sh-1 [000] d..2. 1.000000: sched_wakeup: comm=sh pid=1 prio=120 target_cpu=000",
        "garbage", "   "}) {
    Parse(line, TraceLineKind::kOther);
  }
}

TEST(ParseTraceLine, CountsMalformedSchedSwitchLines) {
  for (std::string_view line : {
           "  sh-1 [000] d..2. 1.000000: sched_switch: truncated",
           "  sh-1 [000] d..2. 1.000000: sched_switch: prev_comm=sh prev_pid=x prev_prio=120 "
           "prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
           "  sh-1 [000] d..2. 1.0000000000: sched_switch: prev_comm=sh prev_pid=1 prev_prio=120 "
           "prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
           "  sh-1 [0x0] d..2. 1.0: sched_switch: prev_comm=sh prev_pid=1 prev_prio=120 "
           "prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
           "  sh-1 d..2. 1.0: sched_switch: prev_comm=sh prev_pid=1 prev_prio=120 "
           "prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
           "  sh-1 [000] d..2. 1.0: sched_switch: prev_comm=sh prev_pid=1 prev_prio=120 "
           "prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120 extra",
           "[000] 1.0: sched_switch: prev_comm=sh prev_pid=99999999999 prev_prio=1 prev_state=S "
           "==> next_comm=x next_pid=0 next_prio=1",
           // Found by trace_text_fuzz: digit runs that overflowed int64 while
           // being added up (UBSan), before their length was checked.
           "  sh-1 [000] d..2. 1.1552777777777777777777: sched_switch: prev_comm=sh prev_pid=1 "
           "prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
           "  sh-1 [000] d..2. 99999999999999999999999.5: sched_switch: prev_comm=sh prev_pid=1 "
           "prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
           ": sched_switch: x",
       }) {
    Parse(line, TraceLineKind::kMalformed);
  }
}

TEST(ParseTraceLine, ReadsLostEventNotes) {
  TraceLine l = Parse("CPU:3 [LOST 120 EVENTS]", TraceLineKind::kLostEvents);
  EXPECT_EQ(l.lost_cpu, 3);
  EXPECT_EQ(l.lost_events, 120);
}

TEST(TraceTextReader, JoinsLinesAcrossChunksAndCounts) {
  const std::string text =
      "# tracer: nop\n"
      "  a-1 [000] d..2. 1.000001: sched_switch: prev_comm=a prev_pid=1 prev_prio=120 "
      "prev_state=S ==> next_comm=b next_pid=2 next_prio=120\n"
      "  b-2 [000] d..2. 1.000002: sched_switch: broken\n"
      "CPU:0 [LOST 5 EVENTS]\n"
      "  b-2 [000] d..2. 1.000003: sched_switch: prev_comm=b prev_pid=2 prev_prio=120 "
      "prev_state=S ==> next_comm=a next_pid=1 next_prio=120";  // no final newline
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{64}, text.size()}) {
    TraceTextReader reader;
    std::vector<SchedSwitch> events;
    auto on_line = [&](const TraceLine& l) {
      if (l.kind == TraceLineKind::kSchedSwitch) events.push_back(l.event);
    };
    for (size_t i = 0; i < text.size(); i += chunk)
      reader.Feed(std::string_view(text).substr(i, chunk), on_line);
    reader.Finish(on_line);
    ASSERT_EQ(events.size(), 2u) << "chunk " << chunk;
    EXPECT_EQ(events[1].ts_ns, 1'000'003'000);
    EXPECT_EQ(reader.counts().lines, 5);
    EXPECT_EQ(reader.counts().events, 2);
    EXPECT_EQ(reader.counts().malformed, 1);
    EXPECT_EQ(reader.counts().first_malformed_line, 3);
    EXPECT_EQ(reader.counts().lost_events, 5);
  }
}

}  // namespace
}  // namespace cosched::telemetry
