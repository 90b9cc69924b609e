// The store's SQLite helpers, shared by its files (job_store.cc,
// dataset_rows.cc): a cache of prepared statements, a statement that binds
// and reads messages and times, and errors that name the database file.
// Internal to server/store/.
#ifndef TRAIND_SERVER_STORE_SQLITE_STATEMENT_H_
#define TRAIND_SERVER_STORE_SQLITE_STATEMENT_H_

#include <sqlite3.h>

#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/time_util.h"

namespace traind::server {

// Prepared statements of the connection, kept for reuse and keyed by their
// SQL text: parsing and planning a statement costs more than running the
// small ones traind issues for every worker report.
struct StatementCache {
  struct Entry {
    sqlite3_stmt* stmt = nullptr;
    bool busy = false;
  };
  std::unordered_map<std::string, Entry> entries;
  ~StatementCache() {
    for (auto& [sql, e] : entries) sqlite3_finalize(e.stmt);
  }
};

// The database file of a connection, for messages: every store error names
// the file it is about.
inline std::string DbPath(sqlite3* db) {
  const char* path = sqlite3_db_filename(db, "main");
  return path != nullptr && *path != '\0' ? path : "job store";
}

// An SQLite error as a status whose code says whether trying again can help:
// a full disk (SQLITE_FULL) is RESOURCE_EXHAUSTED and an I/O error
// UNAVAILABLE, both transient (the StoreWriter retries them); anything else
// is INTERNAL. `what` names the call.
inline absl::Status SqliteStatus(sqlite3* db, int rc, const char* what, const std::string& msg) {
  switch (rc & 0xff) {  // the primary code of an extended one
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(absl::StrCat(
          DbPath(db), ": ", what, ": ", msg, " (free space on the state directory's file system)"));
    case SQLITE_IOERR:
      return absl::UnavailableError(absl::StrCat(DbPath(db), ": ", what, ": ", msg));
    default:
      return absl::InternalError(absl::StrCat(DbPath(db), ": ", what, ": ", msg));
  }
}

// A prepared statement: taken from the cache (reset and returned to it on
// destruction), or, while the cached one is in use, prepared for this use
// and finalized on destruction.
class Stmt {
 public:
  Stmt(sqlite3* db, StatementCache* cache, const char* sql) : db_(db) {
    auto it = cache->entries.find(sql);
    if (it == cache->entries.end()) {
      rc_ = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
      if (rc_ != SQLITE_OK) return;
      it = cache->entries.emplace(sql, StatementCache::Entry{stmt_, false}).first;
    }
    if (it->second.busy) {
      rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
      return;
    }
    entry_ = &it->second;
    entry_->busy = true;
    stmt_ = entry_->stmt;
  }
  ~Stmt() {
    if (entry_ == nullptr) {
      sqlite3_finalize(stmt_);
      return;
    }
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    entry_->busy = false;
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  absl::Status status() const {
    if (rc_ == SQLITE_OK) return absl::OkStatus();
    return SqliteStatus(db_, rc_, "sqlite prepare", sqlite3_errmsg(db_));
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void BindNull(int i) { sqlite3_bind_null(stmt_, i); }
  void BindBlob(int i, const std::string& v) {
    sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  template <typename M>
  void BindMessage(int i, const M& m, bool present) {
    if (!present) {
      BindNull(i);
    } else {
      BindBlob(i, m.SerializeAsString());
    }
  }
  void BindTime(int i, const google::protobuf::Timestamp& t, bool present) {
    if (!present) {
      BindNull(i);
    } else {
      Bind(i, google::protobuf::util::TimeUtil::TimestampToMicroseconds(t));
    }
  }
  // SQLITE_ROW → true, SQLITE_DONE → false.
  absl::StatusOr<bool> Step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteStatus(db_, rc, "sqlite step", sqlite3_errmsg(db_));
  }
  absl::Status Run() {
    absl::StatusOr<bool> r = Step();
    return r.status();
  }
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  bool IsNull(int col) { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string Text(int col) {
    const unsigned char* p = sqlite3_column_text(stmt_, col);
    return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, col))
             : std::string();
  }
  template <typename M>
  bool Message(int col, M* m) {
    if (IsNull(col)) return false;
    const void* p = sqlite3_column_blob(stmt_, col);
    return m->ParseFromArray(p, sqlite3_column_bytes(stmt_, col));
  }
  void Time(int col, google::protobuf::Timestamp* t) {
    if (!IsNull(col)) *t = google::protobuf::util::TimeUtil::MicrosecondsToTimestamp(Int(col));
  }

 private:
  sqlite3* db_;
  StatementCache::Entry* entry_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

#define STORE_RETURN_IF_ERROR(expr) \
  do {                              \
    absl::Status _s = (expr);       \
    if (!_s.ok()) return _s;        \
  } while (0)

}  // namespace traind::server

#endif  // TRAIND_SERVER_STORE_SQLITE_STATEMENT_H_
