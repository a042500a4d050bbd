#include "telemetry/ring_buffer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/telemetry/trace_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace cosched::telemetry {
namespace {

using testing::EncodeSchedSwitch;
using testing::kHeaderPage;
using testing::kSchedSwitchFormat;
using testing::PageBuilder;

struct Read {
  std::vector<SchedSwitch> events;
  std::vector<std::string> prev_comms, next_comms;
};

Read ReadAll(RingBufferPageReader& reader, const std::vector<uint8_t>& page, int cpu,
             absl::Status* status = nullptr) {
  Read r;
  absl::Status s = reader.ReadPage(page, cpu, [&](const SchedSwitch& ev, const SchedSwitchComms& c) {
    r.events.push_back(ev);
    r.prev_comms.emplace_back(c.prev);
    r.next_comms.emplace_back(c.next);
  });
  if (status != nullptr) {
    *status = s;
  } else {
    EXPECT_OK(s);
  }
  return r;
}

TEST(ParseEventFormat, ReadsFieldsAndId) {
  auto format = ParseEventFormat(kSchedSwitchFormat);
  ASSERT_OK(format);
  EXPECT_EQ(format->name, "sched_switch");
  EXPECT_EQ(format->id, 316);
  const FormatField* comm = format->Find("next_comm");
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->type, "char[16]");
  EXPECT_EQ(comm->offset, 40u);
  EXPECT_EQ(comm->size, 16u);
  const FormatField* pid = format->Find("prev_pid");
  ASSERT_NE(pid, nullptr);
  EXPECT_EQ(pid->type, "pid_t");
  EXPECT_TRUE(pid->is_signed);
}

TEST(ParseEventFormat, NamesTheBadLine) {
  auto format = ParseEventFormat("name: x\nID: 1\nformat:\n\tfield:int a;\toffset:zero;\tsize:4;\n");
  ASSERT_FALSE(format.ok());
  EXPECT_NE(format.status().message().find("format line 4"), std::string::npos)
      << format.status();
}

TEST(SchedSwitchLayout, ComesFromTheFormatText) {
  auto layout = SchedSwitchLayout::FromFormat(kSchedSwitchFormat);
  ASSERT_OK(layout);
  EXPECT_EQ(layout->event_id, 316u);
  EXPECT_EQ(layout->prev_pid.offset, 24u);
  EXPECT_EQ(layout->prev_state.size, 8u);
  EXPECT_EQ(layout->next_pid.offset, 56u);
  EXPECT_EQ(layout->min_record_size, 60u);

  EXPECT_FALSE(SchedSwitchLayout::FromFormat("name: sched_wakeup\nID: 3\n").ok());
  EXPECT_FALSE(SchedSwitchLayout::FromFormat(
                   "name: sched_switch\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n")
                   .ok());  // no ID, no pids
}

TEST(PageHeaderLayout, ComesFromHeaderPage) {
  auto header = PageHeaderLayout::FromHeaderPage(kHeaderPage);
  ASSERT_OK(header);
  EXPECT_EQ(header->timestamp.offset, 0u);
  EXPECT_EQ(header->commit.offset, 8u);
  EXPECT_EQ(header->commit.size, 8u);
  EXPECT_EQ(header->data_offset, 16u);
}

class RingBufferPageReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = *SchedSwitchLayout::FromFormat(kSchedSwitchFormat);
    header_ = *PageHeaderLayout::FromHeaderPage(kHeaderPage);
  }
  std::vector<uint8_t> Record(int32_t prev, int32_t next, uint32_t state = 1,
                              std::string_view prev_comm = "CPU 0/KVM",
                              std::string_view next_comm = "swapper/2") {
    SchedSwitch ev;
    ev.prev_tid = prev;
    ev.next_tid = next;
    ev.prev_state = state;
    return EncodeSchedSwitch(layout_, 64, ev, prev_comm, next_comm);
  }
  SchedSwitchLayout layout_;
  PageHeaderLayout header_;
};

TEST_F(RingBufferPageReaderTest, ReadsRecordsWithDeltasExtendsStampsAndPadding) {
  PageBuilder page(1'000'000);
  ASSERT_TRUE(page.AddRecord(10, Record(73, 0, 1, "CPU 1/KVM", "swapper/2")));
  // Another event type in the same buffer.
  std::vector<uint8_t> wakeup(28, 0);
  wakeup[0] = 7;  // common_type 7
  ASSERT_TRUE(page.AddRecord(5, wakeup));
  ASSERT_TRUE(page.AddDiscarded(68));
  // A delta of 2^27 + 3 does not fit 27 bits: a TIME_EXTEND carries it.
  ASSERT_TRUE(page.AddTimeExtend((uint64_t{1} << 27) + 3));
  ASSERT_TRUE(page.AddRecord(0, Record(0, 74, 0)));
  // A record with an explicit length word (type_len 0).
  ASSERT_TRUE(page.AddRecord(100, Record(74, 0, kTaskStatePreempted), /*length_word=*/true));
  // An absolute stamp.
  ASSERT_TRUE(page.AddTimeStamp(5'000'000'000));
  ASSERT_TRUE(page.AddRecord(7, Record(0, 75, 0, "swapper/2", "a-very-long-name-cut")));
  std::vector<uint8_t> bytes = page.Finish(/*pad_end=*/true);

  RingBufferPageReader reader(header_, layout_);
  Read r = ReadAll(reader, bytes, 2);
  ASSERT_EQ(r.events.size(), 4u);
  EXPECT_EQ(r.events[0], (SchedSwitch{1'000'010, 2, 73, 0, 1}));
  EXPECT_EQ(r.prev_comms[0], "CPU 1/KVM");
  EXPECT_EQ(r.next_comms[0], "swapper/2");
  const int64_t after_extend = 1'000'015 + (int64_t{1} << 27) + 3;
  EXPECT_EQ(r.events[1], (SchedSwitch{after_extend, 2, 0, 74, 0}));
  EXPECT_EQ(r.events[2], (SchedSwitch{after_extend + 100, 2, 74, 0, kTaskStatePreempted}));
  EXPECT_EQ(r.events[3], (SchedSwitch{5'000'000'007, 2, 0, 75, 0}));
  EXPECT_EQ(r.next_comms[3], "a-very-long-nam");  // 15 bytes and the NUL
  EXPECT_EQ(reader.counts().sched_switch, 4);
  EXPECT_EQ(reader.counts().other_events, 1);
  EXPECT_EQ(reader.counts().padding, 2);  // the discarded record and the end
  EXPECT_EQ(reader.counts().time_extends, 2);
  EXPECT_EQ(reader.counts().pages_after_loss, 0);
}

TEST_F(RingBufferPageReaderTest, FollowsTheFormatNotFixedOffsets) {
  // A kernel that puts the fields elsewhere, with 4-byte prev_state.
  constexpr std::string_view kMoved = R"(name: sched_switch
ID: 42
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;
	field:unsigned int prev_state;	offset:8;	size:4;	signed:0;
	field:pid_t next_pid;	offset:12;	size:4;	signed:1;
	field:pid_t prev_pid;	offset:16;	size:4;	signed:1;
)";
  auto layout = SchedSwitchLayout::FromFormat(kMoved);
  ASSERT_OK(layout);
  SchedSwitch ev{0, 0, 11, 22, 0x2};
  PageBuilder page(50);
  ASSERT_TRUE(page.AddRecord(1, EncodeSchedSwitch(*layout, 20, ev, "", "")));
  RingBufferPageReader reader(header_, *layout);
  Read r = ReadAll(reader, page.Finish(false, /*missed_events=*/true), 5);
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0], (SchedSwitch{51, 5, 11, 22, 0x2}));
  EXPECT_EQ(r.prev_comms[0], "");
  EXPECT_EQ(reader.counts().pages_after_loss, 1);
}

TEST_F(RingBufferPageReaderTest, RejectsCutPagesWithoutCrashing) {
  PageBuilder page(0);
  ASSERT_TRUE(page.AddRecord(1, Record(1, 2)));
  ASSERT_TRUE(page.AddRecord(1, Record(2, 3)));
  std::vector<uint8_t> bytes = page.Finish();
  RingBufferPageReader reader(header_, layout_);

  // Commit claims more than the page holds.
  std::vector<uint8_t> too_long = bytes;
  testing::Store(&too_long, 8, 5000, 8);
  absl::Status status;
  EXPECT_TRUE(ReadAll(reader, too_long, 0, &status).events.empty());
  EXPECT_FALSE(status.ok());

  // Commit ends inside the second record: the first is delivered.
  std::vector<uint8_t> cut = bytes;
  testing::Store(&cut, 8, 68 + 20, 8);
  Read r = ReadAll(reader, cut, 0, &status);
  EXPECT_EQ(r.events.size(), 1u);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("cpu 0"), std::string::npos) << status;

  // Shorter than the header.
  std::vector<uint8_t> tiny(8, 0);
  ReadAll(reader, tiny, 0, &status);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(reader.counts().malformed_pages, 3);

  // Random bytes never crash.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> junk = bytes;
    for (int k = 0; k < 8; ++k) junk[16 + rng() % 140] = static_cast<uint8_t>(rng());
    ReadAll(reader, junk, 0, &status);
  }
}

TEST_F(RingBufferPageReaderTest, BuildPagesRoundTrips) {
  std::vector<SchedSwitch> events;
  int64_t ts = 10;
  for (int i = 0; i < 500; ++i) {
    ts += i % 50 == 0 ? (int64_t{1} << 30) : 1000 + i;  // some need a TIME_EXTEND
    events.push_back({ts, 1, i, i + 1, 0});
  }
  auto pages = testing::BuildPages(layout_, events);
  EXPECT_GT(pages.size(), 1u);
  RingBufferPageReader reader(header_, layout_);
  std::vector<SchedSwitch> read;
  for (const auto& page : pages) {
    Read r = ReadAll(reader, page, 1);
    read.insert(read.end(), r.events.begin(), r.events.end());
  }
  EXPECT_EQ(read, events);
}

}  // namespace
}  // namespace cosched::telemetry
