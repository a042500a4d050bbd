// `csd store backup|restore|migrate`: the command line over the store tools
// (store/store_tools.h). See RunCsdStoreMain in server/daemon/csd_main.h.
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/config_loader.h"
#include "common/status_macros.h"
#include "cosched/v1/config.pb.h"
#include "glog/logging.h"
#include "server/daemon/csd_main.h"
#include "server/daemon/csd_server.h"
#include "store/store_tools.h"

namespace cosched::server {
namespace {

struct StoreArgs {
  std::string config_file, from, to;
  bool replace = false;
  int64_t resume_floor = 0;
};

// A failure and its exit code.
struct ToolFailure {
  int code = kCsdExitOk;
  std::string message;
};

// The store csd.yaml names: store.etcd, or SQLite in data_dir, checked as
// csd checks it at start.
absl::StatusOr<store::StoreLocation> ConfigLocation(const std::string& file) {
  v1::CsdConfig config;
  ConfigLocations locations;
  RETURN_IF_ERROR(LoadYamlConfigFile(file, &config, &locations));
  if (config.has_store() && !config.store().has_etcd()) {
    return absl::InvalidArgumentError(locations.Locate(
        "store must name its kind: etcd (leave store out for the embedded SQLite store in "
        "data_dir)"));
  }
  CsdOptions options = CsdOptionsFromConfig(config);
  if (absl::Status valid = ValidateCsdOptions(options); !valid.ok()) {
    return absl::InvalidArgumentError(locations.Locate(valid.message()));
  }
  store::StoreLocation at;
  if (options.etcd_store) {
    at.kind = store::StoreLocation::Kind::kEtcd;
    at.etcd = *options.etcd_store;
  } else {
    at.kind = store::StoreLocation::Kind::kSqlite;
    at.sqlite_dir = options.data_dir;
  }
  return at;
}

// The store side of a command: `flag`'s location or --config's, exactly one.
absl::StatusOr<store::StoreLocation> StoreSide(const StoreArgs& args, const std::string& flag,
                                               const std::string& value) {
  if (!value.empty() && !args.config_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " and --config both name the store: give one"));
  }
  if (value.empty() && args.config_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " is required (sqlite:DIR or etcd:HOST:PORT[,HOST:PORT]/PREFIX), or --config "
        "csd.yaml to use its store"));
  }
  if (!value.empty()) return store::ParseStoreLocation(flag, value);
  return ConfigLocation(args.config_file);
}

ToolFailure Usage(const absl::Status& status) {
  return {kCsdExitUsage, std::string(status.message())};
}
ToolFailure Failed(const absl::Status& status) {
  return {kCsdExitToolFailed, std::string(status.message())};
}

ToolFailure RunBackup(const StoreArgs& args, std::ostream& out) {
  auto from = StoreSide(args, "--from", args.from);
  if (!from.ok()) return Usage(from.status());
  auto report = store::BackupStore(*from, args.to);
  if (!report.ok()) return Failed(report.status());
  out << "backed up " << from->Describe() << " at revision " << report->revision << " to "
      << args.to << "\n";
  return {};
}

ToolFailure RunRestore(const StoreArgs& args, std::ostream& out) {
  if (args.resume_floor < 0) {
    return Usage(absl::InvalidArgumentError("--resume-floor must be 0 or a revision"));
  }
  auto to = StoreSide(args, "--to", args.to);
  if (!to.ok()) return Usage(to.status());
  store::RestoreOptions options;
  options.replace = args.replace;
  options.resume_floor = args.resume_floor;
  auto report = store::RestoreStore(args.from, *to, options);
  if (!report.ok()) return Failed(report.status());
  out << "restored " << args.from << " into " << to->Describe() << ": revision "
      << report->revision << "; agents resuming below revision " << report->resume_horizon
      << " get a snapshot\n";
  return {};
}

ToolFailure RunMigrate(const StoreArgs& args, std::ostream& out) {
  auto from = store::ParseStoreLocation("--from", args.from);
  if (!from.ok()) return Usage(from.status());
  auto to = StoreSide(args, "--to", args.to);
  if (!to.ok()) return Usage(to.status());
  if (from->kind != store::StoreLocation::Kind::kSqlite ||
      to->kind != store::StoreLocation::Kind::kEtcd) {
    return Usage(absl::InvalidArgumentError(absl::StrCat(
        "migrate copies a SQLite store into etcd: --from must be sqlite:DIR and the target "
        "etcd, not ", from->Describe(), " and ", to->Describe())));
  }
  store::MigrateOptions options;
  options.replace = args.replace;
  auto report = store::MigrateStore(*from, *to, options);
  if (!report.ok()) return Failed(report.status());
  out << "migrated " << report->items << " records from " << from->Describe() << " into "
      << to->Describe() << " at revision " << report->revision
      << "; agents resuming below revision " << report->resume_horizon << " get a snapshot\n";
  return {};
}

}  // namespace

int RunCsdStoreMain(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  StoreArgs args;
  CLI::App app{"csd store: back up, restore and migrate csd's store", "csd store"};
  app.require_subcommand(1);
  auto add_config = [&args](CLI::App* command, const std::string& side) {
    command->add_option("--config", args.config_file,
                        absl::StrCat("csd.yaml whose store is the ", side));
  };
  CLI::App* backup = app.add_subcommand("backup", "write a consistent copy of a store to a file");
  add_config(backup, "source");
  backup->add_option("--from", args.from, "the store: sqlite:DIR or etcd:HOST:PORT,.../PREFIX");
  backup->add_option("--to", args.to, "the backup file to write")->required();

  CLI::App* restore = app.add_subcommand("restore", "fill an empty store from a backup file");
  add_config(restore, "target");
  restore->add_option("--from", args.from, "the backup file")->required();
  restore->add_option("--to", args.to, "the store: sqlite:DIR or etcd:HOST:PORT,.../PREFIX");
  restore->add_flag("--replace", args.replace, "delete what the target holds first");
  restore->add_option("--resume-floor", args.resume_floor,
                      "etcd: the last revision the backed-up store reached, when it went on "
                      "after the backup (agents at or below it get a snapshot)");

  CLI::App* migrate = app.add_subcommand("migrate", "copy a SQLite store into an empty etcd");
  add_config(migrate, "target");
  migrate->add_option("--from", args.from, "the SQLite store: sqlite:DIR")->required();
  migrate->add_option("--to", args.to, "the etcd store: etcd:HOST:PORT,.../PREFIX");
  migrate->add_flag("--replace", args.replace, "delete what the etcd prefix holds first");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err) == 0 ? kCsdExitOk : kCsdExitUsage;
  }
  if (!google::IsGoogleLoggingInitialized()) {
    FLAGS_logtostderr = true;
    // The tool's own line says what it did; the store's start-up notes
    // would only bury it.
    FLAGS_minloglevel = google::GLOG_WARNING;
    google::InitGoogleLogging("csd");
  }
  ToolFailure failure;
  if (backup->parsed()) failure = RunBackup(args, out);
  if (restore->parsed()) failure = RunRestore(args, out);
  if (migrate->parsed()) failure = RunMigrate(args, out);
  if (failure.code != kCsdExitOk) err << "csd store: " << failure.message << "\n";
  return failure.code;
}

}  // namespace cosched::server
