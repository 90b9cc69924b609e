#include "server/store/job_store.h"

#include <sqlite3.h>

#include <filesystem>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace traind::server {
namespace {

// Every store error names the database file; quick_check passes a healthy
// store and names what is damaged in another.
TEST(JobStoreIntegrityTest, ErrorsNameTheFile) {
  traind::testing::TempDir dir;
  const std::string healthy = dir.path() + "/healthy.db";
  {
    auto store = JobStore::Open(healthy);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_TRUE((*store)->CheckIntegrity().ok());
  }
  const std::string text = dir.Write("text.db", std::string(4096, 'x'));
  auto not_db = JobStore::Open(text);
  ASSERT_FALSE(not_db.ok());
  EXPECT_EQ(not_db.status().message().rfind(text + ": ", 0), 0u) << not_db.status();
  EXPECT_NE(not_db.status().message().find("file is not a database"), std::string::npos);
}

using traind::v1::Job;
using traind::v1::Task;

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }
  void TearDown() override { store_.reset(); }
  void Reopen() {
    store_.reset();
    auto s = JobStore::Open(dir_ + "/traind.db");
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }
  Job MakeJob(const std::string& id, const std::string& name, int tasks) {
    Job job;
    job.set_id(id);
    job.mutable_spec()->set_name(name);
    job.set_state(Job::QUEUED);
    job.mutable_create_time()->set_seconds(1700000000);
    for (int i = 0; i < tasks; ++i) {
      Task* t = job.add_tasks();
      t->set_index(i);
      t->set_state(Task::QUEUED);
      t->set_epochs_total(10);
    }
    return job;
  }
  absl::Status Insert(const Job& job) {
    StoreMutation m;
    m.job = &job;
    m.new_job = true;
    return store_->Apply(m, job.id());
  }

  ::traind::testing::TempDir scratch_{"traind-store"};
  const std::string dir_ = scratch_.path();
  std::unique_ptr<JobStore> store_;
};

TEST_F(JobStoreTest, JobRoundTripsWithTasksAndAttempts) {
  Job job = MakeJob("a1", "iris", 2);
  ASSERT_TRUE(Insert(job).ok());
  Task* t = job.mutable_tasks(1);
  t->set_state(Task::RUNNING);
  auto* a = t->add_attempts();
  a->set_number(1);
  a->set_pid(4242);
  a->set_log_path("/x/attempt-1.log");
  a->mutable_start_time()->set_seconds(1700000005);
  job.set_state(Job::RUNNING);
  StoreMutation m;
  m.job = &job;
  m.tasks.push_back(t);
  ASSERT_TRUE(store_->Apply(m, job.id()).ok());
  Reopen();  // durable across a new connection
  auto loaded = store_->LoadJob("a1");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->state(), Job::RUNNING);
  EXPECT_EQ(loaded->spec().name(), "iris");
  ASSERT_EQ(loaded->tasks_size(), 2);
  EXPECT_EQ(loaded->tasks(1).state(), Task::RUNNING);
  ASSERT_EQ(loaded->tasks(1).attempts_size(), 1);
  EXPECT_EQ(loaded->tasks(1).attempts(0).pid(), 4242);
  EXPECT_EQ(loaded->tasks(1).attempts(0).start_time().seconds(), 1700000005);
  EXPECT_FALSE(loaded->tasks(1).attempts(0).has_end_time());
  EXPECT_FALSE(loaded->has_start_time());
  EXPECT_EQ(store_->LoadJob("zz").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobStoreTest, EpochsAreWrittenOnce) {
  Job job = MakeJob("e1", "x", 1);
  ASSERT_TRUE(Insert(job).ok());
  traind::v1::EpochMetrics m;
  m.set_task(0);
  m.set_attempt(1);
  m.set_epoch(1);
  (*m.mutable_train())["loss"] = 0.25;
  StoreMutation sm;
  sm.epoch = &m;
  bool inserted = false;
  ASSERT_TRUE(store_->Apply(sm, "e1", &inserted).ok());
  EXPECT_TRUE(inserted);
  (*m.mutable_train())["loss"] = 99;
  ASSERT_TRUE(store_->Apply(sm, "e1", &inserted).ok());
  EXPECT_FALSE(inserted);
  auto epochs = store_->ReadEpochs("e1");
  ASSERT_TRUE(epochs.ok());
  ASSERT_EQ(epochs->size(), 1u);
  EXPECT_EQ(epochs->at(0).train().at("loss"), 0.25);
}

// An epoch's metrics are stored once (its epochs row); its event row keeps
// only the key, and ReadEvents gives the whole event back. An event row
// written with its metrics (a store from before) reads the same.
TEST_F(JobStoreTest, EpochMetricsAreStoredOnceAndEventsReadWhole) {
  Job job = MakeJob("s1", "x", 2);
  ASSERT_TRUE(Insert(job).ok());
  std::vector<traind::v1::EpochMetrics> metrics(3);
  std::vector<traind::v1::JobEvent> events(4);
  StoreMutation m;
  for (int i = 0; i < 3; ++i) {
    traind::v1::EpochMetrics& e = metrics[i];
    e.set_task(i % 2);
    e.set_attempt(1 + i / 2);
    e.set_epoch(i + 1);
    (*e.mutable_train())["loss"] = 1.0 / (i + 1);
    (*e.mutable_val())["accuracy"] = 0.5 + 0.125 * i;
    (*e.mutable_val())["f1_macro"] = 0.25 * i;
    e.set_batches(40 * (i + 1));
    e.set_seconds(0.03125 * (i + 1));
    events[i].set_job_id("s1");
    events[i].set_sequence(i + 1);
    events[i].mutable_time()->set_seconds(1700000000 + i);
    *events[i].mutable_epoch() = e;
    m.epochs.push_back(&metrics[i]);
    m.events.push_back(&events[i]);
  }
  events[3].set_job_id("s1");
  events[3].set_sequence(4);
  events[3].mutable_job_state()->set_state(Job::SUCCEEDED);
  events[3].set_last(true);
  m.events.push_back(&events[3]);
  ASSERT_TRUE(store_->Apply(m, "s1").ok());

  auto read = store_->ReadEvents("s1", 0, 10);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(read->at(i), events[i]))
        << read->at(i).DebugString() << " vs " << events[i].DebugString();
  }

  // On disk: the event rows of epochs hold no metrics.
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ + "/traind.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT seq, event FROM events WHERE job_id = 's1' ORDER BY seq",
                               -1, &st, nullptr),
            SQLITE_OK);
  int rows = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    traind::v1::JobEvent stored;
    ASSERT_TRUE(stored.ParseFromArray(sqlite3_column_blob(st, 1), sqlite3_column_bytes(st, 1)));
    const int i = rows++;
    if (i == 3) continue;
    ASSERT_TRUE(stored.has_epoch());
    EXPECT_EQ(stored.epoch().epoch(), i + 1);
    EXPECT_EQ(stored.epoch().task(), i % 2);
    EXPECT_EQ(stored.epoch().attempt(), 1 + i / 2);
    EXPECT_TRUE(stored.epoch().train().empty());
    EXPECT_TRUE(stored.epoch().val().empty());
    EXPECT_EQ(stored.epoch().batches(), 0);
  }
  sqlite3_finalize(st);
  EXPECT_EQ(rows, 4);
  // An event row with the metrics inside, as an older traind wrote them.
  traind::v1::JobEvent old = events[0];
  old.set_sequence(5);
  const std::string blob = old.SerializeAsString();
  ASSERT_EQ(sqlite3_prepare_v2(db, "INSERT INTO events (job_id, seq, event) VALUES ('s1', 5, ?1)",
                               -1, &st, nullptr),
            SQLITE_OK);
  sqlite3_bind_blob(st, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  ASSERT_EQ(sqlite3_step(st), SQLITE_DONE);
  sqlite3_finalize(st);
  sqlite3_close(db);
  Reopen();
  auto again = store_->ReadEvents("s1", 4, 10);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->size(), 1u);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(again->at(0), old))
      << again->at(0).DebugString();
}

TEST_F(JobStoreTest, EventsReadFromCursorAndDuplicateSequenceRollsBack) {
  Job job = MakeJob("v1", "x", 1);
  ASSERT_TRUE(Insert(job).ok());
  std::vector<traind::v1::JobEvent> events(5);
  StoreMutation m;
  for (int i = 0; i < 5; ++i) {
    events[i].set_job_id("v1");
    events[i].set_sequence(i + 1);
    m.events.push_back(&events[i]);
  }
  ASSERT_TRUE(store_->Apply(m, "v1").ok());
  auto after2 = store_->ReadEvents("v1", 2, 2);
  ASSERT_TRUE(after2.ok());
  ASSERT_EQ(after2->size(), 2u);
  EXPECT_EQ(after2->at(0).sequence(), 3);
  EXPECT_EQ(after2->at(1).sequence(), 4);
  EXPECT_EQ(*store_->LastEventSequence("v1"), 5);

  // A failing mutation leaves nothing behind: the job update is rolled back too.
  job.set_state(Job::FAILED);
  traind::v1::JobEvent dup;
  dup.set_sequence(3);
  StoreMutation bad;
  bad.job = &job;
  bad.events.push_back(&dup);
  EXPECT_FALSE(store_->Apply(bad, "v1").ok());
  EXPECT_EQ(store_->LoadJob("v1")->state(), Job::QUEUED);
  EXPECT_EQ(*store_->LastEventSequence("v1"), 5);
}

TEST_F(JobStoreTest, ListsNewestFirstWithFiltersAndPages) {
  for (int i = 0; i < 5; ++i) {
    Job job = MakeJob("j" + std::to_string(i), i % 2 ? "odd" : "even", 1);
    if (i == 4) job.set_state(Job::SUCCEEDED);
    ASSERT_TRUE(Insert(job).ok());
  }
  JobListFilter f;
  f.limit = 2;
  std::vector<int64_t> seqs;
  auto page1 = store_->ListJobs(f, &seqs);
  ASSERT_TRUE(page1.ok());
  ASSERT_EQ(page1->size(), 2u);
  EXPECT_EQ(page1->at(0).id(), "j4");
  EXPECT_EQ(page1->at(1).id(), "j3");
  f.before_seq = seqs.back();
  auto page2 = store_->ListJobs(f, nullptr);
  ASSERT_TRUE(page2.ok());
  EXPECT_EQ(page2->at(0).id(), "j2");

  JobListFilter by_name;
  by_name.name_contains = "odd";
  auto odd = store_->ListJobs(by_name, nullptr);
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->size(), 2u);

  JobListFilter by_state;
  by_state.states = {Job::SUCCEEDED};
  auto ok = store_->ListJobs(by_state, nullptr);
  ASSERT_TRUE(ok.ok());
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ(ok->at(0).id(), "j4");

  auto active = store_->LoadActiveJobs();
  ASSERT_TRUE(active.ok());
  EXPECT_EQ(active->size(), 4u);
  EXPECT_EQ(active->front().id(), "j0");
}

TEST_F(JobStoreTest, UpgradesASchemaOneStore) {
  store_.reset();
  std::filesystem::remove(dir_ + "/traind.db");
  {
    // The tables as the first release wrote them (no user_version).
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ + "/traind.db").c_str(), &db), SQLITE_OK);
    const char* v1 =
        "CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, "
        "name TEXT NOT NULL, state INTEGER NOT NULL, spec BLOB NOT NULL, create_us INTEGER NOT "
        "NULL, start_us INTEGER, end_us INTEGER, failure BLOB, result BLOB);"
        "INSERT INTO jobs (id, name, state, spec, create_us) VALUES ('old', 'n', 4, x'', 1);";
    ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  Reopen();
  auto old = store_->LoadJob("old");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->state(), Job::SUCCEEDED);
  EXPECT_EQ(old->owner(), "");
  Job job = MakeJob("new", "x", 1);
  job.set_owner("alice");
  StoreMutation m;
  m.job = &job;
  m.new_job = true;
  m.idempotency_key = "k";
  m.request_sha256 = "abc123";
  ASSERT_TRUE(store_->Apply(m, "new").ok());
  std::string sha;
  EXPECT_EQ(**store_->FindByIdempotencyKey("alice", "k", &sha), "new");
  EXPECT_EQ(sha, "abc123") << "schema 5's column, added to the first release's table";
  EXPECT_FALSE(store_->FindByIdempotencyKey("bob", "k")->has_value());
  // A row from before the column: no fingerprint.
  Job keyed = MakeJob("keyed", "x", 1);
  keyed.set_owner("carol");
  m.job = &keyed;
  m.request_sha256.clear();
  ASSERT_TRUE(store_->Apply(m, "keyed").ok());
  sha = "unset";
  EXPECT_EQ(**store_->FindByIdempotencyKey("carol", "k", &sha), "keyed");
  EXPECT_EQ(sha, "");
  m.job = &job;
  Job dup = MakeJob("dup", "x", 1);
  dup.set_owner("alice");
  m.job = &dup;
  EXPECT_FALSE(store_->Apply(m, "dup").ok());  // same (owner, key)
}

}  // namespace
}  // namespace traind::server
