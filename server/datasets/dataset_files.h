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

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

struct evp_md_ctx_st;

namespace traind::server {

// An upload being written: Append the bytes in order, then Verify (fsync,
// size and digest) and Commit (rename into objects/, fsync the directory).
// Destroyed before Commit: the .part file stays, to be resumed.
class DatasetUpload {
 public:
  ~DatasetUpload();
  DatasetUpload(const DatasetUpload&) = delete;
  DatasetUpload& operator=(const DatasetUpload&) = delete;

  // INVALID_ARGUMENT past the declared size; RESOURCE_EXHAUSTED on a full
  // disk (the bytes written so far stay, to be resumed).
  absl::Status Append(absl::string_view bytes);
  int64_t received() const { return received_; }
  int64_t size() const { return size_; }
  // Every byte there, on disk, and of the declared SHA-256. A digest
  // mismatch removes the .part file (its bytes are not the file's).
  absl::Status Verify();
  // The .part file, for reading (profiling) between Verify and Commit.
  const std::string& partial_path() const { return partial_; }
  // Renames the verified bytes into objects/; returns the object's path.
  absl::StatusOr<std::string> Commit();
  // Removes the .part file (bad bytes: resuming cannot help).
  void Discard();

 private:
  friend class DatasetFiles;
  DatasetUpload(std::string partial, std::string object, std::string objects_dir,
                std::string sha256, int64_t size);

  const std::string partial_;
  const std::string object_;
  const std::string objects_dir_;
  const std::string sha256_;
  const int64_t size_;
  int fd_ = -1;
  int64_t received_ = 0;
  evp_md_ctx_st* sha_ = nullptr;
  bool verified_ = false;
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
