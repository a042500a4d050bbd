#include "cli/csctl.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/analyze.h"
#include "cli/simulate.h"
#include "common/config_loader.h"
#include "common/transport.h"
#include "grpcpp/create_channel.h"

namespace cosched::cli {
namespace {

int PrintUsageError(absl::string_view message, std::ostream& err) {
  err << "csctl: " << message << "\n";
  return kExitUsage;
}

// Each occurrence of a list option takes one argument ("a,b" or "a"), so a
// list never swallows the positional argument after it.
CLI::Option* AddListOption(CLI::App* app, const std::string& name,
                           std::vector<std::string>* values,
                           const std::string& description) {
  return app->add_option(name, *values, description)
      ->delimiter(',')
      ->allow_extra_args(false);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Stub>> MakeControlPlaneStub(
    const ConnectionSettings& settings) {
  auto credentials = MakeChannelCredentials(settings.server, settings.tls,
                                            settings.insecure);
  if (!credentials.ok()) return credentials.status();
  return std::unique_ptr<Stub>(v1::ControlPlane::NewStub(
      grpc::CreateChannel(settings.server, *credentials)));
}

CsctlEnvironment ProcessEnvironment() {
  CsctlEnvironment env;
  env.get_env = [](const std::string& name) {
    const char* value = std::getenv(name.c_str());
    return std::string(value == nullptr ? "" : value);
  };
  env.file_exists = [](const std::string& path) {
    std::error_code ignored;
    return std::filesystem::exists(path, ignored);
  };
  env.make_stub = MakeControlPlaneStub;
  return env;
}

int RunCsctl(int argc, const char* const* argv, const CsctlEnvironment& env,
             std::ostream& out, std::ostream& err) {
  CLI::App app("csctl: tag VMs for core scheduling and inspect csd", "csctl");
  app.fallthrough();  // global options may follow the command
  app.require_subcommand(1);

  ConnectionFlags flags;
  std::string config_flag;
  std::string output = "table";
  double timeout_s = 10;
  app.add_option("--server", flags.server,
                 "csd address HOST:PORT (else $CSCTL_SERVER, else the config "
                 "file, else 127.0.0.1:7443)");
  app.add_option("--config", config_flag,
                 "YAML config file (else $CSCTL_CONFIG, else "
                 "/etc/cosched/csctl.yaml if it exists)");
  app.add_flag("--insecure", flags.insecure,
               "allow plaintext to a non-loopback address");
  app.add_option("--ca", flags.ca_file, "CA certificate (PEM): use TLS");
  app.add_option("--cert", flags.cert_file, "client certificate (PEM)");
  app.add_option("--key", flags.key_file, "client private key (PEM)");
  app.add_option("--token", flags.token,
                 "bearer token for csd (else --token-file, else $CSCTL_TOKEN, "
                 "else the config's token_file)");
  app.add_option("--token-file", flags.token_file,
                 "file whose first line is the bearer token");
  app.add_option("-o,--output", output, "table or json")
      ->check(CLI::IsMember({"table", "json"}));
  app.add_option("--timeout", timeout_s, "seconds to wait for each RPC (0.001-86400)")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            double seconds = 0;
            if (!absl::SimpleAtod(value, &seconds) || !(seconds >= 0.001 && seconds <= 86400)) {
              return "must be a number of seconds from 0.001 to 86400, got " + value;
            }
            return "";
          },
          "SECONDS"));

  TagArgs tag_args;
  CLI::App* tag = app.add_subcommand("tag", "tag a VM (create or update)");
  tag->add_option("VM", tag_args.vm_id, "VM id")->required();
  tag->add_option("--tenant", tag_args.tenant_id, "tenant id")
      ->capture_default_str();
  tag->add_option("--isolation", tag_args.isolation,
                  "vm|tenant|none|dedicated (default: the tenant's default)");
  AddListOption(tag, "--class", &tag_args.interference_classes,
                "interference classes, comma-separated");
  tag->add_option("--scope", tag_args.thread_scope,
                  "vcpus|emulator|full (default: emulator)");

  std::string untag_vm;
  CLI::App* untag = app.add_subcommand("untag", "remove a VM's tagging");
  untag->add_option("VM", untag_vm, "VM id")->required();

  std::string get_vm;
  CLI::App* get = app.add_subcommand("get", "show a VM and its assignment");
  get->add_option("VM", get_vm, "VM id")->required();

  ListArgs list_args;
  CLI::App* ls = app.add_subcommand("ls", "list VMs");
  ls->add_option("--tenant", list_args.tenant_id, "only this tenant's VMs");
  ls->add_option("--host", list_args.host_id, "only VMs on this host");
  ls->add_option("--trust-group", list_args.trust_group,
                 "only VMs in this trust group");
  ls->add_option("--limit", list_args.limit, "at most N VMs (0: all)");

  CLI::App* policy = app.add_subcommand("policy", "tenant isolation policies");
  policy->require_subcommand(1);
  std::string policy_get_tenant;
  CLI::App* policy_get = policy->add_subcommand("get", "show a tenant's policy");
  policy_get->add_option("TENANT", policy_get_tenant, "tenant id")->required();
  PolicySetArgs policy_set_args;
  CLI::App* policy_set = policy->add_subcommand("set", "set a tenant's policy");
  policy_set->add_option("TENANT", policy_set_args.tenant_id, "tenant id")
      ->required();
  policy_set->add_option("--default", policy_set_args.default_isolation,
                         "default level: vm|tenant|none|dedicated")
      ->required();
  AddListOption(policy_set, "--allow", &policy_set_args.allowed_isolation,
                "allowed levels, comma-separated (default: all)");
  policy_set->add_option("--forced-idle-budget", policy_set_args.forced_idle_budget_pct,
                         "most predicted forced idle on a host with this tenant's "
                         "VMs, percent of host CPU time 0-100 (default: none)");
  CLI::App* policy_ls = policy->add_subcommand("ls", "list tenant policies");

  AuditArgs audit_args;
  CLI::App* audit = app.add_subcommand("audit", "the audit trail of changes, newest first");
  audit->add_option("--vm,--subject", audit_args.subject,
                    "only changes of this vm (or tenant or host) id");
  audit->add_option("--who", audit_args.who,
                    "only changes by this caller (as in the WHO column)");
  audit->add_option("--limit", audit_args.limit, "at most N records")
      ->capture_default_str();

  CLI::App* hosts = app.add_subcommand("hosts", "hosts with a cs-agent");
  hosts->require_subcommand(1);
  CLI::App* hosts_ls = hosts->add_subcommand("ls", "list hosts");
  std::string host_id;
  CLI::App* hosts_get = hosts->add_subcommand("get", "show a host");
  hosts_get->add_option("HOST", host_id, "host id")->required();
  CLI::App* hosts_drain = hosts->add_subcommand(
      "drain", "Place chooses no new VMs for the host; its VMs stay enforced");
  hosts_drain->add_option("HOST", host_id, "host id")->required();
  CLI::App* hosts_undrain = hosts->add_subcommand("undrain", "end a drain");
  hosts_undrain->add_option("HOST", host_id, "host id")->required();
  CLI::App* hosts_rm = hosts->add_subcommand(
      "rm", "forget a host (refused while its agent is connected or it reports VMs)");
  hosts_rm->add_option("HOST", host_id, "host id")->required();

  StatsArgs stats_args;
  CLI::App* stats = app.add_subcommand(
      "stats", "sibling sharing measured by the agents: a VM, a host, a tenant or a trust group");
  stats->add_option("VM", stats_args.vm_id, "VM id");
  stats->add_option("--host", stats_args.host_id, "every VM of this host, and its cores");
  stats->add_option("--tenant", stats_args.tenant, "every VM tagged for this tenant");
  stats->add_option("--group", stats_args.trust_group, "every VM of this trust group");
  stats->add_option("--window", stats_args.window,
                    "the last 300s, 5m, 1h, ... up to 24h")
      ->capture_default_str();

  AnalyzeArgs analyze_args;
  CLI::App* analyze = app.add_subcommand(
      "analyze", "sibling sharing per VM from a tracefs sched_switch trace (offline)");
  analyze->add_option("TRACE", analyze_args.trace_path, "tracefs trace or trace_pipe text")
      ->required();
  analyze->add_option("--topology", analyze_args.topology_path,
                      "one line per CPU, in CPU order: its thread_siblings_list")
      ->required();
  analyze->add_option("--threads", analyze_args.threads_path,
                      "lines 'TID VM_ID' (default: group by tgid, else by thread)");
  analyze->add_option("--from", analyze_args.from,
                      "count from this trace timestamp on (seconds, e.g. 1234.567890)");
  analyze->add_option("--to", analyze_args.to, "count up to this trace timestamp");

  SimulateArgs simulate_args;
  CLI::App* simulate = app.add_subcommand(
      "simulate", "run a scenario file in the SMT simulator, modes side by side (offline)");
  simulate->add_option("FILE", simulate_args.file, "scenario YAML (docs/scenarios.md)")
      ->required();
  AddListOption(simulate, "--modes", &simulate_args.modes,
                "smt,nosmt,vm,tenant,policy (default: all)");
  ExplainArgs explain_args;
  CLI::App* explain = app.add_subcommand(
      "explain",
      "the policy engine's decision for a VM on its host, as csd knows it "
      "(or, with --scenario, offline for a scenario's VMs)");
  explain->add_option("VM", explain_args.vm,
                      "VM id (with --scenario: instance name, default all)");
  explain->add_option("--scenario", explain_args.file,
                      "scenario YAML: explain offline, without csd");

  PlaceArgs place_args;
  CLI::App* place = app.add_subcommand(
      "place", "rank hosts for a new VM (what-if: creates nothing)");
  place->add_option("--vcpus", place_args.vcpus, "vCPUs of the VM (1-1024)")->required();
  place->add_option("--tenant", place_args.tenant_id, "tenant id")->capture_default_str();
  AddListOption(place, "--class", &place_args.interference_classes,
                "interference classes, comma-separated");
  place->add_option("--isolation", place_args.isolation,
                    "vm|tenant|none|dedicated (default: the tenant's default)");
  place->add_option("--load", place_args.load,
                    "declared load per vCPU, 0-1 (default: 1)");
  place->add_flag("--no-pin", place_args.no_pin,
                  "the VM will not be pinned (dedicated is always pinned)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e, out, err);  // --help
    // CLI11 says only that a subcommand is required when the command is
    // misspelt: name it, and the commands there are.
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && app.get_subcommands().empty()) {
      for (const std::string& arg : app.remaining()) {
        if (arg.empty() || arg[0] == '-') continue;
        std::vector<std::string> names;
        for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
        return PrintUsageError(absl::StrCat("unknown command '", arg, "' (commands: ",
                                            absl::StrJoin(names, ", "), ")"),
                               err);
      }
    }
    return PrintUsageError(std::string(e.what()) + " (see csctl --help)", err);
  }

  // Offline: needs neither csd nor the connection settings.
  const OutputFormat offline_format =
      output == "json" ? OutputFormat::kJson : OutputFormat::kTable;
  if (simulate->parsed()) return RunSimulate(simulate_args, offline_format, out, err);
  if (explain->parsed() && !explain_args.file.empty()) {
    return RunExplain(explain_args, offline_format, out, err);
  }
  if (explain->parsed() && explain_args.vm.empty()) {
    return PrintUsageError("explain needs a VM id (or --scenario FILE)", err);
  }
  if (analyze->parsed()) return RunAnalyze(analyze_args, offline_format, out, err);

  std::optional<std::string> config_path =
      ResolveConfigPath(config_flag, env.get_env(kConfigEnv),
                        env.file_exists(kDefaultConfigPath));
  v1::CsctlConfig config;
  ConfigLocations locations;
  if (config_path.has_value()) {
    absl::Status loaded = LoadYamlConfigFile(*config_path, &config, &locations);
    if (!loaded.ok()) return PrintUsageError(loaded.message(), err);
    ExpandHomeInPaths(env.get_env("HOME"), &config);
  }
  // What flags and the environment override is never blamed on the file.
  for (const auto& [given, key] :
       {std::pair{!flags.server.empty() || !env.get_env(kServerEnv).empty(), "server"},
        std::pair{!flags.ca_file.empty(), "tls.ca_file"},
        std::pair{!flags.cert_file.empty(), "tls.cert_file"},
        std::pair{!flags.key_file.empty(), "tls.key_file"}}) {
    if (given) locations.Forget(key);
  }
  ConnectionSettings settings =
      ResolveConnectionSettings(flags, env.get_env(kServerEnv), config);
  auto token = ResolveBearerToken(flags.token, flags.token_file,
                                  env.get_env(kTokenEnv), config, settings);
  if (!token.ok()) return PrintUsageError(locations.Locate(token.status().message()), err);
  auto stub = env.make_stub(settings);
  if (!stub.ok()) return PrintUsageError(locations.Locate(stub.status().message()), err);

  CommandOptions options;
  options.server = settings.server;
  options.format = output == "json" ? OutputFormat::kJson : OutputFormat::kTable;
  options.timeout = std::max(
      std::chrono::milliseconds(1),
      std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  options.bearer_token = *token;

  Stub& s = **stub;
  if (tag->parsed()) return RunTag(s, tag_args, options, out, err);
  if (untag->parsed()) return RunUntag(s, untag_vm, options, out, err);
  if (get->parsed()) return RunGet(s, get_vm, options, out, err);
  if (ls->parsed()) return RunList(s, list_args, options, out, err);
  if (policy_get->parsed()) {
    return RunPolicyGet(s, policy_get_tenant, options, out, err);
  }
  if (policy_set->parsed()) {
    return RunPolicySet(s, policy_set_args, options, out, err);
  }
  if (policy_ls->parsed()) return RunPolicyList(s, options, out, err);
  if (hosts_ls->parsed()) return RunHostList(s, options, out, err);
  if (hosts_get->parsed()) return RunHostGet(s, host_id, options, out, err);
  if (hosts_drain->parsed()) return RunHostDrain(s, host_id, true, options, out, err);
  if (hosts_undrain->parsed()) return RunHostDrain(s, host_id, false, options, out, err);
  if (hosts_rm->parsed()) return RunHostRemove(s, host_id, options, out, err);
  if (stats->parsed()) return RunStats(s, stats_args, options, out, err);
  if (audit->parsed()) return RunAudit(s, audit_args, options, out, err);
  if (place->parsed()) return RunPlace(s, place_args, options, out, err);
  if (explain->parsed()) return RunExplainVm(s, explain_args.vm, options, out, err);
  return PrintUsageError("no command given (see csctl --help)", err);
}

}  // namespace cosched::cli
