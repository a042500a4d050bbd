// EtcdTransaction: csd's records as keys under the prefix (the layout is in
// etcd_store.h), read at the batch's revision over its buffered writes.
#include "store/etcd_transaction.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace cosched::store {
namespace {

constexpr int kMaxPageLimit = 1000;

int ClampLimit(int limit) { return std::clamp(limit, 1, kMaxPageLimit); }

}  // namespace

std::string EtcdAuditId(int64_t sequence) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64,
                std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(sequence));
  return buf;
}

namespace {

std::string AuditId(int64_t sequence) { return EtcdAuditId(sequence); }

}  // namespace

absl::string_view LastPart(absl::string_view key) { return key.substr(key.rfind('/') + 1); }

absl::Status CheckComponent(absl::string_view what, absl::string_view id) {
  if (absl::StrContains(id, '/')) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", id, "' contains '/'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<EtcdSnapshot> TakeSnapshot(etcd::Client& client, const std::string& prefix,
                                          const EtcdCache& cache,
                                          const EtcdCache::Snapshot& view) {
  EtcdSnapshot snap;
  snap.client = &client;
  snap.prefix = prefix;
  snap.cache = &cache;
  snap.view = &view;
  snap.revision = view.revision();
  const std::string key = absl::StrCat(prefix, "/meta");
  std::optional<CachedKv> meta = view.Get(key);
  if (meta) {
    snap.meta_revision = meta->mod_revision;
    snap.meta_value = std::move(meta->value);
    if (!snap.meta.ParseFromString(snap.meta_value)) {
      return absl::DataLossError(absl::StrCat("etcd store: value of key ", key,
                                              " does not parse as the store's metadata"));
    }
    if (snap.meta.layout_version() > kEtcdLayoutVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "etcd store under ", prefix, " has layout version ", snap.meta.layout_version(),
          " but this program knows version ", kEtcdLayoutVersion,
          ": it was written by a newer release"));
    }
  }
  return snap;
}

etcdserverpb::TxnRequest CommitRequest(const EtcdSnapshot& snapshot,
                                       const EtcdWriteState& state, uint64_t commit_id) {
  etcdserverpb::TxnRequest request;
  const std::string meta_key = absl::StrCat(snapshot.prefix, "/meta");
  etcdserverpb::Compare* compare = request.add_compare();
  compare->set_key(meta_key);
  compare->set_target(etcdserverpb::Compare::MOD);
  compare->set_result(etcdserverpb::Compare::EQUAL);
  compare->set_mod_revision(snapshot.meta_revision);  // 0: still absent
  if (state.fence != 0) {
    etcdserverpb::Compare* fenced = request.add_compare();
    fenced->set_key(absl::StrCat(snapshot.prefix, "/leader"));
    fenced->set_target(etcdserverpb::Compare::CREATE);
    fenced->set_result(etcdserverpb::Compare::EQUAL);
    fenced->set_create_revision(state.fence);
  }
  for (const auto& [key, value] : state.writes) {
    etcdserverpb::RequestOp* op = request.add_success();
    if (value) {
      op->mutable_request_put()->set_key(key);
      op->mutable_request_put()->set_value(*value);
    } else {
      op->mutable_request_delete_range()->set_key(key);
    }
  }
  EtcdMeta meta = state.meta;
  // A new store starts indexed; one of layout 1 stays so until its index
  // is built (SetLayoutVersion).
  if (snapshot.meta_revision == 0) meta.set_layout_version(kEtcdLayoutVersion);
  meta.set_commit_id(commit_id);
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(meta_key);
  put->set_value(Serialized(meta));
  // When the compare fails: meta now, whose revision the cache must reach
  // before the functions run again.
  request.add_failure()->mutable_request_range()->set_key(meta_key);
  return request;
}

std::string EtcdTransaction::Key(absl::string_view kind, absl::string_view id) const {
  return absl::StrCat(snap_.prefix, "/", kind, "/", id);
}

absl::Status EtcdTransaction::RequireWrite(absl::string_view op) const {
  if (write_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(op, " is not allowed in a read-only transaction"));
}

absl::StatusOr<std::optional<std::string>> EtcdTransaction::Get(const std::string& key) {
  if (write_ != nullptr) {
    auto it = write_->writes.find(key);
    if (it != write_->writes.end()) return it->second;
  }
  if (snap_.cache->Holds(key)) {
    std::optional<CachedKv> kv = snap_.view->Get(key);
    if (!kv) return std::optional<std::string>();
    return std::optional<std::string>(std::move(kv->value));
  }
  ASSIGN_OR_RETURN(etcd::RangeResult result, snap_.client->Range(key, "", snap_.revision));
  if (result.kvs.empty()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(*result.kvs[0].mutable_value()));
}

void EtcdTransaction::Put(std::string key, std::string value) {
  write_->writes[std::move(key)] = std::move(value);
}

void EtcdTransaction::Delete(std::string key) {
  write_->writes[std::move(key)] = std::nullopt;
}

absl::Status EtcdTransaction::Scan(const std::string& begin, const std::string& end, int limit,
                                   const Visit& visit) {
  const int64_t page = snap_.client->options().range_page;
  const bool cached = snap_.cache->HoldsRange(begin, end);
  std::string from = begin;
  int counted = 0;
  while (true) {
    // One page, copied out: a visit may read further keys.
    std::vector<CachedKv> kvs;
    bool more = false;
    if (cached) {
      kvs = snap_.view->Range(from, end, static_cast<size_t>(page));
      more = kvs.size() == static_cast<size_t>(page);
    } else {
      etcdserverpb::RangeRequest request;
      request.set_key(from);
      request.set_range_end(end);
      request.set_revision(snap_.revision);
      request.set_limit(page);
      ASSIGN_OR_RETURN(etcdserverpb::RangeResponse response, snap_.client->RangeOnce(request));
      more = response.more() && response.kvs_size() > 0;
      for (mvccpb::KeyValue& kv : *response.mutable_kvs()) {
        kvs.push_back(CachedKv{std::move(*kv.mutable_key()), std::move(*kv.mutable_value()),
                               kv.mod_revision()});
      }
    }
    more = more && !kvs.empty();
    // Buffered writes up to what this page covers: its last key, or the
    // range's end when it is the last page.
    std::map<std::string, std::optional<std::string>>::const_iterator buffered, buffered_end;
    if (write_ != nullptr) {
      buffered = write_->writes.lower_bound(from);
      buffered_end = more ? write_->writes.upper_bound(kvs.back().key)
                          : write_->writes.lower_bound(end);
    }
    size_t i = 0;
    while (true) {
      const bool have_snap = i < kvs.size();
      const bool have_buf = write_ != nullptr && buffered != buffered_end;
      if (!have_snap && !have_buf) break;
      const std::string* key;
      const std::string* value;
      if (have_buf && (!have_snap || buffered->first <= kvs[i].key)) {
        if (have_snap && buffered->first == kvs[i].key) ++i;  // shadowed
        key = &buffered->first;
        value = buffered->second ? &*buffered->second : nullptr;
        ++buffered;
      } else {
        key = &kvs[i].key;
        value = &kvs[i].value;
        ++i;
      }
      if (value == nullptr) continue;  // deleted in this transaction
      ASSIGN_OR_RETURN(bool count, visit(*key, *value));
      if (count && limit > 0 && ++counted >= limit) return absl::OkStatus();
    }
    if (!more) return absl::OkStatus();
    from = kvs.back().key + std::string(1, '\0');
  }
}

absl::StatusOr<int64_t> EtcdTransaction::WriteRevision() {
  RETURN_IF_ERROR(RequireWrite("WriteRevision"));
  // The commit's own revision is known only once etcd applies it; R + 1 is
  // above every csd commit (see etcd_store.h) and at most the commit's.
  write_->revision_taken = true;
  return snap_.revision + 1;
}

absl::StatusOr<int64_t> EtcdTransaction::ReadRevision() {
  // The last csd commit at its snapshot, or its own revision once taken.
  return write_ != nullptr && write_->revision_taken ? snap_.revision + 1 : snap_.meta_revision;
}

std::string EtcdTransaction::IndexPrefix(absl::string_view kind, absl::string_view value) const {
  return absl::StrCat(snap_.prefix, "/vm_by/", kind, "/", value, "/");
}

std::vector<std::string> EtcdTransaction::IndexKeys(const v1::VM& vm) const {
  std::vector<std::string> keys;
  if (!vm.host_id().empty()) keys.push_back(IndexPrefix("host", vm.host_id()) + vm.vm_id());
  for (const v1::VMPresence& p : vm.presence()) {
    if (!p.host_id().empty()) keys.push_back(IndexPrefix("reported", p.host_id()) + vm.vm_id());
  }
  if (!vm.tenant_id().empty()) keys.push_back(IndexPrefix("tenant", vm.tenant_id()) + vm.vm_id());
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

bool EtcdTransaction::Indexed() const {
  return snap_.meta_revision == 0 || snap_.meta.layout_version() >= kEtcdLayoutVersion;
}

absl::StatusOr<std::string> EtcdTransaction::IndexVms(const std::string& after, int limit) {
  RETURN_IF_ERROR(RequireWrite("IndexVms"));
  Page page;
  page.after = after;
  page.limit = limit;
  ASSIGN_OR_RETURN(std::vector<v1::VM> vms, ListVms(VmFilter(), page));
  for (const v1::VM& vm : vms) {
    for (std::string& key : IndexKeys(vm)) Put(std::move(key), "");
  }
  return vms.empty() ? std::string() : vms.back().vm_id();
}

void EtcdTransaction::SetLayoutVersion(int version) { write_->meta.set_layout_version(version); }

absl::StatusOr<std::optional<v1::VM>> EtcdTransaction::GetVm(absl::string_view vm_id) {
  const std::string key = Key("vms", vm_id);
  ASSIGN_OR_RETURN(std::optional<std::string> value, Get(key));
  if (!value) return std::optional<v1::VM>();
  ASSIGN_OR_RETURN(v1::VM vm, Parse<v1::VM>(key, *value, "VM"));
  return std::optional<v1::VM>(std::move(vm));
}

absl::Status EtcdTransaction::PutVm(const v1::VM& vm) {
  RETURN_IF_ERROR(RequireWrite("PutVm"));
  if (vm.vm_id().empty()) return absl::InvalidArgumentError("PutVm: vm_id is empty");
  const std::string& group = vm.assignment().trust_group();
  if (!group.empty() && !TrustGroupOfTenant(group, vm.tenant_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("PutVm: trust group '", group, "' of VM ", vm.vm_id(),
                     " does not begin with its tenant '", vm.tenant_id(), "/'"));
  }
  v1::VM stored = vm;
  stored.clear_enforcement();
  // The index follows the record in the same commit: keys the old record
  // had and this one has not go, new ones come (most writes change none).
  ASSIGN_OR_RETURN(std::optional<v1::VM> before, GetVm(vm.vm_id()));
  const std::vector<std::string> old_keys = before ? IndexKeys(*before) : std::vector<std::string>();
  const std::vector<std::string> new_keys = IndexKeys(stored);
  for (const std::string& key : old_keys) {
    if (!std::binary_search(new_keys.begin(), new_keys.end(), key)) Delete(key);
  }
  for (const std::string& key : new_keys) {
    if (!std::binary_search(old_keys.begin(), old_keys.end(), key)) Put(key, "");
  }
  Put(Key("vms", vm.vm_id()), Serialized(stored));
  return absl::OkStatus();
}

absl::Status EtcdTransaction::DeleteVm(absl::string_view vm_id) {
  RETURN_IF_ERROR(RequireWrite("DeleteVm"));
  const std::string key = Key("vms", vm_id);
  ASSIGN_OR_RETURN(std::optional<std::string> value, Get(key));
  if (!value) return absl::NotFoundError(absl::StrCat("VM ", vm_id, " not found"));
  ASSIGN_OR_RETURN(v1::VM vm, Parse<v1::VM>(key, *value, "VM"));
  for (std::string& index : IndexKeys(vm)) Delete(std::move(index));
  Delete(key);
  return absl::OkStatus();
}

namespace {

bool Matches(const VmFilter& filter, const v1::VM& vm) {
  if (!filter.reported_on.empty()) {
    return std::any_of(vm.presence().begin(), vm.presence().end(),
                       [&](const v1::VMPresence& p) { return p.host_id() == filter.reported_on; });
  }
  return (filter.tenant_id.empty() || vm.tenant_id() == filter.tenant_id) &&
         (filter.host_id.empty() || vm.host_id() == filter.host_id) &&
         (filter.trust_group.empty() || vm.assignment().trust_group() == filter.trust_group);
}

}  // namespace

absl::StatusOr<std::vector<v1::VM>> EtcdTransaction::ListVms(const VmFilter& filter,
                                                             const Page& page) {
  if (!filter.reported_on.empty() &&
      (!filter.tenant_id.empty() || !filter.host_id.empty() || !filter.trust_group.empty())) {
    return absl::InvalidArgumentError(
        "ListVms: reported_on cannot be combined with other filters");
  }
  std::vector<v1::VM> vms;
  // By the index when the filter names a host, a tenant or a trust group
  // (through its tenant's index, as a group is one tenant's): its keys are
  // in vm_id order, as the records, and each VM read is checked against
  // the whole filter.
  std::string index;
  if (!filter.reported_on.empty()) {
    index = IndexPrefix("reported", filter.reported_on);
  } else if (!filter.host_id.empty()) {
    index = IndexPrefix("host", filter.host_id);
  } else if (!filter.tenant_id.empty()) {
    index = IndexPrefix("tenant", filter.tenant_id);
  } else if (!filter.trust_group.empty()) {
    index = IndexPrefix("tenant", TenantOfTrustGroup(filter.trust_group));
  }
  if (!index.empty() && Indexed()) {
    const std::string begin = page.after.empty() ? index : absl::StrCat(index, page.after) + '\0';
    RETURN_IF_ERROR(Scan(begin, etcd::PrefixEnd(index), ClampLimit(page.limit),
                         [&](const std::string& key, const std::string&) -> absl::StatusOr<bool> {
      ASSIGN_OR_RETURN(std::optional<v1::VM> vm, GetVm(key.substr(index.size())));
      if (!vm || !Matches(filter, *vm)) return false;
      vms.push_back(*std::move(vm));
      return true;
    }));
    return vms;
  }
  // Else a scan of every VM after page.after, filtered here (a store whose
  // index is not built yet, or no filter).
  const std::string base = Key("vms", "");
  const std::string begin = page.after.empty() ? base : Key("vms", page.after) + '\0';
  RETURN_IF_ERROR(Scan(begin, etcd::PrefixEnd(base), ClampLimit(page.limit),
                       [&](const std::string& key, const std::string& value) -> absl::StatusOr<bool> {
    ASSIGN_OR_RETURN(v1::VM vm, Parse<v1::VM>(key, value, "VM"));
    const bool match = Matches(filter, vm);
    if (match) vms.push_back(std::move(vm));
    return match;
  }));
  return vms;
}

absl::StatusOr<std::optional<v1::Rollout>> EtcdTransaction::GetRollout() {
  const std::string key = absl::StrCat(snap_.prefix, "/rollout");
  ASSIGN_OR_RETURN(std::optional<std::string> value, Get(key));
  if (!value) return std::optional<v1::Rollout>();
  ASSIGN_OR_RETURN(auto rollout, Parse<v1::Rollout>(key, *value, "rollout"));
  return std::optional<v1::Rollout>(std::move(rollout));
}

absl::Status EtcdTransaction::PutRollout(const v1::Rollout& rollout) {
  RETURN_IF_ERROR(RequireWrite("PutRollout"));
  if (rollout.rollout_id().empty() && rollout.state() != v1::Rollout::STATE_UNSPECIFIED) {
    return absl::InvalidArgumentError("PutRollout: rollout_id is empty in a started rollout");
  }
  Put(absl::StrCat(snap_.prefix, "/rollout"), Serialized(rollout));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<v1::TenantPolicy>> EtcdTransaction::GetTenantPolicy(
    absl::string_view tenant_id) {
  const std::string key = Key("policies", tenant_id);
  ASSIGN_OR_RETURN(std::optional<std::string> value, Get(key));
  if (!value) return std::optional<v1::TenantPolicy>();
  ASSIGN_OR_RETURN(auto policy, Parse<v1::TenantPolicy>(key, *value, "tenant policy"));
  return std::optional<v1::TenantPolicy>(std::move(policy));
}

absl::Status EtcdTransaction::PutTenantPolicy(const v1::TenantPolicy& policy) {
  RETURN_IF_ERROR(RequireWrite("PutTenantPolicy"));
  if (policy.tenant_id().empty()) {
    return absl::InvalidArgumentError("PutTenantPolicy: tenant_id is empty");
  }
  Put(Key("policies", policy.tenant_id()), Serialized(policy));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::TenantPolicy>> EtcdTransaction::ListTenantPolicies(
    const Page& page) {
  std::vector<v1::TenantPolicy> policies;
  const std::string base = Key("policies", "");
  const std::string begin = page.after.empty() ? base : Key("policies", page.after) + '\0';
  RETURN_IF_ERROR(Scan(begin, etcd::PrefixEnd(base), ClampLimit(page.limit),
                       [&](const std::string& key, const std::string& value) -> absl::StatusOr<bool> {
    ASSIGN_OR_RETURN(auto policy, Parse<v1::TenantPolicy>(key, value, "tenant policy"));
    policies.push_back(std::move(policy));
    return true;
  }));
  return policies;
}

absl::StatusOr<std::optional<v1::Host>> EtcdTransaction::GetHost(absl::string_view host_id) {
  const std::string key = Key("hosts", host_id);
  ASSIGN_OR_RETURN(std::optional<std::string> value, Get(key));
  if (!value) return std::optional<v1::Host>();
  ASSIGN_OR_RETURN(v1::Host host, Parse<v1::Host>(key, *value, "host"));
  return std::optional<v1::Host>(std::move(host));
}

absl::Status EtcdTransaction::PutHost(const v1::Host& host) {
  RETURN_IF_ERROR(RequireWrite("PutHost"));
  if (host.host_id().empty()) return absl::InvalidArgumentError("PutHost: host_id is empty");
  RETURN_IF_ERROR(CheckComponent("PutHost: host_id", host.host_id()));
  // A stored `connected` or `unplaceable_reason` would outlive the moment
  // it describes.
  v1::Host stored = host;
  stored.clear_connected();
  stored.clear_unplaceable_reason();
  Put(Key("hosts", host.host_id()), Serialized(stored));
  return absl::OkStatus();
}

absl::Status EtcdTransaction::DeleteHost(absl::string_view host_id) {
  RETURN_IF_ERROR(RequireWrite("DeleteHost"));
  const std::string key = Key("hosts", host_id);
  ASSIGN_OR_RETURN(std::optional<std::string> value, Get(key));
  if (!value) return absl::NotFoundError(absl::StrCat("host ", host_id, " not found"));
  Delete(key);
  ASSIGN_OR_RETURN(OpenReport * open, Open(host_id));
  open->report.clear_vms();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Host>> EtcdTransaction::ListHosts(const Page& page) {
  std::vector<v1::Host> hosts;
  const std::string base = Key("hosts", "");
  const std::string begin = page.after.empty() ? base : Key("hosts", page.after) + '\0';
  RETURN_IF_ERROR(Scan(begin, etcd::PrefixEnd(base), ClampLimit(page.limit),
                       [&](const std::string& key, const std::string& value) -> absl::StatusOr<bool> {
    ASSIGN_OR_RETURN(v1::Host host, Parse<v1::Host>(key, value, "host"));
    hosts.push_back(std::move(host));
    return true;
  }));
  return hosts;
}

absl::Status EtcdTransaction::RecordChange(absl::string_view host_id, absl::string_view vm_id) {
  RETURN_IF_ERROR(RequireWrite("RecordChange"));
  RETURN_IF_ERROR(WriteRevision().status());
  if (host_id.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckComponent("RecordChange: host_id", host_id));
  // One key per host and VM: etcd sets its mod_revision to the commit's
  // real revision, which is what ChangesSince compares.
  Put(absl::StrCat(Key("changes", host_id), "/", vm_id), "");
  write_->changed_hosts.insert(std::string(host_id));
  return absl::OkStatus();
}

absl::StatusOr<HostChanges> EtcdTransaction::ChangesSince(absl::string_view host_id,
                                                          int64_t revision) {
  HostChanges changes;
  // "Current" as this transaction sees it.
  ASSIGN_OR_RETURN(const int64_t current, ReadRevision());
  if (revision > current || revision < snap_.meta.changes_horizon()) return changes;
  if (revision < snap_.revision) {
    // Once etcd compacted past the revision, this replica cannot tell what
    // an agent at it has (the store may have been restored or migrated
    // since): a snapshot is the safe answer.
    etcdserverpb::RangeRequest probe;
    probe.set_key(absl::StrCat(snap_.prefix, "/meta"));
    probe.set_revision(std::max<int64_t>(revision, 1));
    probe.set_count_only(true);
    absl::StatusOr<etcdserverpb::RangeResponse> probed = snap_.client->RangeOnce(probe);
    if (absl::IsOutOfRange(probed.status())) return changes;
    RETURN_IF_ERROR(probed.status());
  }
  const std::string base = Key("changes", host_id) + "/";
  std::set<std::string> ids;
  for (CachedKv& kv : snap_.view->Range(base, etcd::PrefixEnd(base),
                                        std::numeric_limits<size_t>::max())) {
    if (kv.mod_revision > revision) ids.insert(kv.key.substr(base.size()));
  }
  if (write_ != nullptr) {
    // Its own changes are at its revision, after any it can be asked about.
    for (auto it = write_->writes.lower_bound(base);
         it != write_->writes.end() && absl::StartsWith(it->first, base); ++it) {
      ids.insert(it->first.substr(base.size()));
    }
  }
  changes.vm_ids.assign(ids.begin(), ids.end());
  changes.complete = true;
  changes.revision = current;
  return changes;
}

absl::Status EtcdTransaction::RequireLeadership() {
  RETURN_IF_ERROR(RequireWrite("RequireLeadership"));
  if (write_->fence != 0) return absl::OkStatus();  // an earlier call of the batch checked
  EtcdReplicas* replicas = snap_.replicas;
  const int64_t fence = replicas != nullptr ? replicas->fence() : 0;
  auto not_leading = [&](const std::string& leader) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this csd replica", replicas != nullptr ? absl::StrCat(" (", replicas->name(), ")") : "",
        " does not lead the replicas on ", snap_.prefix, ": ",
        leader.empty() ? "none does at the moment" : absl::StrCat(leader, " does")));
  };
  if (fence == 0) return not_leading(replicas != nullptr ? replicas->leader() : "");
  // Now, linearizably (the cache does not hold the leader key): a
  // leadership lost before is seen here, one lost after fails the Txn's
  // compare (and this runs again).
  etcdserverpb::RangeRequest request;
  request.set_key(absl::StrCat(snap_.prefix, "/leader"));
  ASSIGN_OR_RETURN(etcdserverpb::RangeResponse response, snap_.client->RangeOnce(request));
  if (response.kvs_size() != 1 || response.kvs(0).create_revision() != fence) {
    EtcdReplica leader;
    if (response.kvs_size() == 1 && !leader.ParseFromString(response.kvs(0).value())) {
      leader.Clear();
    }
    replicas->LostFence(fence, leader.name());
    return not_leading(leader.name());
  }
  write_->fence = fence;
  return absl::OkStatus();
}

absl::Status EtcdTransaction::AppendAudit(const v1::AuditRecord& record) {
  RETURN_IF_ERROR(RequireWrite("AppendAudit"));
  if (record.who().empty() || record.method().empty()) {
    return absl::InvalidArgumentError("AppendAudit: who or method is empty");
  }
  // From meta, which every commit compares: unique and increasing across
  // every csd on the prefix.
  const int64_t sequence = write_->meta.audit_sequence() + 1;
  write_->meta.set_audit_sequence(sequence);
  v1::AuditRecord stored = record;
  stored.set_sequence(sequence);
  Put(Key("audit", AuditId(sequence)), Serialized(stored));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::AuditRecord>> EtcdTransaction::ListAuditAfter(
    int64_t after_sequence, int limit) {
  if (write_ != nullptr) {
    return absl::FailedPreconditionError("ListAuditAfter reads committed records: use Store::Read");
  }
  // Keys are newest first: from the range's end backwards is oldest first.
  const std::string base = Key("audit", "");
  etcdserverpb::RangeRequest request;
  request.set_key(base);
  request.set_range_end(after_sequence > 0 ? Key("audit", AuditId(after_sequence))
                                           : etcd::PrefixEnd(base));
  request.set_revision(snap_.revision);
  request.set_sort_order(etcdserverpb::RangeRequest::DESCEND);
  request.set_sort_target(etcdserverpb::RangeRequest::KEY);
  request.set_limit(ClampLimit(limit));
  ASSIGN_OR_RETURN(etcdserverpb::RangeResponse response, snap_.client->RangeOnce(request));
  std::vector<v1::AuditRecord> records;
  for (const mvccpb::KeyValue& kv : response.kvs()) {
    ASSIGN_OR_RETURN(auto record, Parse<v1::AuditRecord>(kv.key(), kv.value(), "audit"));
    records.push_back(std::move(record));
  }
  return records;
}

absl::StatusOr<std::vector<v1::AuditRecord>> EtcdTransaction::ListAudit(
    const AuditFilter& filter, int64_t before_sequence, int limit) {
  std::vector<v1::AuditRecord> records;
  const std::string base = Key("audit", "");
  const std::string begin =
      before_sequence > 0 ? Key("audit", AuditId(before_sequence)) + '\0' : base;
  RETURN_IF_ERROR(Scan(begin, etcd::PrefixEnd(base), ClampLimit(limit),
                       [&](const std::string& key, const std::string& value) -> absl::StatusOr<bool> {
    ASSIGN_OR_RETURN(auto record, Parse<v1::AuditRecord>(key, value, "audit"));
    const bool match = (filter.subject.empty() || record.subject() == filter.subject) &&
                       (filter.who.empty() || record.who() == filter.who) &&
                       record.time_unix_ns() >= filter.since_unix_ns;
    if (match) records.push_back(std::move(record));
    return match;
  }));
  return records;
}

}  // namespace cosched::store
