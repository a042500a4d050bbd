#include "host/process_events.h"

#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>

#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cosched::host {
namespace {

std::vector<char> Datagram(proc_event ev) {
  std::vector<char> buffer(NLMSG_SPACE(sizeof(cn_msg) + sizeof(proc_event)));
  auto* nl = reinterpret_cast<nlmsghdr*>(buffer.data());
  nl->nlmsg_len = NLMSG_LENGTH(sizeof(cn_msg) + sizeof(proc_event));
  nl->nlmsg_type = NLMSG_DONE;
  auto* cn = reinterpret_cast<cn_msg*>(NLMSG_DATA(nl));
  cn->id.idx = CN_IDX_PROC;
  cn->id.val = CN_VAL_PROC;
  cn->len = sizeof(proc_event);
  std::memcpy(cn->data, &ev, sizeof(ev));
  return buffer;
}

TEST(ParseProcConnectorDatagram, ForkExecExitAndOthers) {
  std::vector<ProcessEvent> seen;
  auto listener = [&](const ProcessEvent& e) { seen.push_back(e); };

  proc_event fork{};
  fork.what = proc_event::PROC_EVENT_FORK;
  fork.event_data.fork.parent_pid = 100;
  fork.event_data.fork.parent_tgid = 100;
  fork.event_data.fork.child_pid = 150;
  fork.event_data.fork.child_tgid = 100;
  auto d = Datagram(fork);
  ParseProcConnectorDatagram(d.data(), d.size(), listener);

  proc_event exec{};
  exec.what = proc_event::PROC_EVENT_EXEC;
  exec.event_data.exec.process_pid = 300;
  exec.event_data.exec.process_tgid = 300;
  d = Datagram(exec);
  ParseProcConnectorDatagram(d.data(), d.size(), listener);

  proc_event exit{};
  exit.what = proc_event::PROC_EVENT_EXIT;
  exit.event_data.exit.process_pid = 151;
  exit.event_data.exit.process_tgid = 100;
  d = Datagram(exit);
  ParseProcConnectorDatagram(d.data(), d.size(), listener);

  proc_event comm{};
  comm.what = proc_event::PROC_EVENT_COMM;
  comm.event_data.comm.process_pid = 160;
  comm.event_data.comm.process_tgid = 160;
  std::memcpy(comm.event_data.comm.comm, "vhost-100", 10);
  d = Datagram(comm);
  ParseProcConnectorDatagram(d.data(), d.size(), listener);
  // A name of the full 16 bytes has no terminating NUL.
  std::memcpy(comm.event_data.comm.comm, "0123456789abcdef", 16);
  d = Datagram(comm);
  ParseProcConnectorDatagram(d.data(), d.size(), listener);

  proc_event uid{};
  uid.what = proc_event::PROC_EVENT_UID;
  d = Datagram(uid);
  ParseProcConnectorDatagram(d.data(), d.size(), listener);
  // A truncated datagram is ignored, not read past its end.
  ParseProcConnectorDatagram(d.data(), 10, listener);

  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[3].kind, ProcessEventKind::kComm);
  EXPECT_EQ(seen[3].tid, 160);
  EXPECT_EQ(seen[3].tgid, 160);
  EXPECT_EQ(seen[3].comm, "vhost-100");
  EXPECT_EQ(seen[4].comm, "0123456789abcdef");
  EXPECT_EQ(seen[0].kind, ProcessEventKind::kFork);
  EXPECT_EQ(seen[0].tgid, 100);
  EXPECT_EQ(seen[0].tid, 150);
  EXPECT_EQ(seen[0].parent_tgid, 100);
  EXPECT_EQ(seen[1].kind, ProcessEventKind::kExec);
  EXPECT_EQ(seen[1].tgid, 300);
  EXPECT_EQ(seen[2].kind, ProcessEventKind::kExit);
  EXPECT_EQ(seen[2].tid, 151);
}

TEST(InInitialPidNamespace, ReadsTheNamespaceLink) {
  EXPECT_EQ(InInitialPidNamespace("pid:[4026531836]"), true);
  EXPECT_EQ(InInitialPidNamespace("pid:[4026532178]"), false);
  EXPECT_EQ(InInitialPidNamespace("net:[4026531836]"), std::nullopt);
  EXPECT_EQ(InInitialPidNamespace("pid:[x]"), std::nullopt);
}

}  // namespace
}  // namespace cosched::host
