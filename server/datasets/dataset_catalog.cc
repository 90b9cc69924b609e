#include "server/datasets/dataset_catalog.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "data/profile.h"
#include "google/protobuf/util/time_util.h"

namespace traind::server {

using google::protobuf::util::TimeUtil;
using traind::v1::Dataset;
using traind::v1::PrepareDatasetUploadRequest;

namespace {

std::string Shown(const Dataset& d) { return absl::StrCat(d.name(), ":", d.version()); }

absl::Status CheckFile(const PrepareDatasetUploadRequest& req, const std::string& field) {
  if (!IsDatasetName(req.name())) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "name: \"", req.name(),
        "\" is not a dataset name (1 to 128 of A-Z a-z 0-9 . _ -, not starting with '.')"));
  }
  if (req.size_bytes() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "size_bytes: ", req.size_bytes(), ": an empty file holds no data"));
  }
  if (!IsSha256Hex(req.sha256())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "sha256: \"", req.sha256(), "\" is not 64 lower-case hex digits"));
  }
  if (req.kind() != Dataset::KIND_UNSPECIFIED && req.kind() != Dataset::CSV) {
    return absl::InvalidArgumentError(absl::StrCat(field, "kind: this traind stores CSV only"));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsDatasetName(absl::string_view name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<std::string> DatasetCatalog::OwnerFor(const Caller& caller,
                                                     const std::string& owner) const {
  if (owner.empty() || owner == caller.name) return caller.name;
  if (caller.role != Role::kAdmin) {
    return absl::PermissionDeniedError(absl::StrCat("owner: ", caller.name, " may not name ", owner,
                                                    "'s datasets (only an admin may)"));
  }
  return owner;
}

absl::Status DatasetCatalog::CheckLimits(const std::string& owner, const std::string& sha256,
                                         int64_t size) {
  if (limits_.max_dataset_bytes > 0 && size > limits_.max_dataset_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("file.size_bytes: ", size,
                                                     " bytes, more than this traind stores in one "
                                                     "dataset (",
                                                     limits_.max_dataset_bytes,
                                                     ", datasets.max_bytes)"));
  }
  if (limits_.owner_quota_bytes <= 0) return absl::OkStatus();
  absl::StatusOr<std::optional<Dataset>> held = store_->FindDatasetByDigest(owner, sha256);
  if (!held.ok()) return held.status();
  if (held->has_value()) return absl::OkStatus();  // counted already
  absl::StatusOr<int64_t> used = store_->OwnerDatasetBytes(owner);
  if (!used.ok()) return used.status();
  if (*used + size > limits_.owner_quota_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "file.size_bytes: ", owner, "'s datasets hold ", *used, " of their ",
        limits_.owner_quota_bytes, " bytes (datasets.owner_quota_bytes); this one needs ", size,
        " more: delete some (trainctl datasets delete) or ask an admin"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> DatasetCatalog::Record(const std::string& owner,
                                               const PrepareDatasetUploadRequest& req,
                                               const traind::v1::DatasetProfile& profile) {
  Dataset d;
  d.set_owner(owner);
  d.set_name(req.name());
  d.set_sha256(req.sha256());
  d.set_size_bytes(req.size_bytes());
  d.set_kind(Dataset::CSV);
  d.set_file_name(req.file_name());
  *d.mutable_create_time() = TimeUtil::GetCurrentTime();
  *d.mutable_profile() = profile;
  absl::StatusOr<Dataset> stored = store_->AddDataset(d);
  if (stored.ok()) {
    LogInfo("dataset stored owner=%s dataset=%s sha256=%s bytes=%d rows=%d", owner, Shown(*stored),
            stored->sha256(), stored->size_bytes(), stored->profile().rows());
  }
  return stored;
}

absl::StatusOr<traind::v1::PrepareDatasetUploadResponse> DatasetCatalog::Prepare(
    const Caller& caller, const PrepareDatasetUploadRequest& req) {
  if (absl::Status s = CheckFile(req, ""); !s.ok()) return s;
  if (absl::Status s = CheckLimits(caller.name, req.sha256(), req.size_bytes()); !s.ok()) return s;
  {
    // An upload of these bytes by the caller that is still ending (a client
    // that went away: its stream's last bytes are being written) is waited
    // for, so the offset answered is every byte traind received. One that
    // goes on past the wait (a second client) is answered as it stands.
    absl::MutexLock lock(&mu_);
    std::pair<DatasetCatalog*, std::string> key(this, absl::StrCat(caller.name, "/", req.sha256()));
    mu_.AwaitWithTimeout(
        absl::Condition(
            +[](std::pair<DatasetCatalog*, std::string>* k) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return k->first->uploading_.count(k->second) == 0;
            },
            &key),
        kUploadEndWait);
  }
  traind::v1::PrepareDatasetUploadResponse resp;
  if (files_.Has(req.sha256())) {
    // The bytes are here (anyone's): record them for the caller, no upload.
    absl::StatusOr<std::optional<Dataset>> any = store_->FindDatasetByDigest("", req.sha256());
    if (!any.ok()) return any.status();
    if (any->has_value()) {
      if ((*any)->size_bytes() != req.size_bytes()) {
        return absl::InvalidArgumentError(absl::StrCat("size_bytes: ", req.size_bytes(),
                                                       ", but the file of SHA-256 ", req.sha256(),
                                                       " has ", (*any)->size_bytes()));
      }
      absl::StatusOr<Dataset> d = Record(caller.name, req, (*any)->profile());
      if (!d.ok()) return d.status();
      *resp.mutable_dataset() = *std::move(d);
      return resp;
    }
  }
  resp.set_offset(files_.PartialBytes(caller.name, req.sha256()));
  return resp;
}

DatasetCatalog::Upload::Upload(DatasetCatalog* catalog, Caller caller,
                               PrepareDatasetUploadRequest file,
                               std::unique_ptr<DatasetUpload> upload)
    : catalog_(catalog),
      caller_(std::move(caller)),
      file_req_(std::move(file)),
      file_(std::move(upload)),
      follow_(std::make_shared<Follow>()) {
  const std::string shown =
      file_req_.file_name().empty() ? file_req_.name() : file_req_.file_name();
  // The profile reads the bytes as they arrive, from memory (Append hands
  // each message over); a resumed upload's bytes held before it are read
  // from the .part file first.
  profiler_ = std::thread(
      [follow = follow_, path = file_->partial_path(), held = file_->received(), shown] {
        int fd = -1;
        int64_t at = 0;
        std::string current;
        size_t pos = 0;
        data::CsvByteSource source = [&](char* buf, size_t max) -> absl::StatusOr<size_t> {
          if (at < held) {
            if (fd < 0) fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
            if (fd < 0) return absl::InternalError(absl::StrCat(path, ": open: ", strerror(errno)));
            const ssize_t n =
                pread(fd, buf, static_cast<size_t>(std::min<int64_t>(max, held - at)), at);
            if (n <= 0) {
              return absl::InternalError(
                  absl::StrCat(path, ": read: ", n < 0 ? strerror(errno) : "shorter than held"));
            }
            at += n;
            return static_cast<size_t>(n);
          }
          if (pos == current.size()) {
            absl::MutexLock lock(&follow->mu);
            follow->mu.Await(absl::Condition(
                +[](Follow* f) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                  return !f->chunks.empty() || f->complete || f->abandoned;
                },
                follow.get()));
            if (follow->abandoned) return absl::CancelledError("the upload ended");
            if (follow->chunks.empty()) return size_t{0};  // complete
            if (current.capacity() > 0 && follow->spare.size() < 4) {
              follow->spare.push_back(std::move(current));
            }
            current = std::move(follow->chunks.front());
            follow->chunks.pop_front();
            follow->queued -= static_cast<int64_t>(current.size());
            pos = 0;
          }
          const size_t n = std::min(max, current.size() - pos);
          std::memcpy(buf, current.data() + pos, n);
          pos += n;
          at += static_cast<int64_t>(n);
          return n;
        };
        absl::StatusOr<traind::v1::DatasetProfile> profile =
            [&]() -> absl::StatusOr<traind::v1::DatasetProfile> {
          absl::StatusOr<data::CsvReader> reader = data::CsvReader::FromSource(source, shown);
          if (!reader.ok()) return reader.status();
          return data::ProfileCsv(*std::move(reader));
        }();
        if (fd >= 0) close(fd);
        absl::MutexLock lock(&follow->mu);
        follow->profile = std::move(profile);
        follow->done = true;
        follow->chunks.clear();
        follow->queued = 0;
      });
}

void DatasetCatalog::Upload::StopProfile() {
  if (!profiler_.joinable()) return;
  {
    absl::MutexLock lock(&follow_->mu);
    if (!follow_->complete) follow_->abandoned = true;
  }
  profiler_.join();
}

DatasetCatalog::Upload::~Upload() {
  StopProfile();
  // The bytes still staged reach the .part file before the upload stops
  // counting as in progress: a PrepareDatasetUpload waiting for it then
  // answers every byte received.
  file_.reset();
  absl::MutexLock lock(&catalog_->mu_);
  catalog_->uploading_.erase(absl::StrCat(caller_.name, "/", file_req_.sha256()));
}

absl::Status DatasetCatalog::Upload::Append(std::string* bytes) {
  {
    absl::MutexLock lock(&follow_->mu);
    // The profile keeps up, or this waits for it (the sender waits in turn,
    // through the stream's flow control): a bounded queue.
    follow_->mu.Await(absl::Condition(
        +[](Follow* f)
             ABSL_NO_THREAD_SAFETY_ANALYSIS { return f->queued < kProfileQueueBytes || f->done; },
        follow_.get()));
    if (follow_->done && !follow_->profile.ok()) {
      // Bad bytes: refused now, not after the rest of the file.
      const absl::Status bad = follow_->profile.status();
      file_->Discard();
      return absl::InvalidArgumentError(absl::StrCat(bad.message(), "; nothing was stored"));
    }
  }
  if (absl::Status s = file_->Append(*bytes); !s.ok()) return s;
  absl::MutexLock lock(&follow_->mu);
  if (!follow_->done) {
    follow_->queued += static_cast<int64_t>(bytes->size());
    follow_->chunks.push_back(std::move(*bytes));
    // A buffer the profile is done with takes its place: the next message
    // is read into memory already mapped, not a fresh MiB.
    if (!follow_->spare.empty()) {
      *bytes = std::move(follow_->spare.back());
      follow_->spare.pop_back();
    }
  }
  bytes->clear();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DatasetCatalog::Upload>> DatasetCatalog::StartUpload(
    const Caller& caller, const traind::v1::UploadDatasetRequest::Header& header,
    Dataset* recorded) {
  absl::StatusOr<traind::v1::PrepareDatasetUploadResponse> prepared =
      Prepare(caller, header.file());
  if (!prepared.ok()) {
    return absl::Status(prepared.status().code(),
                        absl::StrCat("header.file.", prepared.status().message()));
  }
  if (prepared->has_dataset()) {
    *recorded = prepared->dataset();
    return nullptr;
  }
  const std::string key = absl::StrCat(caller.name, "/", header.file().sha256());
  {
    absl::MutexLock lock(&mu_);
    if (!uploading_.insert(key).second) {
      return absl::AbortedError(absl::StrCat("an upload of these bytes (", header.file().sha256(),
                                             ") by ", caller.name,
                                             " is in progress; try again once it ends"));
    }
  }
  absl::StatusOr<std::unique_ptr<DatasetUpload>> file = files_.StartUpload(
      caller.name, header.file().sha256(), header.file().size_bytes(), header.offset());
  if (!file.ok()) {
    absl::MutexLock lock(&mu_);
    uploading_.erase(key);
    return file.status();
  }
  if (header.offset() > 0) {
    LogInfo("dataset upload resumed owner=%s name=%s at=%d of=%d", caller.name,
            header.file().name(), header.offset(), header.file().size_bytes());
  }
  return std::unique_ptr<Upload>(new Upload(this, caller, header.file(), *std::move(file)));
}

absl::StatusOr<Dataset> DatasetCatalog::Upload::Finish() {
  const absl::Time received = absl::Now();
  if (absl::Status s = file_->Verify(); !s.ok()) return s;
  const absl::Time verified = absl::Now();
  {
    absl::MutexLock lock(&follow_->mu);
    follow_->complete = true;
  }
  profiler_.join();
  absl::StatusOr<traind::v1::DatasetProfile> profile;
  {
    absl::MutexLock lock(&follow_->mu);
    profile = std::move(follow_->profile);
  }
  if (!profile.ok()) {
    file_->Discard();  // bad bytes: resuming cannot help
    return absl::InvalidArgumentError(
        absl::StrCat(profile.status().message(), "; nothing was stored"));
  }
  // Another upload may have used the quota meanwhile.
  if (absl::Status s =
          catalog_->CheckLimits(caller_.name, file_req_.sha256(), file_req_.size_bytes());
      !s.ok()) {
    file_->Discard();
    return s;
  }
  const absl::Time profiled = absl::Now();
  absl::StatusOr<std::string> path = file_->Commit();
  if (!path.ok()) return path.status();
  LogInfo("dataset upload received owner=%s name=%s bytes=%d verify_ms=%d profile_wait_ms=%d",
          caller_.name, file_req_.name(), file_req_.size_bytes(),
          absl::ToInt64Milliseconds(verified - received),
          absl::ToInt64Milliseconds(profiled - verified));
  return catalog_->Record(caller_.name, file_req_, *profile);
}

absl::StatusOr<std::vector<Dataset>> DatasetCatalog::Lookup(const std::string& field,
                                                            const std::string& owner,
                                                            const std::string& ref,
                                                            bool all_versions) {
  std::vector<Dataset> out;
  if (absl::StartsWith(ref, "sha256:")) {
    const std::string sha = ref.substr(7);
    if (!IsSha256Hex(sha)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": \"", ref, "\": sha256: needs 64 lower-case hex digits"));
    }
    absl::StatusOr<std::optional<Dataset>> d = store_->FindDatasetByDigest(owner, sha);
    if (!d.ok()) return d.status();
    if (!d->has_value()) {
      return absl::NotFoundError(absl::StrCat(field, ": ", owner, " has no dataset of SHA-256 ",
                                              sha, " (upload it: trainctl datasets upload FILE)"));
    }
    out.push_back(**d);
    return out;
  }
  std::string name = ref;
  int version = 0;
  if (const size_t colon = ref.rfind(':'); colon != std::string::npos) {
    name = ref.substr(0, colon);
    if (!absl::SimpleAtoi(ref.substr(colon + 1), &version) || version <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": \"", ref, "\": the version after ':' must be a positive integer"));
    }
  }
  if (!IsDatasetName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": \"", ref,
                     "\" names no dataset (\"name\", \"name:version\" or \"sha256:<hex>\")"));
  }
  if (all_versions && version == 0) {
    absl::StatusOr<std::vector<Dataset>> all = store_->ListDatasets(owner, name);
    if (!all.ok()) return all.status();
    out = *std::move(all);
  } else {
    absl::StatusOr<std::optional<Dataset>> d = store_->FindDataset(owner, name, version);
    if (!d.ok()) return d.status();
    if (d->has_value()) out.push_back(**d);
  }
  if (out.empty()) {
    return absl::NotFoundError(
        absl::StrCat(field, ": ", owner, " has no dataset ", ref,
                     " (trainctl datasets list shows them; trainctl datasets upload FILE "
                     "stores one)"));
  }
  return out;
}

absl::StatusOr<std::vector<Dataset>> DatasetCatalog::List(
    const Caller& caller, const traind::v1::ListDatasetsRequest& req) {
  std::string owner = caller.name;
  if (caller.role == Role::kAdmin) {
    owner = req.owner();  // "": everyone's
  } else if (!req.owner().empty() && req.owner() != caller.name) {
    return OwnerFor(caller, req.owner()).status();
  }
  absl::StatusOr<std::vector<Dataset>> all = store_->ListDatasets(owner, req.name());
  if (!all.ok()) return all.status();
  for (Dataset& d : *all) d.clear_profile();
  return all;
}

absl::StatusOr<Dataset> DatasetCatalog::Get(const Caller& caller,
                                            const traind::v1::GetDatasetRequest& req) {
  absl::StatusOr<Found> found = Find(caller, "ref", req.ref(), req.owner());
  if (!found.ok()) return found.status();
  absl::StatusOr<std::vector<std::string>> jobs = store_->JobsUsingDigest(found->dataset.sha256());
  if (!jobs.ok()) return jobs.status();
  for (std::string& id : *jobs) found->dataset.add_job_ids(std::move(id));
  return found->dataset;
}

absl::StatusOr<DatasetCatalog::Found> DatasetCatalog::Find(const Caller& caller,
                                                           const std::string& field,
                                                           const std::string& ref,
                                                           const std::string& owner) {
  absl::StatusOr<std::string> who = OwnerFor(caller, owner);
  if (!who.ok()) return who.status();
  absl::StatusOr<std::vector<Dataset>> found = Lookup(field, *who, ref, false);
  if (!found.ok()) return found.status();
  Found out{found->front(), files_.ObjectPath(found->front().sha256())};
  if (!files_.Has(out.dataset.sha256())) {
    return absl::DataLossError(absl::StrCat(field, ": dataset ", Shown(out.dataset), ": its file ",
                                            out.path, " is missing"));
  }
  return out;
}

absl::StatusOr<std::vector<Dataset>> DatasetCatalog::Delete(
    const Caller& caller, const traind::v1::DeleteDatasetRequest& req) {
  absl::StatusOr<std::string> owner = OwnerFor(caller, req.owner());
  if (!owner.ok()) return owner.status();
  absl::StatusOr<std::vector<Dataset>> found = Lookup("ref", *owner, req.ref(), req.all_versions());
  if (!found.ok()) return found.status();
  // Every version is checked before any is deleted.
  for (const Dataset& d : *found) {
    {
      absl::MutexLock lock(&mu_);
      if (pinned_.count(d.sha256()) > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "dataset ", Shown(d), " is being named by a job being submitted; try again"));
      }
    }
    absl::StatusOr<std::string> job = store_->UnfinishedJobUsingDigest(d.sha256());
    if (!job.ok()) return job.status();
    if (!job->empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("dataset ", Shown(d), " is used by job ", *job,
                       ", which has not finished; cancel it or wait for it to end"));
    }
  }
  std::vector<Dataset> deleted;
  for (Dataset& d : *found) {
    absl::StatusOr<int64_t> left =
        store_->DeleteDataset(d.owner(), d.name(), d.version(), d.sha256());
    if (!left.ok()) return left.status();
    if (*left == 0) {
      if (absl::Status s = files_.Remove(d.sha256()); !s.ok()) return s;
    }
    LogInfo("dataset deleted owner=%s dataset=%s sha256=%s by=%s", d.owner(), Shown(d), d.sha256(),
            caller.name);
    d.clear_profile();
    deleted.push_back(std::move(d));
  }
  return deleted;
}

DatasetCatalog::Pins::~Pins() {
  if (catalog_ != nullptr) catalog_->Unpin(digests_);
}

void DatasetCatalog::Unpin(const std::vector<std::string>& digests) {
  absl::MutexLock lock(&mu_);
  for (const std::string& d : digests) {
    auto it = pinned_.find(d);
    if (it != pinned_.end()) pinned_.erase(it);
  }
}

absl::StatusOr<DatasetCatalog::Pins> DatasetCatalog::ResolveSpec(const Caller& caller,
                                                                 traind::v1::JobSpec* spec) {
  Pins pins;
  pins.catalog_ = this;
  // The digests are traind's to set.
  spec->mutable_data()->clear_dataset_sha256();
  if (spec->has_cross_validation()) {
    spec->mutable_cross_validation()->clear_validation_dataset_sha256();
  }
  struct Ref {
    const char* field;
    const char* path_field;
    std::string ref;
    std::string path;
    std::function<void(const std::string&, const std::string&)> set;
  };
  std::vector<Ref> refs;
  if (!spec->data().dataset().empty()) {
    refs.push_back({"spec.data.dataset", "spec.data.path", spec->data().dataset(),
                    spec->data().path(), [spec](const std::string& sha, const std::string& path) {
                      spec->mutable_data()->set_dataset_sha256(sha);
                      spec->mutable_data()->set_path(path);
                    }});
  }
  if (spec->has_cross_validation() && !spec->cross_validation().validation_dataset().empty()) {
    refs.push_back(
        {"spec.cross_validation.validation_dataset", "spec.cross_validation.validation_path",
         spec->cross_validation().validation_dataset(), spec->cross_validation().validation_path(),
         [spec](const std::string& sha, const std::string& path) {
           spec->mutable_cross_validation()->set_validation_dataset_sha256(sha);
           spec->mutable_cross_validation()->set_validation_path(path);
         }});
  }
  for (const Ref& r : refs) {
    if (!r.path.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(r.field, ": set it or ", r.path_field, ", not both"));
    }
    absl::StatusOr<Found> found = Find(caller, r.field, r.ref);
    if (!found.ok()) return found.status();
    {
      absl::MutexLock lock(&mu_);
      pinned_.insert(found->dataset.sha256());
    }
    pins.digests_.push_back(found->dataset.sha256());
    r.set(found->dataset.sha256(), found->path);
  }
  return pins;
}

void DatasetCatalog::Sweep(absl::Time now) {
  if (limits_.abandoned_upload_age > absl::ZeroDuration()) {
    const int removed = files_.RemovePartialsOlderThan(now - limits_.abandoned_upload_age);
    if (removed > 0) LogInfo("dataset uploads abandoned removed=%d", removed);
  }
  if (limits_.retention_age <= absl::ZeroDuration()) return;
  absl::StatusOr<std::vector<Dataset>> old =
      store_->UnusedDatasetsBefore(absl::ToUnixMicros(now - limits_.retention_age));
  if (!old.ok()) {
    LogWarning("dataset retention: %s", old.status().message());
    return;
  }
  for (const Dataset& d : *old) {
    {
      absl::MutexLock lock(&mu_);
      if (pinned_.count(d.sha256()) > 0) continue;
    }
    absl::StatusOr<int64_t> left =
        store_->DeleteDataset(d.owner(), d.name(), d.version(), d.sha256());
    if (!left.ok()) {
      LogWarning("dataset retention: %s", left.status().message());
      return;
    }
    if (*left == 0) files_.Remove(d.sha256()).IgnoreError();
    LogInfo("dataset removed by retention owner=%s dataset=%s sha256=%s", d.owner(), Shown(d),
            d.sha256());
  }
}

}  // namespace traind::server
