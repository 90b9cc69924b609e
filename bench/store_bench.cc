// store_bench: the bytes traind's database keeps per stored epoch.
//
//   build/bin/store_bench [--tasks 10] [--epochs 200] [--train 2] [--val 5]
//
// Writes one job's epochs the way the scheduler commits a worker's epoch
// report (one transaction: the task row, the epoch's metrics, its JobEvent)
// into a fresh JobStore, and, in the same run, the same epochs into a second
// database in the layout before an epoch's metrics were stored once (the
// event row holding the metrics again, as SQLite rows written directly).
// Sizes are SQLite's own accounting (dbstat: pages of each table and index,
// after a checkpoint), divided by the number of epochs.
#include <sqlite3.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/store/job_store.h"
#include "traind/v1/job.pb.h"

namespace {

using traind::server::JobStore;
using traind::server::StoreMutation;

struct Options {
  int tasks = 10;
  int epochs = 200;
  int train_metrics = 2;
  int val_metrics = 5;
};

const char* const kMetricNames[] = {"loss",     "accuracy",  "f1_macro", "top_k_accuracy",
                                    "log_loss", "precision", "recall",   "roc_auc"};

traind::v1::EpochMetrics Metrics(const Options& o, int task, int epoch) {
  traind::v1::EpochMetrics m;
  m.set_task(task);
  m.set_attempt(1);
  m.set_epoch(epoch);
  // Values with full mantissas, as training produces.
  for (int i = 0; i < o.train_metrics; ++i) {
    (*m.mutable_train())[kMetricNames[i % 8]] = 1.0 / (3.0 + epoch + i + task * 0.7);
  }
  for (int i = 0; i < o.val_metrics; ++i) {
    (*m.mutable_val())[kMetricNames[i % 8]] = 1.0 / (7.0 + epoch * 1.3 + i + task * 0.3);
  }
  m.set_batches(static_cast<int64_t>(epoch) * 38);
  m.set_seconds(0.0123456789 * epoch);
  return m;
}

traind::v1::Job MakeJob(const Options& o) {
  traind::v1::Job job;
  job.set_id("bench0000001");
  job.mutable_spec()->set_name("store-bench");
  job.set_state(traind::v1::Job::RUNNING);
  for (int t = 0; t < o.tasks; ++t) {
    traind::v1::Task* task = job.add_tasks();
    task->set_index(t);
    task->set_state(traind::v1::Task::RUNNING);
    task->set_epochs_total(o.epochs);
    traind::v1::Attempt* a = task->add_attempts();
    a->set_number(1);
    a->set_pid(40000 + t);
    a->set_log_path(absl::StrCat("/var/lib/traind/jobs/bench0000001/task-", t, "/attempt-1.log"));
  }
  return job;
}

// Bytes per table or index (dbstat), after a checkpoint.
std::map<std::string, int64_t> Sizes(const std::string& path) {
  std::map<std::string, int64_t> out;
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), sqlite3_errmsg(db));
    std::exit(1);
  }
  sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name", -1, &st,
                         nullptr) != SQLITE_OK) {
    std::fprintf(stderr, "dbstat: %s (SQLite without SQLITE_ENABLE_DBSTAT_VTAB?)\n",
                 sqlite3_errmsg(db));
    std::exit(1);
  }
  while (sqlite3_step(st) == SQLITE_ROW) {
    out[reinterpret_cast<const char*>(sqlite3_column_text(st, 0))] = sqlite3_column_int64(st, 1);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

// Through JobStore::Apply, as the scheduler commits an epoch report.
void WriteThroughStore(const Options& o, const std::string& path) {
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", std::string(store.status().message()).c_str());
    std::exit(1);
  }
  traind::v1::Job job = MakeJob(o);
  StoreMutation create;
  create.job = &job;
  create.new_job = true;
  if (absl::Status s = (*store)->Apply(create, job.id()); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
  int64_t seq = 0;
  for (int e = 1; e <= o.epochs; ++e) {
    for (int t = 0; t < o.tasks; ++t) {
      traind::v1::EpochMetrics m = Metrics(o, t, e);
      job.mutable_tasks(t)->set_epochs_done(e);
      traind::v1::JobEvent event;
      event.set_job_id(job.id());
      event.set_sequence(++seq);
      event.mutable_time()->set_seconds(1764800000 + seq);
      event.mutable_time()->set_nanos(123456789);
      *event.mutable_epoch() = m;
      StoreMutation sm;
      sm.tasks.push_back(&job.tasks(t));
      sm.epochs.push_back(&m);
      sm.events.push_back(&event);
      if (absl::Status s = (*store)->Apply(sm, job.id()); !s.ok()) {
        std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
        std::exit(1);
      }
    }
  }
}

// The same rows in the layout with the metrics in both the epochs row and
// the event row (a fresh store's schema, rows written directly).
void WriteBothCopies(const Options& o, const std::string& path) {
  { (void)JobStore::Open(path); }
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
  sqlite3_stmt* ep = nullptr;
  sqlite3_stmt* ev = nullptr;
  sqlite3_prepare_v2(db,
                     "INSERT INTO epochs (job_id, task_idx, attempt, epoch, metrics) "
                     "VALUES ('bench0000001', ?1, 1, ?2, ?3)",
                     -1, &ep, nullptr);
  sqlite3_prepare_v2(db, "INSERT INTO events (job_id, seq, event) VALUES ('bench0000001', ?1, ?2)",
                     -1, &ev, nullptr);
  int64_t seq = 0;
  for (int e = 1; e <= o.epochs; ++e) {
    for (int t = 0; t < o.tasks; ++t) {
      const traind::v1::EpochMetrics m = Metrics(o, t, e);
      traind::v1::JobEvent event;
      event.set_job_id("bench0000001");
      event.set_sequence(++seq);
      event.mutable_time()->set_seconds(1764800000 + seq);
      event.mutable_time()->set_nanos(123456789);
      *event.mutable_epoch() = m;
      const std::string metrics = m.SerializeAsString(), blob = event.SerializeAsString();
      sqlite3_bind_int(ep, 1, t);
      sqlite3_bind_int(ep, 2, e);
      sqlite3_bind_blob(ep, 3, metrics.data(), static_cast<int>(metrics.size()), SQLITE_TRANSIENT);
      sqlite3_step(ep);
      sqlite3_reset(ep);
      sqlite3_bind_int64(ev, 1, seq);
      sqlite3_bind_blob(ev, 2, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
      sqlite3_step(ev);
      sqlite3_reset(ev);
    }
  }
  sqlite3_finalize(ep);
  sqlite3_finalize(ev);
  sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(db);
}

int64_t Of(const std::map<std::string, int64_t>& sizes, const std::string& prefix) {
  int64_t sum = 0;
  for (const auto& [name, bytes] : sizes) {
    if (name.rfind(prefix, 0) == 0) sum += bytes;
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (flag == "--tasks") o.tasks = v;
    if (flag == "--epochs") o.epochs = v;
    if (flag == "--train") o.train_metrics = v;
    if (flag == "--val") o.val_metrics = v;
  }
  char tmpl[] = "/tmp/store-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = tmpl;
  WriteThroughStore(o, dir + "/once.db");
  WriteBothCopies(o, dir + "/twice.db");
  const std::map<std::string, int64_t> once = Sizes(dir + "/once.db");
  const std::map<std::string, int64_t> twice = Sizes(dir + "/twice.db");
  const double n = static_cast<double>(o.tasks) * o.epochs;
  const traind::v1::EpochMetrics sample = Metrics(o, 0, 1);
  std::printf("store_bench: %d tasks x %d epochs, %d train + %d val metrics (EpochMetrics %zu B)\n",
              o.tasks, o.epochs, o.train_metrics, o.val_metrics, sample.ByteSizeLong());
  std::printf(
      "| layout | epochs table | its key index | events table | its key index | total "
      "per epoch |\n| --- | --- | --- | --- | --- | --- |\n");
  for (const auto& [label, sizes] :
       {std::pair{"metrics once (traind)", &once}, std::pair{"metrics twice (before)", &twice}}) {
    const double epochs = Of(*sizes, "epochs") / n,
                 epochs_index = Of(*sizes, "sqlite_autoindex_epochs") / n;
    const double events = Of(*sizes, "events") / n,
                 events_index = Of(*sizes, "sqlite_autoindex_events") / n;
    std::printf("| %s | %.1f B | %.1f B | %.1f B | %.1f B | %.1f B |\n", label, epochs,
                epochs_index, events, events_index, epochs + epochs_index + events + events_index);
  }
  const double a = (Of(once, "epochs") + Of(once, "sqlite_autoindex_epochs") + Of(once, "events") +
                    Of(once, "sqlite_autoindex_events")) /
                   n;
  const double b = (Of(twice, "epochs") + Of(twice, "sqlite_autoindex_epochs") +
                    Of(twice, "events") + Of(twice, "sqlite_autoindex_events")) /
                   n;
  std::printf("ratio once/twice: %.2f; whole database: %.1f KiB vs %.1f KiB\n", a / b,
              Of(once, "") / 1024.0, Of(twice, "") / 1024.0);
  std::filesystem::remove_all(dir);
  return 0;
}
