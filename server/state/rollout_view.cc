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
  const std::string& host_id = host.host_id();
  if (rollout == nullptr || !Started(*rollout)) {
    RolloutVerdict waiting;
    waiting.enabled = false;
    waiting.reason = "it registered while new_hosts was wait-for-rollout, and no rollout has "
                     "enabled it yet (csctl rollout start)";
    return waiting;
  }
  // Sorted by the writer (RolloutControl), and a few thousand at most.
  if (std::binary_search(rollout->enabled_hosts().begin(), rollout->enabled_hosts().end(),
                         host_id)) {
    return {};
  }
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

uint64_t RolloutHash(absl::string_view host_id) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : host_id) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

std::vector<std::string> StageHosts(std::vector<std::string> matching, int percent) {
  std::sort(matching.begin(), matching.end(), [](const std::string& a, const std::string& b) {
    const uint64_t ha = RolloutHash(a);
    const uint64_t hb = RolloutHash(b);
    return ha != hb ? ha < hb : a < b;
  });
  const size_t n = matching.size();
  size_t take = (n * static_cast<size_t>(std::clamp(percent, 0, 100)) + 99) / 100;
  if (n > 0 && take == 0) take = 1;
  matching.resize(take);
  return matching;
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
