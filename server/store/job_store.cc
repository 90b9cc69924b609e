#include "server/store/job_store.h"

#include <sqlite3.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/time_util.h"
#include "server/store/job_states.h"
#include "server/store/sqlite_statement.h"

namespace traind::server {
namespace {

using google::protobuf::Timestamp;
using google::protobuf::util::TimeUtil;
using traind::v1::Job;
using traind::v1::Task;

// Schema 1: the first release (no user_version). Schema 2: jobs.owner and
// jobs.idem_key. Schema 3: attempts.detail (the whole Attempt message).
// Schema 4: datasets and dataset_uses (new tables only). Schema 5:
// jobs.request_sha256 (an idempotency key reused for another request).
constexpr int64_t kSchemaVersion = 5;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  seq         INTEGER PRIMARY KEY AUTOINCREMENT,
  id          TEXT NOT NULL UNIQUE,
  name        TEXT NOT NULL,
  state       INTEGER NOT NULL,
  spec        BLOB NOT NULL,
  create_us   INTEGER NOT NULL,
  start_us    INTEGER,
  end_us      INTEGER,
  failure     BLOB,
  result      BLOB,
  owner       TEXT NOT NULL DEFAULT '',
  idem_key    TEXT,
  request_sha256 TEXT,
  UNIQUE (owner, idem_key)
);
CREATE TABLE IF NOT EXISTS tasks (
  job_id        TEXT NOT NULL,
  idx           INTEGER NOT NULL,
  state         INTEGER NOT NULL,
  epochs_done   INTEGER NOT NULL,
  epochs_total  INTEGER NOT NULL,
  result        BLOB,
  failure       BLOB,
  PRIMARY KEY (job_id, idx)
);
CREATE TABLE IF NOT EXISTS attempts (
  job_id    TEXT NOT NULL,
  task_idx  INTEGER NOT NULL,
  number    INTEGER NOT NULL,
  pid       INTEGER NOT NULL,
  start_us  INTEGER,
  end_us    INTEGER,
  failure   BLOB,
  log_path  TEXT NOT NULL,
  detail    BLOB,
  PRIMARY KEY (job_id, task_idx, number)
);
CREATE TABLE IF NOT EXISTS epochs (
  job_id    TEXT NOT NULL,
  task_idx  INTEGER NOT NULL,
  attempt   INTEGER NOT NULL,
  epoch     INTEGER NOT NULL,
  metrics   BLOB NOT NULL,
  PRIMARY KEY (job_id, task_idx, attempt, epoch)
);
CREATE TABLE IF NOT EXISTS events (
  job_id  TEXT NOT NULL,
  seq     INTEGER NOT NULL,
  event   BLOB NOT NULL,
  PRIMARY KEY (job_id, seq)
);
CREATE TABLE IF NOT EXISTS datasets (
  owner      TEXT NOT NULL,
  name       TEXT NOT NULL,
  version    INTEGER NOT NULL,
  sha256     TEXT NOT NULL,
  size       INTEGER NOT NULL,
  create_us  INTEGER NOT NULL,
  record     BLOB NOT NULL,
  PRIMARY KEY (owner, name, version)
);
CREATE INDEX IF NOT EXISTS datasets_sha256 ON datasets (sha256);
CREATE TABLE IF NOT EXISTS dataset_uses (
  sha256  TEXT NOT NULL,
  job_id  TEXT NOT NULL,
  PRIMARY KEY (sha256, job_id)
);
CREATE INDEX IF NOT EXISTS dataset_uses_job ON dataset_uses (job_id);
)sql";

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat(path, ": cannot open database: ", msg));
  }
  sqlite3_busy_timeout(db, 5000);
  std::unique_ptr<JobStore> store(new JobStore(db));
  absl::MutexLock lock(&store->mu_);
  // A file that is not a database ("file is not a database") fails here,
  // the first statement that reads its header.
  // Incremental auto-vacuum, so that deleted jobs give their pages back
  // (ReclaimSpace). A new file takes it before its first table; an older
  // store converts once, with a VACUUM.
  int64_t auto_vacuum = 0;
  {
    Stmt st(db, store->stmts_.get(), "PRAGMA auto_vacuum");
    STORE_RETURN_IF_ERROR(st.status());
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) return row.status();
    if (*row) auto_vacuum = st.Int(0);
  }
  if (auto_vacuum != 2) {  // 2: incremental
    STORE_RETURN_IF_ERROR(store->Exec("PRAGMA auto_vacuum=INCREMENTAL"));
    STORE_RETURN_IF_ERROR(store->Exec("VACUUM"));
  }
  STORE_RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
  STORE_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL"));
  STORE_RETURN_IF_ERROR(store->Exec("PRAGMA foreign_keys=ON"));
  STORE_RETURN_IF_ERROR(store->Migrate());
  return store;
}

absl::Status JobStore::CheckIntegrity() {
  absl::MutexLock lock(&mu_);
  // quick_check reads every page of the file once (O(size): about as long
  // as reading the file from disk) and checks the b-trees' structure, but
  // not that indexes match their tables (integrity_check, O(size · log
  // size), would). Its first few findings are enough to name the damage.
  Stmt st(db_, stmts_.get(), "PRAGMA quick_check(5)");
  STORE_RETURN_IF_ERROR(st.status());
  std::vector<std::string> findings;
  for (;;) {
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) {
      findings.push_back(std::string(row.status().message()));
      break;
    }
    if (!*row) break;
    std::string line = st.Text(0);
    if (line != "ok") findings.push_back(std::move(line));
  }
  if (findings.empty()) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(DbPath(db_), ": the job store is damaged (quick_check: ",
                                          absl::StrJoin(findings, "; "), ")"));
}

JobStore::JobStore(sqlite3* db) : db_(db), stmts_(std::make_unique<StatementCache>()) {}

JobStore::~JobStore() {
  absl::MutexLock lock(&mu_);
  stmts_.reset();  // finalized before the connection closes
  sqlite3_close(db_);
}

absl::Status JobStore::Migrate() {
  int64_t version = 0;
  {
    Stmt st(db_, stmts_.get(), "PRAGMA user_version");
    STORE_RETURN_IF_ERROR(st.status());
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) return row.status();
    version = *row ? st.Int(0) : 0;
  }
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(DbPath(db_), ": the store was written by a newer traind (schema ", version,
                     ", this one knows ", kSchemaVersion, ")"));
  }
  bool legacy = false;  // tables of schema 1, which set no user_version
  {
    Stmt st(db_, stmts_.get(),
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'");
    STORE_RETURN_IF_ERROR(st.status());
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) return row.status();
    legacy = version == 0 && *row;
  }
  STORE_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status s = [&]() -> absl::Status {
    if (legacy) {
      STORE_RETURN_IF_ERROR(Exec("ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT ''"));
      STORE_RETURN_IF_ERROR(Exec("ALTER TABLE jobs ADD COLUMN idem_key TEXT"));
      STORE_RETURN_IF_ERROR(
          Exec("CREATE UNIQUE INDEX IF NOT EXISTS jobs_idem ON jobs (owner, idem_key)"));
    }
    if (legacy || version == 2) {
      bool has_attempts = false;
      Stmt st(db_, stmts_.get(),
              "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'attempts'");
      STORE_RETURN_IF_ERROR(st.status());
      absl::StatusOr<bool> row = st.Step();
      if (!row.ok()) return row.status();
      has_attempts = *row;
      if (has_attempts) STORE_RETURN_IF_ERROR(Exec("ALTER TABLE attempts ADD COLUMN detail BLOB"));
    }
    if (legacy || (version >= 2 && version < 5)) {
      STORE_RETURN_IF_ERROR(Exec("ALTER TABLE jobs ADD COLUMN request_sha256 TEXT"));
    }
    STORE_RETURN_IF_ERROR(Exec(kSchema));
    return Exec(absl::StrCat("PRAGMA user_version = ", kSchemaVersion).c_str());
  }();
  if (!s.ok()) {
    Exec("ROLLBACK").IgnoreError();
    return s;
  }
  return Exec("COMMIT");
}

absl::Status JobStore::Exec(const char* sql) {
  char* err = nullptr;
  if (int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err); rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    return SqliteStatus(db_, rc, "sqlite", msg);
  }
  return absl::OkStatus();
}

absl::Status JobStore::WriteJobRow(const Job& job, bool insert, const std::string& idempotency_key,
                                   const std::string& request_sha256) {
  const char* sql =
      insert ? "INSERT INTO jobs (id, name, state, spec, create_us, start_us, end_us, failure, "
               "result, owner, idem_key, request_sha256) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, "
               "?9, ?10, ?11, ?12)"
             : "UPDATE jobs SET name = ?2, state = ?3, spec = ?4, create_us = ?5, start_us = ?6, "
               "end_us = ?7, failure = ?8, result = ?9 WHERE id = ?1";
  Stmt st(db_, stmts_.get(), sql);
  STORE_RETURN_IF_ERROR(st.status());
  st.Bind(1, job.id());
  st.Bind(2, job.spec().name());
  st.Bind(3, static_cast<int64_t>(job.state()));
  st.BindBlob(4, job.spec().SerializeAsString());
  st.Bind(5, TimeUtil::TimestampToMicroseconds(job.create_time()));
  st.BindTime(6, job.start_time(), job.has_start_time());
  st.BindTime(7, job.end_time(), job.has_end_time());
  st.BindMessage(8, job.failure(), job.has_failure());
  st.BindMessage(9, job.result(), job.has_result());
  if (insert) {
    st.Bind(10, job.owner());
    if (idempotency_key.empty()) {
      st.BindNull(11);
    } else {
      st.Bind(11, idempotency_key);
    }
    if (request_sha256.empty()) {
      st.BindNull(12);
    } else {
      st.Bind(12, request_sha256);
    }
  }
  return st.Run();
}

absl::Status JobStore::WriteTaskRow(const std::string& job_id, const Task& task) {
  Stmt st(db_, stmts_.get(),
          "INSERT INTO tasks (job_id, idx, state, epochs_done, epochs_total, result, failure) "
          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (job_id, idx) DO UPDATE SET "
          "state = excluded.state, epochs_done = excluded.epochs_done, "
          "epochs_total = excluded.epochs_total, result = excluded.result, "
          "failure = excluded.failure");
  STORE_RETURN_IF_ERROR(st.status());
  st.Bind(1, job_id);
  st.Bind(2, task.index());
  st.Bind(3, static_cast<int64_t>(task.state()));
  st.Bind(4, task.epochs_done());
  st.Bind(5, task.epochs_total());
  st.BindMessage(6, task.result(), task.has_result());
  st.BindMessage(7, task.failure(), task.has_failure());
  STORE_RETURN_IF_ERROR(st.Run());
  for (const traind::v1::Attempt& a : task.attempts()) {
    Stmt at(db_, stmts_.get(),
            "INSERT INTO attempts (job_id, task_idx, number, pid, start_us, end_us, failure, "
            "log_path, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) "
            "ON CONFLICT (job_id, task_idx, number) DO UPDATE SET pid = excluded.pid, "
            "start_us = excluded.start_us, end_us = excluded.end_us, "
            "failure = excluded.failure, log_path = excluded.log_path, detail = excluded.detail");
    STORE_RETURN_IF_ERROR(at.status());
    at.Bind(1, job_id);
    at.Bind(2, task.index());
    at.Bind(3, a.number());
    at.Bind(4, a.pid());
    at.BindTime(5, a.start_time(), a.has_start_time());
    at.BindTime(6, a.end_time(), a.has_end_time());
    at.BindMessage(7, a.failure(), a.has_failure());
    at.Bind(8, a.log_path());
    at.BindBlob(9, a.SerializeAsString());
    STORE_RETURN_IF_ERROR(at.Run());
  }
  return absl::OkStatus();
}

absl::Status JobStore::Apply(const StoreMutation& m, const std::string& job_id,
                             bool* epoch_inserted) {
  absl::MutexLock lock(&mu_);
  STORE_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  auto body = [&]() -> absl::Status {
    if (m.job != nullptr) {
      STORE_RETURN_IF_ERROR(WriteJobRow(*m.job, m.new_job, m.idempotency_key, m.request_sha256));
      if (m.new_job) {
        for (const Task& t : m.job->tasks()) STORE_RETURN_IF_ERROR(WriteTaskRow(job_id, t));
        STORE_RETURN_IF_ERROR(WriteDatasetUses(*m.job));
      }
    }
    for (const Task* t : m.tasks) STORE_RETURN_IF_ERROR(WriteTaskRow(job_id, *t));
    std::vector<const traind::v1::EpochMetrics*> epochs = m.epochs;
    if (m.epoch != nullptr) epochs.insert(epochs.begin(), m.epoch);
    for (const traind::v1::EpochMetrics* epoch : epochs) {
      Stmt st(db_, stmts_.get(),
              "INSERT OR IGNORE INTO epochs (job_id, task_idx, attempt, epoch, metrics) "
              "VALUES (?1, ?2, ?3, ?4, ?5)");
      STORE_RETURN_IF_ERROR(st.status());
      st.Bind(1, job_id);
      st.Bind(2, epoch->task());
      st.Bind(3, epoch->attempt());
      st.Bind(4, epoch->epoch());
      st.BindBlob(5, epoch->SerializeAsString());
      STORE_RETURN_IF_ERROR(st.Run());
      if (epoch_inserted != nullptr && epoch == m.epoch) *epoch_inserted = sqlite3_changes(db_) > 0;
    }
    for (const traind::v1::JobEvent* e : m.events) {
      Stmt st(db_, stmts_.get(), "INSERT INTO events (job_id, seq, event) VALUES (?1, ?2, ?3)");
      STORE_RETURN_IF_ERROR(st.status());
      st.Bind(1, job_id);
      st.Bind(2, e->sequence());
      if (e->has_epoch()) {
        // The metrics live once, in the epochs row; the event keeps its key
        // (ReadEvents puts them back).
        traind::v1::JobEvent keyed = *e;
        traind::v1::EpochMetrics* epoch = keyed.mutable_epoch();
        epoch->clear_train();
        epoch->clear_val();
        epoch->clear_batches();
        epoch->clear_seconds();
        st.BindBlob(3, keyed.SerializeAsString());
      } else {
        st.BindBlob(3, e->SerializeAsString());
      }
      STORE_RETURN_IF_ERROR(st.Run());
    }
    if (m.delete_job) {
      for (const char* sql :
           {"DELETE FROM events WHERE job_id = ?1", "DELETE FROM epochs WHERE job_id = ?1",
            "DELETE FROM attempts WHERE job_id = ?1", "DELETE FROM tasks WHERE job_id = ?1",
            "DELETE FROM dataset_uses WHERE job_id = ?1", "DELETE FROM jobs WHERE id = ?1"}) {
        Stmt st(db_, stmts_.get(), sql);
        STORE_RETURN_IF_ERROR(st.status());
        st.Bind(1, job_id);
        STORE_RETURN_IF_ERROR(st.Run());
      }
    }
    return absl::OkStatus();
  };
  absl::Status s = body();
  if (s.ok()) s = Exec("COMMIT");
  // A failed COMMIT (a full disk) may leave the transaction open: end it,
  // so that the mutation can be applied again as a whole.
  if (!s.ok() && !sqlite3_get_autocommit(db_)) Exec("ROLLBACK").IgnoreError();
  return s;
}

absl::StatusOr<Job> JobStore::LoadJobLocked(const std::string& job_id) {
  Job job;
  {
    Stmt st(db_, stmts_.get(),
            "SELECT id, state, spec, create_us, start_us, end_us, failure, result, owner "
            "FROM jobs WHERE id = ?1");
    STORE_RETURN_IF_ERROR(st.status());
    st.Bind(1, job_id);
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
    job.set_id(st.Text(0));
    job.set_state(static_cast<Job::State>(st.Int(1)));
    st.Message(2, job.mutable_spec());
    st.Time(3, job.mutable_create_time());
    st.Time(4, job.mutable_start_time());
    if (st.IsNull(4)) job.clear_start_time();
    st.Time(5, job.mutable_end_time());
    if (st.IsNull(5)) job.clear_end_time();
    st.Message(6, job.mutable_failure());
    if (st.IsNull(6)) job.clear_failure();
    st.Message(7, job.mutable_result());
    if (st.IsNull(7)) job.clear_result();
    job.set_owner(st.Text(8));
  }
  {
    Stmt st(db_, stmts_.get(),
            "SELECT idx, state, epochs_done, epochs_total, result, failure FROM tasks "
            "WHERE job_id = ?1 ORDER BY idx");
    STORE_RETURN_IF_ERROR(st.status());
    st.Bind(1, job_id);
    for (;;) {
      absl::StatusOr<bool> row = st.Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      Task* t = job.add_tasks();
      t->set_index(static_cast<int32_t>(st.Int(0)));
      t->set_state(static_cast<Task::State>(st.Int(1)));
      t->set_epochs_done(static_cast<int32_t>(st.Int(2)));
      t->set_epochs_total(static_cast<int32_t>(st.Int(3)));
      if (!st.Message(4, t->mutable_result())) t->clear_result();
      if (!st.Message(5, t->mutable_failure())) t->clear_failure();
    }
  }
  {
    Stmt st(db_, stmts_.get(),
            "SELECT task_idx, number, pid, start_us, end_us, failure, log_path, detail "
            "FROM attempts WHERE job_id = ?1 ORDER BY task_idx, number");
    STORE_RETURN_IF_ERROR(st.status());
    st.Bind(1, job_id);
    for (;;) {
      absl::StatusOr<bool> row = st.Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      int idx = static_cast<int>(st.Int(0));
      if (idx < 0 || idx >= job.tasks_size()) continue;
      traind::v1::Attempt* a = job.mutable_tasks(idx)->add_attempts();
      if (st.Message(7, a)) continue;  // schema 3: the whole message
      a->set_number(static_cast<int32_t>(st.Int(1)));
      a->set_pid(static_cast<int32_t>(st.Int(2)));
      if (!st.IsNull(3)) st.Time(3, a->mutable_start_time());
      if (!st.IsNull(4)) st.Time(4, a->mutable_end_time());
      if (!st.Message(5, a->mutable_failure())) a->clear_failure();
      a->set_log_path(st.Text(6));
    }
  }
  return job;
}

absl::StatusOr<Job> JobStore::LoadJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return LoadJobLocked(job_id);
}

absl::StatusOr<std::vector<Job>> JobStore::LoadActiveJobs() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  {
    Stmt st(db_, stmts_.get(), "SELECT id, state FROM jobs ORDER BY seq");
    STORE_RETURN_IF_ERROR(st.status());
    for (;;) {
      absl::StatusOr<bool> row = st.Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      if (!IsTerminal(static_cast<Job::State>(st.Int(1)))) ids.push_back(st.Text(0));
    }
  }
  std::vector<Job> jobs;
  for (const std::string& id : ids) {
    absl::StatusOr<Job> job = LoadJobLocked(id);
    if (!job.ok()) return job.status();
    jobs.push_back(*std::move(job));
  }
  return jobs;
}

absl::StatusOr<std::vector<Job>> JobStore::ListJobs(const JobListFilter& f,
                                                    std::vector<int64_t>* seqs) {
  absl::MutexLock lock(&mu_);
  std::string sql = "SELECT id, seq FROM jobs WHERE 1";
  if (!f.states.empty()) {
    std::vector<std::string> states;
    for (Job::State s : f.states) states.push_back(absl::StrCat(static_cast<int>(s)));
    absl::StrAppend(&sql, " AND state IN (", absl::StrJoin(states, ","), ")");
  }
  if (!f.name_contains.empty()) absl::StrAppend(&sql, " AND instr(name, ?1) > 0");
  if (f.before_seq > 0) absl::StrAppend(&sql, " AND seq < ?2");
  absl::StrAppend(&sql, " ORDER BY seq DESC LIMIT ?3");
  std::vector<std::pair<std::string, int64_t>> rows;
  {
    Stmt st(db_, stmts_.get(), sql.c_str());
    STORE_RETURN_IF_ERROR(st.status());
    if (!f.name_contains.empty()) st.Bind(1, f.name_contains);
    if (f.before_seq > 0) st.Bind(2, f.before_seq);
    st.Bind(3, f.limit);
    for (;;) {
      absl::StatusOr<bool> row = st.Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      rows.emplace_back(st.Text(0), st.Int(1));
    }
  }
  std::vector<Job> jobs;
  for (const auto& [id, seq] : rows) {
    absl::StatusOr<Job> job = LoadJobLocked(id);
    if (!job.ok()) return job.status();
    jobs.push_back(*std::move(job));
    if (seqs != nullptr) seqs->push_back(seq);
  }
  return jobs;
}

absl::StatusOr<std::vector<traind::v1::JobEvent>> JobStore::ReadEvents(const std::string& job_id,
                                                                       int64_t after, int limit) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, stmts_.get(),
          "SELECT event FROM events WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3");
  STORE_RETURN_IF_ERROR(st.status());
  st.Bind(1, job_id);
  st.Bind(2, after);
  st.Bind(3, limit);
  std::vector<traind::v1::JobEvent> events;
  for (;;) {
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    traind::v1::JobEvent& e = events.emplace_back();
    st.Message(0, &e);
    if (!e.has_epoch()) continue;
    // An epoch event's metrics: its epochs row (a database written before
    // epochs were stored once has them in the event too: the same values).
    Stmt epoch(db_, stmts_.get(),
               "SELECT metrics FROM epochs WHERE job_id = ?1 AND task_idx = ?2 AND attempt = ?3 "
               "AND epoch = ?4");
    STORE_RETURN_IF_ERROR(epoch.status());
    epoch.Bind(1, job_id);
    epoch.Bind(2, e.epoch().task());
    epoch.Bind(3, e.epoch().attempt());
    epoch.Bind(4, e.epoch().epoch());
    absl::StatusOr<bool> found = epoch.Step();
    if (!found.ok()) return found.status();
    if (*found) epoch.Message(0, e.mutable_epoch());
  }
  return events;
}

absl::StatusOr<std::optional<std::string>> JobStore::FindByIdempotencyKey(
    const std::string& owner, const std::string& key, std::string* request_sha256) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, stmts_.get(),
          "SELECT id, COALESCE(request_sha256, '') FROM jobs WHERE owner = ?1 AND idem_key = ?2");
  STORE_RETURN_IF_ERROR(st.status());
  st.Bind(1, owner);
  st.Bind(2, key);
  absl::StatusOr<bool> row = st.Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<std::string>();
  if (request_sha256 != nullptr) *request_sha256 = st.Text(1);
  return std::optional<std::string>(st.Text(0));
}

absl::StatusOr<int64_t> JobStore::LastEventSequence(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, stmts_.get(), "SELECT COALESCE(MAX(seq), 0) FROM events WHERE job_id = ?1");
  STORE_RETURN_IF_ERROR(st.status());
  st.Bind(1, job_id);
  absl::StatusOr<bool> row = st.Step();
  if (!row.ok()) return row.status();
  return *row ? st.Int(0) : 0;
}

absl::StatusOr<JobStore::StateCounts> JobStore::CountStates() {
  absl::MutexLock lock(&mu_);
  StateCounts counts;
  for (auto [sql, out] :
       {std::pair{"SELECT state, COUNT(*) FROM jobs GROUP BY state", &counts.jobs},
        std::pair{"SELECT state, COUNT(*) FROM tasks GROUP BY state", &counts.tasks}}) {
    Stmt st(db_, stmts_.get(), sql);
    STORE_RETURN_IF_ERROR(st.status());
    for (;;) {
      absl::StatusOr<bool> row = st.Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      (*out)[static_cast<int>(st.Int(0))] = st.Int(1);
    }
  }
  return counts;
}

absl::StatusOr<bool> JobStore::HasJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, stmts_.get(), "SELECT 1 FROM jobs WHERE id = ?1");
  STORE_RETURN_IF_ERROR(st.status());
  st.Bind(1, job_id);
  return st.Step();
}

absl::StatusOr<std::vector<FinishedJob>> JobStore::FinishedJobs() {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, stmts_.get(),
          "SELECT id, COALESCE(end_us, create_us) AS t FROM jobs WHERE state IN (?1, ?2, ?3) "
          "ORDER BY t DESC, seq DESC");
  STORE_RETURN_IF_ERROR(st.status());
  st.Bind(1, static_cast<int64_t>(Job::SUCCEEDED));
  st.Bind(2, static_cast<int64_t>(Job::FAILED));
  st.Bind(3, static_cast<int64_t>(Job::CANCELLED));
  std::vector<FinishedJob> out;
  for (;;) {
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    out.push_back({st.Text(0), st.Int(1)});
  }
  return out;
}

absl::Status JobStore::ReclaimSpace() {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, stmts_.get(), "PRAGMA incremental_vacuum");
  STORE_RETURN_IF_ERROR(st.status());
  for (;;) {
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
  }
  return Exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

absl::StatusOr<std::vector<traind::v1::EpochMetrics>> JobStore::ReadEpochs(
    const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, stmts_.get(),
          "SELECT metrics FROM epochs WHERE job_id = ?1 ORDER BY task_idx, attempt, epoch");
  STORE_RETURN_IF_ERROR(st.status());
  st.Bind(1, job_id);
  std::vector<traind::v1::EpochMetrics> out;
  for (;;) {
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    st.Message(0, &out.emplace_back());
  }
  return out;
}

}  // namespace traind::server
