// The job store and the state directory at start, end to end against the
// real traind: a damaged or lost store is refused naming the file, and the
// state directory's modes stay private under any umask.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/testing/traind_process.h"

namespace traind::testing {
namespace {

// ---------------------------------------------------------------------------
// A damaged or lost job store: traind refuses to start, naming the file
// ---------------------------------------------------------------------------

class StoreIntegrityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = dir_.path() + "/state";
    db_ = state_ + "/traind.db";
    TraindProcess d(state_);
    ASSERT_TRUE(d.Start()) << d.Log();
    for (int i = 0; i < 3; ++i) {  // a few jobs: a store of several pages
      absl::StatusOr<traind::v1::Job> job = SubmitJob(d.stub(), IrisExampleSpec(2, 2));
      ASSERT_TRUE(job.ok()) << job.status();
      std::vector<traind::v1::JobEvent> events;
      ASSERT_TRUE(WatchAll(d.stub(), job->id(), 0, &events).ok());
    }
    ASSERT_EQ(d.Stop(), 0) << d.Log();
    ASSERT_TRUE(std::filesystem::exists(state_ + "/jobs"));
  }

  // Starts traind on the state directory; expects it to refuse (exit code
  // != 0) with a message naming the database file. Returns the log.
  std::string ExpectRefused() {
    std::filesystem::remove(state_ + "/traind.log");
    TraindProcess d(state_);
    EXPECT_FALSE(d.Start()) << d.Log();
    EXPECT_GT(d.exit_code(), 0) << d.Log();
    const std::string log = d.Log();
    EXPECT_NE(log.find(db_), std::string::npos) << log;
    EXPECT_EQ(log.find("traind ready"), std::string::npos) << log;
    return log;
  }

  TempDir dir_;
  std::string state_, db_;
};

TEST_F(StoreIntegrityTest, AHealthyStoreStartsAndKeepsItsJobs) {
  TraindProcess d(state_);
  ASSERT_TRUE(d.Start()) << d.Log();
  EXPECT_EQ(JobCount(d.stub()), 3);
  EXPECT_NE(d.Log().find("store checked path=" + db_), std::string::npos) << d.Log();
}

TEST_F(StoreIntegrityTest, AnEmptyStoreBesideJobArtifactsIsRefused) {
  for (bool remove : {false, true}) {
    if (remove) {
      std::filesystem::remove(db_);  // deleted, not truncated: a new store
    } else {
      std::filesystem::resize_file(db_, 0);  // truncate -s 0
    }
    std::filesystem::remove(db_ + "-wal");
    std::filesystem::remove(db_ + "-shm");
    const std::string log = ExpectRefused();
    EXPECT_NE(log.find("holds no jobs, but " + state_ + "/jobs holds the artifacts of 3"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("restore " + db_ + " from a backup"), std::string::npos) << log;
  }
  // Moved aside as the message says: traind starts, empty.
  std::filesystem::rename(state_ + "/jobs", state_ + "/jobs.orphaned");
  TraindProcess d(state_);
  ASSERT_TRUE(d.Start()) << d.Log();
  EXPECT_EQ(JobCount(d.stub()), 0);
}

TEST_F(StoreIntegrityTest, OverwrittenPagesAreRefusedAtStart) {
  // Random bytes over the pages after the first (the schema page stays
  // readable, so only the check finds the damage).
  const auto size = std::filesystem::file_size(db_);
  ASSERT_GT(size, 8192u) << "a store of several pages";
  {
    std::fstream f(db_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    uint32_t x = 12345;
    for (uint64_t i = 4096; i < size; ++i) {
      x = x * 1664525u + 1013904223u;
      f.put(static_cast<char>(x >> 24));
    }
  }
  const std::string log = ExpectRefused();
  EXPECT_NE(log.find("the job store is damaged (quick_check: "), std::string::npos) << log;
  EXPECT_NE(log.find("mv " + db_ + " " + db_ + ".damaged"), std::string::npos) << log;
}

TEST_F(StoreIntegrityTest, AFileThatIsNoDatabaseIsRefused) {
  {
    std::ofstream f(db_, std::ios::trunc);
    for (int i = 0; i < 100; ++i) f << "this is a text file, not an SQLite database\n";
  }
  const std::string log = ExpectRefused();
  EXPECT_NE(log.find("file is not a database"), std::string::npos) << log;
}

// ---------------------------------------------------------------------------
// File modes in the state directory, whatever the umask
// ---------------------------------------------------------------------------

struct UmaskGuard {
  explicit UmaskGuard(mode_t m) : old(umask(m)) {}
  ~UmaskGuard() { umask(old); }
  mode_t old;
};

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Runs a job to its end on a state directory made under `mask`, then
// checks every mode traind and its workers left there.
void ExpectModes(mode_t mask, const std::vector<std::string>& extra, mode_t dir_mode) {
  const mode_t file_mode = dir_mode & 0666;
  UmaskGuard guard(mask);
  TempDir dir;
  const std::string state = dir.path() + "/state";
  TraindProcess d(state, extra);
  ASSERT_TRUE(d.Start()) << d.Log();
  absl::StatusOr<traind::v1::Job> job = SubmitJob(d.stub(), IrisExampleSpec(2, 2));
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<traind::v1::JobEvent> events;
  ASSERT_TRUE(WatchAll(d.stub(), job->id(), 0, &events).ok());
  SCOPED_TRACE(absl::StrCat("umask ", mask));
  EXPECT_EQ(ModeOf(state), dir_mode);
  for (const char* f : {"traind.db", "traind.db-wal", "traind.db-shm", "traind.lock"}) {
    EXPECT_EQ(ModeOf(state + "/" + f), file_mode) << f;
  }
  EXPECT_EQ(ModeOf(state + "/worker.sock"), 0600);
  EXPECT_EQ(ModeOf(state + "/traind.sock"), 0660) << "documented: the group may use it";
  EXPECT_EQ(ModeOf(state + "/jobs"), dir_mode);
  int files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(state + "/jobs")) {
    if (e.is_directory()) {
      EXPECT_EQ(ModeOf(e.path().string()), dir_mode) << e.path();
    } else {
      EXPECT_EQ(ModeOf(e.path().string()), file_mode) << e.path();
      ++files;
    }
  }
  EXPECT_GT(files, 2) << "logs, TensorBoard files, results";
}

TEST(StateModesTest, PrivateUnderUmask022And000) {
  ExpectModes(022, {}, 0700);
  ExpectModes(0, {}, 0700);
}

TEST(StateModesTest, GroupReadableWhenConfigured) {
  ExpectModes(0, {"--state-dir-mode=0750"}, 0750);
}

TEST(StateModesTest, ModesOpenToOthersAreRefused) {
  TempDir dir;
  TraindProcess d(dir.path() + "/state", {"--state-dir-mode=0755"});
  EXPECT_FALSE(d.Start());
  EXPECT_EQ(d.exit_code(), 2) << d.Log();
  EXPECT_NE(d.Log().find("--state-dir-mode: \"0755\""), std::string::npos) << d.Log();
}

}  // namespace
}  // namespace traind::testing
