// TrainingService: the calls on a job's files — ListArtifacts, GetArtifact,
// Predict — and DeleteJob. (The rest: services.cc.)
#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "server/api/grpc_reply.h"
#include "server/api/services.h"
#include "server/store/job_files.h"

namespace traind::server {

using grpc::CallbackServerContext;
using grpc::ServerUnaryReactor;

namespace {

// Streams one file (a job's artifact, a dataset): finds it with `find` and
// reads each chunk on the files pool, never on a gRPC thread; one chunk in
// flight.
// The first message carries the artifact, the last the SHA-256 of all
// bytes sent. The size is the file's when opened: a log that grows while it
// is read is sent up to that size.
class ArtifactReactor final : public grpc::ServerWriteReactor<traind::v1::ArtifactChunk> {
 public:
  static constexpr int64_t kChunk = 1 << 20;

  // `what` names the file in messages ("job 1a2b: artifact \"x.csv\"").
  ArtifactReactor(WorkPool* files, std::function<absl::StatusOr<ArtifactFile>()> find,
                  std::string what)
      : files_(files), find_(std::move(find)), what_(std::move(what)) {
    refs_.fetch_add(1);
    files_->Post([this] { Open(); });
  }
  ~ArtifactReactor() override { EVP_MD_CTX_free(sha_); }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    if (last_) {
      End(grpc::Status::OK);
      return;
    }
    if (cancelled_.load()) {
      End(grpc::Status::CANCELLED);
      return;
    }
    refs_.fetch_add(1);
    files_->Post([this] { ReadNext(); });
  }
  void OnCancel() override { cancelled_.store(true); }
  void OnDone() override { Unref(); }

 private:
  void Open() {
    absl::StatusOr<ArtifactFile> file = find_();
    if (!file.ok()) {
      End(ToGrpc(file.status()));
      Unref();
      return;
    }
    in_.open(file->path, std::ios::binary);
    if (!in_) {
      End(grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat(what_, " cannot be read")));
      Unref();
      return;
    }
    in_.seekg(0, std::ios::end);
    remaining_ = static_cast<int64_t>(in_.tellg());
    in_.seekg(0);
    file->artifact.set_size_bytes(remaining_);
    *chunk_.mutable_artifact() = file->artifact;
    sha_ = EVP_MD_CTX_new();
    EVP_DigestInit_ex(sha_, EVP_sha256(), nullptr);
    ReadNext();
  }

  // Fills chunk_ (after the first message: only data) and writes it.
  void ReadNext() {
    const int64_t n = std::min(remaining_, kChunk);
    std::string* data = chunk_.mutable_data();
    data->resize(static_cast<size_t>(n));
    if (n > 0 && !in_.read(data->data(), n)) {
      End(grpc::Status(grpc::StatusCode::DATA_LOSS,
                       absl::StrCat(what_, " became shorter while it was read")));
      Unref();
      return;
    }
    EVP_DigestUpdate(sha_, data->data(), data->size());
    remaining_ -= n;
    if (remaining_ == 0) {
      unsigned char digest[EVP_MAX_MD_SIZE];
      unsigned int size = 0;
      EVP_DigestFinal_ex(sha_, digest, &size);
      chunk_.set_sha256(
          absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), size)));
      last_ = true;
    }
    StartWrite(&chunk_);
    Unref();
  }

  // Before the next write: what the last one sent goes.
  void End(const grpc::Status& status) {
    bool expected = false;
    if (finished_.compare_exchange_strong(expected, true)) Finish(status);
  }
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  WorkPool* const files_;
  const std::function<absl::StatusOr<ArtifactFile>()> find_;
  const std::string what_;
  std::atomic<int> refs_{1};  // gRPC's (until OnDone) and one per pending pool task
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> finished_{false};
  std::ifstream in_;
  int64_t remaining_ = 0;
  bool last_ = false;
  EVP_MD_CTX* sha_ = nullptr;
  traind::v1::ArtifactChunk chunk_;
};

}  // namespace

// ListArtifacts pages (a job may hold tens of thousands of files: one reply
// with every one came near gRPC's 4 MiB message limit).
constexpr int kArtifactsPage = 1000;
constexpr int kMaxArtifactsPage = 10000;

// Predict: reads the header, then the uploaded CSV into a file of the
// state directory (each write on the files pool, one message at a time),
// then scores it on the predictions pool. The upload is removed when the
// call ends.
class PredictReactor final : public grpc::ServerReadReactor<traind::v1::PredictRequest> {
 public:
  PredictReactor(TrainingServiceImpl* service, CallbackServerContext* ctx,
                 traind::v1::PredictResponse* resp, int64_t max_upload, Caller caller)
      : service_(service),
        ctx_(ctx),
        resp_(resp),
        max_upload_(max_upload),
        caller_(std::move(caller)) {
    // A slot first: no file is opened for an upload over the caps.
    absl::StatusOr<std::unique_ptr<UploadSlots::Slot>> slot =
        service_->uploads_->Acquire(caller_.name, "Predict", [this] {
          Finish(grpc::Status(
              grpc::StatusCode::DEADLINE_EXCEEDED,
              absl::StrCat("the upload sent nothing for ",
                           absl::FormatDuration(service_->policy_.limits.upload_idle_timeout),
                           " (limits.upload_idle_timeout)")));
        });
    if (!slot.ok()) {
      Finish(ToGrpc(slot.status()));
      return;
    }
    slot_ = *std::move(slot);
    Read();
  }

  void OnReadDone(bool ok) override {
    if (!slot_->MessageArrived()) return;  // ended as idle
    if (!ok) {                             // the client sent everything, or went away
      if (ctx_->IsCancelled()) {
        // Part of a file is not scored.
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the upload was cancelled"));
        return;
      }
      if (!have_header_) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "header: the first message must be the header"));
        return;
      }
      if (file_.is_open()) file_.close();
      service_->predictions_->Post([this] {
        std::string csv = header_.data_path().empty() ? upload_ : confined_;
        if (!header_.dataset().empty()) {  // a stored dataset
          absl::Status s = service_->RequireDatasets();
          absl::StatusOr<DatasetCatalog::Found> found =
              s.ok() ? service_->datasets_->Find(caller_, "header.dataset", header_.dataset())
                     : absl::StatusOr<DatasetCatalog::Found>(s);
          if (!found.ok()) {
            Finish(ToGrpc(found.status()));
            return;
          }
          csv = found->path;
        }
        Finish(ToGrpc(service_->RunPredict(header_, csv, resp_)));
      });
      return;
    }
    if (!have_header_) {
      if (!message_.has_header()) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "header: the first message must be the header"));
        return;
      }
      header_ = message_.header();
      have_header_ = true;
      if (header_.job_id().empty()) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "header.job_id: required"));
        return;
      }
      if (header_.has_task() && header_.task() < 0) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("header.task: a task number (>= 0), got ", header_.task(),
                                         "; unset for the refit model")));
        return;
      }
      // The predictions become an artifact of the job: its owner's (or an
      // admin's) to run, as Cancel and Delete are; refused before any upload.
      {
        absl::StatusOr<traind::v1::Job> job = service_->scheduler_->GetJob(header_.job_id());
        absl::Status may = job.ok() ? MayPredict(caller_, job->owner(), job->id()) : job.status();
        if (!may.ok()) {
          Finish(ToGrpc(may));
          return;
        }
      }
      if (!header_.dataset().empty() && !header_.data_path().empty()) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "header.dataset: set it or header.data_path, not both"));
        return;
      }
      if (!header_.dataset().empty()) {
        Read();  // nothing to upload: the stream ends next
        return;
      }
      if (!header_.data_path().empty()) {
        std::string path = header_.data_path();
        if (path[0] != '/') {
          if (header_.base_dir().empty() || header_.base_dir()[0] != '/') {
            Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                "header.data_path: a relative path needs an absolute base_dir"));
            return;
          }
          path = header_.base_dir() + "/" + path;
        }
        absl::StatusOr<std::string> confined =
            service_->policy_.data_roots.Confine("header.data_path", path);
        if (!confined.ok()) {
          Finish(ToGrpc(confined.status()));
          return;
        }
        confined_ = *confined;
      } else {
        const std::string dir = service_->scheduler_->state_dir() + "/uploads";
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        upload_ = absl::StrCat(dir, "/predict-", getpid(), "-", reinterpret_cast<uintptr_t>(this),
                               ".csv");
        file_.open(upload_, std::ios::binary | std::ios::trunc);
        if (!file_) {
          Finish(grpc::Status(grpc::StatusCode::INTERNAL,
                              absl::StrCat(upload_, ": cannot create the upload")));
          return;
        }
      }
      Read();
      return;
    }
    if (!message_.has_csv() || !header_.data_path().empty() || !header_.dataset().empty()) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          header_.data_path().empty() && header_.dataset().empty()
                              ? "csv: every message after the header carries CSV bytes"
                              : "csv: no upload with header.data_path or header.dataset"));
      return;
    }
    received_ += static_cast<int64_t>(message_.csv().size());
    if (received_ > max_upload_) {
      Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat("csv: the upload is larger than ", max_upload_,
                                       " bytes (limits.max_predict_upload_bytes); name a file "
                                       "on the server with data_path instead")));
      return;
    }
    service_->files_->Post([this] {
      file_.write(message_.csv().data(), static_cast<std::streamsize>(message_.csv().size()));
      if (!file_) {
        Finish(grpc::Status(grpc::StatusCode::INTERNAL,
                            absl::StrCat(upload_, ": write failed (disk full?)")));
        return;
      }
      Read();
    });
  }

  void OnDone() override {
    if (file_.is_open()) file_.close();
    if (!upload_.empty()) {
      std::error_code ec;
      std::filesystem::remove(upload_, ec);
    }
    delete this;
  }

 private:
  void Read() {
    slot_->WaitingForMessage();
    StartRead(&message_);
  }

  TrainingServiceImpl* const service_;
  CallbackServerContext* const ctx_;
  traind::v1::PredictResponse* const resp_;
  const int64_t max_upload_;
  const Caller caller_;
  traind::v1::PredictRequest message_;
  traind::v1::PredictRequest::Header header_;
  bool have_header_ = false;
  std::string upload_;    // the uploaded CSV
  std::string confined_;  // or the server's file
  std::ofstream file_;
  int64_t received_ = 0;
  std::unique_ptr<UploadSlots::Slot> slot_;  // last: released first
};

ServerUnaryReactor* TrainingServiceImpl::ListArtifacts(CallbackServerContext* ctx,
                                                       const traind::v1::ListArtifactsRequest* req,
                                                       traind::v1::ListArtifactsResponse* resp) {
  if (absl::StatusOr<Caller> c = Authorize(ctx, Rpc::kListArtifacts); !c.ok()) {
    return Reply(ctx, c.status());
  }
  if (absl::Status s = RequireJobId(req->job_id()); !s.ok()) return Reply(ctx, s);
  return OnStoreReads(ctx, [this, req, resp]() -> absl::Status {
    absl::StatusOr<traind::v1::Job> job = reads_->GetJob(req->job_id());
    if (!job.ok()) return job.status();
    if (req->page_size() < 0 || req->page_size() > kMaxArtifactsPage) {
      return absl::InvalidArgumentError(absl::StrCat("page_size: from 0 (the default, ",
                                                     kArtifactsPage, ") to ", kMaxArtifactsPage,
                                                     ", got ", req->page_size()));
    }
    std::string after;
    if (!req->page_token().empty() &&
        (!absl::WebSafeBase64Unescape(req->page_token(), &after) || after.empty())) {
      return absl::InvalidArgumentError("page_token: not a token ListArtifacts returned");
    }
    absl::StatusOr<std::vector<traind::v1::Artifact>> list =
        server::ListArtifacts(reads_->description().state_dir, *job);
    if (!list.ok()) return list.status();
    // By name: the page starts after the last name of the one before.
    const size_t page = req->page_size() > 0 ? req->page_size() : kArtifactsPage;
    auto it = std::upper_bound(
        list->begin(), list->end(), after,
        [](const std::string& a, const traind::v1::Artifact& b) { return a < b.name(); });
    if (after.empty()) it = list->begin();
    for (; it != list->end() && static_cast<size_t>(resp->artifacts_size()) < page; ++it) {
      *resp->add_artifacts() = std::move(*it);
    }
    if (it != list->end()) {
      resp->set_next_page_token(
          absl::WebSafeBase64Escape(resp->artifacts(resp->artifacts_size() - 1).name()));
    }
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<traind::v1::ArtifactChunk>* TrainingServiceImpl::GetArtifact(
    CallbackServerContext* ctx, const traind::v1::GetArtifactRequest* req) {
  using Finished = FinishedWriter<traind::v1::ArtifactChunk>;
  if (absl::StatusOr<Caller> c = Authorize(ctx, Rpc::kGetArtifact); !c.ok()) {
    return new Finished(ToGrpc(c.status()));
  }
  if (req->job_id().empty()) {
    return new Finished(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: required"));
  }
  if (req->name().empty()) {
    return new Finished(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "name: required"));
  }
  ReadApi* const reads = reads_;
  return new ArtifactReactor(
      files_.get(),
      [reads, job_id = req->job_id(), name = req->name()]() -> absl::StatusOr<ArtifactFile> {
        absl::StatusOr<traind::v1::Job> job = reads->GetJob(job_id);
        if (!job.ok()) return job.status();
        return FindArtifact(reads->description().state_dir, *job, name);
      },
      absl::StrCat("job ", req->job_id(), ": artifact \"", req->name(), "\""));
}

grpc::ServerWriteReactor<traind::v1::ArtifactChunk>* TrainingServiceImpl::DownloadDataset(
    CallbackServerContext* ctx, const traind::v1::GetDatasetRequest* req) {
  using Finished = FinishedWriter<traind::v1::ArtifactChunk>;
  absl::StatusOr<Caller> caller = Authorize(ctx, Rpc::kDownloadDataset);
  absl::Status s = caller.ok() ? RequireDatasets() : caller.status();
  if (!s.ok()) return new Finished(ToGrpc(s));
  DatasetCatalog* const datasets = datasets_;
  return new ArtifactReactor(
      files_.get(),
      [datasets, caller = *std::move(caller), ref = req->ref(),
       owner = req->owner()]() -> absl::StatusOr<ArtifactFile> {
        absl::StatusOr<DatasetCatalog::Found> found = datasets->Find(caller, "ref", ref, owner);
        if (!found.ok()) return found.status();
        ArtifactFile file;
        file.path = found->path;
        const std::string& given = found->dataset.file_name();
        file.artifact.set_name(given.empty() ? found->dataset.name() + ".csv"
                                             : given.substr(given.rfind('/') + 1));
        file.artifact.set_kind(traind::v1::Artifact::OTHER);
        file.artifact.set_task(-1);
        return file;
      },
      absl::StrCat("dataset ", req->ref()));
}

grpc::ServerReadReactor<traind::v1::PredictRequest>* TrainingServiceImpl::Predict(
    CallbackServerContext* ctx, traind::v1::PredictResponse* resp) {
  absl::StatusOr<Caller> caller = Authorize(ctx, Rpc::kPredict);
  if (!caller.ok()) {
    class Refused final : public grpc::ServerReadReactor<traind::v1::PredictRequest> {
     public:
      explicit Refused(const grpc::Status& s) { Finish(s); }
      void OnDone() override { delete this; }
    };
    return new Refused(ToGrpc(caller.status()));
  }
  return new PredictReactor(this, ctx, resp, policy_.limits.max_predict_upload_bytes,
                            *std::move(caller));
}

absl::Status TrainingServiceImpl::RunPredict(const traind::v1::PredictRequest::Header& header,
                                             const std::string& csv_path,
                                             traind::v1::PredictResponse* resp) {
  absl::StatusOr<traind::v1::Job> job = reads_->GetJob(header.job_id());
  if (!job.ok()) return job.status();
  const std::string& state_dir = scheduler_->state_dir();
  absl::StatusOr<std::vector<ArtifactFile>> models =
      PredictionModels(state_dir, *job, header.has_task() ? header.task() : -1, header.ensemble());
  if (!models.ok()) return models.status();
  // The predictions become an artifact of the job: predict/<time>-<n>.csv.
  static std::atomic<int> counter{0};
  const std::string id =
      absl::StrCat(absl::FormatTime("%Y%m%dT%H%M%S", absl::Now(), absl::UTCTimeZone()), "-",
                   counter.fetch_add(1));
  const std::string dir = JobDir(state_dir, job->id()) + "/predict";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir, ": ", ec.message()));
  const std::string out = absl::StrCat(dir, "/", id, ".csv");
  const std::string partial = absl::StrCat(dir, "/.", id, ".csv");
  const std::string log = absl::StrCat(dir, "/.", id, ".log");
  LaunchRequest request;
  request.argv = {scheduler_->worker_path()};
  for (const ArtifactFile& m : *models) {
    request.argv.push_back("--predict");
    request.argv.push_back(m.path);
    resp->add_models(m.artifact.name());
  }
  request.argv.insert(request.argv.end(), {"--data", csv_path, "--out", partial});
  request.env = {"OMP_NUM_THREADS=1"};
  request.log_path = log;
  const bool want_gpu = job->spec().resources().device() == traind::v1::GPU;
  LogInfo("predict started job=%s models=%s", job->id(), absl::StrJoin(resp->models(), ","));
  std::string device;
  absl::StatusOr<ProcessExit> exit =
      scheduler_->RunProcess(request, absl::Hours(1), want_gpu, &device);
  resp->set_device(device);
  auto cleanup = [&] {
    std::filesystem::remove(partial, ec);
    std::filesystem::remove(log, ec);
  };
  if (!exit.ok()) {
    cleanup();
    return exit.status();
  }
  if (exit->signal != 0 || exit->exit_code != 0) {
    // The worker's one-line error, with the upload's name in place of the
    // server's copy.
    std::ifstream in(log);
    std::string line, error;
    while (std::getline(in, line)) {
      if (absl::StartsWith(line, "traind-worker: error: ")) error = line.substr(22);
    }
    cleanup();
    if (header.data_path().empty()) {
      error = absl::StrReplaceAll(
          error, {{csv_path, header.file_name().empty() ? "uploaded CSV" : header.file_name()}});
    }
    LogInfo("predict failed job=%s exit=%d signal=%d: %s", job->id(), exit->exit_code, exit->signal,
            error);
    if (error.empty()) {
      return absl::InternalError(absl::StrCat("the predict worker ended with exit code ",
                                              exit->exit_code, " signal ", exit->signal));
    }
    return absl::InvalidArgumentError(error);
  }
  std::filesystem::rename(partial, out, ec);
  std::filesystem::remove(log, ec);
  if (ec) return absl::InternalError(absl::StrCat(out, ": ", ec.message()));
  int64_t rows = -1;  // the header line
  {
    std::ifstream in(out);
    std::string line;
    while (std::getline(in, line)) ++rows;
  }
  absl::StatusOr<ArtifactFile> artifact =
      FindArtifact(state_dir, *job, absl::StrCat("predict/", id, ".csv"));
  if (!artifact.ok()) return artifact.status();
  *resp->mutable_artifact() = artifact->artifact;
  resp->set_rows(std::max<int64_t>(rows, 0));
  LogInfo("predict done job=%s rows=%d artifact=%s device=%s%s", job->id(), resp->rows(),
          resp->artifact().name(), device, want_gpu && device == "cpu" ? " (no idle GPU)" : "");
  return absl::OkStatus();
}

ServerUnaryReactor* TrainingServiceImpl::DeleteJob(CallbackServerContext* ctx,
                                                   const traind::v1::DeleteJobRequest* req,
                                                   traind::v1::DeleteJobResponse* resp) {
  absl::StatusOr<Caller> caller = Authorize(ctx, Rpc::kDeleteJob);
  if (!caller.ok()) return Reply(ctx, caller.status());
  if (absl::Status s = RequireJobId(req->job_id()); !s.ok()) return Reply(ctx, s);
  ServerUnaryReactor* reactor = ctx->DefaultReactor();
  deletions_->Post([this, reactor, req, resp, caller = *std::move(caller)] {
    absl::Status status = [&]() -> absl::Status {
      absl::StatusOr<traind::v1::Job> job = scheduler_->GetJob(req->job_id());
      if (!job.ok()) return job.status();
      if (absl::Status s = MayDelete(caller, job->owner(), job->id()); !s.ok()) return s;
      absl::StatusOr<int64_t> freed = scheduler_->Delete(req->job_id(), req->cancel());
      if (!freed.ok()) return freed.status();
      resp->set_freed_bytes(*freed);
      LogInfo("job deleted job=%s by=%s freed_bytes=%d", req->job_id(), caller.name, *freed);
      return absl::OkStatus();
    }();
    reactor->Finish(ToGrpc(status));
  });
  return reactor;
}

}  // namespace traind::server
