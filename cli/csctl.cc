#include "cli/csctl.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/analyze.h"
#include "cli/bash_completion.h"
#include "cli/simulate.h"
#include "common/config_loader.h"
#include "common/transport.h"
#include "common/version.h"
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

// What a parsed command runs. Offline commands need neither csd nor the
// connection settings; they return nullopt when the arguments ask for csd
// after all (explain without --scenario).
using OfflineCommand =
    std::function<std::optional<int>(OutputFormat, std::ostream&, std::ostream&)>;
using OnlineCommand =
    std::function<int(Stub&, const CommandOptions&, std::ostream&, std::ostream&)>;

struct Command {
  CLI::App* app;
  OfflineCommand offline;
  OnlineCommand online;
};

// Every argument of every command: they live as long as the parse.
struct CsctlArgs {
  ConnectionFlags flags;
  std::string config_flag;
  std::string output = "table";
  double timeout_s = 10;
  TagArgs tag;
  std::string untag_vm, get_vm, policy_get_tenant, host_id, host_selector;
  HostEnforceArgs host_enforce;
  ListArgs list;
  PolicySetArgs policy_set;
  AuditArgs audit;
  StatsArgs stats;
  AnalyzeArgs analyze;
  SimulateArgs simulate;
  ExplainArgs explain;
  PlaceArgs place;
  PlanArgs plan;
  HostTraitsArgs traits;
  RolloutStartArgs rollout_start;
  RolloutChangeArgs rollout_change;
  RolloutNewHostsArgs rollout_new_hosts;
};

void AddGlobalOptions(CLI::App& app, CsctlArgs& a) {
  app.add_option("--server", a.flags.server,
                 "csd address HOST:PORT or unix:PATH, or several replicas' comma-separated "
                 "(the first that accepts a connection is used) (else $CSCTL_SERVER, else the config "
                 "file, else csd's socket /run/cosched/csd.sock if this user may use it, "
                 "else 127.0.0.1:7443)");
  app.add_option("--config", a.config_flag,
                 "YAML config file (else $CSCTL_CONFIG, else "
                 "/etc/cosched/csctl.yaml if it exists)");
  app.add_flag("--insecure", a.flags.insecure, "allow plaintext to a non-loopback address");
  app.add_option("--ca", a.flags.ca_file, "CA certificate (PEM): use TLS");
  app.add_option("--cert", a.flags.cert_file, "client certificate (PEM)");
  app.add_option("--key", a.flags.key_file, "client private key (PEM)");
  app.add_option("--token", a.flags.token,
                 "bearer token for csd (else --token-file, else $CSCTL_TOKEN, "
                 "else the config's token_file)");
  app.add_option("--token-file", a.flags.token_file, "file whose first line is the bearer token");
  app.add_option("-o,--output", a.output,
                 "table or json (hosts traits: also openstack-provider-yaml, k8s-labels)")
      ->check(CLI::IsMember({"table", "json", "openstack-provider-yaml", "k8s-labels"}));
  app.add_option("--timeout", a.timeout_s, "seconds to wait for each RPC (0.001-86400)")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            double seconds = 0;
            if (!absl::SimpleAtod(value, &seconds) || !(seconds >= 0.001 && seconds <= 86400)) {
              return "must be a number of seconds from 0.001 to 86400, got " + value;
            }
            return "";
          },
          "SECONDS"));
}

void AddVmCommands(CLI::App& app, CsctlArgs& a, std::vector<Command>& commands) {
  CLI::App* tag = app.add_subcommand("tag", "tag a VM (create or update)");
  tag->add_option("VM", a.tag.vm_id, "VM id")->required();
  tag->add_option("--tenant", a.tag.tenant_id, "tenant id")->capture_default_str();
  tag->add_option("--isolation", a.tag.isolation,
                  "vm|tenant|none|dedicated (default: the tenant's default)");
  AddListOption(tag, "--class", &a.tag.interference_classes,
                "interference classes, comma-separated");
  tag->add_option("--scope", a.tag.thread_scope, "vcpus|emulator|full (default: emulator)");
  commands.push_back({tag, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                         std::ostream& err) { return RunTag(s, a.tag, o, out, err); }});

  CLI::App* untag = app.add_subcommand("untag", "remove a VM's tagging");
  untag->add_option("VM", a.untag_vm, "VM id")->required();
  commands.push_back({untag, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                           std::ostream& err) {
                        return RunUntag(s, a.untag_vm, o, out, err);
                      }});

  CLI::App* get = app.add_subcommand("get", "show a VM and its assignment");
  get->add_option("VM", a.get_vm, "VM id")->required();
  commands.push_back({get, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                         std::ostream& err) { return RunGet(s, a.get_vm, o, out, err); }});

  CLI::App* ls = app.add_subcommand("ls", "list VMs");
  ls->add_option("--tenant", a.list.tenant_id, "only this tenant's VMs");
  ls->add_option("--host", a.list.host_id, "only VMs on this host");
  ls->add_option("--trust-group", a.list.trust_group, "only VMs in this trust group");
  ls->add_option("--name", a.list.domain_name,
                 "the VMs hosts run under this domain name, whatever id they are tagged under "
                 "(alone)");
  ls->add_option("--limit", a.list.limit, "at most N VMs (0: all)");
  commands.push_back({ls, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                        std::ostream& err) { return RunList(s, a.list, o, out, err); }});
}

void AddPolicyCommands(CLI::App& app, CsctlArgs& a, std::vector<Command>& commands) {
  CLI::App* policy = app.add_subcommand("policy", "tenant isolation policies");
  policy->require_subcommand(1);
  CLI::App* get = policy->add_subcommand("get", "show a tenant's policy");
  get->add_option("TENANT", a.policy_get_tenant, "tenant id")->required();
  commands.push_back({get, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                         std::ostream& err) {
                        return RunPolicyGet(s, a.policy_get_tenant, o, out, err);
                      }});
  CLI::App* set = policy->add_subcommand("set", "set a tenant's policy");
  set->add_option("TENANT", a.policy_set.tenant_id, "tenant id")->required();
  set->add_option("--default", a.policy_set.default_isolation,
                  "default level: vm|tenant|none|dedicated")
      ->required();
  AddListOption(set, "--allow", &a.policy_set.allowed_isolation,
                "allowed levels, comma-separated (default: all)");
  set->add_option("--forced-idle-budget", a.policy_set.forced_idle_budget_pct,
                  "most predicted forced idle on a host with this tenant's "
                  "VMs, percent of host CPU time 0-100 (default: none)");
  set->add_option("--mode", a.policy_set.mode,
                  "fixed (default): VMs keep their levels; auto: the policy engine "
                  "chooses the level of VMs tagged without one, among --allow");
  set->add_flag("--no-apply", a.policy_set.no_apply,
                "with --mode auto: a dry run, the engine plans and changes nothing");
  commands.push_back({set, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                         std::ostream& err) {
                        return RunPolicySet(s, a.policy_set, o, out, err);
                      }});
  CLI::App* ls = policy->add_subcommand("ls", "list tenant policies");
  commands.push_back({ls, nullptr, [](Stub& s, const CommandOptions& o, std::ostream& out,
                                      std::ostream& err) { return RunPolicyList(s, o, out, err); }});
}

void AddHostCommands(CLI::App& app, CsctlArgs& a, std::vector<Command>& commands) {
  CLI::App* hosts = app.add_subcommand("hosts", "hosts with a cs-agent");
  hosts->require_subcommand(1);
  CLI::App* ls = hosts->add_subcommand("ls", "list hosts");
  ls->add_option("--selector,-l", a.host_selector,
                 "only hosts whose labels (cs-agent's config) match: key=value[,key=value...]");
  commands.push_back({ls, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                        std::ostream& err) {
                        return RunHostList(s, o, out, err, a.host_selector);
                      }});
  // The commands on one host: what each does with it.
  const struct {
    const char* name;
    const char* help;
    int (*run)(Stub&, const std::string&, const CommandOptions&, std::ostream&, std::ostream&);
  } on_one[] = {
      {"get", "show a host", RunHostGet},
      {"drain", "Place chooses no new VMs for the host; its VMs stay enforced",
       [](Stub& s, const std::string& h, const CommandOptions& o, std::ostream& out,
          std::ostream& err) { return RunHostDrain(s, h, true, o, out, err); }},
      {"undrain", "end a drain",
       [](Stub& s, const std::string& h, const CommandOptions& o, std::ostream& out,
          std::ostream& err) { return RunHostDrain(s, h, false, o, out, err); }},
      {"rm", "forget a host (refused while its agent is connected or it reports VMs)",
       RunHostRemove},
  };
  CLI::App* enforce = hosts->add_subcommand(
      "enforce",
      "the off switch (admin): off takes every cookie off the hosts' VMs (cookie 0) until on");
  enforce->add_option("SWITCH", a.host_enforce.switch_to, "on or off")->required();
  enforce->add_option("HOST", a.host_enforce.host_id, "one host");
  enforce->add_option("--selector,-l", a.host_enforce.selector,
                      "the hosts whose labels match now: key=value[,key=value...]");
  enforce->add_flag("--all", a.host_enforce.all,
                    "the whole fleet, hosts that register later included");
  enforce->add_option("--reason", a.host_enforce.reason, "why, for the audit trail")
      ->required();
  commands.push_back({enforce, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                             std::ostream& err) {
                        return RunHostEnforce(s, a.host_enforce, o, out, err);
                      }});
  CLI::App* traits = hosts->add_subcommand(
      "traits", "what schedulers need: isolating hosts as Nova traits or node labels (-o)");
  traits->add_option("--host", a.traits.host_id, "only this host");
  traits->add_flag("--compute-node", a.traits.compute_node,
                   "with --host and -o openstack-provider-yaml: identify it as "
                   "'$COMPUTE_NODE', for the file on that host");
  commands.push_back({traits, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                            std::ostream& err) {
                        HostTraitsArgs args = a.traits;
                        args.format = a.output;
                        return RunHostTraits(s, args, o, out, err);
                      }});
  for (const auto& command : on_one) {
    CLI::App* sub = hosts->add_subcommand(command.name, command.help);
    sub->add_option("HOST", a.host_id, "host id")->required();
    commands.push_back({sub, nullptr,
                        [&a, run = command.run](Stub& s, const CommandOptions& o,
                                                std::ostream& out, std::ostream& err) {
                          return run(s, a.host_id, o, out, err);
                        }});
  }
}

void AddRolloutCommands(CLI::App& app, CsctlArgs& a, std::vector<Command>& commands) {
  CLI::App* rollout = app.add_subcommand(
      "rollout", "turn enforcement on across the fleet in stages (docs/operating.md)");
  rollout->require_subcommand(1);
  CLI::App* start = rollout->add_subcommand(
      "start", "start a rollout: stage 1's hosts are enabled at once, each stage soaks");
  start->add_option("--stages", a.rollout_start.stages,
                    "percent of the matching hosts per stage, strictly increasing: "
                    "1%,10%,50%,100%")
      ->required();
  start->add_option("--soak", a.rollout_start.soak,
                    "how long each stage runs without a regression before the next: "
                    "90s, 30m, 2h, 1d (at most 7d; csd sets the least)")
      ->required();
  start->add_option("--selector,-l", a.rollout_start.selector,
                    "only hosts whose labels match: key=value[,key=value...]");
  commands.push_back({start, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                           std::ostream& err) {
                        return RunRolloutStart(s, a.rollout_start, o, out, err);
                      }});
  CLI::App* status = rollout->add_subcommand("status", "the current rollout");
  commands.push_back({status, nullptr, [](Stub& s, const CommandOptions& o, std::ostream& out,
                                          std::ostream& err) {
                        return RunRolloutStatus(s, o, out, err);
                      }});
  const struct {
    const char* name;
    const char* help;
    RolloutChange change;
  } changes[] = {
      {"pause", "no further stage; the enabled hosts stay enabled", RolloutChange::kPause},
      {"resume", "go on from a pause or a halt: the stage soaks again from now",
       RolloutChange::kResume},
      {"abort", "end it: no host is enabled beyond those it enabled already",
       RolloutChange::kAbort},
  };
  CLI::App* new_hosts = rollout->add_subcommand(
      "new-hosts",
      "what a host that registers for the first time does: enforce (the default) or "
      "wait-for-rollout; without a value, print it");
  new_hosts->add_option("value", a.rollout_new_hosts.value, "enforce or wait-for-rollout");
  new_hosts->add_option("--reason", a.rollout_new_hosts.reason, "why, for the audit trail");
  commands.push_back({new_hosts, nullptr, [&a](Stub& s, const CommandOptions& o,
                                               std::ostream& out, std::ostream& err) {
                        return RunRolloutNewHosts(s, a.rollout_new_hosts, o, out, err);
                      }});
  for (const auto& c : changes) {
    CLI::App* sub = rollout->add_subcommand(c.name, c.help);
    sub->add_option("--id", a.rollout_change.rollout_id,
                    "only if this is the current rollout's id");
    sub->add_option("--reason", a.rollout_change.reason, "why, for the audit trail");
    commands.push_back({sub, nullptr,
                        [&a, change = c.change](Stub& s, const CommandOptions& o,
                                                std::ostream& out, std::ostream& err) {
                          return RunRolloutChange(s, change, a.rollout_change, o, out, err);
                        }});
  }
}

void AddRecordCommands(CLI::App& app, CsctlArgs& a, std::vector<Command>& commands) {
  CLI::App* status = app.add_subcommand(
      "status", "csd's health: each replica, its version, leader, store, revision and agents "
                "(exit 3 when something is wrong)");
  commands.push_back({status, nullptr, [](Stub& s, const CommandOptions& o, std::ostream& out,
                                          std::ostream& err) { return RunStatus(s, o, out, err); }});
  CLI::App* audit = app.add_subcommand("audit", "the audit trail of changes, newest first");
  audit->add_option("--vm,--subject", a.audit.subject,
                    "only changes of this vm (or tenant or host) id");
  audit->add_option("--who", a.audit.who, "only changes by this caller (as in the WHO column)");
  audit->add_option("--limit", a.audit.limit, "at most N records")->capture_default_str();
  commands.push_back({audit, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                           std::ostream& err) {
                        return RunAudit(s, a.audit, o, out, err);
                      }});

  CLI::App* stats = app.add_subcommand(
      "stats", "sibling sharing measured by the agents: a VM, a host, a tenant or a trust group");
  stats->add_option("VM", a.stats.vm_id, "VM id");
  stats->add_option("--host", a.stats.host_id, "every VM of this host, and its cores");
  stats->add_option("--tenant", a.stats.tenant, "every VM tagged for this tenant");
  stats->add_option("--group", a.stats.trust_group, "every VM of this trust group");
  stats->add_option("--window", a.stats.window, "the last 300s, 5m, 1h, ... up to 24h")
      ->capture_default_str();
  commands.push_back({stats, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                           std::ostream& err) {
                        return RunStats(s, a.stats, o, out, err);
                      }});
}

// analyze and simulate are offline; explain is offline with --scenario and
// asks csd otherwise; place asks csd.
void AddPolicyQuestions(CLI::App& app, CsctlArgs& a, std::vector<Command>& commands) {
  CLI::App* analyze = app.add_subcommand(
      "analyze", "sibling sharing per VM from a tracefs sched_switch trace (offline)");
  analyze->add_option("TRACE", a.analyze.trace_path, "tracefs trace or trace_pipe text")
      ->required();
  analyze->add_option("--topology", a.analyze.topology_path,
                      "one line per CPU, in CPU order: its thread_siblings_list")
      ->required();
  analyze->add_option("--threads", a.analyze.threads_path,
                      "lines 'TID VM_ID', or 'tgid:TGID VM_ID' for every thread of a process "
                      "(default: group by tgid, else by thread)");
  analyze->add_option("--from", a.analyze.from,
                      "count from this trace timestamp on (seconds, e.g. 1234.567890)");
  analyze->add_option("--to", a.analyze.to, "count up to this trace timestamp");
  commands.push_back({analyze,
                      [&a](OutputFormat f, std::ostream& out, std::ostream& err) {
                        return std::optional<int>(RunAnalyze(a.analyze, f, out, err));
                      },
                      nullptr});

  CLI::App* simulate = app.add_subcommand(
      "simulate", "run a scenario file in the SMT simulator, modes side by side (offline)");
  simulate->add_option("FILE", a.simulate.file, "scenario YAML (docs/scenarios.md)")->required();
  AddListOption(simulate, "--modes", &a.simulate.modes,
                "smt,nosmt,vm,tenant,policy (default: all)");
  commands.push_back({simulate,
                      [&a](OutputFormat f, std::ostream& out, std::ostream& err) {
                        return std::optional<int>(RunSimulate(a.simulate, f, out, err));
                      },
                      nullptr});

  CLI::App* explain = app.add_subcommand(
      "explain",
      "the policy engine's decision for a VM on its host, as csd knows it "
      "(or, with --scenario, offline for a scenario's VMs)");
  explain->add_option("VM", a.explain.vm, "VM id (with --scenario: instance name, default all)");
  explain->add_option("--scenario", a.explain.file, "scenario YAML: explain offline, without csd");
  commands.push_back(
      {explain,
       [&a](OutputFormat f, std::ostream& out, std::ostream& err) -> std::optional<int> {
         if (!a.explain.file.empty()) return RunExplain(a.explain, f, out, err);
         if (a.explain.vm.empty()) {
           return PrintUsageError("explain needs a VM id (or --scenario FILE)", err);
         }
         return std::nullopt;
       },
       [&a](Stub& s, const CommandOptions& o, std::ostream& out, std::ostream& err) {
         return RunExplainVm(s, a.explain.vm, o, out, err);
       }});

  CLI::App* plan = app.add_subcommand(
      "plan",
      "what the policy engine would change now on each host (--dry-run), or how its "
      "applied plans did (--report)");
  plan->add_flag("--dry-run", a.plan.dry_run, "show the plan, change nothing");
  plan->add_flag("--report", a.plan.report,
                 "per host: the applied plan's predicted gain and figures against those "
                 "measured since");
  plan->add_option("--tenant", a.plan.tenant_id, "only hosts running this tenant's VMs");
  commands.push_back({plan, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                          std::ostream& err) {
                        return RunPlan(s, a.plan, o, out, err);
                      }});

  CLI::App* place = app.add_subcommand("place", "rank hosts for a new VM (what-if: creates nothing)");
  place->add_option("--vcpus", a.place.vcpus, "vCPUs of the VM (1-1024)")->required();
  place->add_option("--tenant", a.place.tenant_id, "tenant id")->capture_default_str();
  AddListOption(place, "--class", &a.place.interference_classes,
                "interference classes, comma-separated");
  place->add_option("--isolation", a.place.isolation,
                    "vm|tenant|none|dedicated (default: the tenant's default)");
  place->add_option("--load", a.place.load, "declared load per vCPU, 0-1 (default: 1)");
  place->add_flag("--no-pin", a.place.no_pin,
                  "the VM will not be pinned (dedicated is always pinned)");
  commands.push_back({place, nullptr, [&a](Stub& s, const CommandOptions& o, std::ostream& out,
                                           std::ostream& err) {
                        return RunPlace(s, a.place, o, out, err);
                      }});
}

// Parses argv; the exit code when csctl is done (help printed, or a usage
// error), nullopt to go on.
std::optional<int> Parse(CLI::App& app, int argc, const char* const* argv, std::ostream& out,
                         std::ostream& err) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
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
}

// The stub and command options from flags, the environment and the config
// file; a usage error's exit code when they do not make a connection.
struct Connection {
  std::unique_ptr<Stub> stub;
  CommandOptions options;
};
std::variant<Connection, int> Connect(const CsctlArgs& a, const CsctlEnvironment& env,
                                      std::ostream& err) {
  std::optional<std::string> config_path = ResolveConfigPath(
      a.config_flag, env.get_env(kConfigEnv), env.file_exists(kDefaultConfigPath));
  v1::CsctlConfig config;
  ConfigLocations locations;
  if (config_path.has_value()) {
    absl::Status loaded = LoadYamlConfigFile(*config_path, &config, &locations);
    if (!loaded.ok()) return PrintUsageError(loaded.message(), err);
    ExpandHomeInPaths(env.get_env("HOME"), &config);
  }
  // What flags and the environment override is never blamed on the file.
  for (const auto& [given, key] :
       {std::pair{!a.flags.server.empty() || !env.get_env(kServerEnv).empty(), "server"},
        std::pair{!a.flags.ca_file.empty(), "tls.ca_file"},
        std::pair{!a.flags.cert_file.empty(), "tls.cert_file"},
        std::pair{!a.flags.key_file.empty(), "tls.key_file"}}) {
    if (given) locations.Forget(key);
  }
  const bool local_socket_usable = env.can_connect && env.can_connect(kDefaultLocalSocket);
  ConnectionSettings settings =
      ResolveConnectionSettings(a.flags, env.get_env(kServerEnv), config, local_socket_usable);
  auto token = ResolveBearerToken(a.flags.token, a.flags.token_file, env.get_env(kTokenEnv),
                                  config, settings);
  if (!token.ok()) return PrintUsageError(locations.Locate(token.status().message()), err);
  auto stub = env.make_stub(settings);
  if (!stub.ok()) return PrintUsageError(locations.Locate(stub.status().message()), err);

  Connection connection;
  connection.stub = std::move(*stub);
  connection.options.server = settings.server;
  connection.options.format = a.output == "json" ? OutputFormat::kJson : OutputFormat::kTable;
  connection.options.timeout =
      std::max(std::chrono::milliseconds(1),
               std::chrono::milliseconds(static_cast<int64_t>(a.timeout_s * 1000)));
  connection.options.bearer_token = *token;
  return connection;
}

}  // namespace

namespace {

// Whether `channel` connects before `deadline`; false as soon as the attempt
// fails, without waiting for gRPC's retries.
bool Connects(grpc::Channel& channel, std::chrono::system_clock::time_point deadline) {
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) return false;
    if (!channel.WaitForStateChange(state, deadline)) return false;
    state = channel.GetState(/*try_to_connect=*/true);
  }
  return true;
}

// How long csctl waits for one replica of a list to accept a connection.
constexpr std::chrono::seconds kReplicaConnectTimeout{3};

}  // namespace

absl::StatusOr<std::unique_ptr<Stub>> MakeControlPlaneStub(
    const ConnectionSettings& settings) {
  absl::StatusOr<std::vector<std::string>> addresses =
      ParseServerList("server", settings.server);
  if (!addresses.ok()) return addresses.status();
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (const std::string& address : *addresses) {
    auto credentials = MakeChannelCredentials(address, settings.tls, settings.insecure);
    if (!credentials.ok()) return credentials.status();
    channels.push_back(grpc::CreateChannel(address, *credentials));
  }
  // Several replicas: the first that accepts a connection. When none does,
  // the first, so that the call fails with the usual UNAVAILABLE.
  std::shared_ptr<grpc::Channel> chosen = channels.front();
  if (channels.size() > 1) {
    for (const std::shared_ptr<grpc::Channel>& channel : channels) {
      if (Connects(*channel, std::chrono::system_clock::now() + kReplicaConnectTimeout)) {
        chosen = channel;
        break;
      }
    }
  }
  return std::unique_ptr<Stub>(v1::ControlPlane::NewStub(chosen));
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
  // access() asks with the real uid, as connect() will be judged: a user
  // outside the socket's group goes on to loopback TCP.
  env.can_connect = [](const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
           access(path.c_str(), R_OK | W_OK) == 0;
  };
  env.make_stub = MakeControlPlaneStub;
  return env;
}

int RunCsctl(int argc, const char* const* argv, const CsctlEnvironment& env,
             std::ostream& out, std::ostream& err) {
  CLI::App app("csctl: tag VMs for core scheduling and inspect csd", "csctl");
  app.fallthrough();  // global options may follow the command
  app.require_subcommand(1);
  CsctlArgs args;
  std::vector<Command> commands;
  AddGlobalOptions(app, args);
  AddVmCommands(app, args, commands);
  AddPolicyCommands(app, args, commands);
  AddRecordCommands(app, args, commands);
  AddHostCommands(app, args, commands);
  AddRolloutCommands(app, args, commands);
  AddPolicyQuestions(app, args, commands);
  const std::string version =
      absl::StrCat("csctl ", CoschedVersion(), " (commit ", CoschedCommit(), ")");
  app.set_version_flag("--version", version);
  CLI::App* version_command = app.add_subcommand("version", "print csctl's version (offline)");
  commands.push_back({version_command,
                      [&version](OutputFormat, std::ostream& out, std::ostream&) {
                        out << version << "\n";
                        return std::optional<int>(0);
                      },
                      nullptr});
  CLI::App* completion = app.add_subcommand(
      "completion", "print a completion script for SHELL (bash), made from these commands");
  std::string shell;
  completion->add_option("SHELL", shell, "bash")->required()->check(CLI::IsMember({"bash"}));
  commands.push_back({completion,
                      [&app](OutputFormat, std::ostream& out, std::ostream&) {
                        out << BashCompletion(app);
                        return std::optional<int>(0);
                      },
                      nullptr});
  if (std::optional<int> done = Parse(app, argc, argv, out, err)) return *done;

  auto parsed = std::find_if(commands.begin(), commands.end(),
                             [](const Command& c) { return c.app->parsed(); });
  if (parsed == commands.end()) return PrintUsageError("no command given (see csctl --help)", err);
  if (args.output != "table" && args.output != "json" && parsed->app->get_name() != "traits") {
    return PrintUsageError(
        absl::StrCat("-o ", args.output, " is for csctl hosts traits only; use table or json"), err);
  }
  if (parsed->offline) {
    const OutputFormat format = args.output == "json" ? OutputFormat::kJson : OutputFormat::kTable;
    if (std::optional<int> code = parsed->offline(format, out, err)) return *code;
  }
  std::variant<Connection, int> connection = Connect(args, env, err);
  if (const int* code = std::get_if<int>(&connection)) return *code;
  Connection& c = std::get<Connection>(connection);
  return parsed->online(*c.stub, c.options, out, err);
}

}  // namespace cosched::cli
