// DatasetCatalog: what traind does with datasets, whichever front end asks
// (docs/spec.md, "Datasets"; docs/architecture.md, "Datasets").
//
// A dataset is an immutable file named by the SHA-256 of its bytes, stored
// once however many records name it (DatasetFiles), with records per owner
// of a name and a version (JobStore's datasets table): uploading other
// bytes under a name makes its next version; the same bytes again make
// nothing new. An upload is profiled (data/profile.h) before it is
// recorded: bad bytes refuse it, naming line and column.
//
// Owners: a caller sees, names and deletes its own datasets; an admin any
// owner's (naming the owner). A submit names a dataset of its owner
// (ResolveSpec); the job records the digest, and the digest stays pinned
// until the job is stored, so a concurrent delete cannot take it away.
//
// Thread-safety: thread-safe. Calls read and write files and the store:
// call them on a work pool, never on a front end's event thread.
#ifndef TRAIND_SERVER_DATASETS_DATASET_CATALOG_H_
#define TRAIND_SERVER_DATASETS_DATASET_CATALOG_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/auth.h"
#include "server/datasets/dataset_files.h"
#include "server/store/job_store.h"
#include "traind/v1/dataset.pb.h"
#include "traind/v1/job.pb.h"
#include "traind/v1/training_service.pb.h"

namespace traind::server {

struct DatasetLimits {
  int64_t max_dataset_bytes = 0;  // 0: no limit
  int64_t owner_quota_bytes = 0;  // 0: no limit
  // A partial upload not written for this long is removed.
  absl::Duration abandoned_upload_age = absl::Hours(24);
  // Datasets no stored job names, older than this, are removed (0: kept).
  absl::Duration retention_age = absl::ZeroDuration();
};

class DatasetCatalog {
 public:
  // `store` must outlive the catalog.
  DatasetCatalog(JobStore* store, DatasetFiles files, DatasetLimits limits)
      : store_(store), files_(std::move(files)), limits_(limits) {}

  // An upload in progress: Append the bytes in order, then Finish. Only one
  // upload of the same bytes by the same owner runs at a time. The profile
  // is taken while the bytes arrive, by a thread that reads the file behind
  // the writer (so a bad row refuses the upload as soon as it is there, and
  // the profile costs no pass after the last byte).
  class Upload {
   public:
    ~Upload();
    // Errors: the file's (a full disk), or the profile's (bad bytes: the
    // upload is refused at once, nothing kept).
    // Takes the bytes of *bytes, and leaves it empty (with a buffer to
    // reuse for the next message's bytes, when the profile has one).
    absl::Status Append(std::string* bytes);
    int64_t received() const { return file_->received(); }
    // Verifies, waits for the profile and records the dataset.
    absl::StatusOr<traind::v1::Dataset> Finish();

   private:
    friend class DatasetCatalog;
    // The bytes on their way to the profiling thread.
    static constexpr int64_t kProfileQueueBytes = 8 << 20;
    struct Follow {
      absl::Mutex mu;
      std::deque<std::string> chunks ABSL_GUARDED_BY(mu);  // received, not yet profiled
      int64_t queued ABSL_GUARDED_BY(mu) = 0;              // their bytes
      std::vector<std::string> spare ABSL_GUARDED_BY(mu);  // profiled: buffers to reuse
      bool complete ABSL_GUARDED_BY(mu) = false;           // every byte there
      bool abandoned ABSL_GUARDED_BY(mu) = false;          // the upload ends without it
      bool done ABSL_GUARDED_BY(mu) = false;               // the thread's profile is set
      absl::StatusOr<traind::v1::DatasetProfile> profile ABSL_GUARDED_BY(mu);
    };
    Upload(DatasetCatalog* catalog, Caller caller, traind::v1::PrepareDatasetUploadRequest file,
           std::unique_ptr<DatasetUpload> upload);
    void StopProfile();
    DatasetCatalog* const catalog_;
    const Caller caller_;
    const traind::v1::PrepareDatasetUploadRequest file_req_;
    std::unique_ptr<DatasetUpload> file_;
    std::shared_ptr<Follow> follow_;
    std::thread profiler_;
  };

  absl::StatusOr<traind::v1::PrepareDatasetUploadResponse> Prepare(
      const Caller& caller, const traind::v1::PrepareDatasetUploadRequest& req);
  // The upload `header` starts. When traind has the bytes already,
  // *recorded is the dataset (recorded now) and no upload is returned.
  absl::StatusOr<std::unique_ptr<Upload>> StartUpload(
      const Caller& caller, const traind::v1::UploadDatasetRequest::Header& header,
      traind::v1::Dataset* recorded);

  absl::StatusOr<std::vector<traind::v1::Dataset>> List(const Caller& caller,
                                                        const traind::v1::ListDatasetsRequest& req);
  // With its profile and the jobs that named its digest.
  absl::StatusOr<traind::v1::Dataset> Get(const Caller& caller,
                                          const traind::v1::GetDatasetRequest& req);
  absl::StatusOr<std::vector<traind::v1::Dataset>> Delete(
      const Caller& caller, const traind::v1::DeleteDatasetRequest& req);
  // The dataset `ref` names for the caller and its file; `field` names the
  // field in errors ("spec.data.dataset").
  struct Found {
    traind::v1::Dataset dataset;
    std::string path;
  };
  absl::StatusOr<Found> Find(const Caller& caller, const std::string& field, const std::string& ref,
                             const std::string& owner = "");

  // Digests pinned while a submit that named them is being stored.
  class Pins {
   public:
    Pins() = default;
    Pins(Pins&& other) noexcept : catalog_(other.catalog_), digests_(std::move(other.digests_)) {
      other.catalog_ = nullptr;
    }
    Pins& operator=(Pins&&) = delete;
    ~Pins();

   private:
    friend class DatasetCatalog;
    DatasetCatalog* catalog_ = nullptr;
    std::vector<std::string> digests_;
  };
  // Resolves spec.data.dataset and spec.cross_validation.validation_dataset
  // to the stored files: sets their *_sha256 and the paths the workers
  // read. The digests stay pinned while the returned Pins live.
  absl::StatusOr<Pins> ResolveSpec(const Caller& caller, traind::v1::JobSpec* spec);

  // Removes abandoned partial uploads and, with a retention age, datasets
  // no stored job names; logs one line for each.
  void Sweep(absl::Time now);

  const DatasetFiles& files() const { return files_; }

 private:
  // The records `ref` names for `owner` ("name": the latest version, or
  // every version with all_versions; "name:3"; "sha256:<hex>").
  absl::StatusOr<std::vector<traind::v1::Dataset>> Lookup(const std::string& field,
                                                          const std::string& owner,
                                                          const std::string& ref,
                                                          bool all_versions);
  // The owner a call acts for: the caller's name, or (an admin only) `owner`.
  absl::StatusOr<std::string> OwnerFor(const Caller& caller, const std::string& owner) const;
  absl::Status CheckLimits(const std::string& owner, const std::string& sha256, int64_t size);
  absl::StatusOr<traind::v1::Dataset> Record(const std::string& owner,
                                             const traind::v1::PrepareDatasetUploadRequest& req,
                                             const traind::v1::DatasetProfile& profile);
  void Unpin(const std::vector<std::string>& digests);

  JobStore* const store_;
  const DatasetFiles files_;
  const DatasetLimits limits_;
  absl::Mutex mu_;
  std::set<std::string> uploading_ ABSL_GUARDED_BY(mu_);  // owner + "/" + sha256
  // How long Prepare waits for an upload of the same bytes to end.
  static constexpr absl::Duration kUploadEndWait = absl::Seconds(5);
  std::multiset<std::string> pinned_ ABSL_GUARDED_BY(mu_);  // digests
};

// Whether `name` may name a dataset: 1 to 128 bytes of [A-Za-z0-9._-],
// not starting with '.'.
bool IsDatasetName(absl::string_view name);

}  // namespace traind::server

#endif  // TRAIND_SERVER_DATASETS_DATASET_CATALOG_H_
