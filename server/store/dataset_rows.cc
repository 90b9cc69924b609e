// JobStore: the datasets tables (job_store.h). A record is the Dataset
// message (profile included, job_ids never: lineage is dataset_uses).
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "server/store/job_store.h"
#include "server/store/sqlite_statement.h"

namespace traind::server {

using google::protobuf::util::TimeUtil;
using traind::v1::Dataset;
using traind::v1::Job;

absl::Status JobStore::WriteDatasetUses(const Job& job) {
  std::set<std::string> digests;
  if (!job.spec().data().dataset_sha256().empty()) {
    digests.insert(job.spec().data().dataset_sha256());
  }
  if (!job.spec().cross_validation().validation_dataset_sha256().empty()) {
    digests.insert(job.spec().cross_validation().validation_dataset_sha256());
  }
  for (const std::string& sha : digests) {
    Stmt st(db_, stmts_.get(),
            "INSERT OR IGNORE INTO dataset_uses (sha256, job_id) VALUES (?1, ?2)");
    STORE_RETURN_IF_ERROR(st.status());
    st.Bind(1, sha);
    st.Bind(2, job.id());
    STORE_RETURN_IF_ERROR(st.Run());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Dataset>> JobStore::ReadDatasets(const char* sql,
                                                            const std::vector<std::string>& text,
                                                            const std::vector<int64_t>& ints) {
  Stmt st(db_, stmts_.get(), sql);
  STORE_RETURN_IF_ERROR(st.status());
  int i = 1;
  for (const std::string& t : text) st.Bind(i++, t);
  for (int64_t n : ints) st.Bind(i++, n);
  std::vector<Dataset> out;
  for (;;) {
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    Dataset d;
    if (!st.Message(0, &d)) {
      return absl::InternalError(absl::StrCat(DbPath(db_), ": a dataset record cannot be read"));
    }
    out.push_back(std::move(d));
  }
  return out;
}

absl::StatusOr<Dataset> JobStore::AddDataset(const Dataset& d) {
  absl::MutexLock lock(&mu_);
  STORE_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::StatusOr<Dataset> out = [&]() -> absl::StatusOr<Dataset> {
    absl::StatusOr<std::vector<Dataset>> latest = ReadDatasets(
        "SELECT record FROM datasets WHERE owner = ?1 AND name = ?2 ORDER BY version DESC LIMIT 1",
        {d.owner(), d.name()}, {});
    if (!latest.ok()) return latest.status();
    if (!latest->empty() && latest->front().sha256() == d.sha256()) return latest->front();
    Dataset record = d;
    record.clear_job_ids();
    record.set_version(latest->empty() ? 1 : latest->front().version() + 1);
    Stmt st(db_, stmts_.get(),
            "INSERT INTO datasets (owner, name, version, sha256, size, create_us, record) "
            "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    STORE_RETURN_IF_ERROR(st.status());
    st.Bind(1, record.owner());
    st.Bind(2, record.name());
    st.Bind(3, int64_t{record.version()});
    st.Bind(4, record.sha256());
    st.Bind(5, record.size_bytes());
    st.Bind(6, TimeUtil::TimestampToMicroseconds(record.create_time()));
    st.BindMessage(7, record, true);
    STORE_RETURN_IF_ERROR(st.Run());
    return record;
  }();
  if (!out.ok()) {
    Exec("ROLLBACK").IgnoreError();
    return out.status();
  }
  STORE_RETURN_IF_ERROR(Exec("COMMIT"));
  return out;
}

absl::StatusOr<std::vector<Dataset>> JobStore::ListDatasets(const std::string& owner,
                                                            const std::string& name) {
  absl::MutexLock lock(&mu_);
  return ReadDatasets(
      "SELECT record FROM datasets WHERE (?1 = '' OR owner = ?1) AND (?2 = '' OR name = ?2) "
      "ORDER BY create_us DESC, owner, name, version DESC",
      {owner, name}, {});
}

absl::StatusOr<std::optional<Dataset>> JobStore::FindDataset(const std::string& owner,
                                                             const std::string& name, int version) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::vector<Dataset>> found = ReadDatasets(
      "SELECT record FROM datasets WHERE owner = ?1 AND name = ?2 AND (?3 = 0 OR version = ?3) "
      "ORDER BY version DESC LIMIT 1",
      {owner, name}, {int64_t{version}});
  if (!found.ok()) return found.status();
  if (found->empty()) return std::nullopt;
  return found->front();
}

absl::StatusOr<std::optional<Dataset>> JobStore::FindDatasetByDigest(const std::string& owner,
                                                                     const std::string& sha256) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::vector<Dataset>> found = ReadDatasets(
      "SELECT record FROM datasets WHERE (?1 = '' OR owner = ?1) AND sha256 = ?2 "
      "ORDER BY create_us DESC LIMIT 1",
      {owner, sha256}, {});
  if (!found.ok()) return found.status();
  if (found->empty()) return std::nullopt;
  return found->front();
}

absl::StatusOr<int64_t> JobStore::DeleteDataset(const std::string& owner, const std::string& name,
                                                int version, const std::string& sha256) {
  absl::MutexLock lock(&mu_);
  {
    Stmt st(db_, stmts_.get(),
            "DELETE FROM datasets WHERE owner = ?1 AND name = ?2 AND version = ?3");
    STORE_RETURN_IF_ERROR(st.status());
    st.Bind(1, owner);
    st.Bind(2, name);
    st.Bind(3, int64_t{version});
    STORE_RETURN_IF_ERROR(st.Run());
  }
  Stmt st(db_, stmts_.get(), "SELECT COUNT(*) FROM datasets WHERE sha256 = ?1");
  STORE_RETURN_IF_ERROR(st.status());
  st.Bind(1, sha256);
  absl::StatusOr<bool> row = st.Step();
  if (!row.ok()) return row.status();
  return st.Int(0);
}

absl::StatusOr<int64_t> JobStore::OwnerDatasetBytes(const std::string& owner) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, stmts_.get(),
          "SELECT COALESCE(SUM(size), 0) FROM "
          "(SELECT DISTINCT sha256, size FROM datasets WHERE owner = ?1)");
  STORE_RETURN_IF_ERROR(st.status());
  st.Bind(1, owner);
  absl::StatusOr<bool> row = st.Step();
  if (!row.ok()) return row.status();
  return st.Int(0);
}

absl::StatusOr<std::vector<std::string>> JobStore::JobsUsingDigest(const std::string& sha256) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, stmts_.get(),
          "SELECT u.job_id FROM dataset_uses u JOIN jobs j ON j.id = u.job_id "
          "WHERE u.sha256 = ?1 ORDER BY j.seq DESC");
  STORE_RETURN_IF_ERROR(st.status());
  st.Bind(1, sha256);
  std::vector<std::string> out;
  for (;;) {
    absl::StatusOr<bool> row = st.Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    out.push_back(st.Text(0));
  }
  return out;
}

absl::StatusOr<std::string> JobStore::UnfinishedJobUsingDigest(const std::string& sha256) {
  absl::MutexLock lock(&mu_);
  Stmt st(db_, stmts_.get(),
          "SELECT u.job_id FROM dataset_uses u JOIN jobs j ON j.id = u.job_id "
          "WHERE u.sha256 = ?1 AND j.state NOT IN (?2, ?3, ?4) ORDER BY j.seq LIMIT 1");
  STORE_RETURN_IF_ERROR(st.status());
  st.Bind(1, sha256);
  st.Bind(2, static_cast<int64_t>(Job::SUCCEEDED));
  st.Bind(3, static_cast<int64_t>(Job::FAILED));
  st.Bind(4, static_cast<int64_t>(Job::CANCELLED));
  absl::StatusOr<bool> row = st.Step();
  if (!row.ok()) return row.status();
  return *row ? st.Text(0) : std::string();
}

absl::StatusOr<std::vector<Dataset>> JobStore::UnusedDatasetsBefore(int64_t create_us) {
  absl::MutexLock lock(&mu_);
  return ReadDatasets(
      "SELECT record FROM datasets d WHERE create_us < ?1 AND NOT EXISTS "
      "(SELECT 1 FROM dataset_uses u WHERE u.sha256 = d.sha256) ORDER BY create_us",
      {}, {create_us});
}

}  // namespace traind::server
