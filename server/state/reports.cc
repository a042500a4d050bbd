// The write of an agent's Report: the VMs the host runs now (presence,
// ownership, tags from domain metadata), its preflight and enablement, and
// its stats windows.
#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/labels.h"
#include "common/log_every.h"
#include "common/names.h"
#include "common/status_macros.h"
#include "common/validation.h"
#include "glog/logging.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "openssl/evp.h"
#include "server/state/agent_input.h"
#include "server/state/metadata_tag.h"
#include "server/state/reports.h"
#include "server/state/vm_names.h"
#include "server/state/vm_presence.h"

namespace cosched::server {
namespace {

using internal::DropUnlistedStats;
using internal::RecordReceiverChanges;
using internal::ValidateDomainMetadata;
using internal::ValidateEnforcement;
using internal::ValidateOptionalId;
using internal::ValidatePreflight;
using internal::ValidateStatsCores;
using internal::WriteAndAnswer;
using google::protobuf::util::TimeUtil;
using store::ListAllVms;

// A Report names at most this many VMs.
constexpr int kMaxReportedVms = 10000;

// One VM of a Report, its fields named within it (the caller names the
// VM only when one is wrong); `ids`: the Report's VM ids so far.
absl::Status ValidateObservation(const v1::VMObservation& o,
                                 absl::flat_hash_set<absl::string_view>& ids) {
  RETURN_IF_ERROR(ValidateId("vm_id", o.vm_id()));
  RETURN_IF_ERROR(ValidateOptionalId("uuid", o.uuid()));
  RETURN_IF_ERROR(ValidateEnforcement("enforcement", o.enforcement()));
  if (o.has_metadata()) RETURN_IF_ERROR(ValidateDomainMetadata("metadata", o.metadata()));
  if (!v1::VMRunState_IsValid(o.run_state())) {
    return absl::InvalidArgumentError("run_state is not a known run state");
  }
  if (!ids.insert(o.vm_id()).second) {
    return absl::InvalidArgumentError(
        absl::StrCat("vm_id '", o.vm_id(), "' is reported twice"));
  }
  return absl::OkStatus();
}

// The checks of a Report's own fields, after its host id and rate.
absl::Status ValidateReport(const v1::ReportRequest& request) {
  absl::Status valid;
  if (request.applied_revision() < 0) {
    valid = absl::InvalidArgumentError("applied_revision must not be negative");
  }
  if (valid.ok() && request.vms_size() > kMaxReportedVms) {
    valid = absl::InvalidArgumentError(
        absl::StrCat("vms has ", request.vms_size(), " entries; at most ",
                     kMaxReportedVms, " are allowed"));
  }
  absl::flat_hash_set<absl::string_view> ids;
  ids.reserve(static_cast<size_t>(request.vms_size()));
  for (int i = 0; valid.ok() && i < request.vms_size(); ++i) {
    valid = InElement("vms", i, ValidateObservation(request.vms(i), ids));
  }
  if (valid.ok()) valid = ValidateStatsWindows(request.stats(), request.dropped_windows());
  if (valid.ok()) valid = ValidatePreflight("preflight", request.preflight());
  if (valid.ok()) valid = internal::ValidateImpostors(request);
  return valid;
}

// What a Report's write did, for what follows its commit. Reset by each run
// of the write (a store may run it again).
struct ReportWrite {
  // Reported vm_id -> the id the VM is tagged under, where they differ.
  absl::flat_hash_map<std::string, std::string> tagged_id;
  PlacementDelta delta;
  std::vector<std::string> moves;  // "vm from 'a' to 'b'", for the log
  int cores = 0;                   // of the host's registered topology
  MetadataWrites from_metadata;
};

// Which of a host's VMs a Report's write looks at.
struct ReportScope {
  // Null: every VM of the host, as the store has them (nothing is
  // remembered of its last Report: csd started, or the host's VMs were
  // tagged or untagged elsewhere). Else only the VMs whose observations
  // these reported ids are (written or deleted by this Report), and the
  // VMs they were tagged under before (`tagged_before`: the remembered
  // Report's tagged ids); the host's other VMs are as the last written
  // Report left them.
  const std::vector<std::string>* changed = nullptr;
  const absl::flat_hash_map<std::string, std::string>* tagged_before = nullptr;
};

bool OnHost(const v1::VM& vm, const std::string& host_id) {
  if (vm.host_id() == host_id) return true;
  for (const v1::VMPresence& p : vm.presence()) {
    if (p.host_id() == host_id) return true;
  }
  return false;
}

// The VMs of `scope` on the host and every tagged VM among its
// observations in scope (tagged from its metadata when
// `tag_from_metadata`), with what it reports of each (`seen`, pointing
// into `observations`); the host's tagged ids in `out`.
absl::Status ReadReportedVms(
    store::Transaction& txn, const std::string& host_id,
    const google::protobuf::RepeatedPtrField<v1::VMObservation>& observations,
    bool tag_from_metadata, const ReportScope& scope, ReportWrite& out,
    std::map<std::string, v1::VM>& vms,
    std::map<std::string, const v1::VMObservation*>& seen) {
  absl::flat_hash_set<absl::string_view> changed;
  if (scope.changed == nullptr) {
    for (const store::VmFilter& filter :
         {store::VmFilter::OwnedBy(host_id), store::VmFilter::ReportedOn(host_id)}) {
      ASSIGN_OR_RETURN(auto listed, ListAllVms(txn, filter));
      for (v1::VM& vm : listed) vms.emplace(vm.vm_id(), std::move(vm));
    }
  } else {
    out.tagged_id = *scope.tagged_before;
    for (const std::string& id : *scope.changed) {
      changed.insert(id);
      auto before = scope.tagged_before->find(id);
      const std::string& tagged = before == scope.tagged_before->end() ? id : before->second;
      out.tagged_id.erase(id);
      ASSIGN_OR_RETURN(std::optional<v1::VM> vm, txn.GetVm(tagged));
      if (vm && OnHost(*vm, host_id)) vms.emplace(vm->vm_id(), *std::move(vm));
    }
  }
  for (const auto& o : observations) {
    if (scope.changed != nullptr && !changed.contains(o.vm_id())) continue;
    ASSIGN_OR_RETURN(std::optional<v1::VM> vm, TaggedVmOf(txn, host_id, o));
    if (tag_from_metadata) {
      const std::string before = vm ? vm->vm_id() : "";
      ASSIGN_OR_RETURN(vm, TagFromMetadata(txn, host_id, o, std::move(vm), out.from_metadata));
      // Untagged now: not written back below.
      if (!vm && !before.empty()) vms.erase(before);
    }
    if (!vm) continue;
    if (vm->vm_id() != o.vm_id()) out.tagged_id[o.vm_id()] = vm->vm_id();
    seen[vm->vm_id()] = &o;
    // As read now: tagging from metadata may have rewritten the VM
    // listed above.
    vms.insert_or_assign(vm->vm_id(), *std::move(vm));
  }
  return absl::OkStatus();
}

// Writes each VM of `vms` with its presence on the host as reported now
// (`seen`), its owner and any metadata conflict; audits a change of owner.
absl::Status WritePresence(store::Transaction& txn, const std::string& host_id,
                           const google::protobuf::Timestamp& now, bool tag_from_metadata,
                           std::map<std::string, v1::VM>& vms,
                           const std::map<std::string, const v1::VMObservation*>& seen,
                           ReportWrite& out) {
  for (auto& [vm_id, vm] : vms) {
    v1::VM updated = vm;
    auto it = seen.find(vm_id);
    SetPresence(updated, host_id,
                it == seen.end() ? std::nullopt
                                 : std::optional<v1::VMObservation>(*it->second),
                now);
    ResolveOwner(updated);
    if (it != seen.end() && updated.host_id() == host_id) NoteDomainName(updated, *it->second);
    // Metadata counts from the owner only, and what every host that
    // reports the VM says must agree with it (issue #32).
    if (tag_from_metadata && updated.conflict().empty() && !updated.metadata_host().empty() &&
        (updated.presence_size() > 1 || updated.host_id() != updated.metadata_host())) {
      ASSIGN_OR_RETURN(std::string conflict,
                       MetadataConflict(txn, updated, host_id,
                                        it == seen.end() ? nullptr : it->second,
                                        out.from_metadata.hosts));
      updated.set_conflict(std::move(conflict));
    }
    if (!google::protobuf::util::MessageDifferencer::Equals(updated, vm)) {
      RETURN_IF_ERROR(RecordReceiverChanges(txn, &vm, &updated));
      RETURN_IF_ERROR(txn.PutVm(updated));
      // A first placement or a VM gone everywhere is no migration.
      if (updated.host_id() != vm.host_id() && !vm.host_id().empty() &&
          !updated.host_id().empty()) {
        out.moves.push_back(absl::StrCat(vm_id, " from '", vm.host_id(), "' to '",
                                         updated.host_id(), "'"));
        v1::AuditRecord logged;
        RETURN_IF_ERROR(internal::Audit(txn, host_id, "host", "ChangeOwner", vm_id, &vm,
                                        &updated, 0, &logged));
      }
    }
    ASSIGN_OR_RETURN(PlacedVm placed, PlacedVmOf(txn, updated));
    out.delta.vms.push_back(std::move(placed));
  }
  return absl::OkStatus();
}

// How stale the host record's last_seen_time and applied_revision may get
// before a changed Report writes them with nothing else of the host
// changed. They are what a restarted csd shows until the host's next
// Report; while it runs, every replica has them from memory
// (host_liveness.h), so a Report that changes one VM need not rewrite the
// host.
constexpr absl::Duration kHostRecordRefresh = absl::Seconds(60);

// Whether a changed Report must write the host record `updated` over
// `stored`: a field other than its liveness changed, or the stored
// liveness is older than kHostRecordRefresh.
bool HostRecordDue(const v1::Host& stored, const v1::Host& updated) {
  google::protobuf::util::MessageDifferencer same;
  same.IgnoreField(v1::Host::descriptor()->FindFieldByName("last_seen_time"));
  same.IgnoreField(v1::Host::descriptor()->FindFieldByName("applied_revision"));
  if (!same.Compare(stored, updated)) return true;
  if (!stored.has_last_seen_time()) return true;
  return TimeUtil::TimestampToNanoseconds(updated.last_seen_time()) -
             TimeUtil::TimestampToNanoseconds(stored.last_seen_time()) >=
         absl::ToInt64Nanoseconds(kHostRecordRefresh);
}

// A changed Report's write: the observations that changed, the VMs whose
// presence or owner changed, tags from metadata, and the host record when
// HostRecordDue.
// `tagged_before`: the remembered Report's tagged ids, null when none is
// remembered (then the write looks at every VM of the host).
absl::Status WriteReport(store::Transaction& txn, const v1::ReportRequest& request,
                         bool tag_from_metadata,
                         const absl::flat_hash_map<std::string, std::string>* tagged_before,
                         ReportWrite& out) {
  out = ReportWrite();
  const std::string& host_id = request.host_id();
  ASSIGN_OR_RETURN(auto host, txn.GetHost(host_id));
  if (!host) {
    return absl::FailedPreconditionError(
        absl::StrCat("host '", host_id, "' is not registered; call Register first"));
  }
  RETURN_IF_ERROR(ValidateStatsCores(request.stats(), host->topology()));
  out.cores = host->topology().cores_size();

  // Only the VMs whose observation changed are written, stamped with
  // csd's time; an unchanged one keeps the time it was last written at
  // (what reads show is lifted to the host's last Report: vms.cc).
  const auto now = TimeUtil::GetCurrentTime();
  ASSIGN_OR_RETURN(const std::vector<std::string> changed,
                   store::ReplaceObservations(txn, host_id, request.vms(), &now));
  std::map<std::string, v1::VM> vms;
  std::map<std::string, const v1::VMObservation*> seen;
  ReportScope scope;
  if (tagged_before != nullptr) scope = ReportScope{&changed, tagged_before};
  RETURN_IF_ERROR(
      ReadReportedVms(txn, host_id, request.vms(), tag_from_metadata, scope, out, vms, seen));
  out.delta.removed_vms = out.from_metadata.untagged_vms;
  RETURN_IF_ERROR(WritePresence(txn, host_id, now, tag_from_metadata, vms, seen, out));

  v1::Host updated = *host;
  *updated.mutable_last_seen_time() = now;
  updated.set_applied_revision(request.applied_revision());
  updated.set_vm_count(request.vms_size());
  if (request.has_preflight() &&
      !google::protobuf::util::MessageDifferencer::Equals(host->capabilities().preflight(),
                                                          request.preflight())) {
    // A hazard came or went: Place must see it at once.
    *updated.mutable_capabilities()->mutable_preflight() = request.preflight();
    out.delta.hosts.push_back(updated);
  }
  // What the host says of processes posing as VMs: shown, never acted on.
  updated.mutable_impostors()->CopyFrom(request.impostors());
  updated.set_impostor_count(request.impostor_count());
  if (!HostRecordDue(*host, updated)) return absl::OkStatus();
  return txn.PutHost(updated);
}

}  // namespace

void Reports::ApplyReport(std::shared_ptr<v1::ReportRequest> own,
                          Done<v1::ReportResponse> done) {
  const v1::ReportRequest& request = *own;
  absl::Status valid = ValidateId("host_id", request.host_id());
  // Before anything else is read of it: a Report past the host's rate
  // costs csd no more than this.
  if (valid.ok()) valid = report_rate_.Admit(request.host_id());
  if (valid.ok()) valid = ValidateReport(request);
  if (!valid.ok()) return done(valid);
  // Every answer says whether the host should set cookies, so a change of
  // the setting or of the host's vulnerabilities reaches a running agent.
  status_.liveness().Note(request, absl::Now());
  std::optional<v1::Host> registered = effects_.placement().HostRecord(request.host_id());
  done = [enablement = EnablementOf(request.preflight(), settings_.enforce_policy(),
                                    registered ? rollout_.VerdictFor(*registered) : RolloutVerdict{}),
          done = std::move(done)](absl::StatusOr<v1::ReportResponse> r) mutable {
    if (r.ok()) *r->mutable_enablement() = enablement;
    done(std::move(r));
  };

  // Agents stamp report_time on every Report; csd stamps its own on what
  // it stores, so the agent's is neither what changed nor kept.
  for (v1::VMObservation& vm : *own->mutable_vms()) {
    if (vm.has_enforcement()) vm.mutable_enforcement()->clear_report_time();
  }
  // Stats of VMs the Report does not list are dropped here, before the
  // store, the stats kept in memory or the leader see them.
  auto dropped_ids = std::make_shared<std::vector<std::string>>();
  const int64_t dropped = DropUnlistedStats(*own, dropped_ids.get());
  if (dropped > 0) {
    COSCHED_LOG_EVERY_T(WARNING, 60) << "host " << request.host_id() << ": dropped " << dropped
                             << " stats entries of VMs its Report does not list, e.g. "
                             << (*dropped_ids)[0] << " (logged once a minute)";
    done = [dropped, dropped_ids, done = std::move(done)](
               absl::StatusOr<v1::ReportResponse> r) mutable {
      if (r.ok()) {
        r->set_dropped_vm_stats(dropped);
        for (std::string& id : *dropped_ids) r->add_dropped_vm_ids(std::move(id));
      }
      done(std::move(r));
    };
  }
  std::shared_ptr<const v1::ReportRequest> report = std::move(own);
  const ReportDigest content = ReportContent(request);
  const ReportDigest state = ReportState(request);
  ReportMemory::Judged judged = effects_.reports().Judge(
      request, content, state, absl::Now(), settings_.enforcement_write_interval());
  if (judged.verdict != ReportMemory::Verdict::kWrite) {
    // What the host runs is what its last written Report said: nothing to
    // write, no revision, no fan-out. Only its time, its stats windows
    // and, when held, its enforcement are new.
    v1::Topology topology;
    for (int i = 0; i < judged.cores; ++i) topology.add_cores();
    absl::Status stats_valid = ValidateStatsCores(request.stats(), topology);
    if (!stats_valid.ok()) return done(stats_valid);
    return AddReportStats(report, std::move(judged.tagged_id), std::move(done));
  }

  auto write = std::make_shared<ReportWrite>();
  // What is remembered of the host's last written Report: the write then
  // looks only at the VMs whose observations changed.
  const uint64_t judged_version = judged.version;
  auto tagged_before = judged_version == 0
                           ? nullptr
                           : std::make_shared<const absl::flat_hash_map<std::string, std::string>>(
                                 std::move(judged.tagged_id));
  internal::WriteAndAnswer<v1::ReportResponse>(
      &store_,
      [report, write, tagged_before, tag_from_metadata = settings_.tag_from_metadata()](
          store::Transaction& txn, v1::ReportResponse&) {
        return WriteReport(txn, *report, tag_from_metadata, tagged_before.get(), *write);
      },
      [this, report, content, state, write, judged_version, done = std::move(done)](
          absl::StatusOr<v1::ReportResponse> r) mutable {
        if (!r.ok()) return done(r.status());
        effects_.placement().Apply(write->delta);
        for (const v1::AuditRecord& audit : write->from_metadata.audits) {
          internal::LogAudit(audit);
        }
        for (const std::string& host : write->from_metadata.hosts) {
          if (host != report->host_id()) effects_.reports().Forget(host);
        }
        for (const std::string& move : write->moves) {
          LOG(INFO) << "host " << report->host_id() << ": owner of vm " << move;
        }
        effects_.reports().Remember(
            report->host_id(), ReportMemory::Seen{content, state, write->cores, write->tagged_id},
            judged_version);
        effects_.NotifyLayout(report->host_id());
        AddReportStats(report, std::move(write->tagged_id), std::move(done));
      });
}

void Reports::AddReportStats(
                             std::shared_ptr<const v1::ReportRequest> report,
                             absl::flat_hash_map<std::string, std::string> tagged_id,
                             Done<v1::ReportResponse> done) {
  v1::ReportResponse response;
  response.set_revision(store_.CurrentRevision());
  // Only a committed (or unchanged) Report counts: a refused one changes
  // nothing. Answered once its windows are in, so the agent's next Report
  // and any GetStats after the answer see them.
  auto tagged = std::make_shared<const absl::flat_hash_map<std::string, std::string>>(
      std::move(tagged_id));
  if (stats_observer_ && report->stats_size() > 0) stats_observer_(report, tagged);
  stats_.AddInBackground(
      report, tagged,
      [host = report->host_id(), done = std::move(done), response](int64_t ignored) {
        LOG_IF_EVERY_N(WARNING, ignored > 0, 100)
            << "host " << host << ": ignored " << ignored
            << " stats window(s) already reported, over 24 h old or "
               "ahead of csd's clock (logged every 100th time)";
        done(response);
      });
}

namespace {

void WriteMessage(google::protobuf::io::CodedOutputStream& out,
                  const google::protobuf::MessageLite& message) {
  out.WriteVarint64(message.ByteSizeLong());
  message.SerializeWithCachedSizes(&out);
}

void WriteText(google::protobuf::io::CodedOutputStream& out, const std::string& text) {
  out.WriteVarint64(text.size());
  out.WriteString(text);
}

// A stream that hashes what is written to it (SHA-256) instead of keeping
// it: a Report's content is digested without a copy of it.
class Sha256OutputStream final : public google::protobuf::io::ZeroCopyOutputStream {
 public:
  Sha256OutputStream() : sha_(EVP_MD_CTX_new()) {
    if (sha_ != nullptr) EVP_DigestInit_ex(sha_.get(), EVP_sha256(), nullptr);
  }

  bool Next(void** data, int* size) override {
    Flush();
    *data = buffer_.data();
    *size = static_cast<int>(buffer_.size());
    given_ = buffer_.size();
    return true;
  }
  void BackUp(int count) override { given_ -= static_cast<size_t>(count); }
  int64_t ByteCount() const override { return static_cast<int64_t>(hashed_ + given_); }

  ReportDigest Finish() {
    Flush();
    ReportDigest digest{};
    if (sha_ == nullptr || EVP_DigestFinal_ex(sha_.get(), digest.data(), nullptr) != 1) {
      // OpenSSL out of memory: a digest no other Report gets, so that the
      // Report is written rather than judged unchanged.
      static std::atomic<uint64_t> failures{0};
      const uint64_t n = ++failures;
      digest.fill(0xff);
      std::memcpy(digest.data(), &n, sizeof(n));
    }
    return digest;
  }

 private:
  void Flush() {
    if (sha_ != nullptr && given_ > 0) EVP_DigestUpdate(sha_.get(), buffer_.data(), given_);
    hashed_ += given_;
    given_ = 0;
  }

  struct FreeContext {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
  };
  std::unique_ptr<EVP_MD_CTX, FreeContext> sha_;
  std::array<unsigned char, 4096> buffer_;
  size_t given_ = 0;  // bytes of buffer_ handed out and not backed up
  size_t hashed_ = 0;
};

// Runs `write` on a deterministic stream and digests what it wrote.
template <typename F>
ReportDigest Digested(F write) {
  Sha256OutputStream stream;
  {
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    write(out);
  }
  return stream.Finish();
}

}  // namespace

// Both run for every Report, on its own message, without a copy of it.
// Each field of VMObservation is in one of them: a field added there must
// be added to one here.
ReportDigest Reports::ReportContent(const v1::ReportRequest& request) {
  return Digested([&](google::protobuf::io::CodedOutputStream& out) {
    for (const v1::VMObservation& o : request.vms()) {
      WriteText(out, o.vm_id());
      WriteText(out, o.uuid());
      out.WriteVarint32(static_cast<uint32_t>(o.run_state()));
      out.WriteVarint32(o.metadata_unknown() ? 1 : 0);
      out.WriteVarint32(o.has_metadata() ? 1 : 0);
      if (o.has_metadata()) WriteMessage(out, o.metadata());
      // What placement and the engine read of a VM (placement_view.h).
      out.WriteVarint32(static_cast<uint32_t>(o.enforcement().vcpus()));
      out.WriteVarint32(static_cast<uint32_t>(o.enforcement().vcpu_affinity_size()));
      for (int32_t cpu : o.enforcement().vcpu_affinity()) {
        out.WriteVarint32(static_cast<uint32_t>(cpu));
      }
    }
    // A hazard that comes or goes changes the host, so it is content; so
    // does a process posing as a VM.
    out.WriteVarint32(request.has_preflight() ? 1 : 0);
    if (request.has_preflight()) WriteMessage(out, request.preflight());
    out.WriteVarint32(static_cast<uint32_t>(request.impostor_count()));
    for (const v1::ImpostorProcess& impostor : request.impostors()) WriteMessage(out, impostor);
  });
}

ReportDigest Reports::ReportState(const v1::ReportRequest& request) {
  return Digested([&](google::protobuf::io::CodedOutputStream& out) {
    out.WriteVarint64(static_cast<uint64_t>(request.applied_revision()));
    // ApplyReport took the agent's report_time out.
    for (const v1::VMObservation& o : request.vms()) WriteMessage(out, o.enforcement());
  });
}

}  // namespace cosched::server
