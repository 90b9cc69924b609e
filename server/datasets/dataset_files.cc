#include "server/datasets/dataset_files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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
      sha_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(sha_, EVP_sha256(), nullptr);
}

DatasetUpload::~DatasetUpload() {
  if (fd_ >= 0) close(fd_);
  EVP_MD_CTX_free(sha_);
}

absl::Status DatasetUpload::Append(absl::string_view bytes) {
  if (static_cast<int64_t>(bytes.size()) > size_ - received_) {
    return absl::InvalidArgumentError(absl::StrCat("data: more bytes than the declared size (",
                                                   size_, " bytes, file.size_bytes)"));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      // What reached the file stays a prefix of the upload: cut a partial
      // write back to the bytes counted.
      if (ftruncate(fd_, received_ + static_cast<int64_t>(done)) != 0) {
        // The next resume re-reads the file's size; nothing else to do.
      }
      received_ += static_cast<int64_t>(done);
      EVP_DigestUpdate(sha_, bytes.data(), done);
      return FileError(partial_, "write", err);
    }
    done += static_cast<size_t>(n);
  }
  EVP_DigestUpdate(sha_, bytes.data(), bytes.size());
  received_ += static_cast<int64_t>(bytes.size());
  return absl::OkStatus();
}

absl::Status DatasetUpload::Verify() {
  if (received_ != size_) {
    return absl::InvalidArgumentError(absl::StrCat("data: the upload ended after ", received_,
                                                   " of its ", size_, " bytes; send the rest"));
  }
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
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (offset == 0 ? O_TRUNC : O_APPEND);
  up->fd_ = open(up->partial_.c_str(), flags, 0666);
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
    close(in);
    up->received_ = offset;
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
