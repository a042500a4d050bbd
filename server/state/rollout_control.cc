#include "server/state/rollout_control.h"

#include <algorithm>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/labels.h"
#include "common/log_every.h"
#include "common/names.h"
#include "common/rollout_spec.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "glog/logging.h"
#include "google/protobuf/util/time_util.h"
#include "server/state/rollout_enrolment.h"
#include "server/state/write_support.h"

namespace cosched::server {
namespace {

using google::protobuf::util::TimeUtil;

google::protobuf::Timestamp ProtoTime(absl::Time t) {
  return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}

absl::Time TimeOf(const google::protobuf::Timestamp& t) {
  return absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(t));
}

bool Active(const v1::Rollout& rollout) {
  return rollout.state() == v1::Rollout::STATE_RUNNING ||
         rollout.state() == v1::Rollout::STATE_PAUSED ||
         rollout.state() == v1::Rollout::STATE_HALTED;
}

// Every registered host, inside one transaction.
absl::StatusOr<std::vector<v1::Host>> AllHosts(store::Transaction& txn) {
  std::vector<v1::Host> all;
  store::Page page;
  page.limit = internal::kMaxPageSize;
  while (true) {
    ASSIGN_OR_RETURN(std::vector<v1::Host> hosts, txn.ListHosts(page));
    for (v1::Host& h : hosts) all.push_back(std::move(h));
    if (static_cast<int>(hosts.size()) < page.limit) return all;
    page.after = all.back().host_id();
  }
}

std::vector<std::string> MatchingHosts(const std::vector<v1::Host>& hosts,
                                       const LabelSelector& selector) {
  std::vector<std::string> matching;
  for (const v1::Host& h : hosts) {
    if (Matches(selector, h.labels())) matching.push_back(h.host_id());
  }
  return matching;
}

// The hosts a rollout concerns: those the selector matches that wait for
// a rollout. Every other host enforces already, and a rollout only enables.
std::vector<std::string> WaitingHosts(const std::vector<v1::Host>& hosts,
                                      const LabelSelector& selector) {
  std::vector<std::string> waiting;
  for (const v1::Host& h : hosts) {
    if (h.waits_for_rollout() && Matches(selector, h.labels())) waiting.push_back(h.host_id());
  }
  return waiting;
}

// The free text an operator gives a change for the audit trail.
absl::Status ValidateReason(const std::string& reason) {
  if (reason.size() <= internal::kMaxDetailLength) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("reason must be at most ", internal::kMaxDetailLength, " characters"));
}

}  // namespace

RolloutOptions RolloutOptionsFromConfig(const v1::RolloutConfig& config) {
  RolloutOptions options;
  if (config.has_check_interval_s()) {
    options.check_interval = std::chrono::seconds(config.check_interval_s());
  }
  if (config.has_no_report_halt_s()) {
    options.no_report_halt = std::chrono::seconds(config.no_report_halt_s());
  }
  if (config.has_min_soak_s()) options.min_soak_s = config.min_soak_s();
  return options;
}

absl::Status ValidateRolloutOptions(const RolloutOptions& options) {
  const int64_t interval = options.check_interval.count();
  if (interval < 1 || interval > 3600) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rollout.check_interval_s must be 1 to 3600 seconds (unset: 10), got ", interval));
  }
  const int64_t halt = options.no_report_halt.count();
  if (halt < 1 || halt > 86400) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rollout.no_report_halt_s must be 1 to 86400 seconds (unset: 120), got ", halt));
  }
  if (options.min_soak_s < 1 || options.min_soak_s > kMaxSoakSeconds) {
    return absl::InvalidArgumentError(absl::StrCat("rollout.min_soak_s must be 1 to ",
                                                   kMaxSoakSeconds, " seconds (unset: 60), got ",
                                                   options.min_soak_s));
  }
  return absl::OkStatus();
}

void AddRolloutCounts(const PlacementView& hosts, v1::Rollout& rollout) {
  if (!Started(rollout)) return;
  RolloutCounter counter(rollout);
  hosts.ForEachHost([&counter](const v1::Host& host) { counter.Add(host); });
  counter.Fill(rollout);
}

RolloutControl::RolloutControl(store::Store& store, RolloutView& rollout, const HostStatus& hosts,
                               PlacementView& placement, RolloutOptions options, Clock clock,
                               Observer observer, ReplicaCheck replicas)
    : store_(store),
      rollout_(rollout),
      hosts_(hosts),
      placement_(placement),
      replicas_(std::move(replicas)),
      options_(options),
      clock_(clock ? std::move(clock) : Clock([] { return absl::Now(); })),
      observer_(std::move(observer)) {}

RolloutControl::~RolloutControl() { Stop(); }

void RolloutControl::Start() { thread_ = NamedThread("cs-rollout", [this] { Loop(); }); }

void RolloutControl::Stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

RolloutOptions RolloutControl::options() const {
  std::lock_guard<std::mutex> lock(options_mu_);
  return options_;
}

void RolloutControl::SetOptions(const RolloutOptions& options) {
  {
    std::lock_guard<std::mutex> lock(options_mu_);
    options_ = options;
  }
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    options_changed_ = true;
  }
  wake_.notify_all();
}

void RolloutControl::Loop() {
  std::unique_lock<std::mutex> lock(wake_mu_);
  while (!stopping_) {
    const std::chrono::seconds interval = options().check_interval;
    // A reload's new interval restarts the wait, without a check.
    if (wake_.wait_for(lock, interval, [this] { return stopping_ || options_changed_; })) {
      if (stopping_) break;
      options_changed_ = false;
      continue;
    }
    lock.unlock();
    if (absl::Status pass = RunPass(); !pass.ok()) {
      COSCHED_LOG_EVERY_T(WARNING, 60) << "rollout: the check failed, tried again in "
                               << interval.count() << " s: " << pass;
    }
    lock.lock();
  }
}

void RolloutControl::Committed(const v1::Rollout& rollout, const v1::AuditRecord& audit) {
  rollout_.Set(rollout);
  internal::LogAudit(audit);
  if (observer_) observer_(rollout);
}

v1::Rollout RolloutControl::Answer(v1::Rollout record) const {
  AddRolloutCounts(placement_, record);
  return record;
}


absl::StatusOr<v1::Rollout> RolloutControl::GetRollout() const {
  std::optional<v1::Rollout> rollout;
  RETURN_IF_ERROR(store_.Read([&rollout](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(rollout, txn.GetRollout());
    return absl::OkStatus();
  }));
  if (!rollout) {
    return absl::NotFoundError("no rollout was started (csctl rollout start)");
  }
  // Only the new_hosts setting, when no rollout was started: answered too,
  // for what it says of new hosts.
  return Answer(*std::move(rollout));
}

namespace {

// StartRollout's record: stage 0 of `request` running from `now`, with the
// fleet settings `record` (the record before, if any) held. It lists no
// host: those it enables are marked on their host records.
v1::Rollout NewRollout(const v1::StartRolloutRequest& request,
                       const std::optional<v1::Rollout>& record, int64_t revision,
                       absl::Time now, const Actor& actor) {
  v1::Rollout r;
  if (record) {
    r.set_new_hosts(record->new_hosts());
    r.set_enforcement_off(record->enforcement_off());
  }
  r.set_rollout_id(absl::StrCat("r-", revision));
  r.set_selector(request.selector());
  *r.mutable_stage_percents() = request.stage_percents();
  r.set_soak_seconds(request.soak_seconds());
  r.set_state(v1::Rollout::STATE_RUNNING);
  r.set_stage(0);
  *r.mutable_stage_started_time() = ProtoTime(now);
  *r.mutable_started_time() = ProtoTime(now);
  *r.mutable_updated_time() = ProtoTime(now);
  r.set_started_by(actor.who);
  return r;
}

// Why an enrolment of `r` enables hosts, for the audit trail.
std::string StageText(const v1::Rollout& r) {
  if (!Enrolling(r)) return "listed in the rollout's record by an older csd";
  if (r.state() == v1::Rollout::STATE_DONE) return "the rollout is done";
  const int percent = r.stage() < r.stage_percents_size() ? r.stage_percents(r.stage()) : 0;
  return absl::StrCat("stage ", r.stage() + 1, " of ", r.stage_percents_size(), " (", percent,
                      "%)");
}

}  // namespace

void RolloutControl::StartRollout(const v1::StartRolloutRequest& request, const Actor& actor,
                                  Done<v1::Rollout> done) {
  std::vector<int> percents(request.stage_percents().begin(), request.stage_percents().end());
  absl::Status valid = ValidateStagePercents("stage_percents", percents);
  if (valid.ok()) valid = ValidateSoak("soak_seconds", request.soak_seconds(), options().min_soak_s);
  absl::StatusOr<LabelSelector> selector = ParseLabelSelector("selector", request.selector());
  if (valid.ok()) valid = selector.status();
  // A replica of an older csd would read the new record's empty host lists
  // as every carried host disabled.
  if (valid.ok() && replicas_) valid = replicas_();
  if (!valid.ok()) return done(valid);

  auto result = std::make_shared<v1::Rollout>();
  auto audit = std::make_shared<v1::AuditRecord>();
  auto delta = std::make_shared<PlacementDelta>();
  auto first_stage = std::make_shared<std::vector<std::string>>();
  const absl::Time now = clock_();
  store_.Write(
      [request, actor, parsed = *selector, now, result, audit, delta, first_stage](
          store::Transaction& txn) -> absl::Status {
        result->Clear();
        audit->Clear();
        *delta = PlacementDelta();
        first_stage->clear();
        ASSIGN_OR_RETURN(std::optional<v1::Rollout> record, txn.GetRollout());
        // The rollout before, if any (the record may hold new_hosts only).
        std::optional<v1::Rollout> previous;
        if (record && Started(*record)) previous = record;
        if (previous && Active(*previous)) {
          return absl::FailedPreconditionError(absl::StrCat(
              "rollout ", previous->rollout_id(), " is ", RolloutStateName(previous->state()),
              ": only one rollout runs at a time; abort it (csctl rollout abort) first"));
        }
        ASSIGN_OR_RETURN(std::vector<v1::Host> hosts, AllHosts(txn));
        const std::vector<std::string> matching = MatchingHosts(hosts, parsed);
        if (matching.empty()) {
          return absl::InvalidArgumentError(
              request.selector().empty()
                  ? absl::StrCat("selector (empty: every host) must match a registered host; ",
                                 "none is registered")
                  : absl::StrCat("selector '", request.selector(), "' must match a registered ",
                                 "host; it matches none of the ", hosts.size(), " registered"));
        }
        // What the rollouts before enabled stays so: a new rollout only
        // ever adds hosts. The hosts the record before enables without a
        // mark (its list, written by an older csd, or its done selector)
        // are marked now, since the new record will not say it; the
        // leader marks them at each check, so these are the few since.
        std::set<std::string> enabled;
        std::vector<v1::Host> unmarked;
        for (v1::Host& h : hosts) {
          if (!h.waits_for_rollout()) continue;
          if (!h.enabled_by_rollout().empty()) {
            enabled.insert(h.host_id());
          } else if (previous && VerdictOf(&*previous, h).enabled) {
            std::string by = ListedBy(*previous, h.host_id());
            h.set_enabled_by_rollout(by.empty() ? previous->rollout_id() : std::move(by));
            unmarked.push_back(h);
            enabled.insert(h.host_id());
          }
        }
        if (unmarked.size() > kEnableChunk) {
          return absl::UnavailableError(absl::StrCat(
              unmarked.size(), " host(s) rollout ", previous->rollout_id(),
              " enabled are not yet marked on their host records (the leader marks them at ",
              "its next check, within rollout.check_interval_s): try again then"));
        }
        for (const v1::Host& h : unmarked) {
          RETURN_IF_ERROR(txn.PutHost(h));
          delta->hosts.push_back(h);
        }
        const std::vector<std::string> waiting = WaitingHosts(hosts, parsed);
        if (std::all_of(waiting.begin(), waiting.end(),
                        [&](const std::string& h) { return enabled.count(h) != 0; })) {
          return absl::FailedPreconditionError(absl::StrCat(
              "every one of the ", matching.size(), " host(s) ",
              request.selector().empty() ? "registered"
                                         : absl::StrCat("matching '", request.selector(), "'"),
              " already enforces: a rollout only enables hosts that wait for one (hosts that "
              "registered while new_hosts was wait-for-rollout: csctl rollout new-hosts); "
              "nothing was changed"));
        }
        for (std::string& h : StageHosts(waiting, request.stage_percents(0))) {
          if (enabled.count(h) == 0) first_stage->push_back(std::move(h));
        }
        ASSIGN_OR_RETURN(int64_t revision, txn.WriteRevision());
        v1::Rollout& r = *result;
        r = NewRollout(request, record, revision, now, actor);
        RETURN_IF_ERROR(txn.PutRollout(r));
        return internal::Audit(txn, actor.who, actor.role, "StartRollout", r.rollout_id(),
                               record ? &*record : nullptr, &r, revision, audit.get());
      },
      [this, actor, result, audit, delta, first_stage,
       done = std::move(done)](absl::Status status) mutable {
        if (!status.ok()) return done(status);
        placement_.Apply(*delta);
        Committed(*result, *audit);
        // The first stage's hosts, in commits of their own after the
        // record's; answered once they are all in.
        EnableRolloutHosts(store_, placement_, result->rollout_id(), StageText(*result),
                           std::move(*first_stage), actor,
                    [this, result, done = std::move(done)](absl::Status enabled, int) {
                      if (!enabled.ok()) {
                        LOG(WARNING) << "rollout " << result->rollout_id()
                                     << ": enabling its first stage's hosts failed, the "
                                        "leader's next check enables the rest: "
                                     << enabled;
                      }
                      done(Answer(*result));
                    });
      });
}

void RolloutControl::ChangeRollout(Change change, const v1::ChangeRolloutRequest& request,
                                   const Actor& actor, Done<v1::Rollout> done) {
  if (absl::Status valid = ValidateReason(request.reason()); !valid.ok()) return done(valid);
  auto result = std::make_shared<v1::Rollout>();
  auto audit = std::make_shared<v1::AuditRecord>();
  auto wrote = std::make_shared<bool>(false);
  const absl::Time now = clock_();
  store_.Write(
      [change, request, actor, now, result, audit, wrote](
          store::Transaction& txn) -> absl::Status {
        result->Clear();
        audit->Clear();
        *wrote = false;
        ASSIGN_OR_RETURN(std::optional<v1::Rollout> current, txn.GetRollout());
        if (!current || !Started(*current)) {
          return absl::NotFoundError("no rollout was started (csctl rollout start)");
        }
        if (!request.rollout_id().empty() && request.rollout_id() != current->rollout_id()) {
          return absl::FailedPreconditionError(
              absl::StrCat("rollout_id '", request.rollout_id(), "' is not the current rollout (",
                           current->rollout_id(), ")"));
        }
        *result = *current;
        const v1::Rollout::State state = current->state();
        const char* method = "";
        v1::Rollout& r = *result;
        switch (change) {
          case Change::kPause:
            if (state == v1::Rollout::STATE_PAUSED) return absl::OkStatus();
            if (state != v1::Rollout::STATE_RUNNING) {
              return absl::FailedPreconditionError(absl::StrCat(
                  "rollout ", r.rollout_id(), " is ", RolloutStateName(state),
                  "; only a running rollout pauses"));
            }
            r.set_state(v1::Rollout::STATE_PAUSED);
            method = "PauseRollout";
            break;
          case Change::kResume:
            if (state != v1::Rollout::STATE_PAUSED && state != v1::Rollout::STATE_HALTED) {
              return absl::FailedPreconditionError(absl::StrCat(
                  "rollout ", r.rollout_id(), " is ", RolloutStateName(state),
                  "; only a paused or halted rollout resumes"));
            }
            // The stage soaks again from now: what it proved before the
            // pause or the halt does not count for what comes after.
            r.set_state(v1::Rollout::STATE_RUNNING);
            *r.mutable_stage_started_time() = ProtoTime(now);
            r.clear_halt_reason();
            r.clear_halted_host();
            method = "ResumeRollout";
            break;
          case Change::kAbort:
            if (!Active(*current)) {
              return absl::FailedPreconditionError(absl::StrCat(
                  "rollout ", r.rollout_id(), " is ", RolloutStateName(state),
                  "; only a running, paused or halted rollout aborts"));
            }
            r.set_state(v1::Rollout::STATE_ABORTED);
            method = "AbortRollout";
            break;
        }
        *r.mutable_updated_time() = ProtoTime(now);
        RETURN_IF_ERROR(txn.PutRollout(r));
        *wrote = true;
        return internal::Audit(txn, actor.who, actor.role, method, r.rollout_id(), &*current, &r,
                               0, audit.get(), request.reason());
      },
      [this, result, audit, wrote, done = std::move(done)](absl::Status status) {
        if (!status.ok()) return done(status);
        if (*wrote) Committed(*result, *audit);
        done(Answer(*result));
      });
}

void RolloutControl::SetNewHosts(const v1::SetNewHostsRequest& request, const Actor& actor,
                                 Done<v1::Rollout> done) {
  const v1::NewHosts wanted = request.new_hosts();
  if (wanted != v1::NEW_HOSTS_ENFORCE && wanted != v1::NEW_HOSTS_WAIT_FOR_ROLLOUT) {
    return done(absl::InvalidArgumentError(
        "new_hosts must be NEW_HOSTS_ENFORCE or NEW_HOSTS_WAIT_FOR_ROLLOUT"));
  }
  if (absl::Status valid = ValidateReason(request.reason()); !valid.ok()) return done(valid);
  ChangeSetting(
      "SetNewHosts", "new-hosts", request.reason(), actor,
      [wanted](v1::Rollout& record) {
        const v1::NewHosts was = record.new_hosts() == v1::NEW_HOSTS_UNSPECIFIED
                                     ? v1::NEW_HOSTS_ENFORCE
                                     : record.new_hosts();
        if (was == wanted) return false;
        record.set_new_hosts(wanted);
        return true;
      },
      std::move(done));
}

void RolloutControl::SetFleetEnforcement(const v1::SetHostEnforcementRequest& request,
                                         const Actor& actor,
                                         Done<v1::SetHostEnforcementResponse> done) {
  if (absl::Status valid = internal::ValidateSwitchReason(request.reason()); !valid.ok()) {
    return done(valid);
  }
  ChangeSetting(
      "SetHostEnforcement", "fleet", request.reason(), actor,
      [off = request.off()](v1::Rollout& record) {
        if (record.enforcement_off() == off) return false;
        record.set_enforcement_off(off);
        return true;
      },
      [done = std::move(done)](absl::StatusOr<v1::Rollout> record) {
        if (!record.ok()) return done(record.status());
        v1::SetHostEnforcementResponse response;
        response.set_fleet_off(record->enforcement_off());
        done(response);
      });
}

void RolloutControl::ChangeSetting(absl::string_view method, absl::string_view subject,
                                   const std::string& reason, const Actor& actor,
                                   std::function<bool(v1::Rollout&)> change,
                                   Done<v1::Rollout> done) {
  auto result = std::make_shared<v1::Rollout>();
  auto audit = std::make_shared<v1::AuditRecord>();
  auto wrote = std::make_shared<bool>(false);
  store_.Write(
      [method = std::string(method), subject = std::string(subject), reason, actor,
       change = std::move(change), result, audit, wrote](store::Transaction& txn) -> absl::Status {
        audit->Clear();
        *wrote = false;
        ASSIGN_OR_RETURN(std::optional<v1::Rollout> current, txn.GetRollout());
        *result = current.value_or(v1::Rollout());
        if (!change(*result)) return absl::OkStatus();
        RETURN_IF_ERROR(txn.PutRollout(*result));
        *wrote = true;
        return internal::Audit(txn, actor.who, actor.role, method, subject,
                               current ? &*current : nullptr, &*result, 0, audit.get(), reason);
      },
      [this, result, audit, wrote, done = std::move(done)](absl::Status status) {
        if (!status.ok()) return done(status);
        if (*wrote) Committed(*result, *audit);
        done(Answer(*result));
      });
}

std::string RolloutControl::Regression(const v1::Host& host) const {
  const absl::Duration silent = hosts_.SilentFor(host);
  const std::chrono::seconds no_report_halt = options().no_report_halt;
  if (silent > absl::FromChrono(no_report_halt)) {
    return absl::StrCat("host ", host.host_id(), " stopped reporting: nothing from its agent for ",
                        absl::FormatDuration(absl::Trunc(silent, absl::Seconds(1))),
                        " (rollout.no_report_halt_s ", no_report_halt.count(), ")");
  }
  if (std::optional<HostLiveness::Seen> seen = hosts_.liveness().Latest(host.host_id());
      seen && seen->time != absl::InfinitePast()) {
    if (!seen->problem.empty()) return absl::StrCat("host ", host.host_id(), " ", seen->problem);
    return "";
  }
  // No Report to any replica yet: what it said at Register.
  if (host.capabilities().preflight().hazards_size() > 0) {
    return absl::StrCat("host ", host.host_id(), " reports the hazard ",
                        host.capabilities().preflight().hazards(0).name());
  }
  return "";
}

absl::Status RolloutControl::RunPass() {
  if (!store_.Leads()) return absl::OkStatus();
  auto result = std::make_shared<v1::Rollout>();
  auto audit = std::make_shared<v1::AuditRecord>();
  auto wrote = std::make_shared<bool>(false);
  // The hosts to mark after the record's commit, if any. New marks wait
  // while a replica of an older csd shares the store: it would not read
  // them, and would answer those hosts' agents not-enabled. (Marks of the
  // hosts an older csd's list names only say again what it reads there.)
  std::vector<std::string> to_enable;
  absl::Status replicas = replicas_ ? replicas_() : absl::OkStatus();
  const absl::Time now = clock_();
  RETURN_IF_ERROR(store_.WriteSync([&](store::Transaction& txn) -> absl::Status {
    result->Clear();
    audit->Clear();
    *wrote = false;
    to_enable.clear();
    RETURN_IF_ERROR(txn.RequireLeadership());
    ASSIGN_OR_RETURN(std::optional<v1::Rollout> current, txn.GetRollout());
    if (!current || !Started(*current)) return absl::OkStatus();
    v1::Rollout& r = *result;
    r = *current;
    ASSIGN_OR_RETURN(LabelSelector selector, ParseLabelSelector("selector", current->selector()));
    const bool running = current->state() == v1::Rollout::STATE_RUNNING;
    // One scan of the hosts as this csd's view has them (its commits and
    // the other replicas', as the watch delivered them), not of the
    // store's records: parsing 200 000 of them would hold the writer for
    // a second at each check. Each mark is checked again against the
    // host's record in its own commit.
    std::vector<std::string> listed;   // an older csd's list, not yet marked
    std::vector<std::string> waiting;  // waiting hosts the selector matches
    absl::flat_hash_set<std::string> enabled;
    std::string halted_host, halt_reason;
    placement_.ForEachHost([&](const v1::Host& h) {
      if (!h.waits_for_rollout()) return;
      const std::string by = EnabledBy(&*current, h);
      if (!by.empty()) {
        enabled.insert(h.host_id());
        if (h.enabled_by_rollout().empty()) listed.push_back(h.host_id());
      }
      if (Matches(selector, h.labels())) waiting.push_back(h.host_id());
      // A host this rollout enabled that regressed halts it; those the
      // rollouts before enabled do not.
      if (running && halted_host.empty() && by == current->rollout_id()) {
        halt_reason = Regression(h);  // takes HostStatus' locks, never the view's
        if (!halt_reason.empty()) halted_host = h.host_id();
      }
    });
    // Whatever its state: the hosts an older csd's record lists move onto
    // their host records (they are enabled already; only where it is
    // written changes).
    to_enable = std::move(listed);
    // Only a running rollout moves, and only a running or finished one
    // enables more: a finished one every waiting host its selector
    // matches, later ones included.
    if (!Enrolling(*current)) return absl::OkStatus();
    std::string method;
    std::string reason;
    if (!halted_host.empty()) {
      r.set_state(v1::Rollout::STATE_HALTED);
      r.set_halt_reason(halt_reason);
      r.set_halted_host(halted_host);
      method = "HaltRollout";
      reason = halt_reason;
    } else if (running && now - TimeOf(r.stage_started_time()) >= absl::Seconds(r.soak_seconds())) {
      if (r.stage() + 1 < r.stage_percents_size()) {
        r.set_stage(r.stage() + 1);
        *r.mutable_stage_started_time() = ProtoTime(now);
        method = "AdvanceRollout";
        reason = absl::StrCat("stage ", r.stage(), " soaked ", SoakText(r.soak_seconds()),
                              " with no regression");
      } else {
        r.set_state(v1::Rollout::STATE_DONE);
        method = "FinishRollout";
        reason = absl::StrCat("the last stage soaked ", SoakText(r.soak_seconds()),
                              " with no regression");
      }
    }
    if (r.state() != v1::Rollout::STATE_HALTED && replicas.ok()) {
      // The stage's share of the waiting hosts that match now: hosts
      // registered since the stage began are enrolled as it grows.
      const int percent =
          r.state() == v1::Rollout::STATE_DONE ? 100 : r.stage_percents(r.stage());
      for (std::string& h : StageHosts(std::move(waiting), percent)) {
        if (!enabled.contains(h)) to_enable.push_back(std::move(h));
      }
    }
    if (method.empty()) return absl::OkStatus();
    *r.mutable_updated_time() = ProtoTime(now);
    RETURN_IF_ERROR(txn.PutRollout(r));
    *wrote = true;
    return internal::Audit(txn, kRolloutActor, "leader", method, r.rollout_id(), &*current, &r, 0,
                           audit.get(), reason);
  }));
  if (*wrote) Committed(*result, *audit);
  if (!replicas.ok() && Enrolling(*result)) {
    COSCHED_LOG_EVERY_T(WARNING, 60) << "rollout " << result->rollout_id()
                                     << ": enables no more hosts until every replica is "
                                        "upgraded: " << replicas;
  }
  if (to_enable.empty()) return absl::OkStatus();
  std::promise<absl::Status> enabled;
  EnableRolloutHosts(store_, placement_, result->rollout_id(), StageText(*result),
                     std::move(to_enable), Actor{kRolloutActor, "leader"},
              [&enabled](absl::Status status, int) { enabled.set_value(std::move(status)); });
  return enabled.get_future().get();
}

}  // namespace cosched::server
