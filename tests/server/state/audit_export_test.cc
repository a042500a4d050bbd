// The audit trail outside the store: the file of JSON lines (appends,
// rotation, a last line cut short, where it resumes) and the exporter over a
// real SQLite store (every record in order, once; a file that cannot be
// written; records that left the store's window first).
#include "server/state/audit_export.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "store/sqlite_store.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace cosched::server {
namespace {

v1::AuditRecord Record(int64_t sequence) {
  v1::AuditRecord record;
  record.set_sequence(sequence);
  record.set_who("alice");
  record.set_role("admin");
  record.set_method("TagVM");
  record.set_subject(absl::StrCat("vm-", sequence));
  record.set_after(R"({"vm_id":"x"})");
  return record;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The sequences of a file's lines, each parsed as an audit record.
std::vector<int64_t> Sequences(const std::string& path) {
  std::vector<int64_t> out;
  for (absl::string_view line : absl::StrSplit(Read(path), '\n', absl::SkipEmpty())) {
    v1::AuditRecord record;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(line), &record).ok())
        << line;
    out.push_back(record.sequence());
  }
  return out;
}

TEST(AuditFileTest, AppendsOneLinePerRecordAndResumesAfterTheLast) {
  cosched::testing::TempDir dir;
  AuditFileOptions options{.path = dir.Sub("audit.jsonl"), .max_bytes = 1 << 20, .keep = 2};
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<AuditFile> file, AuditFile::Open(options));
    EXPECT_EQ(file->last_sequence(), 0);
    ASSERT_OK(file->Append({Record(1), Record(2), Record(3)}));
    EXPECT_EQ(file->last_sequence(), 3);
  }
  EXPECT_EQ(Sequences(options.path), (std::vector<int64_t>{1, 2, 3}));
  struct stat st {};
  ASSERT_EQ(stat(options.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u) << "the group reads it, whatever the umask";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AuditFile> again, AuditFile::Open(options));
  EXPECT_EQ(again->last_sequence(), 3);
}

TEST(AuditFileTest, ALastLineCutShortIsCutOffSoTheNextRecordStartsALine) {
  cosched::testing::TempDir dir;
  AuditFileOptions options{.path = dir.Sub("audit.jsonl")};
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<AuditFile> file, AuditFile::Open(options));
    ASSERT_OK(file->Append({Record(1), Record(2)}));
  }
  {
    std::ofstream out(options.path, std::ios::app);
    out << R"({"sequence":"3","who":"al)";  // csd stopped in the middle of a write
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AuditFile> file, AuditFile::Open(options));
  EXPECT_EQ(file->last_sequence(), 2);
  ASSERT_OK(file->Append({Record(3)}));
  EXPECT_EQ(Sequences(options.path), (std::vector<int64_t>{1, 2, 3}));
}

TEST(AuditFileTest, RotatesBeforeALineWouldPassTheLimitAndKeepsSoManyFiles) {
  cosched::testing::TempDir dir;
  const int64_t line = static_cast<int64_t>(Read([&] {
                                              AuditFileOptions probe{.path = dir.Sub("probe")};
                                              auto file = AuditFile::Open(probe);
                                              EXPECT_OK(file);
                                              EXPECT_OK((*file)->Append({Record(1)}));
                                              return probe.path;
                                            }())
                                             .size());
  // Three lines a file (the sequences 1-9 print alike).
  AuditFileOptions options{.path = dir.Sub("audit.jsonl"), .max_bytes = 3 * line, .keep = 2};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AuditFile> file, AuditFile::Open(options));
  for (int64_t s = 1; s <= 9; ++s) ASSERT_OK(file->Append({Record(s)}));
  EXPECT_EQ(Sequences(options.path), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(Sequences(options.path + ".1"), (std::vector<int64_t>{4, 5, 6}));
  EXPECT_EQ(Sequences(options.path + ".2"), (std::vector<int64_t>{1, 2, 3}));
  ASSERT_OK(file->Append({Record(10)}));  // one batch may cross a rotation too
  EXPECT_EQ(Sequences(options.path), (std::vector<int64_t>{10}));
  EXPECT_EQ(Sequences(options.path + ".2"), (std::vector<int64_t>{4, 5, 6}));
  EXPECT_FALSE(std::filesystem::exists(options.path + ".3"));
  // Just rotated: the new file is empty, and the export resumes after the
  // newest rotated file's last record.
  file.reset();
  std::filesystem::remove(options.path);
  std::filesystem::rename(options.path + ".1", options.path + ".keep");
  std::filesystem::rename(options.path + ".2", options.path + ".1");
  ASSERT_OK_AND_ASSIGN(file, AuditFile::Open(options));
  EXPECT_EQ(file->last_sequence(), 6);
}

class AuditExporterTest : public ::testing::Test {
 protected:
  // The store, keeping the newest `window` records.
  void Open(int64_t window) {
    store::SqliteStoreOptions options;
    options.data_dir = dir_.Sub("data");
    options.audit_window_records = window;
    ASSERT_OK_AND_ASSIGN(store_, store::SqliteStore::Open(options));
  }

  // `n` audited changes, in batches of at most 500.
  void Write(int n) {
    for (int done = 0; done < n;) {
      const int batch = std::min(500, n - done);
      ASSERT_OK(store_->WriteSync([&](store::Transaction& txn) -> absl::Status {
        for (int i = 0; i < batch; ++i) {
          v1::AuditRecord record = Record(0);
          record.clear_sequence();
          record.set_time_unix_ns(absl::ToUnixNanos(absl::Now()));
          RETURN_IF_ERROR(txn.AppendAudit(record));
        }
        return absl::OkStatus();
      }));
      done += batch;
    }
  }

  AuditExporter::Observers Observe() {
    AuditExporter::Observers observers;
    observers.exported = [this](int64_t records, int64_t last) {
      exported_ += records;
      last_ = last;
    };
    observers.failing = [this](bool failing) { failing_ = failing; };
    observers.missing = [this](int64_t records) { missing_ += records; };
    return observers;
  }

  cosched::testing::TempDir dir_;
  std::unique_ptr<store::SqliteStore> store_;
  int64_t exported_ = 0;
  int64_t last_ = 0;
  int64_t missing_ = 0;
  bool failing_ = false;
};

TEST_F(AuditExporterTest, EveryRecordReachesTheFileOnceInOrder) {
  ASSERT_NO_FATAL_FAILURE(Open(1500));
  const std::string path = dir_.Sub("audit.jsonl");
  AuditExporter exporter(*store_, {.path = path}, absl::Seconds(1), Observe());
  Write(700);
  ASSERT_OK_AND_ASSIGN(int64_t first, exporter.ExportOnce());
  EXPECT_EQ(first, 700);
  Write(1300);  // two pages of the store's at the next export, all in the window
  ASSERT_OK_AND_ASSIGN(int64_t second, exporter.ExportOnce());
  EXPECT_EQ(second, 1300);
  ASSERT_OK_AND_ASSIGN(int64_t none, exporter.ExportOnce());
  EXPECT_EQ(none, 0);
  std::vector<int64_t> sequences = Sequences(path);
  ASSERT_EQ(sequences.size(), 2000u);
  for (size_t i = 0; i < sequences.size(); ++i) ASSERT_EQ(sequences[i], int64_t(i) + 1);
  EXPECT_EQ(exported_, 2000);
  EXPECT_EQ(last_, 2000);
  EXPECT_EQ(missing_, 0);
  // The store kept its window only; the file has the whole trail.
  int64_t kept = 0;
  ASSERT_OK(store_->Read([&](store::Transaction& txn) -> absl::Status {
    ASSIGN_OR_RETURN(auto records, txn.ListAuditAfter(0, 1000));
    kept = static_cast<int64_t>(records.size());
    EXPECT_EQ(records.front().sequence(), 501);
    return absl::OkStatus();
  }));
  EXPECT_EQ(kept, 1000);  // a page of the window's 1500
  // A new exporter (csd restarted) resumes after the file's last record.
  AuditExporter restarted(*store_, {.path = path}, absl::Seconds(1), {});
  Write(10);
  ASSERT_OK_AND_ASSIGN(int64_t resumed, restarted.ExportOnce());
  EXPECT_EQ(resumed, 10);
  EXPECT_EQ(Sequences(path).back(), 2010);
}

TEST_F(AuditExporterTest, AFileThatCannotBeWrittenFailsTheExportNotTheWrites) {
  ASSERT_NO_FATAL_FAILURE(Open(1000));
  const std::string folder = dir_.Sub("log");
  const std::string path = folder + "/audit.jsonl";
  AuditExporter exporter(*store_, {.path = path}, absl::Seconds(1), Observe());
  Write(5);  // the store takes them whatever the file does
  absl::StatusOr<int64_t> failed = exporter.ExportOnce();
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find(path), std::string::npos) << failed.status();
  EXPECT_TRUE(failing_);
  // Once the folder is there, the next export catches up.
  std::filesystem::create_directory(folder);
  ASSERT_OK_AND_ASSIGN(int64_t exported, exporter.ExportOnce());
  EXPECT_EQ(exported, 5);
  EXPECT_FALSE(failing_);
  EXPECT_EQ(Sequences(path), (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

TEST_F(AuditExporterTest, RecordsThatLeftTheWindowFirstAreCountedMissing) {
  ASSERT_NO_FATAL_FAILURE(Open(1000));
  const std::string path = dir_.Sub("audit.jsonl");
  AuditExporter exporter(*store_, {.path = path}, absl::Seconds(1), Observe());
  Write(100);
  ASSERT_OK(exporter.ExportOnce().status());
  // The file falls behind by more than the window (1000): 101-1100 go.
  Write(2000);
  ASSERT_OK_AND_ASSIGN(int64_t exported, exporter.ExportOnce());
  EXPECT_EQ(exported, 1000);
  EXPECT_EQ(missing_, 1000);
  std::vector<int64_t> sequences = Sequences(path);
  ASSERT_EQ(sequences.size(), 1100u);
  EXPECT_EQ(sequences[99], 100);
  EXPECT_EQ(sequences[100], 1101);
}

}  // namespace
}  // namespace cosched::server
