#include "server/datasets/dataset_files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/core/auth.h"

namespace traind::server {

namespace fs = std::filesystem;

namespace {

// A failed file call as a status: a full disk (or quota) is
// RESOURCE_EXHAUSTED naming the directory, anything else INTERNAL.
absl::Status FileError(const std::string& path, const char* what, int err) {
  if (err == ENOSPC || err == EDQUOT) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": ", what, ": ", strerror(err),
                     " (free space on the state directory's file system)"));
  }
  return absl::InternalError(absl::StrCat(path, ": ", what, ": ", strerror(err)));
}

absl::Status FsyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileError(dir, "open", errno);
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  return rc == 0 ? absl::OkStatus() : FileError(dir, "fsync", err);
}

}  // namespace

bool IsSha256Hex(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

DatasetUpload::DatasetUpload(std::string partial, std::string object, std::string objects_dir,
                             std::string sha256, int64_t size)
    : partial_(std::move(partial)),
      object_(std::move(object)),
      objects_dir_(std::move(objects_dir)),
      sha256_(std::move(sha256)),
      size_(size),
      stage_(static_cast<char*>(std::aligned_alloc(kAlign, kStage))),
      sha_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(sha_, EVP_sha256(), nullptr);
}

DatasetUpload::~DatasetUpload() {
  if (fd_ >= 0 && !verified_ && !failed_) {
    // Abandoned: what was received is written, to be resumed (an error
    // here leaves the file a shorter prefix, which resumes from its size).
    WriteStaged(/*all=*/true).IgnoreError();
  }
  StopFlusher();
  if (fd_ >= 0) close(fd_);
  std::free(stage_);
  EVP_MD_CTX_free(sha_);
}

absl::Status DatasetUpload::WriteAt(const char* data, size_t n, int64_t at) {
  size_t done = 0;
  while (done < n) {
    const ssize_t w = pwrite(fd_, data + done, n - done, at + static_cast<int64_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL && direct_) {
      // The file system took O_DIRECT at open but not this write: go
      // through the page cache from here on.
      if (fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) & ~O_DIRECT) != 0) {
        return FileError(partial_, "fcntl", errno);
      }
      direct_ = false;
      continue;
    }
    if (w < 0) {
      const int err = errno;
      // The file stays a prefix of the upload: a partial write is cut back
      // to the bytes written before it.
      if (ftruncate(fd_, written_) != 0) {
        // The next resume reads the file's size; nothing else to do.
      }
      return FileError(partial_, "write", err);
    }
    done += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status DatasetUpload::WriteStaged(bool all) {
  size_t n = all ? staged_ : (staged_ == kStage ? kStage : 0);
  if (n == 0) return absl::OkStatus();
  size_t whole = direct_ ? n / kAlign * kAlign : n;
  if (whole > 0) {
    if (absl::Status s = WriteAt(stage_, whole, written_); !s.ok()) return s;
  }
  if (whole < n) {
    // The tail of a direct upload, less than a block: through the cache.
    if (fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) & ~O_DIRECT) != 0) {
      return FileError(partial_, "fcntl", errno);
    }
    direct_ = false;
    if (absl::Status s = WriteAt(stage_ + whole, n - whole, written_ + static_cast<int64_t>(whole));
        !s.ok()) {
      return s;
    }
  }
  written_ += static_cast<int64_t>(n);
  staged_ -= n;  // 0: a whole buffer or everything
  if (written_ - flush_requested_ >= kFlushEvery) RequestFlush();
  return absl::OkStatus();
}

absl::Status DatasetUpload::Append(absl::string_view bytes) {
  if (failed_) return absl::FailedPreconditionError("data: an earlier write of this upload failed");
  if (static_cast<int64_t>(bytes.size()) > size_ - received_) {
    return absl::InvalidArgumentError(absl::StrCat("data: more bytes than the declared size (",
                                                   size_, " bytes, file.size_bytes)"));
  }
  EVP_DigestUpdate(sha_, bytes.data(), bytes.size());
  while (!bytes.empty()) {
    const size_t take = std::min(bytes.size(), kStage - staged_);
    std::memcpy(stage_ + staged_, bytes.data(), take);
    staged_ += take;
    bytes.remove_prefix(take);
    if (absl::Status s = WriteStaged(/*all=*/false); !s.ok()) {
      // What reached the file is what counts; the digest is no longer the
      // file's, so this upload ends here (a resume re-reads the file).
      failed_ = true;
      staged_ = 0;
      received_ = written_;
      return s;
    }
  }
  received_ = written_ + static_cast<int64_t>(staged_);
  return absl::OkStatus();
}

void DatasetUpload::RequestFlush() {
  flush_requested_ = written_;
  {
    absl::MutexLock lock(&flush_mu_);
    flush_wanted_ = true;
  }
  if (flusher_.joinable()) return;
  flusher_ = std::thread([this] {
    for (;;) {
      {
        absl::MutexLock lock(&flush_mu_);
        flush_mu_.Await(absl::Condition(
            +[](DatasetUpload* u) ABSL_EXCLUSIVE_LOCKS_REQUIRED(u->flush_mu_) {
              return u->flush_stop_ || u->flush_wanted_;
            },
            this));
        if (flush_stop_) return;
        flush_wanted_ = false;
      }
      // Advisory: an error here is met again by Verify's fsync. fd_ stays
      // open while this thread runs (StopFlusher comes first).
      fdatasync(fd_);
    }
  });
}

void DatasetUpload::StopFlusher() {
  if (!flusher_.joinable()) return;
  {
    absl::MutexLock lock(&flush_mu_);
    flush_stop_ = true;
  }
  flusher_.join();
}

absl::Status DatasetUpload::Verify() {
  if (failed_) return absl::FailedPreconditionError("data: an earlier write of this upload failed");
  if (received_ != size_) {
    return absl::InvalidArgumentError(absl::StrCat("data: the upload ended after ", received_,
                                                   " of its ", size_, " bytes; send the rest"));
  }
  if (absl::Status s = WriteStaged(/*all=*/true); !s.ok()) {
    failed_ = true;
    return s;
  }
  StopFlusher();
  if (fsync(fd_) != 0) return FileError(partial_, "fsync", errno);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(sha_, digest, &n);
  const std::string got =
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), n));
  if (got != sha256_) {
    Discard();
    return absl::InvalidArgumentError(
        absl::StrCat("file.sha256: the bytes received have SHA-256 ", got, ", not ", sha256_,
                     " as declared; nothing was stored (upload the file again)"));
  }
  verified_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::string> DatasetUpload::Commit() {
  if (!verified_) return absl::FailedPreconditionError("the upload is not verified");
  if (rename(partial_.c_str(), object_.c_str()) != 0) return FileError(object_, "rename", errno);
  if (absl::Status s = FsyncDir(objects_dir_); !s.ok()) return s;
  return object_;
}

void DatasetUpload::Discard() {
  StopFlusher();
  staged_ = 0;
  failed_ = true;  // nothing more to write
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  unlink(partial_.c_str());
}

absl::StatusOr<DatasetFiles> DatasetFiles::Open(const std::string& state_dir) {
  const std::string dir = (fs::path(state_dir) / "datasets").string();
  for (const char* sub : {"objects", "uploads"}) {
    std::error_code ec;
    fs::create_directories(fs::path(dir) / sub, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat((fs::path(dir) / sub).string(), ": cannot create: ", ec.message()));
    }
  }
  return DatasetFiles(dir);
}

std::string DatasetFiles::ObjectPath(const std::string& sha256) const {
  return absl::StrCat(dir_, "/objects/", sha256);
}

std::string DatasetFiles::PartialPath(const std::string& owner, const std::string& sha256) const {
  // The owner's name may hold any character: a digest of it names the file.
  return absl::StrCat(dir_, "/uploads/", Sha256Hex(owner).substr(0, 16), "-", sha256, ".part");
}

bool DatasetFiles::Has(const std::string& sha256) const {
  struct stat st;
  return stat(ObjectPath(sha256).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

int64_t DatasetFiles::PartialBytes(const std::string& owner, const std::string& sha256) const {
  struct stat st;
  if (stat(PartialPath(owner, sha256).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  return st.st_size;
}

absl::StatusOr<std::unique_ptr<DatasetUpload>> DatasetFiles::StartUpload(const std::string& owner,
                                                                         const std::string& sha256,
                                                                         int64_t size,
                                                                         int64_t offset) const {
  const int64_t held = PartialBytes(owner, sha256);
  if (offset != held || held > size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "header.offset: ", offset, ", but traind holds ", held, " bytes of this upload; send from ",
        held > size ? 0 : held, " (ask PrepareDatasetUpload)"));
  }
  std::unique_ptr<DatasetUpload> up(new DatasetUpload(
      PartialPath(owner, sha256), ObjectPath(sha256), dir_ + "/objects", sha256, size));
  if (up->stage_ == nullptr) return absl::ResourceExhaustedError("no memory for an upload buffer");
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (offset == 0 ? O_TRUNC : 0);
  up->fd_ = open(up->partial_.c_str(), flags | O_DIRECT, 0666);
  up->direct_ = up->fd_ >= 0;
  if (up->fd_ < 0 && errno == EINVAL) up->fd_ = open(up->partial_.c_str(), flags, 0666);
  if (up->fd_ < 0) return FileError(up->partial_, "open", errno);
  if (offset > 0) {
    // The digest of the bytes held, read once.
    const int in = open(up->partial_.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) return FileError(up->partial_, "open", errno);
    std::vector<char> buf(size_t{1} << 20);
    int64_t left = offset;
    while (left > 0) {
      const ssize_t n =
          read(in, buf.data(),
               static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(buf.size()))));
      if (n <= 0) {
        const int err = n < 0 ? errno : EIO;
        close(in);
        return FileError(up->partial_, "read", err);
      }
      EVP_DigestUpdate(up->sha_, buf.data(), static_cast<size_t>(n));
      left -= n;
    }
    // A direct upload writes whole blocks at block offsets: the held bytes
    // past the last whole block are staged again, to be rewritten with
    // what follows them.
    const int64_t whole = up->direct_ ? offset / static_cast<int64_t>(DatasetUpload::kAlign) *
                                            static_cast<int64_t>(DatasetUpload::kAlign)
                                      : offset;
    const size_t tail = static_cast<size_t>(offset - whole);
    if (tail > 0 && pread(in, up->stage_, tail, whole) != static_cast<ssize_t>(tail)) {
      const int err = errno;
      close(in);
      return FileError(up->partial_, "read", err);
    }
    close(in);
    up->written_ = whole;
    up->staged_ = tail;
    up->received_ = offset;
    up->flush_requested_ = whole;
  }
  return up;
}

absl::Status DatasetFiles::Remove(const std::string& sha256) const {
  if (unlink(ObjectPath(sha256).c_str()) != 0 && errno != ENOENT) {
    return FileError(ObjectPath(sha256), "unlink", errno);
  }
  return absl::OkStatus();
}

int DatasetFiles::RemovePartialsOlderThan(absl::Time cutoff) const {
  int removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_ + "/uploads", ec)) {
    struct stat st;
    if (stat(e.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (absl::FromTimeT(st.st_mtime) < cutoff && unlink(e.path().c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace traind::server
