// The files of stored datasets, under <state_dir>/datasets:
//
//   objects/<sha256>                 a dataset's bytes, whole: renamed into
//                                    place only after they were fsync'd and
//                                    their SHA-256 checked
//   uploads/<owner>-<sha256>.part    an upload in progress or interrupted
//                                    (<owner>: a digest of the owner's name)
//
// So a dataset is whole or absent, also after a kill of traind mid-upload:
// what a kill leaves is a .part file, which the next upload of the same
// bytes by the same owner continues from its size (PartialBytes), and
// which RemovePartialsOlderThan removes once abandoned.
//
// Thread-safety: thread-safe (the file system serializes); one upload of a
// (owner, digest) at a time is the caller's rule (DatasetCatalog's).
#ifndef TRAIND_SERVER_DATASETS_DATASET_FILES_H_
#define TRAIND_SERVER_DATASETS_DATASET_FILES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

struct evp_md_ctx_st;

namespace traind::server {

// An upload being written: Append the bytes in order, then Verify (fsync,
// size and digest) and Commit (rename into objects/, fsync the directory).
// Destroyed before Commit: every byte received is written to the .part
// file, which stays, to be resumed.
//
// The bytes reach the disk without passing through the page cache where the
// file system allows it (O_DIRECT): they are gathered in an aligned staging
// buffer and written a few MiB at a time, and the tail that is not a whole
// block is written through the cache at the end. Copying a large upload
// into the page cache would otherwise cost about as much CPU as receiving
// it, and the profile reads the bytes from memory, not back from the file
// (DatasetCatalog). Where O_DIRECT is refused (tmpfs, some overlays), every
// write goes through the cache; the file is the same.
class DatasetUpload {
 public:
  ~DatasetUpload();
  DatasetUpload(const DatasetUpload&) = delete;
  DatasetUpload& operator=(const DatasetUpload&) = delete;

  // INVALID_ARGUMENT past the declared size; RESOURCE_EXHAUSTED on a full
  // disk (the bytes that reached the file stay, to be resumed; received()
  // counts them and no more, and this upload takes no more bytes).
  absl::Status Append(absl::string_view bytes);
  int64_t received() const { return received_; }
  int64_t size() const { return size_; }
  // Every byte there, on disk, and of the declared SHA-256. A digest
  // mismatch removes the .part file (its bytes are not the file's).
  absl::Status Verify();
  // The .part file, for reading the bytes held before a resumed upload.
  const std::string& partial_path() const { return partial_; }
  // Whether the bytes bypass the page cache (O_DIRECT was accepted).
  bool direct() const { return direct_; }
  // Renames the verified bytes into objects/; returns the object's path.
  absl::StatusOr<std::string> Commit();
  // Removes the .part file (bad bytes: resuming cannot help).
  void Discard();

 private:
  friend class DatasetFiles;
  DatasetUpload(std::string partial, std::string object, std::string objects_dir,
                std::string sha256, int64_t size);
  // Writes the staged bytes: whole kStage buffers only, or (all) every
  // staged byte, the tail through the page cache.
  absl::Status WriteStaged(bool all);
  absl::Status WriteAt(const char* data, size_t n, int64_t at);
  // Asks the flusher to make the bytes written so far durable, once
  // kFlushEvery more were written since it last was asked.
  void RequestFlush();
  void StopFlusher();

  static constexpr size_t kAlign = 4096;      // O_DIRECT's offsets and sizes
  static constexpr size_t kStage = 4u << 20;  // bytes per direct write

  const std::string partial_;
  const std::string object_;
  const std::string objects_dir_;
  const std::string sha256_;
  const int64_t size_;
  int fd_ = -1;
  bool direct_ = false;
  bool failed_ = false;    // a write failed: no more bytes
  char* stage_ = nullptr;  // kStage bytes, kAlign-aligned
  size_t staged_ = 0;      // bytes in stage_, not yet in the file
  int64_t written_ = 0;    // bytes in the file (stage_ holds what follows)
  int64_t received_ = 0;   // written_ + staged_
  evp_md_ctx_st* sha_ = nullptr;
  bool verified_ = false;

  // Durability while the bytes arrive: a thread that fdatasyncs the .part
  // file every kFlushEvery bytes, so that Verify's fsync has only the last
  // few MiB to write, not the whole file (on a disk with a write cache the
  // final flush of a large file otherwise takes a second per GB or so, all
  // after the last byte). Started at the first request: a small upload has
  // none.
  static constexpr int64_t kFlushEvery = 32 << 20;
  int64_t flush_requested_ = 0;  // written_ at the last request
  std::thread flusher_;
  absl::Mutex flush_mu_;
  bool flush_wanted_ ABSL_GUARDED_BY(flush_mu_) = false;
  bool flush_stop_ ABSL_GUARDED_BY(flush_mu_) = false;
};

class DatasetFiles {
 public:
  // Creates <state_dir>/datasets and its folders when missing.
  static absl::StatusOr<DatasetFiles> Open(const std::string& state_dir);

  const std::string& dir() const { return dir_; }
  std::string ObjectPath(const std::string& sha256) const;
  bool Has(const std::string& sha256) const;
  // Bytes held of an interrupted upload of `sha256` by `owner` (0: none).
  int64_t PartialBytes(const std::string& owner, const std::string& sha256) const;
  // Starts or resumes the upload at `offset`, which must be PartialBytes
  // (FAILED_PRECONDITION naming the bytes held otherwise). Resuming reads
  // the bytes held once, for the digest.
  absl::StatusOr<std::unique_ptr<DatasetUpload>> StartUpload(const std::string& owner,
                                                             const std::string& sha256,
                                                             int64_t size, int64_t offset) const;
  // Removes an object (no error when absent).
  absl::Status Remove(const std::string& sha256) const;
  // Removes .part files not written since `cutoff`; returns how many.
  int RemovePartialsOlderThan(absl::Time cutoff) const;

 private:
  explicit DatasetFiles(std::string dir) : dir_(std::move(dir)) {}
  std::string PartialPath(const std::string& owner, const std::string& sha256) const;

  std::string dir_;
};

// Whether `s` is 64 lower-case hex digits.
bool IsSha256Hex(absl::string_view s);

}  // namespace traind::server

#endif  // TRAIND_SERVER_DATASETS_DATASET_FILES_H_
