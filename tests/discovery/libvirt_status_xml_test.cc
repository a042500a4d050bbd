#include "discovery/libvirt_status_xml.h"

#include <gtest/gtest.h>
#include "tests/testing/status_matchers.h"

namespace cosched::discovery {
namespace {

// /run/libvirt/qemu/cosched-exp2.xml as libvirt 9.0.0 (Debian 12) wrote it
// for a paused TCG domain with <vcpu>2</vcpu><iothreads>2</iothreads>;
// only the long <qemuCaps> list is shortened.
constexpr char kStatusXml[] = R"(<!--
WARNING: THIS IS AN AUTO-GENERATED FILE. CHANGES TO IT ARE LIKELY TO BE
OVERWRITTEN AND LOST. Changes to this xml configuration should be made using:
  virsh edit cosched-exp2
or other application using the libvirt API.
-->

<domstatus state='paused' reason='user' pid='26988'>
  <taint flag='high-privileges'/>
  <monitor path='/var/lib/libvirt/qemu/domain-2-cosched-exp2/monitor.sock' type='unix'/>
  <vcpus>
    <vcpu id='1' pid='26995'/>
    <vcpu id='0' pid='26994'/>
  </vcpus>
  <qemuCaps>
    <flag name='kvm'/>
    <flag name='iothread'/>
    <flag name='tcg'/>
  </qemuCaps>
  <devices>
    <device alias='balloon0'/>
    <device alias='usb'/>
  </devices>
  <libDir path='/var/lib/libvirt/qemu/domain-2-cosched-exp2'/>
  <channelTargetDir path='/var/lib/libvirt/qemu/channel/target/domain-2-cosched-exp2'/>
  <cpu mode='custom' match='exact' check='none'>
    <model fallback='forbid'>qemu64</model>
  </cpu>
  <chardevStdioLogd/>
  <nodename index='0'/>
  <fdset index='0'/>
  <blockjobs active='no'/>
  <agentTimeout>-2</agentTimeout>
  <domain type='qemu' id='2'>
    <name>cosched-exp2</name>
    <uuid>A4C5E430-d04a-4e7e-a5e2-ae60b295b691</uuid>
    <memory unit='KiB'>131072</memory>
    <currentMemory unit='KiB'>131072</currentMemory>
    <vcpu placement='static'>2</vcpu>
    <iothreads>2</iothreads>
    <resource>
      <partition>/machine</partition>
    </resource>
    <os>
      <type arch='x86_64' machine='pc-i440fx-7.2'>hvm</type>
      <boot dev='hd'/>
    </os>
    <devices>
      <emulator>/usr/bin/qemu-system-x86_64</emulator>
    </devices>
  </domain>
</domstatus>
)";

TEST(LibvirtStatusXml, RealLibvirt90Output) {
  auto status = ParseLibvirtStatusXml(kStatusXml);
  ASSERT_OK(status);
  EXPECT_EQ(status->name, "cosched-exp2");
  EXPECT_EQ(status->uuid, "a4c5e430-d04a-4e7e-a5e2-ae60b295b691");
  EXPECT_EQ(status->state, "paused");
  EXPECT_EQ(status->pid, 26988);
  EXPECT_EQ(status->vcpus,
            (std::vector<LibvirtDomainStatus::Vcpu>{{0, 26994}, {1, 26995}}));
  EXPECT_EQ(status->iothread_ids, (std::vector<int>{1, 2}));
  EXPECT_EQ(status->async_job, "");
}

TEST(LibvirtStatusXml, AsyncJobOfAMigration) {
  // libvirt keeps its async job in the status XML while it runs; an
  // incoming migration's destination writes it like this.
  auto status = ParseLibvirtStatusXml(R"(<domstatus state='paused' reason='migration' pid='7'>
  <job type='none' async='migration in' phase='prepare' flags='0x0'>
    <migParams/>
  </job>
  <domain type='qemu'><name>vm-1</name></domain>
</domstatus>)");
  ASSERT_OK(status);
  EXPECT_EQ(status->async_job, "migration in");
  auto idle = ParseLibvirtStatusXml(
      "<domstatus pid='7'><job type='destroy' async='none'/><domain><name>a</name></domain>"
      "</domstatus>");
  ASSERT_OK(idle);
  EXPECT_EQ(idle->async_job, "");
}

TEST(LibvirtStatusXml, IothreadIdsAndNoVcpuThreads) {
  auto status = ParseLibvirtStatusXml(R"(<domstatus state='running' pid='5'>
      <domain type='kvm'><name>a</name><uuid>u</uuid>
        <iothreads>2</iothreads>
        <iothreadids><iothread id='3'/><iothread id='7'/></iothreadids>
      </domain></domstatus>)");
  ASSERT_OK(status);
  EXPECT_TRUE(status->vcpus.empty());
  EXPECT_EQ(status->iothread_ids, (std::vector<int>{3, 7}));
}

TEST(LibvirtStatusXml, Errors) {
  EXPECT_EQ(ParseLibvirtStatusXml("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseLibvirtStatusXml("<domstatus pid='1'><domain><name>x</name>").ok());
  // A domain definition is not a status file.
  EXPECT_FALSE(ParseLibvirtStatusXml("<domain><name>x</name></domain>").ok());
  EXPECT_FALSE(ParseLibvirtStatusXml("<domstatus><domain><name>x</name></domain></domstatus>").ok());
  EXPECT_FALSE(ParseLibvirtStatusXml("<domstatus pid='-3'><domain><name>x</name></domain></domstatus>").ok());
  EXPECT_FALSE(ParseLibvirtStatusXml("<domstatus pid='3'/>").ok());
  EXPECT_FALSE(ParseLibvirtStatusXml(
                   "<domstatus pid='3'><vcpus><vcpu id='0'/></vcpus><domain><name>x</name></domain></domstatus>")
                   .ok());
  // External entities are never loaded.
  auto with_entity = ParseLibvirtStatusXml(
      "<!DOCTYPE d [<!ENTITY e SYSTEM 'file:///etc/passwd'>]>"
      "<domstatus pid='3'><domain><name>x&e;</name></domain></domstatus>");
  EXPECT_TRUE(!with_entity.ok() || with_entity->name.find("root:") == std::string::npos);
}

// A forged iothread count made 2^31 ids (minutes, gigabytes: the fuzzer's
// timeout); the count of libvirt's own files is far below the bound.
TEST(LibvirtStatusXml, RefusesAnIothreadCountNoDomainHas) {
  auto status = ParseLibvirtStatusXml(
      "<domstatus pid='5'><domain><name>a</name><iothreads>2000000000</iothreads>"
      "</domain></domstatus>");
  EXPECT_EQ(status.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.status().message().find("<iothreads>"), absl::string_view::npos);
  auto many = ParseLibvirtStatusXml(
      "<domstatus pid='5'><domain><name>a</name><iothreads>65536</iothreads>"
      "</domain></domstatus>");
  ASSERT_OK(many);
  EXPECT_EQ(many->iothread_ids.size(), 65536u);
}

}  // namespace
}  // namespace cosched::discovery
