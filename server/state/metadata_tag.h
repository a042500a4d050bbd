// What a VM's libvirt domain metadata asks csd to tag it with, when csd
// tags from metadata (tag_from_metadata, docs/integrations.md). Metadata is
// input like a TagVM request: its values pass TagVM's rules, and a refusal
// names the metadata's field.
#ifndef COSCHED_SERVER_STATE_METADATA_TAG_H_
#define COSCHED_SERVER_STATE_METADATA_TAG_H_

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cosched/v1/agent.pb.h"
#include "cosched/v1/control_plane.pb.h"
#include "cosched/v1/types.pb.h"
#include "store/store.h"

namespace cosched::server {

// A TagVM's worth of tenancy.
struct MetadataTag {
  std::string tenant_id;
  // UNSPECIFIED: the tenant's default level.
  v1::IsolationLevel isolation = v1::ISOLATION_LEVEL_UNSPECIFIED;
  // Sorted, without duplicates.
  std::vector<std::string> interference_classes;
};

// The tag `m` asks for: the tenant is cosched's <cosched:tenant> when given,
// else Nova's project uuid (stable where project names are not); the level
// and classes are cosched's. nullopt when the metadata names no tenant and
// asks for nothing (a domain nobody described). INVALID_ARGUMENT naming the
// field ("metadata.cosched.isolation ...") when it is bad: the agent could
// not read it, a value breaks TagVM's rules, or it asks for a level or
// classes without saying for which tenant.
absl::StatusOr<std::optional<MetadataTag>> MetadataTagOf(const v1::DomainMetadata& m);

// What tagging from metadata wrote inside one Report's write, for what
// follows its commit.
struct MetadataWrites {
  std::vector<v1::AuditRecord> audits;
  // Hosts whose last Report csd forgets: a VM they report was tagged or
  // untagged.
  std::set<std::string> hosts;
  std::vector<std::string> untagged_vms;
};

// Inside the write of a Report from `host_id`, with tag_from_metadata on:
// tags, retags or untags the VM of observation `o` from its metadata.
// `vm` is the VM as tagged now (under o's name or UUID), nullopt when
// nobody tagged it; answers it as it is after the write (nullopt: not
// tagged). A VM tagged by TagVM, or owned by another host, is left alone.
// Metadata that is refused (MetadataTagOf, or the tenant's policy) leaves
// an untagged VM untagged and untags one tagged from metadata: fail-closed.
// Metadata the agent could not read (o.metadata_unknown) changes nothing.
absl::StatusOr<std::optional<v1::VM>> TagFromMetadata(store::Transaction& txn,
                                                      const std::string& host_id,
                                                      const v1::VMObservation& o,
                                                      std::optional<v1::VM> vm,
                                                      MetadataWrites& writes);

// Inside the write of a Report from `host_id`, which reports the VM
// tagged from metadata `vm` as `own` (null: it does not), with `vm`'s
// presence and owner as this Report leaves them. Empty when the hosts that
// report the VM, where their metadata could be read, all ask for the tag it
// has; otherwise the conflict, in words for `csctl get`:
// - two hosts ask for different tags (each named with what it asks for):
//   neither host's metadata retags the VM until one stops reporting it or
//   an operator tags it (issue #32);
// - they agree on another tag than the VM's (the host whose metadata tagged
//   it no longer reports it): the owner's next Report retags it, and
//   `forget` gets the owner, whose Report must then be written.
// A VM in conflict gets no assignment anywhere (ReceivesAssignment).
absl::StatusOr<std::string> MetadataConflict(store::Transaction& txn, const v1::VM& vm,
                                             const std::string& host_id,
                                             const v1::VMObservation* own,
                                             std::set<std::string>& forget);

// Why the metadata hosts report of the untagged VM `vm_id` did not tag it,
// one sentence per host ("host h1 reports it with domain metadata that was
// refused: ..."); empty when no host reports metadata for it.
absl::StatusOr<std::string> WhyNotTaggedFromMetadata(store::Transaction& txn,
                                                     const std::string& vm_id,
                                                     bool tag_from_metadata);

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_METADATA_TAG_H_
