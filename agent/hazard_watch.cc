#include "agent/hazard_watch.h"

#include <utility>

#include "glog/logging.h"
#include "google/protobuf/util/message_differencer.h"

namespace cosched::agent {
namespace {

bool SameHazards(const v1::HostPreflight& a, const v1::HostPreflight& b) {
  if (a.hazards_size() != b.hazards_size() ||
      a.allowed_hazards_size() != b.allowed_hazards_size()) {
    return false;
  }
  using google::protobuf::util::MessageDifferencer;
  for (int i = 0; i < a.hazards_size(); ++i) {
    if (!MessageDifferencer::Equals(a.hazards(i), b.hazards(i))) return false;
  }
  for (int i = 0; i < a.allowed_hazards_size(); ++i) {
    if (!MessageDifferencer::Equals(a.allowed_hazards(i), b.allowed_hazards(i))) return false;
  }
  return true;
}

}  // namespace

HazardWatch::HazardWatch(std::shared_ptr<const host::PseudoFs> fs, HazardWatchOptions options,
                         std::function<void()> on_change)
    : fs_(std::move(fs)),
      options_(std::move(options)),
      rules_(options_.rules),
      on_change_(std::move(on_change)) {}

host::HazardRules HazardWatch::rules() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rules_;
}

void HazardWatch::SetRules(host::HazardRules rules) {
  bool changed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rules_ = std::move(rules);
    v1::HostPreflight next = preflight_;
    host::FindHazards(rules_, next);
    changed = !SameHazards(preflight_, next);
    for (const v1::Hazard& h : next.hazards()) {
      LOG(WARNING) << "hazard " << h.name() << " under the reloaded rules: " << h.detail();
    }
    preflight_ = std::move(next);
  }
  if (changed && on_change_) on_change_();
}

HazardWatch::~HazardWatch() { Stop(); }

void HazardWatch::ReadNow() {
  v1::HostPreflight read = host::ReadPreflight(*fs_, options_.paths);
  host::FindHazards(rules(), read);
  for (const v1::Hazard& h : read.hazards()) {
    LOG(ERROR) << "hazard " << h.name() << ": " << h.detail()
               << "; creating and moving no cookies while it lasts";
  }
  for (const v1::Hazard& h : read.allowed_hazards()) {
    LOG(WARNING) << "hazard " << h.name() << " allowed by allow_hazards: " << h.detail()
                 << "; tagging anyway";
  }
  std::lock_guard<std::mutex> lock(mu_);
  preflight_ = std::move(read);
}

void HazardWatch::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Run(); });
}

void HazardWatch::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

v1::HostPreflight HazardWatch::preflight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return preflight_;
}

std::vector<v1::Hazard> HazardWatch::hazards() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {preflight_.hazards().begin(), preflight_.hazards().end()};
}

bool HazardWatch::Refresh() {
  v1::HostPreflight next = preflight();
  host::ReadSchedExt(*fs_, options_.paths, next);
  std::lock_guard<std::mutex> lock(mu_);
  // Under the lock: a reload's rules are never overwritten by hazards
  // judged under the old ones.
  host::FindHazards(rules_, next);
  const bool changed = !SameHazards(preflight_, next);
  if (changed) {
    for (const v1::Hazard& h : next.hazards()) {
      LOG(ERROR) << "hazard " << h.name() << " appeared: " << h.detail()
                 << "; creating and moving no cookies while it lasts";
    }
    if (next.hazards_size() == 0 && preflight_.hazards_size() > 0) {
      LOG(WARNING) << "no hazard any more; tagging again";
    }
  }
  preflight_ = std::move(next);
  return changed;
}

void HazardWatch::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, options_.poll, [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    if (Refresh() && on_change_) on_change_();
    lock.lock();
  }
}

}  // namespace cosched::agent
