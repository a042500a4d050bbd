// The recorded day of stats windows (stats_answers.h).
#include "tests/server/stats/stats_answers.h"

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "openssl/sha.h"
#include "server/stats/stats_aggregator.h"

namespace cosched::server {
namespace {

constexpr int64_t kSec = 1000000000;
// Not on a minute or hour boundary, so buckets split windows.
constexpr int64_t kStart = 1800000000LL * kSec + 7 * kSec + 123456789;

// Numbers from a fixed generator used raw (the standard distributions'
// outputs differ between standard libraries; the engine's do not).
class Numbers {
 public:
  explicit Numbers(uint64_t seed) : engine_(seed) {}
  int64_t Below(int64_t bound) { return static_cast<int64_t>(engine_() % static_cast<uint64_t>(bound)); }

 private:
  std::mt19937_64 engine_;
};

v1::SiblingShare RandomShare(Numbers& n, int64_t window_ns, int vcpus, bool forced_idle) {
  v1::SiblingShare s;
  const int64_t run = n.Below(window_ns * vcpus);
  int64_t left = run;
  auto part = [&] {
    const int64_t p = left == 0 ? 0 : n.Below(left / 2 + 1);
    left -= p;
    return p;
  };
  s.set_run_ns(run);
  s.set_same_ns(part());
  s.set_idle_ns(part());
  s.set_foreign_ns(part());
  s.set_unknown_ns(part());
  s.set_foreign_intervals(s.foreign_ns() == 0 ? 0 : 1 + n.Below(40));
  s.set_longest_foreign_ns(s.foreign_ns() == 0 ? 0 : n.Below(s.foreign_ns()) + 1);
  s.set_forced_idle_known(forced_idle);
  if (forced_idle) s.set_forced_idle_ns(n.Below(window_ns / 4));
  return s;
}

// A host's VMs as the simulation runs: which it reports now, under which
// id (a VM reported by UUID is kept under its tagged id).
struct SimHost {
  std::string id;
  int64_t window_ns = 10 * kSec;  // its agent's report interval
  int batch = 1;                  // windows a Report carries
  std::vector<std::string> vms;   // reported ids
  int64_t last_end = kStart;
  std::vector<v1::StatsWindow> pending;
};

std::string Digest(const v1::GetStatsResponse& r) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(r, &text);
  unsigned char sha[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), sha);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(sha), 8));
}

std::string Line(int64_t minute, const std::string& query, const v1::GetStatsResponse& r) {
  return absl::StrCat("t+", minute, "m ", query, " windows=", r.windows(), " vms=", r.vms_size(),
                      " run=", r.total().run_ns(), " same=", r.total().same_ns(),
                      " start=", r.start_unix_ns(), " end=", r.end_unix_ns(),
                      " cores=", r.cores_size(), " gone_run=", r.gone_vms().run_ns(),
                      " digest=", Digest(r));
}

}  // namespace

std::vector<std::string> RecordedStatsAnswers() {
  int64_t now = kStart;
  StatsAggregator stats([&now] { return now; });
  // The store's word on VMs: those deleted are reported nowhere; tenants
  // by the VM's last digit (tenant-a: even, tenant-b: odd; "-x" VMs are
  // untagged).
  absl::flat_hash_map<std::string, bool> deleted;
  stats.SetVmFacts([&deleted](const std::vector<std::string>& ids)
                       -> absl::StatusOr<absl::flat_hash_map<std::string,
                                                             StatsAggregator::VmFacts>> {
    absl::flat_hash_map<std::string, StatsAggregator::VmFacts> facts;
    for (const std::string& id : ids) {
      StatsAggregator::VmFacts f;
      f.reported = !deleted.contains(id);
      if (id.back() != 'x') f.tenant = (id.back() - '0') % 2 == 0 ? "tenant-a" : "tenant-b";
      facts[id] = f;
    }
    return facts;
  });

  std::vector<SimHost> hosts(3);
  for (int h = 0; h < 3; ++h) {
    hosts[h].id = absl::StrCat("host-", h);
    for (int v = 0; v < 6; ++v) hosts[h].vms.push_back(absl::StrCat("h", h, "-vm", v));
  }
  hosts[1].window_ns = 7 * kSec;
  hosts[2].batch = 3;  // three windows a Report, as after a reconnect
  hosts[2].vms.push_back("uuid-5e1f");  // reported by UUID, tagged as "tagged-vm4"
  const absl::flat_hash_map<std::string, std::string> alias = {{"uuid-5e1f", "tagged-vm4"}};
  const absl::flat_hash_map<std::string, std::string> none;
  hosts[0].vms.push_back("roam-vm6");  // migrates to host-1 at 5 h
  hosts[0].vms.push_back("scratch-x");  // untagged, deleted at 7 h

  Numbers n(20261207);
  std::vector<std::string> lines;
  std::vector<std::string> all_ids;
  for (const SimHost& h : hosts) {
    for (const std::string& v : h.vms) all_ids.push_back(alias.contains(v) ? alias.at(v) : v);
  }
  all_ids.push_back("h1-vm7");  // starts at 9 h
  // Tagged now (the deleted h0-vm5, tenant-b's, is folded into its gone VMs).
  const std::map<std::string, std::vector<std::string>> tenants = {
      {"tenant-a", {"h0-vm0", "h0-vm2", "h0-vm4", "h1-vm0", "h1-vm2", "h1-vm4", "h2-vm0", "h2-vm2",
                    "roam-vm6", "tagged-vm4"}},
      {"tenant-b", {"h0-vm1", "h0-vm3", "h1-vm1", "h1-vm3", "h1-vm5", "h1-vm7", "h2-vm1",
                    "h2-vm3", "h2-vm5"}}};

  const int64_t end = kStart + 26 * 3600 * kSec;
  int64_t next_check = kStart + 17 * 60 * kSec;
  for (now = kStart; now < end; now += kSec) {
    const int64_t minute = (now - kStart) / (60 * kSec);
    // The fleet's changes.
    if (now == kStart + 3 * 3600 * kSec) {  // h0-vm5 is deleted
      std::erase(hosts[0].vms, "h0-vm5");
      deleted["h0-vm5"] = true;
    }
    if (now == kStart + 5 * 3600 * kSec) {  // roam-vm6 migrates
      std::erase(hosts[0].vms, "roam-vm6");
      hosts[1].vms.push_back("roam-vm6");
    }
    if (now == kStart + 7 * 3600 * kSec) {
      std::erase(hosts[0].vms, "scratch-x");
      deleted["scratch-x"] = true;
    }
    if (now == kStart + 9 * 3600 * kSec) hosts[1].vms.push_back("h1-vm7");
    // host-2 is silent for 40 minutes at 12 h (its agent restarting).
    const bool host2_silent = now >= kStart + 12 * 3600 * kSec &&
                              now < kStart + 12 * 3600 * kSec + 40 * 60 * kSec;

    for (size_t hi = 0; hi < hosts.size(); ++hi) {
      SimHost& h = hosts[hi];
      if (now - h.last_end < h.window_ns) continue;
      if (hi == 2 && host2_silent) {
        h.last_end = now;  // the windows of the silence are lost
        continue;
      }
      v1::StatsWindow w;
      // Some windows start a little after the last one ended (an agent's
      // gap), and end a second or two before csd's now (the way there).
      w.set_start_unix_ns(h.last_end + (n.Below(10) == 0 ? n.Below(2 * kSec) : 0));
      w.set_end_unix_ns(now - n.Below(2 * kSec));
      if (w.end_unix_ns() <= w.start_unix_ns()) w.set_end_unix_ns(w.start_unix_ns() + kSec);
      h.last_end = w.end_unix_ns();
      const int64_t length = w.end_unix_ns() - w.start_unix_ns();
      w.set_lost_events(n.Below(20) == 0 ? n.Below(100) : 0);
      for (const std::string& vm : h.vms) {
        v1::VMStats* s = w.add_vms();
        s->set_vm_id(vm);
        *s->mutable_share() = RandomShare(n, length, 2 + static_cast<int>(vm.size() % 3),
                                          vm.size() % 2 == 0);
      }
      for (int c = 0; c < 4; ++c) {
        v1::CoreShare* core = w.add_cores();
        core->set_core(c);
        int64_t left = length;
        const int64_t busy = n.Below(left + 1);
        left -= busy;
        const int64_t one = n.Below(left + 1);
        left -= one;
        core->set_both_busy_ns(busy);
        core->set_one_idle_ns(one);
        core->set_both_idle_ns(left);
      }
      h.pending.push_back(std::move(w));
      if (static_cast<int>(h.pending.size()) < h.batch) continue;
      google::protobuf::RepeatedPtrField<v1::StatsWindow> report;
      for (v1::StatsWindow& p : h.pending) *report.Add() = std::move(p);
      h.pending.clear();
      stats.Add(h.id, report, /*dropped_windows=*/n.Below(50) == 0 ? 1 + n.Below(3) : 0,
                hi == 2 ? alias : none, static_cast<int>(h.vms.size()));
    }

    if (now < next_check) continue;
    next_check += 47 * 60 * kSec;
    for (int64_t span : {60, 600, 3600, 21600, 86400}) {
      lines.push_back(Line(minute, absl::StrCat("vms span=", span), stats.QueryVms(all_ids, span)));
    }
    lines.push_back(Line(minute, "vm roam-vm6 span=3600", stats.QueryVms({"roam-vm6"}, 3600)));
    lines.push_back(Line(minute, "vm tagged-vm4 span=600", stats.QueryVms({"tagged-vm4"}, 600)));
    for (const SimHost& h : hosts) {
      for (int64_t span : {300, 3600, 86400}) {
        lines.push_back(Line(minute, absl::StrCat("host ", h.id, " span=", span),
                             stats.QueryHost(h.id, span)));
      }
      for (int64_t ago_minutes : {25, 90}) {
        lines.push_back(Line(minute, absl::StrCat("host-since ", h.id, " ago=", ago_minutes, "m"),
                             stats.QueryHostSince(h.id, now - ago_minutes * 60 * kSec)));
      }
    }
    for (const auto& [tenant, ids] : tenants) {
      for (int64_t span : {600, 86400}) {
        lines.push_back(Line(minute, absl::StrCat("tenant ", tenant, " span=", span),
                             stats.QueryTenant(tenant, ids, span)));
      }
    }
  }
  return lines;
}

}  // namespace cosched::server
