// Which hosts are live, and what each one's last Report said, as every csd
// replica sees it. An agent talks to one replica, and a Report that changes
// nothing is not written to the store, so a replica learns of the others'
// agents only from their seen records (<prefix>/seen/<replica>, written
// every store.etcd.liveness_interval_ms under the replica's lease:
// store/etcd_replicas.h). This merges what this csd heard itself with
// those records: Place and ExplainVM judge liveness by it, `csctl hosts`
// shows it, and a staged rollout halts on it (a host silent for
// rollout.no_report_halt_s, a hazard, reconcile errors) whichever replica
// the host's agent talks to.
//
// Times come from the clock of the replica that heard the Report: replicas
// need synchronised clocks (NTP) as the rest of the fleet does.
#ifndef COSCHED_SERVER_STATE_HOST_LIVENESS_H_
#define COSCHED_SERVER_STATE_HOST_LIVENESS_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cosched/store/etcd_records.pb.h"
#include "cosched/v1/agent.pb.h"

namespace cosched::server {

// What a Report shows wrong, as a staged rollout judges a regression: a
// hazard in its preflight, or a VM whose enforcement FAILED or is PARTIAL
// (reconcile errors); in a sentence, empty when healthy.
std::string ReportProblem(const v1::ReportRequest& report);

// Thread-safe.
class HostLiveness {
 public:
  struct Seen {
    // When the host's agent last reported; InfinitePast when the replica
    // that holds its stream has not had a Report since it started.
    absl::Time time = absl::InfinitePast();
    // ReportProblem of that Report.
    std::string problem;
    // Its applied_revision: newer than the host's record, which a Report
    // writes only when more than the host's liveness changed, or its
    // stored liveness is a minute old (reports.cc, HostRecordDue).
    int64_t applied_revision = 0;
    // Its agent holds an assignment stream on the replica that said so.
    bool connected = false;
    // The replica that heard it; empty: this csd.
    std::string replica;
    // The other replica that holds its stream (when `connected`), and
    // when that replica wrote the record that says so.
    std::string connected_to;
    absl::Time connected_as_of = absl::InfinitePast();
  };

  // A Report of this csd's agents, at `now`.
  void Note(const v1::ReportRequest& report, absl::Time now);
  // The host was removed: what this csd heard of it goes.
  void Forget(absl::string_view host_id);

  // What this csd heard itself of the host's last Report.
  std::optional<Seen> Local(absl::string_view host_id) const;
  // The latest Report of the host to any replica: this csd's or one in the
  // others' records; `connected` is whether another replica holds its
  // stream (this csd's own streams are the fan-out's to say).
  std::optional<Seen> Latest(absl::string_view host_id) const;
  // Another replica holds the host's stream, by a record it wrote at or
  // after `not_before`: a replica that cannot read the records any more
  // (etcd away) keeps the last ones, and a stream they name may be long
  // gone.
  bool ConnectedElsewhere(absl::string_view host_id, absl::Time not_before) const;
  // Which one; empty when none does.
  std::string ConnectedReplica(absl::string_view host_id, absl::Time not_before) const;

  // This csd's record for the others: every host it heard a Report from
  // and every host in `connected` (those whose agents hold a stream here).
  std::vector<store::EtcdSeenHost> Record(const std::vector<std::string>& connected) const;
  // The others' records as read now: replaces the last ones. A host in
  // several (its agent moved) counts as its latest Report says.
  void SetOthers(const std::vector<store::EtcdSeen>& others);

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, Seen> local_;   // guarded by mu_
  absl::flat_hash_map<std::string, Seen> others_;  // guarded by mu_
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_STATE_HOST_LIVENESS_H_
