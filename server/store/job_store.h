// JobStore: durable state of traind in one SQLite database (WAL mode).
//
// Tables: jobs, tasks, attempts (one row each), epochs (per-epoch metrics,
// keyed by job, task, attempt and epoch, written idempotently) and events
// (the WatchJob log, keyed by job and sequence number). An epoch's metrics
// are stored once, in its epochs row: its event row holds only the key
// (task, attempt, epoch), and ReadEvents joins the two. Datasets
// (dataset_rows.cc): one row per (owner, name, version), and dataset_uses,
// the digests each job named, written with the new job.
//
// Thread-safety: every method may be called from any thread; calls are
// serialized on one connection.
#ifndef TRAIND_SERVER_STORE_JOB_STORE_H_
#define TRAIND_SERVER_STORE_JOB_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "traind/v1/dataset.pb.h"
#include "traind/v1/job.pb.h"

struct sqlite3;

namespace traind::server {
struct StatementCache;
}  // namespace traind::server

namespace traind::server {

// One atomic change: everything in it is written in one transaction.
struct StoreMutation {
  // Inserts the job (with its tasks) when new, else updates its job-level
  // columns (state, times, failure, result).
  const traind::v1::Job* job = nullptr;
  bool new_job = false;
  // With new_job: the submitter's idempotency key ("" for none). A second
  // job with the same (owner, key) fails the whole mutation.
  std::string idempotency_key;
  // With new_job: the SHA-256 of the submit request (its key aside), so that
  // a key reused for another request is told apart from a retry.
  std::string request_sha256;
  // Tasks (with their attempts) to upsert.
  std::vector<const traind::v1::Task*> tasks;
  // Epoch metrics to insert unless already present.
  const traind::v1::EpochMetrics* epoch = nullptr;
  std::vector<const traind::v1::EpochMetrics*> epochs;
  std::vector<const traind::v1::JobEvent*> events;
  // Deletes the job: its row, tasks, attempts, epochs and events (after
  // whatever else the mutation writes; the job's own file are the caller's).
  bool delete_job = false;
};

// A finished job, for retention.
struct FinishedJob {
  std::string id;
  int64_t end_us = 0;  // end time (Unix microseconds)
};

struct JobListFilter {
  std::vector<traind::v1::Job::State> states;  // any, when empty
  std::string name_contains;
  int32_t limit = 100;
  int64_t before_seq = 0;  // only jobs submitted before this one (0: no bound)
};

class JobStore final {
 public:
  // Opens (creating if needed) the database at `path`. Every error, here
  // and from every method, names the file.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // PRAGMA quick_check: DATA_LOSS naming the file and what is damaged.
  // Reads the whole file (O(size)): call it once, at start.
  absl::Status CheckIntegrity();

  // Writes `m` atomically. For `m.epoch`, `*epoch_inserted` (if given) tells
  // whether the row was new (false: a duplicate report, nothing written).
  absl::Status Apply(const StoreMutation& m, const std::string& job_id,
                     bool* epoch_inserted = nullptr);

  // The job with its tasks and attempts; NotFound if unknown.
  absl::StatusOr<traind::v1::Job> LoadJob(const std::string& job_id);
  // Jobs not in a terminal state, oldest first.
  absl::StatusOr<std::vector<traind::v1::Job>> LoadActiveJobs();
  // Newest first. `*seqs` receives each job's submit sequence (for paging).
  absl::StatusOr<std::vector<traind::v1::Job>> ListJobs(const JobListFilter& f,
                                                        std::vector<int64_t>* seqs);
  // Events with sequence > after, at most `limit`, in order.
  absl::StatusOr<std::vector<traind::v1::JobEvent>> ReadEvents(const std::string& job_id,
                                                               int64_t after, int limit);
  // The job submitted by `owner` with idempotency key `key`, if any, and
  // the SHA-256 of its request ("" for jobs stored before schema 5).
  absl::StatusOr<std::optional<std::string>> FindByIdempotencyKey(
      const std::string& owner, const std::string& key, std::string* request_sha256 = nullptr);
  // Highest event sequence of a job (0 if none).
  absl::StatusOr<int64_t> LastEventSequence(const std::string& job_id);
  // Epoch metrics of a job, ordered by task, attempt, epoch.
  absl::StatusOr<std::vector<traind::v1::EpochMetrics>> ReadEpochs(const std::string& job_id);
  // How many jobs, and how many tasks, the store holds in each state
  // (Job::State / Task::State values as keys; states without any absent).
  struct StateCounts {
    std::map<int, int64_t> jobs;
    std::map<int, int64_t> tasks;
  };
  absl::StatusOr<StateCounts> CountStates();
  // Whether the store has the job.
  absl::StatusOr<bool> HasJob(const std::string& job_id);
  // Jobs in a terminal state, newest end first.
  absl::StatusOr<std::vector<FinishedJob>> FinishedJobs();
  // Gives the pages that deleted rows freed back to the file system
  // (auto_vacuum = incremental, set when the store is opened).
  absl::Status ReclaimSpace();

  // Datasets (dataset_rows.cc). Records are Dataset messages without
  // job_ids (lineage comes from dataset_uses).
  //
  // Records `d` (owner, name, sha256, size, kind, file name, profile,
  // create_time set) as the next version of (owner, name) — unless the
  // latest version has the same sha256: then that record. Returns the
  // record as stored (its version set).
  absl::StatusOr<traind::v1::Dataset> AddDataset(const traind::v1::Dataset& d);
  // Newest first. `owner` "": every owner's; `name` "": every name.
  absl::StatusOr<std::vector<traind::v1::Dataset>> ListDatasets(const std::string& owner,
                                                                const std::string& name);
  // One version of (owner, name); version 0: the latest.
  absl::StatusOr<std::optional<traind::v1::Dataset>> FindDataset(const std::string& owner,
                                                                 const std::string& name,
                                                                 int version);
  // The owner's newest record of these bytes (owner "": anyone's).
  absl::StatusOr<std::optional<traind::v1::Dataset>> FindDatasetByDigest(const std::string& owner,
                                                                         const std::string& sha256);
  // Removes one record; returns how many records still name its digest.
  absl::StatusOr<int64_t> DeleteDataset(const std::string& owner, const std::string& name,
                                        int version, const std::string& sha256);
  // The bytes of the owner's distinct digests.
  absl::StatusOr<int64_t> OwnerDatasetBytes(const std::string& owner);
  // Jobs that named the digest, newest first.
  absl::StatusOr<std::vector<std::string>> JobsUsingDigest(const std::string& sha256);
  // A job that named the digest and has not finished ("" if none).
  absl::StatusOr<std::string> UnfinishedJobUsingDigest(const std::string& sha256);
  // Records created before `create_us` whose digest no stored job names.
  absl::StatusOr<std::vector<traind::v1::Dataset>> UnusedDatasetsBefore(int64_t create_us);

 private:
  explicit JobStore(sqlite3* db);
  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Migrate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteJobRow(const traind::v1::Job& job, bool insert,
                           const std::string& idempotency_key, const std::string& request_sha256)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteTaskRow(const std::string& job_id, const traind::v1::Task& task)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<traind::v1::Job> LoadJobLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With a new job: the digests its spec names (dataset_rows.cc).
  absl::Status WriteDatasetUses(const traind::v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<traind::v1::Dataset>> ReadDatasets(
      const char* sql, const std::vector<std::string>& text, const std::vector<int64_t>& ints)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<StatementCache> stmts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_STORE_JOB_STORE_H_
