#include "server/stats/stats_queries.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/validation.h"

namespace cosched::server {
namespace {

constexpr int64_t kDefaultStatsSeconds = 300;

}  // namespace

absl::StatusOr<v1::GetStatsResponse> StatsQueries::GetStats(
                                                            const v1::GetStatsRequest& request) {
  ASSIGN_OR_RETURN(StatsQuery query, QueryStats(request));
  if (!HasStats(query.stats)) return absl::NotFoundError(query.not_found);
  return std::move(query.stats);
}

StatsAggregator::VmFactsFn VmFactsIn(store::Store& store) {
  return [&store](const std::vector<std::string>& vm_ids)
             -> absl::StatusOr<absl::flat_hash_map<std::string, StatsAggregator::VmFacts>> {
    absl::flat_hash_map<std::string, StatsAggregator::VmFacts> facts;
    RETURN_IF_ERROR(store.Read([&](store::Transaction& txn) -> absl::Status {
      facts.clear();  // a Read may run its function again
      for (const std::string& id : vm_ids) {
        StatsAggregator::VmFacts& f = facts[id];
        ASSIGN_OR_RETURN(std::optional<store::Observation> seen, txn.FindObservation(id));
        f.reported = seen.has_value();
        ASSIGN_OR_RETURN(std::optional<v1::VM> vm, txn.GetVm(id));
        if (vm) f.tenant = vm->tenant_id();
      }
      return absl::OkStatus();
    }));
    return facts;
  };
}

absl::StatusOr<StatsQueries::StatsQuery> StatsQueries::QueryStats(
    const v1::GetStatsRequest& request) {
  if (request.window_seconds() < 0 ||
      request.window_seconds() > kMaxStatsSpanSeconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "window_seconds must be between 1 and ", kMaxStatsSpanSeconds,
        " (0 means ", kDefaultStatsSeconds, ")"));
  }
  const int64_t span = request.window_seconds() == 0 ? kDefaultStatsSeconds
                                                     : request.window_seconds();
  v1::GetStatsResponse response;
  std::string subject;
  switch (request.subject_case()) {
    case v1::GetStatsRequest::kVmId:
      RETURN_IF_ERROR(ValidateId("vm_id", request.vm_id()));
      subject = absl::StrCat("vm '", request.vm_id(), "'");
      response = stats_.QueryVms({request.vm_id()}, span);
      break;
    case v1::GetStatsRequest::kHostId:
      RETURN_IF_ERROR(ValidateId("host_id", request.host_id()));
      subject = absl::StrCat("host '", request.host_id(), "'");
      response = stats_.QueryHost(request.host_id(), span);
      break;
    case v1::GetStatsRequest::kTenant:
    case v1::GetStatsRequest::kTrustGroup: {
      store::VmFilter filter;
      if (request.has_tenant()) {
        RETURN_IF_ERROR(ValidateId("tenant", request.tenant()));
        filter.tenant_id = request.tenant();
        subject = absl::StrCat("tenant '", request.tenant(), "'");
      } else {
        if (request.trust_group().empty() ||
            request.trust_group().size() > kMaxTrustGroupLength) {
          return absl::InvalidArgumentError(absl::StrCat(
              "trust_group must be 1-", kMaxTrustGroupLength, " bytes"));
        }
        filter.trust_group = request.trust_group();
        subject = absl::StrCat("trust group '", request.trust_group(), "'");
      }
      std::vector<std::string> vm_ids;
      RETURN_IF_ERROR(store_.Read([&](store::Transaction& txn) -> absl::Status {
        ASSIGN_OR_RETURN(auto vms, store::ListAllVms(txn, filter));
        for (const v1::VM& vm : vms) vm_ids.push_back(vm.vm_id());
        return absl::OkStatus();
      }));
      response = request.has_tenant() ? stats_.QueryTenant(request.tenant(), vm_ids, span)
                                      : stats_.QueryVms(vm_ids, span);
      break;
    }
    case v1::GetStatsRequest::SUBJECT_NOT_SET:
      return absl::InvalidArgumentError(
          "one of vm_id, host_id, tenant, trust_group is required");
  }
  return StatsQuery{std::move(response), absl::StrCat("no stats were reported for ", subject,
                                                     " in the last ", span, " s")};
}

}  // namespace cosched::server
