#include "server/state/rollout_enrolment.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "server/state/rollout_view.h"

namespace cosched::server {

bool Enrolling(const v1::Rollout& record) {
  return record.state() == v1::Rollout::STATE_RUNNING ||
         record.state() == v1::Rollout::STATE_DONE;
}

namespace {

// One commit of an enrolment (RolloutControl::EnableHosts): marks each of
// `hosts` that still waits with the rollout that enables it, into
// `marked`, and audits them in one record. Nothing once `rollout_id` is no
// longer the current rollout.
absl::Status MarkEnabled(store::Transaction& txn, const std::string& rollout_id,
                         const std::string& why, const std::vector<std::string>& hosts,
                         const Actor& actor, std::vector<v1::Host>& marked,
                         v1::AuditRecord& audit) {
  marked.clear();
  audit.Clear();
  ASSIGN_OR_RETURN(std::optional<v1::Rollout> record, txn.GetRollout());
  if (!record || record->rollout_id() != rollout_id) return absl::OkStatus();
  for (const std::string& id : hosts) {
    ASSIGN_OR_RETURN(std::optional<v1::Host> host, txn.GetHost(id));
    if (!host || !host->waits_for_rollout() || !host->enabled_by_rollout().empty()) continue;
    std::string by = ListedBy(*record, id);
    if (by.empty()) {
      if (!Enrolling(*record)) continue;
      by = rollout_id;
    }
    host->set_enabled_by_rollout(std::move(by));
    RETURN_IF_ERROR(txn.PutHost(*host));
    marked.push_back(*std::move(host));
  }
  if (marked.empty()) return absl::OkStatus();
  std::vector<absl::string_view> ids;
  for (const v1::Host& h : marked) ids.push_back(h.host_id());
  return internal::Audit(txn, actor.who, actor.role, "EnableRolloutHosts", rollout_id, nullptr,
                         nullptr, 0, &audit,
                         absl::StrCat(why, ": ", marked.size(), " host(s): ",
                                      absl::StrJoin(ids, ", ")));
}

// A write over the store's limits (EtcdStore's RESOURCE_EXHAUSTED for one
// write function), which a smaller one may not be.
bool TooLarge(const absl::Status& status) {
  return absl::IsResourceExhausted(status) &&
         absl::StrContains(status.message(), "too large for one etcd transaction");
}

// What the commits of one enrolment share.
struct Enrolment {
  std::mutex mu;
  int pending = 0;     // commits not answered yet
  absl::Status first;  // the first failure
  int enabled = 0;
  EnableDone done;

  void Begin() {
    std::lock_guard<std::mutex> lock(mu);
    ++pending;
  }
  // One commit answered (`status`, `marked` hosts): the last one calls done.
  void End(const absl::Status& status, int marked) {
    EnableDone finished;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (status.ok()) {
        enabled += marked;
      } else if (first.ok()) {
        first = status;
      }
      if (--pending > 0) return;
      finished = std::move(done);
    }
    finished(first, enabled);
  }
};

}  // namespace

void EnableRolloutHosts(store::Store& store, PlacementView& placement,
                        const std::string& rollout_id, const std::string& why,
                        std::vector<std::string> hosts, const Actor& actor, EnableDone done) {
  if (hosts.empty()) return done(absl::OkStatus(), 0);
  std::sort(hosts.begin(), hosts.end());
  auto enrolment = std::make_shared<Enrolment>();
  enrolment->done = std::move(done);
  // Submits one commit of `chunk`; one the store finds too large comes
  // back as two halves. All are submitted at once: the store's group
  // commit packs as many into each Txn as its limits take.
  auto submit = std::make_shared<std::function<void(std::vector<std::string>)>>();
  *submit = [&store, &placement, rollout_id, why, actor, enrolment,
             weak = std::weak_ptr<std::function<void(std::vector<std::string>)>>(submit)](
                std::vector<std::string> chunk) {
    enrolment->Begin();
    auto marked = std::make_shared<std::vector<v1::Host>>();
    auto audit = std::make_shared<v1::AuditRecord>();
    auto ids = std::make_shared<std::vector<std::string>>(std::move(chunk));
    store.Write(
        [rollout_id, why, actor, ids, marked, audit](store::Transaction& txn) {
          return MarkEnabled(txn, rollout_id, why, *ids, actor, *marked, *audit);
        },
        [&placement, enrolment, ids, marked, audit, weak](absl::Status status) {
          std::shared_ptr<std::function<void(std::vector<std::string>)>> again = weak.lock();
          if (TooLarge(status) && ids->size() > 1 && again) {
            // Nothing of it was written: its halves go instead.
            const auto middle = ids->begin() + static_cast<std::ptrdiff_t>(ids->size() / 2);
            (*again)(std::vector<std::string>(ids->begin(), middle));
            (*again)(std::vector<std::string>(middle, ids->end()));
            return enrolment->End(absl::OkStatus(), 0);
          }
          if (status.ok() && !marked->empty()) {
            PlacementDelta delta;
            delta.hosts = *marked;
            placement.Apply(delta);
            internal::LogAudit(*audit);
          }
          enrolment->End(status, status.ok() ? static_cast<int>(marked->size()) : 0);
        });
  };
  // Held by the enrolment until its last commit answers: a halving
  // submits from a done callback.
  auto keep = submit;
  enrolment->done = [keep, done = std::move(enrolment->done)](absl::Status s, int n) mutable {
    keep.reset();
    done(s, n);
  };
  // One count over the submission itself, so that a commit answered
  // before the last one is submitted cannot finish the enrolment.
  enrolment->Begin();
  for (size_t at = 0; at < hosts.size(); at += kEnableChunk) {
    const size_t end = std::min(hosts.size(), at + kEnableChunk);
    (*submit)(std::vector<std::string>(hosts.begin() + static_cast<std::ptrdiff_t>(at),
                                       hosts.begin() + static_cast<std::ptrdiff_t>(end)));
  }
  enrolment->End(absl::OkStatus(), 0);
}

}  // namespace cosched::server
