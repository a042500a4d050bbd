#include "server/state/rollout_view.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/labels.h"
#include "common/names.h"
#include "common/status_macros.h"

namespace cosched::server {

namespace {

RolloutVerdict RolloutOnly(const v1::Rollout* rollout, const v1::Host& host);

}  // namespace

RolloutVerdict VerdictOf(const v1::Rollout* rollout, const v1::Host& host) {
  RolloutVerdict verdict = RolloutOnly(rollout, host);
  if (rollout != nullptr && rollout->enforcement_off()) {
    verdict.off = true;
    verdict.off_reason =
        "an operator switched enforcement off for the whole fleet (csctl hosts enforce on --all)";
  } else if (host.enforcement_off()) {
    verdict.off = true;
    verdict.off_reason = absl::StrCat("an operator switched enforcement off on this host (csctl "
                                      "hosts enforce on ", host.host_id(), ")");
  }
  return verdict;
}

namespace {

RolloutVerdict RolloutOnly(const v1::Rollout* rollout, const v1::Host& host) {
  if (!host.waits_for_rollout()) return {};
  // Enabled for good, whichever rollout did it and whatever came after.
  if (!host.enabled_by_rollout().empty()) return {};
  if (rollout == nullptr || !Started(*rollout)) {
    RolloutVerdict waiting;
    waiting.enabled = false;
    waiting.reason = "it registered while new_hosts was wait-for-rollout, and no rollout has "
                     "enabled it yet (csctl rollout start)";
    return waiting;
  }
  if (!ListedBy(*rollout, host.host_id()).empty()) return {};
  if (rollout->state() == v1::Rollout::STATE_DONE) {
    // Stored by StartRollout, which parsed it: a selector that no longer
    // parses matches nothing.
    absl::StatusOr<LabelSelector> selector = ParseLabelSelector("selector", rollout->selector());
    if (selector.ok() && Matches(*selector, host.labels())) return {};
  }
  RolloutVerdict verdict;
  verdict.enabled = false;
  const std::string& id = rollout->rollout_id();
  switch (rollout->state()) {
    case v1::Rollout::STATE_ABORTED:
      verdict.reason = absl::StrCat("rollout ", id, " was aborted before it enabled this host");
      break;
    case v1::Rollout::STATE_DONE:
      verdict.reason = absl::StrCat("rollout ", id, " enables hosts matching ",
                                    rollout->selector(), " only");
      break;
    default: {
      const int stage = rollout->stage();
      const int percent =
          stage < rollout->stage_percents_size() ? rollout->stage_percents(stage) : 0;
      verdict.reason = absl::StrCat("rollout ", id, " (", RolloutStateName(rollout->state()),
                                    ", stage ", stage + 1, " of ", rollout->stage_percents_size(),
                                    " at ", percent, "%) has not enabled this host yet");
    }
  }
  return verdict;
}

}  // namespace

std::string ListedBy(const v1::Rollout& rollout, absl::string_view host_id) {
  // Sorted by the writer (an older csd); at most what fit in one etcd value.
  auto listed = [host_id](const auto& hosts) {
    return std::binary_search(hosts.begin(), hosts.end(), host_id,
                              [](absl::string_view a, absl::string_view b) { return a < b; });
  };
  if (!listed(rollout.enabled_hosts())) return "";
  // The carried hosts were never sorted apart: a linear scan, in a
  // record that has them only until the next rollout starts.
  for (const std::string& carried : rollout.carried_hosts()) {
    if (carried == host_id) return absl::StrCat("before ", rollout.rollout_id());
  }
  return rollout.rollout_id();
}

std::string EnabledBy(const v1::Rollout* rollout, const v1::Host& host) {
  if (!host.enabled_by_rollout().empty()) return host.enabled_by_rollout();
  if (rollout == nullptr || !Started(*rollout)) return "";
  return ListedBy(*rollout, host.host_id());
}

RolloutCounter::RolloutCounter(const v1::Rollout& rollout) : rollout_(rollout) {
  // Stored by StartRollout, which parsed it.
  if (absl::StatusOr<LabelSelector> s = ParseLabelSelector("selector", rollout.selector());
      s.ok()) {
    selector_ = *std::move(s);
  }
}

void RolloutCounter::Add(const v1::Host& host) {
  if (!host.waits_for_rollout()) return;
  if (selector_ && Matches(*selector_, host.labels())) ++matching_;
  const std::string by = EnabledBy(&rollout_, host);
  if (!by.empty()) {
    ++enabled_;
    if (by != rollout_.rollout_id()) ++carried_;
  } else if (VerdictOf(&rollout_, host).enabled) {
    ++enabled_;  // a done rollout's selector, before the leader records it
  }
}

void RolloutCounter::Fill(v1::Rollout& rollout) const {
  rollout.set_matching_hosts(matching_);
  rollout.set_enabled_count(enabled_);
  rollout.set_carried_count(carried_);
}

uint64_t RolloutHash(absl::string_view host_id) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : host_id) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

std::vector<std::string> StageHosts(std::vector<std::string> matching, int percent) {
  const size_t n = matching.size();
  size_t take = (n * static_cast<size_t>(std::clamp(percent, 0, 100)) + 99) / 100;
  if (n > 0 && take == 0) take = 1;
  if (take == n) return matching;  // every one: no order to find
  // Each host's hash once, not at every comparison (a rollout's check
  // orders every waiting host of the fleet).
  std::vector<std::pair<uint64_t, std::string>> ordered;
  ordered.reserve(n);
  for (std::string& h : matching) {
    const uint64_t hash = RolloutHash(h);
    ordered.emplace_back(hash, std::move(h));
  }
  std::nth_element(ordered.begin(), ordered.begin() + static_cast<std::ptrdiff_t>(take),
                   ordered.end());
  std::sort(ordered.begin(), ordered.begin() + static_cast<std::ptrdiff_t>(take));
  std::vector<std::string> stage;
  stage.reserve(take);
  for (size_t i = 0; i < take; ++i) stage.push_back(std::move(ordered[i].second));
  return stage;
}

absl::Status RolloutView::Load(store::Store& store) {
  std::optional<v1::Rollout> rollout;
  RETURN_IF_ERROR(store.Read([&rollout](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(rollout, txn.GetRollout());
    return absl::OkStatus();
  }));
  Set(std::move(rollout));
  return absl::OkStatus();
}

void RolloutView::Set(std::optional<v1::Rollout> rollout) {
  std::shared_ptr<const v1::Rollout> next;
  if (rollout) {
    auto sorted = std::make_shared<v1::Rollout>(std::move(*rollout));
    std::sort(sorted->mutable_enabled_hosts()->begin(), sorted->mutable_enabled_hosts()->end());
    next = std::move(sorted);
  }
  std::lock_guard<std::mutex> lock(mu_);
  rollout_ = std::move(next);
}

std::optional<v1::Rollout> RolloutView::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!rollout_) return std::nullopt;
  return *rollout_;
}

RolloutVerdict RolloutView::VerdictFor(const v1::Host& host) const {
  std::shared_ptr<const v1::Rollout> rollout;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rollout = rollout_;
  }
  return VerdictOf(rollout.get(), host);
}

bool RolloutView::FleetOff() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rollout_ && rollout_->enforcement_off();
}

v1::NewHosts RolloutView::NewHosts() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!rollout_ || rollout_->new_hosts() == v1::NEW_HOSTS_UNSPECIFIED) {
    return v1::NEW_HOSTS_ENFORCE;
  }
  return rollout_->new_hosts();
}

}  // namespace cosched::server
