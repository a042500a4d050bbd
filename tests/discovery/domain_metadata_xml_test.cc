#include "discovery/domain_metadata_xml.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace cosched::discovery {
namespace {

// What Nova (27.x, "Antelope") writes into a domain's <metadata>; other
// elements of the domain shortened.
constexpr char kNova11[] = R"(<domain type='kvm'>
  <name>instance-0000002a</name>
  <uuid>0f6b3a53-5d1c-4d0e-9c47-6b8e4c1f7a20</uuid>
  <metadata>
    <nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">
      <nova:package version="27.1.0"/>
      <nova:name>web-1</nova:name>
      <nova:creationTime>2026-11-30 09:12:44</nova:creationTime>
      <nova:flavor name="m1.small">
        <nova:memory>2048</nova:memory>
        <nova:disk>20</nova:disk>
        <nova:swap>0</nova:swap>
        <nova:ephemeral>0</nova:ephemeral>
        <nova:vcpus>1</nova:vcpus>
      </nova:flavor>
      <nova:owner>
        <nova:user uuid="5f1e2c7a0c3b4c1e8e7d6a5b4c3d2e1f">alice</nova:user>
        <nova:project uuid="8a3b7c6d5e4f4a3b9c2d1e0f9a8b7c6d">acme</nova:project>
      </nova:owner>
      <nova:root type="image" uuid="c2f5e3d4-0000-4000-8000-000000000001"/>
    </nova:instance>
  </metadata>
  <memory unit='KiB'>2097152</memory>
</domain>)";

std::string WithMetadata(const std::string& inside) {
  return absl::StrCat("<domain type='qemu'><name>vm-1</name><metadata>", inside,
                      "</metadata><vcpu>1</vcpu></domain>");
}

std::string Cosched(const std::string& inside) {
  return WithMetadata(absl::StrCat(
      R"(<cosched:vm xmlns:cosched="https://cosched.dev/xmlns/libvirt/1.0">)", inside,
      "</cosched:vm>"));
}

// The error of a refused metadata; fails the test when it was read.
std::string ErrorOf(const std::string& xml) {
  std::optional<v1::DomainMetadata> m = ParseDomainMetadata(xml);
  if (!m) {
    ADD_FAILURE() << "no metadata found in " << xml;
    return "";
  }
  EXPECT_FALSE(m->has_nova());
  EXPECT_FALSE(m->has_cosched());
  EXPECT_FALSE(m->error().empty()) << m->ShortDebugString();
  return m->error();
}

TEST(DomainMetadataXml, ReadsNova11OwnerProjectAndFlavor) {
  std::optional<v1::DomainMetadata> m = ParseDomainMetadata(kNova11);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->error(), "");
  EXPECT_EQ(m->nova().version(), "1.1");
  EXPECT_EQ(m->nova().project_uuid(), "8a3b7c6d5e4f4a3b9c2d1e0f9a8b7c6d");
  EXPECT_EQ(m->nova().project_name(), "acme");
  EXPECT_EQ(m->nova().flavor_name(), "m1.small");
  EXPECT_FALSE(m->has_cosched());
}

TEST(DomainMetadataXml, ReadsNova10AnyPrefix) {
  std::optional<v1::DomainMetadata> m = ParseDomainMetadata(WithMetadata(
      R"(<n:instance xmlns:n="http://openstack.org/xmlns/libvirt/nova/1.0">
           <n:owner><n:project uuid=" p-1 "> one </n:project></n:owner>
         </n:instance>)"));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->error(), "");
  EXPECT_EQ(m->nova().version(), "1.0");
  EXPECT_EQ(m->nova().project_uuid(), "p-1");
  EXPECT_EQ(m->nova().project_name(), "one");
  EXPECT_EQ(m->nova().flavor_name(), "");
}

TEST(DomainMetadataXml, ReadsCoschedVm) {
  std::optional<v1::DomainMetadata> m = ParseDomainMetadata(
      Cosched("<cosched:tenant>acme</cosched:tenant><cosched:isolation>tenant"
              "</cosched:isolation><cosched:class>avx512</cosched:class>"
              "<cosched:class>latency-critical</cosched:class>"));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->error(), "");
  EXPECT_FALSE(m->has_nova());
  EXPECT_EQ(m->cosched().tenant(), "acme");
  // Level names are csd's to check (as TagVM's): kept as written.
  EXPECT_EQ(m->cosched().isolation(), "tenant");
  ASSERT_EQ(m->cosched().interference_classes_size(), 2);
  EXPECT_EQ(m->cosched().interference_classes(0), "avx512");
  EXPECT_EQ(m->cosched().interference_classes(1), "latency-critical");
}

TEST(DomainMetadataXml, ReadsNovaAndCoschedTogether) {
  std::optional<v1::DomainMetadata> m = ParseDomainMetadata(WithMetadata(
      R"(<nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">
           <nova:owner><nova:project uuid="p1">one</nova:project></nova:owner>
         </nova:instance>
         <cosched:vm xmlns:cosched="https://cosched.dev/xmlns/libvirt/1.0">
           <cosched:isolation>dedicated</cosched:isolation>
         </cosched:vm>)"));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->nova().project_uuid(), "p1");
  EXPECT_EQ(m->cosched().isolation(), "dedicated");
  EXPECT_EQ(m->cosched().tenant(), "");
}

TEST(DomainMetadataXml, AbsentIsNothing) {
  EXPECT_FALSE(ParseDomainMetadata("<domain type='qemu'><name>a</name></domain>").has_value());
  EXPECT_FALSE(ParseDomainMetadata(WithMetadata("")).has_value());
  // Other applications' metadata, and elements that take the names of ours
  // in another namespace (or in none), are not ours.
  EXPECT_FALSE(ParseDomainMetadata(WithMetadata(
                   R"(<app:instance xmlns:app="http://example.com/app"><app:x/></app:instance>)"
                   R"(<vm><tenant>t</tenant></vm>)"
                   R"(<x:vm xmlns:x="https://cosched.dev/xmlns/libvirt/2.0"/>)"))
                   .has_value());
}

TEST(DomainMetadataXml, MalformedXmlIsAnError) {
  EXPECT_NE(ErrorOf("<domain><metadata><cosched:vm").find("not well-formed"),
            std::string::npos);
  EXPECT_NE(ErrorOf("").find("not well-formed"), std::string::npos);
  EXPECT_NE(ErrorOf("<domstatus/>").find("no <domain> root"), std::string::npos);
  // Undeclared prefix: libxml2 refuses it only with a warning, and the
  // element is in no namespace: not ours.
  std::optional<v1::DomainMetadata> m =
      ParseDomainMetadata(WithMetadata("<nova:instance><nova:owner/></nova:instance>"));
  EXPECT_FALSE(m.has_value() && m->error().empty() && m->has_nova());
}

TEST(DomainMetadataXml, OversizedValuesAreRefusedNamingTheField) {
  const std::string long_value(kMaxMetadataValue + 1, 'a');
  EXPECT_EQ(ErrorOf(Cosched(absl::StrCat("<cosched:tenant>", long_value, "</cosched:tenant>"))),
            "cosched:tenant is 257 bytes; at most 256 are allowed");
  EXPECT_EQ(ErrorOf(WithMetadata(absl::StrCat(
                R"(<nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">)",
                R"(<nova:owner><nova:project uuid=")", long_value,
                R"(">x</nova:project></nova:owner></nova:instance>)"))),
            "nova:project uuid is 257 bytes; at most 256 are allowed");
  std::string classes;
  for (int i = 0; i <= kMaxMetadataClasses; ++i) {
    absl::StrAppend(&classes, "<cosched:class>c", i, "</cosched:class>");
  }
  EXPECT_EQ(ErrorOf(Cosched(classes)), "cosched:class is given more than 16 times");
  EXPECT_NE(ErrorOf(std::string(kMaxDomainXml + 1, ' ')).find("at most 4194304"),
            std::string::npos);
  // At the bound exactly: read.
  std::optional<v1::DomainMetadata> m = ParseDomainMetadata(
      Cosched(absl::StrCat("<cosched:tenant>", std::string(kMaxMetadataValue, 'b'),
                           "</cosched:tenant>")));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->cosched().tenant().size(), kMaxMetadataValue);
}

TEST(DomainMetadataXml, WrongTypesAreRefused) {
  EXPECT_EQ(ErrorOf(Cosched("<cosched:tenant><cosched:x/></cosched:tenant>")),
            "cosched:tenant holds an element; it must hold text only");
  EXPECT_EQ(ErrorOf(Cosched("<cosched:tenant>a</cosched:tenant><cosched:tenant>b"
                            "</cosched:tenant>")),
            "cosched:tenant is given more than once");
  EXPECT_EQ(ErrorOf(Cosched("<cosched:isolaton>tenant</cosched:isolaton>")),
            "cosched:vm holds <cosched:isolaton>; only tenant, isolation and class are "
            "allowed");
  EXPECT_NE(ErrorOf(Cosched("<tenant>a</tenant>")).find("outside cosched's namespace"),
            std::string::npos);
  EXPECT_EQ(ErrorOf(WithMetadata(
                R"(<nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1"/>)"
                R"(<nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.0"/>)")),
            "nova:instance is given more than once");
  EXPECT_EQ(ErrorOf(WithMetadata(
                R"(<nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">)"
                R"(<nova:owner><nova:project uuid="a"><b/></nova:project></nova:owner>)"
                R"(</nova:instance>)")),
            "nova:project holds an element; it must hold text only");
}

TEST(DomainMetadataXml, EntitiesAreNotExpanded) {
  // A "billion laughs" document: refused or read without expansion, never
  // gigabytes of text.
  const std::string xml =
      R"(<?xml version="1.0"?><!DOCTYPE domain [<!ENTITY a "aaaaaaaaaa">)"
      R"(<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>)"
      R"(<domain><metadata><cosched:vm xmlns:cosched="https://cosched.dev/xmlns/libvirt/1.0">)"
      R"(<cosched:tenant>&c;</cosched:tenant></cosched:vm></metadata></domain>)";
  std::optional<v1::DomainMetadata> m = ParseDomainMetadata(xml);
  ASSERT_TRUE(m.has_value());
  EXPECT_LE(m->cosched().tenant().size(), kMaxMetadataValue);
}

}  // namespace
}  // namespace cosched::discovery
