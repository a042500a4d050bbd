#include "server/state/host_status.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/time_util.h"
#include "server/state/host_enablement.h"

namespace cosched::server {
namespace {

using google::protobuf::util::TimeUtil;

absl::Time TimeOf(const google::protobuf::Timestamp& t) {
  return absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(t));
}

}  // namespace

std::optional<absl::Time> HostStatus::LastReport(absl::string_view host_id) const {
  std::optional<HostLiveness::Seen> seen = liveness_.Latest(host_id);
  if (!seen || seen->time == absl::InfinitePast()) return std::nullopt;
  return seen->time;
}

absl::Time HostStatus::LastSeen(const v1::Host& host) const {
  absl::Time seen = host.has_last_seen_time() ? TimeOf(host.last_seen_time())
                                              : absl::InfinitePast();
  if (std::optional<absl::Time> reported = LastReport(host.host_id())) {
    seen = std::max(seen, *reported);
  }
  return seen;
}

absl::Duration HostStatus::SilentFor(const v1::Host& host) const {
  return std::max(absl::ZeroDuration(), absl::Now() - LastSeen(host));
}

bool HostStatus::IsConnected(absl::string_view host_id) const {
  return (connected_ && connected_(host_id)) ||
         liveness_.ConnectedElsewhere(host_id, absl::Now() - settings_.host_stale_after());
}

std::string HostStatus::ConnectedReplica(absl::string_view host_id) const {
  if (connected_ && connected_(host_id)) return replica_name_;
  return liveness_.ConnectedReplica(host_id, absl::Now() - settings_.host_stale_after());
}

bool HostStatus::ServedBy(const std::string& host_id, const std::string& replica) const {
  if (replica.empty()) return false;
  std::optional<HostLiveness::Seen> seen = liveness_.Latest(host_id);
  if (!seen || (seen->replica != replica && seen->connected_to != replica)) return false;
  return placement_.HostRecord(host_id).has_value();
}

bool HostStatus::IsLive(const v1::Host& host) const {
  if (IsConnected(host.host_id())) return true;
  return absl::Now() - LastSeen(host) <= settings_.host_stale_after();
}

std::string HostStatus::UnplaceableReason(const v1::Host& host,
                                          bool needs_isolation) const {
  if (host.draining()) return "draining";
  // A host the operator waived counts as isolating without cookies.
  const v1::HostEnablement enablement =
      EnablementOf(host.capabilities().preflight(), settings_.enforce_policy(), rollout_.VerdictFor(host));
  if (enablement.state() == v1::HostEnablement::STATE_WAIVED) {
    needs_isolation = false;
  }
  if (needs_isolation && enablement.state() == v1::HostEnablement::STATE_OFF) {
    return "enforcement off (csctl hosts enforce on)";
  }
  // A staged rollout has not enabled it: its agent makes no cookies.
  if (needs_isolation && enablement.state() == v1::HostEnablement::STATE_NOT_ENABLED) {
    return "not enabled (staged rollout)";
  }
  // Its agent creates no cookies while a hazard lasts.
  if (needs_isolation && host.capabilities().preflight().hazards_size() > 0) {
    return absl::StrCat("unsafe (", host.capabilities().preflight().hazards(0).name(), ")");
  }
  // Where siblings exist, only cookies keep strangers off them.
  if (needs_isolation && host.capabilities().smt_active() &&
      host.capabilities().core_sched() != v1::CORE_SCHED_SUPPORT_SUPPORTED) {
    return "unable to isolate (SMT on, core scheduling not usable)";
  }
  if (!IsLive(host)) {
    return absl::StrCat("not live (no agent connected, no report in ",
                        absl::FormatDuration(settings_.host_stale_after()), ")");
  }
  return "";
}

void HostStatus::AddLiveness(v1::Host& host) const {
  // The last Report's, written or not (reports.h). 0 in a record of a
  // replica older than the field (a rolling upgrade): the host's record.
  if (std::optional<HostLiveness::Seen> seen = liveness_.Latest(host.host_id());
      seen && seen->time != absl::InfinitePast() && seen->applied_revision > 0) {
    host.set_applied_revision(seen->applied_revision);
  }
  *host.mutable_last_seen_time() =
      TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(LastSeen(host)));
  if (LastSeen(host) == absl::InfinitePast()) host.clear_last_seen_time();
  host.set_unplaceable_reason(UnplaceableReason(host, /*needs_isolation=*/true));
  *host.mutable_enablement() =
      EnablementOf(host.capabilities().preflight(), settings_.enforce_policy(), rollout_.VerdictFor(host));
}

}  // namespace cosched::server
