// csctl: the staged rollout commands: rollout start, status, pause, resume,
// abort, new-hosts. (cli/commands.h says how every command validates, calls csd and
// prints.)
#include "absl/strings/str_cat.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "cli/rollout_output.h"
#include "common/labels.h"
#include "common/names.h"
#include "common/rollout_spec.h"

namespace cosched::cli {
namespace {

int PrintAnswer(const v1::Rollout& rollout, const std::string& said,
                const CommandOptions& options, std::ostream& out) {
  if (options.format == OutputFormat::kJson) {
    PrintJson(RolloutToJson(rollout), out);
  } else {
    if (!said.empty()) out << said << "\n\n";
    PrintRollout(rollout, out);
  }
  return kExitOk;
}

}  // namespace

int RunRolloutStart(Stub& stub, const RolloutStartArgs& args, const CommandOptions& options,
                    std::ostream& out, std::ostream& err) {
  absl::StatusOr<std::vector<int>> stages = ParseStagePercents("--stages", args.stages);
  if (!stages.ok()) return UsageError(stages.status(), err);
  // csd may ask for a longer soak (rollout.min_soak_s) and says so.
  absl::StatusOr<int64_t> soak = ParseSoak("--soak", args.soak);
  if (!soak.ok()) return UsageError(soak.status(), err);
  if (absl::Status valid = ParseLabelSelector("--selector", args.selector).status(); !valid.ok()) {
    return UsageError(valid, err);
  }
  v1::StartRolloutRequest request;
  for (int percent : *stages) request.add_stage_percents(percent);
  request.set_soak_seconds(*soak);
  request.set_selector(args.selector);
  v1::Rollout rollout;
  grpc::Status status = stub.StartRollout(MakeContext(options).get(), request, &rollout);
  if (!status.ok()) return RpcError(status, options, "starting a rollout", err);
  return PrintAnswer(rollout,
                     absl::StrCat("started rollout ", rollout.rollout_id(), ": stage 1 enabled ",
                                  rollout.enabled_count() - rollout.carried_count(), " host(s)"),
                     options, out);
}

int RunRolloutStatus(Stub& stub, const CommandOptions& options, std::ostream& out,
                     std::ostream& err) {
  v1::Rollout rollout;
  grpc::Status status =
      stub.GetRollout(MakeContext(options).get(), v1::GetRolloutRequest(), &rollout);
  if (!status.ok()) return RpcError(status, options, "the rollout", err);
  return PrintAnswer(rollout, "", options, out);
}

int RunRolloutChange(Stub& stub, RolloutChange change, const RolloutChangeArgs& args,
                     const CommandOptions& options, std::ostream& out, std::ostream& err) {
  v1::ChangeRolloutRequest request;
  request.set_rollout_id(args.rollout_id);
  request.set_reason(args.reason);
  v1::Rollout rollout;
  grpc::Status status;
  const char* verb = "";
  switch (change) {
    case RolloutChange::kPause:
      status = stub.PauseRollout(MakeContext(options).get(), request, &rollout);
      verb = "paused";
      break;
    case RolloutChange::kResume:
      status = stub.ResumeRollout(MakeContext(options).get(), request, &rollout);
      verb = "resumed";
      break;
    case RolloutChange::kAbort:
      status = stub.AbortRollout(MakeContext(options).get(), request, &rollout);
      verb = "aborted";
      break;
  }
  if (!status.ok()) return RpcError(status, options, "the rollout", err);
  return PrintAnswer(rollout, absl::StrCat("rollout ", rollout.rollout_id(), " ", verb), options,
                     out);
}

int RunRolloutNewHosts(Stub& stub, const RolloutNewHostsArgs& args, const CommandOptions& options,
                       std::ostream& out, std::ostream& err) {
  v1::Rollout rollout;
  grpc::Status status;
  std::string said;
  if (args.value.empty()) {
    status = stub.GetRollout(MakeContext(options).get(), v1::GetRolloutRequest(), &rollout);
    // Never set and no rollout: the default.
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) status = grpc::Status::OK;
    if (!status.ok()) return RpcError(status, options, "the new_hosts setting", err);
  } else {
    absl::StatusOr<v1::NewHosts> value = ParseNewHosts("new-hosts", args.value);
    if (!value.ok()) return UsageError(value.status(), err);
    v1::SetNewHostsRequest request;
    request.set_new_hosts(*value);
    request.set_reason(args.reason);
    status = stub.SetNewHosts(MakeContext(options).get(), request, &rollout);
    if (!status.ok()) return RpcError(status, options, "setting new_hosts", err);
    said = "set: ";
  }
  if (options.format == OutputFormat::kJson) {
    PrintJson(RolloutToJson(rollout), out);
    return kExitOk;
  }
  out << said << "new hosts: " << NewHostsName(rollout.new_hosts())
      << (rollout.new_hosts() == v1::NEW_HOSTS_WAIT_FOR_ROLLOUT
              ? " (a host that registers for the first time makes no cookies until a rollout "
                "enables it)"
              : " (a host that registers for the first time enforces at once)")
      << "\n";
  return kExitOk;
}

}  // namespace cosched::cli
