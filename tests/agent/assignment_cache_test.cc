#include "agent/assignment_cache.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host/state_fs.h"
#include "host/testing/state_fs_fake.h"
#include "tests/agent/fake_csd.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace cosched::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Key;
using testing::MakeAssignment;
using testing::MakeDelta;
using testing::MakeSnapshot;
using cosched::testing::TempDir;

class AssignmentCacheTest : public ::testing::Test {
 protected:
  std::string StateFile() const { return dir_.path() + "/assignments.pb"; }
  TempDir dir_;
};

TEST_F(AssignmentCacheTest, SnapshotReplacesDeltaMerges) {
  AssignmentCache cache("");
  ASSERT_TRUE(cache
                  .Apply(MakeSnapshot(5, {MakeAssignment("vm-1", "g1", 3),
                                          MakeAssignment("vm-2", "g2", 5)}))
                  .ok());
  EXPECT_EQ(cache.revision(), 5);
  EXPECT_THAT(cache.assignments(), ElementsAre(Key("vm-1"), Key("vm-2")));

  ASSERT_TRUE(cache
                  .Apply(MakeDelta(7, {MakeAssignment("vm-3", "g3", 7),
                                       MakeAssignment("vm-1", "g9", 7)},
                                   {"vm-2"}))
                  .ok());
  EXPECT_EQ(cache.revision(), 7);
  EXPECT_THAT(cache.assignments(), ElementsAre(Key("vm-1"), Key("vm-3")));
  EXPECT_EQ(cache.Find("vm-1")->trust_group(), "g9");
  EXPECT_FALSE(cache.Find("vm-2").has_value());

  ASSERT_OK(cache.Apply(MakeSnapshot(9, {MakeAssignment("vm-4", "g4", 9)})));
  EXPECT_THAT(cache.assignments(), ElementsAre(Key("vm-4")));
}

TEST_F(AssignmentCacheTest, RevisionNeverGoesBack) {
  AssignmentCache cache("");
  ASSERT_OK(cache.Apply(MakeSnapshot(5, {MakeAssignment("vm-1", "g1", 5)})));
  absl::Status back = cache.Apply(MakeDelta(4, {}, {"vm-1"}));
  EXPECT_EQ(back.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(back.message(), HasSubstr("from 5 to 4"));
  EXPECT_EQ(cache.revision(), 5);
  EXPECT_TRUE(cache.Find("vm-1").has_value());
  // The same revision again is harmless (a resumed stream may repeat it).
  EXPECT_OK(cache.Apply(MakeDelta(5, {}, {})));
  EXPECT_EQ(cache.deltas_applied(), 1);
}

TEST_F(AssignmentCacheTest, SnapshotFromBehindIsFollowed) {
  // csd's store was restored from a backup: its snapshot is the truth.
  AssignmentCache cache("");
  ASSERT_OK(cache.Apply(MakeSnapshot(5, {MakeAssignment("vm-1", "g1", 5)})));
  ASSERT_OK(cache.Apply(MakeSnapshot(3, {MakeAssignment("vm-2", "g2", 2)})));
  EXPECT_EQ(cache.revision(), 3);
  EXPECT_FALSE(cache.Find("vm-1").has_value());
  EXPECT_TRUE(cache.Find("vm-2").has_value());
  EXPECT_EQ(cache.snapshots_applied(), 2);
}

TEST_F(AssignmentCacheTest, RejectsBadMessages) {
  AssignmentCache cache("");
  v1::WatchAssignmentsResponse unknown;
  unknown.set_revision(1);
  EXPECT_EQ(cache.Apply(unknown).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Apply(MakeSnapshot(2, {MakeAssignment("bad id!", "g", 2)})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.revision(), 0);
}

TEST_F(AssignmentCacheTest, PersistsAndLoads) {
  {
    AssignmentCache cache(StateFile());
    ASSERT_OK(cache.Load());  // no file yet: empty
    EXPECT_EQ(cache.revision(), 0);
    ASSERT_OK(cache.Apply(MakeSnapshot(5, {MakeAssignment("vm-1", "g1", 5)})));
    ASSERT_OK(cache.Apply(MakeDelta(6, {MakeAssignment("vm-2", "g2", 6)}, {})));
  }
  EXPECT_FALSE(std::filesystem::exists(StateFile() + ".tmp"));
  struct stat st;
  ASSERT_EQ(stat(StateFile().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  AssignmentCache loaded(StateFile());
  ASSERT_OK(loaded.Load());
  EXPECT_EQ(loaded.revision(), 6);
  EXPECT_THAT(loaded.assignments(), ElementsAre(Key("vm-1"), Key("vm-2")));
  EXPECT_EQ(loaded.Find("vm-2")->trust_group(), "g2");
}

TEST_F(AssignmentCacheTest, AFailedSaveIsEnforcedFromMemoryAndSavedWithTheNext) {
  const std::string dir = dir_.path() + "/not-yet";
  AssignmentCache cache(dir + "/assignments.pb");
  // The state dir is missing (as if full or unwritable): csd's change is
  // taken all the same, and the failure is kept for the operator.
  absl::Status status =
      cache.Apply(MakeSnapshot(5, {MakeAssignment("vm-1", "g1", 5)}));
  ASSERT_OK(status) << status;
  EXPECT_EQ(cache.revision(), 5);
  EXPECT_EQ(cache.Find("vm-1")->trust_group(), "g1");
  EXPECT_THAT(cache.save_error().message(), HasSubstr("not-yet"));
  EXPECT_EQ(cache.saved_revision(), 0);
  // Writable again: the next message saves everything held.
  ASSERT_TRUE(std::filesystem::create_directory(dir));
  v1::WatchAssignmentsResponse delta;
  delta.set_kind(v1::WatchAssignmentsResponse::KIND_DELTA);
  delta.set_revision(6);
  *delta.add_assignments() = MakeAssignment("vm-2", "g2", 6);
  ASSERT_OK(cache.Apply(delta));
  EXPECT_OK(cache.save_error());
  EXPECT_EQ(cache.saved_revision(), 6);
  AssignmentCache loaded(dir + "/assignments.pb");
  ASSERT_OK(loaded.Load());
  EXPECT_EQ(loaded.revision(), 6);
  EXPECT_EQ(loaded.assignments().size(), 2u);
}

TEST_F(AssignmentCacheTest, AtomicWriteReplacesWholeFile) {
  const std::string path = dir_.path() + "/f";
  ASSERT_OK(WriteFileAtomically(path, "a long first content"));
  ASSERT_OK(WriteFileAtomically(path, "short"));
  EXPECT_EQ(*ReadFileToString(path), "short");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // A leftover temporary file from a crash does not matter.
  { std::ofstream(path + ".tmp") << "half"; }
  ASSERT_OK(WriteFileAtomically(path, "next"));
  EXPECT_EQ(*ReadFileToString(path), "next");
  EXPECT_EQ(ReadFileToString(dir_.path() + "/none").status().code(),
            absl::StatusCode::kNotFound);
}

void ExpectCorrupt(const std::string& path, absl::string_view content) {
  { std::ofstream(path, std::ios::binary | std::ios::trunc) << content; }
  AssignmentCache cache(path);
  absl::Status status = cache.Load();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("corrupt"));
}

TEST_F(AssignmentCacheTest, CorruptFileIsAnError) {
  const std::string good = AssignmentCache::Encode(
      5, {{"vm-1", MakeAssignment("vm-1", "g1", 5)}});
  ExpectCorrupt(StateFile(), "garbage");
  ExpectCorrupt(StateFile(), "");
  ExpectCorrupt(StateFile(), good.substr(0, good.size() - 3));  // truncated
  std::string flipped = good;
  flipped[flipped.size() - 2] ^= 0x01;
  ExpectCorrupt(StateFile(), flipped);
  std::string other_version = good;
  other_version.replace(other_version.find(" 1 "), 3, " 9 ");
  ExpectCorrupt(StateFile(), other_version);

  // And the good one loads.
  { std::ofstream(StateFile(), std::ios::binary | std::ios::trunc) << good; }
  AssignmentCache cache(StateFile());
  ASSERT_OK(cache.Load());
  EXPECT_EQ(cache.revision(), 5);
}

// 2025-01-02 03:04:05.000006 UTC.
absl::Time SetAsideTime() {
  return absl::FromCivil(absl::CivilSecond(2025, 1, 2, 3, 4, 5), absl::UTCTimeZone()) +
         absl::Microseconds(6);
}

TEST_F(AssignmentCacheTest, CorruptFileIsMovedAsideAndTheCacheStartsEmpty) {
  { std::ofstream(StateFile(), std::ios::binary) << "not a state file"; }
  AssignmentCache cache(StateFile());
  std::optional<AssignmentCache::SetAside> aside = cache.LoadOrSetAside(SetAsideTime());
  ASSERT_TRUE(aside.has_value());
  EXPECT_EQ(aside->reason, "corrupt");
  EXPECT_EQ(aside->problem.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(aside->problem.message(), HasSubstr(StateFile()));
  EXPECT_OK(aside->move_error) << aside->move_error;
  const std::string moved = StateFile() + ".corrupt-20250102T030405.000006Z";
  EXPECT_EQ(aside->moved_to, moved);
  // Kept, byte for byte, for a person to look at; gone from its place.
  EXPECT_EQ(*ReadFileToString(moved), "not a state file");
  EXPECT_FALSE(std::filesystem::exists(StateFile()));
  EXPECT_EQ(cache.revision(), 0);
  EXPECT_TRUE(cache.assignments().empty());

  // csd's snapshot is then saved as usual, and the next start loads it.
  ASSERT_OK(cache.Apply(MakeSnapshot(7, {MakeAssignment("vm-1", "g1", 7)})));
  AssignmentCache next(StateFile());
  EXPECT_FALSE(next.LoadOrSetAside(SetAsideTime()).has_value());
  EXPECT_EQ(next.revision(), 7);
}

TEST_F(AssignmentCacheTest, AMissingOrGoodFileIsNotSetAside) {
  AssignmentCache none(StateFile());
  EXPECT_FALSE(none.LoadOrSetAside(SetAsideTime()).has_value());
  ASSERT_TRUE(WriteFileAtomically(
      StateFile(), AssignmentCache::Encode(3, {{"vm-1", MakeAssignment("vm-1", "g1", 3)}})).ok());
  AssignmentCache good(StateFile());
  EXPECT_FALSE(good.LoadOrSetAside(SetAsideTime()).has_value());
  EXPECT_EQ(good.revision(), 3);
  EXPECT_TRUE(std::filesystem::exists(StateFile()));
}

TEST_F(AssignmentCacheTest, UnreadableFileIsMovedAside) {
  // EACCES, or EIO from a failing disk: the content is unknown, so the
  // cache does not trust it any more than a corrupt one.
  auto fs = std::make_shared<host::FakeStateFs>();
  const std::string file = "/state/assignments.pb";
  fs->SetFile(file, AssignmentCache::Encode(3, {{"vm-1", MakeAssignment("vm-1", "g1", 3)}}));
  fs->FailReads(file, absl::PermissionDeniedError("cannot open /state/assignments.pb: "
                                                  "Permission denied"));
  AssignmentCache cache(file, fs);
  std::optional<AssignmentCache::SetAside> aside = cache.LoadOrSetAside(SetAsideTime());
  ASSERT_TRUE(aside.has_value());
  EXPECT_EQ(aside->reason, "unreadable");
  EXPECT_EQ(aside->problem.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(aside->moved_to, file + ".unreadable-20250102T030405.000006Z");
  EXPECT_THAT(fs->files(), ElementsAre(Key(aside->moved_to)));
  EXPECT_TRUE(cache.assignments().empty());
  EXPECT_EQ(cache.revision(), 0);
}

TEST_F(AssignmentCacheTest, AFileThatCannotBeMovedIsLeftAndReplacedByCsdsState) {
  // The dir is read-only or unreadable: the rename fails too. The cache
  // still starts empty, and csd's next state overwrites the file once the
  // dir can be written.
  auto fs = std::make_shared<host::FakeStateFs>();
  const std::string file = "/state/assignments.pb";
  fs->SetFile(file, "garbage");
  fs->FailRenames("/state/", absl::PermissionDeniedError("cannot rename: Permission denied"));
  AssignmentCache cache(file, fs);
  std::optional<AssignmentCache::SetAside> aside = cache.LoadOrSetAside(SetAsideTime());
  ASSERT_TRUE(aside.has_value());
  EXPECT_EQ(aside->reason, "corrupt");
  EXPECT_TRUE(aside->moved_to.empty());
  EXPECT_EQ(aside->move_error.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(aside->move_error.message(), HasSubstr("Permission denied"));
  EXPECT_EQ(fs->files().at(file), "garbage");
  EXPECT_TRUE(cache.assignments().empty());

  ASSERT_OK(cache.Apply(MakeSnapshot(4, {MakeAssignment("vm-2", "g2", 4)})));
  int64_t revision = 0;
  AssignmentMap saved;
  ASSERT_OK(AssignmentCache::Decode(fs->files().at(file), file, &revision, &saved));
  EXPECT_EQ(revision, 4);
  EXPECT_THAT(saved, ElementsAre(Key("vm-2")));
}

}  // namespace
}  // namespace cosched::agent
