// `csd store ...` as an operator runs it: the real csd binary, its exit
// codes and the lines it prints, over real SQLite files and a real etcd.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "store/etcd_store.h"
#include "store/sqlite_store.h"
#include "tests/testing/etcd_member.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched {
namespace {

struct Exit {
  int code = -1;
  std::string output;  // stdout and stderr
};

Exit Csd(const std::string& args) {
  Exit exit;
  FILE* out = popen(absl::StrCat(CSD_BINARY, " ", args, " 2>&1").c_str(), "r");
  if (out == nullptr) return exit;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), out)) > 0) exit.output.append(buffer, n);
  const int status = pclose(out);
  exit.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return exit;
}

void Expect(const Exit& e, int code, const std::string& text) {
  EXPECT_EQ(e.code, code) << e.output;
  EXPECT_NE(e.output.find(text), std::string::npos) << "no '" << text << "' in: " << e.output;
}

// A SQLite store with one VM, at revision 1.
void MakeStore(const std::string& dir) {
  store::SqliteStoreOptions options;
  options.data_dir = dir;
  auto store = store::SqliteStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status();
  v1::VM vm;
  vm.set_vm_id("vm-1");
  vm.set_tenant_id("t1");
  ASSERT_OK((*store)->WriteSync([&](store::Transaction& txn) -> absl::Status {
    RETURN_IF_ERROR(txn.PutVm(vm));
    return txn.RecordChange("", "vm-1");  // takes revision 1
  }));
}

class CsdStoreCliTest : public ::testing::Test {
 protected:
  testing::TempDir dir_;
};

TEST_F(CsdStoreCliTest, BadArgumentsExit2NamingTheFlagAndRule) {
  Expect(Csd("store"), 2, "A subcommand is required");
  Expect(Csd("store backup --from sqlite:/x"), 2, "--to is required");
  Expect(Csd("store backup --to f"), 2, "--from is required (sqlite:DIR or etcd:");
  Expect(Csd("store backup --from mysql:x --to f"), 2,
         "csd store: --from: store location 'mysql:x' must begin with sqlite:");
  Expect(Csd("store restore --from f --to etcd:127.0.0.1:2379/"), 2,
         "csd store: --to: etcd prefix '/' must be absolute");
  Expect(Csd("store restore --from f --to etcd:127.0.0.1:0/a"), 2, "port of 1-65535");
  Expect(Csd("store migrate --from sqlite:/x --to sqlite:/y"), 2,
         "migrate copies a SQLite store into etcd");
  const std::string config = dir_.Sub("csd.yaml");
  std::ofstream(config) << "store:\n  etcd:\n    prefix: /cosched\n";
  Expect(Csd(absl::StrCat("store backup --config ", config, " --to f")), 2,
         "store.etcd.endpoints is required");
  Expect(Csd(absl::StrCat("store backup --config ", config, " --from sqlite:/x --to f")), 2,
         "--from and --config both name the store");
  Expect(Csd("store restore --from f --to sqlite:/x --resume-floor -3"), 2,
         "--resume-floor must be 0 or a revision");
}

TEST_F(CsdStoreCliTest, SqliteBackupAndRestoreThroughTheConfigsStore) {
  MakeStore(dir_.Sub("a"));
  const std::string backup = dir_.Sub("backup");
  Expect(Csd(absl::StrCat("store backup --from sqlite:", dir_.Sub("a"), " --to ", backup)), 0,
         absl::StrCat("backed up sqlite:", dir_.Sub("a"), " at revision 1 to ", backup));
  const std::string config = dir_.Sub("csd.yaml");
  std::ofstream(config) << "data_dir: " << dir_.Sub("b") << "\n";
  Expect(Csd(absl::StrCat("store restore --from ", backup, " --config ", config)), 0,
         absl::StrCat("restored ", backup, " into sqlite:", dir_.Sub("b")));
  // Into a store that now holds data: refused, exit 1, the way out named.
  Expect(Csd(absl::StrCat("store restore --from ", backup, " --config ", config)), 1,
         "is not empty: restore only fills an empty store; stop csd and pass --replace");
  Expect(Csd(absl::StrCat("store restore --replace --from ", backup, " --config ", config)), 0,
         "restored");

  std::ofstream(dir_.Sub("junk")) << "junk";
  Expect(Csd(absl::StrCat("store restore --from ", dir_.Sub("junk"), " --to sqlite:",
                          dir_.Sub("c"))),
         1, absl::StrCat("csd store: backup file ", dir_.Sub("junk"), " is corrupt or truncated"));
}

TEST_F(CsdStoreCliTest, MigrateIntoEtcdThenBackupAndRestoreIt) {
  testing::EtcdMember etcd;
  ASSERT_OK(etcd.Start());
  MakeStore(dir_.Sub("a"));
  const std::string target = absl::StrCat("etcd:", etcd.endpoint(), "/cosched");
  Expect(Csd(absl::StrCat("store migrate --from sqlite:", dir_.Sub("a"), " --to ", target)), 0,
         absl::StrCat("migrated 1 records from sqlite:", dir_.Sub("a"), " into ", target));
  Expect(Csd(absl::StrCat("store migrate --from sqlite:", dir_.Sub("a"), " --to ", target)), 1,
         "target etcd store under /cosched is not empty");
  const std::string backup = dir_.Sub("etcd.backup");
  Expect(Csd(absl::StrCat("store backup --from ", target, " --to ", backup)), 0, "backed up");
  Expect(Csd(absl::StrCat("store restore --from ", backup, " --to etcd:", etcd.endpoint(),
                          "/restored")),
         0, "get a snapshot");
  store::EtcdStoreOptions options;
  options.client = etcd.ClientOptions();
  options.prefix = "/restored";
  auto restored = store::EtcdStore::Open(options);
  ASSERT_TRUE(restored.ok()) << restored.status();
  ASSERT_OK((*restored)->Read([](store::Transaction& txn) -> absl::Status {
    auto vm = txn.GetVm("vm-1");
    if (!vm.ok()) return vm.status();
    return vm->has_value() ? absl::OkStatus() : absl::NotFoundError("vm-1 not restored");
  }));
}

}  // namespace
}  // namespace cosched
