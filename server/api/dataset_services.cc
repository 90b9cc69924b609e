// TrainingService: the dataset calls — PrepareDatasetUpload, UploadDataset,
// ListDatasets, GetDataset, DeleteDataset (DownloadDataset streams like an
// artifact: artifact_services.cc). Each is the DatasetCatalog's work on the
// files pool; nothing here decides anything.
#include <memory>
#include <utility>

#include "server/api/grpc_reply.h"
#include "server/api/services.h"

namespace traind::server {

using grpc::CallbackServerContext;
using grpc::ServerUnaryReactor;
using traind::v1::UploadDatasetRequest;

namespace {

// UploadDataset: the header starts (or resumes) the upload, each data
// message is appended on the files pool, one message at a time; its bytes
// go to the file's staging buffer and, moved, to the profile's bounded
// queue (so an upload holds a few MiB however large the file). The end of
// the stream verifies, profiles and records the dataset. A call that ends
// early leaves the bytes received, to be resumed.
class UploadReactor final : public grpc::ServerReadReactor<UploadDatasetRequest> {
 public:
  UploadReactor(DatasetCatalog* catalog, WorkPool* files, UploadSlots* uploads,
                absl::Duration idle_timeout, CallbackServerContext* ctx, Caller caller,
                traind::v1::Dataset* resp)
      : catalog_(catalog), files_(files), ctx_(ctx), caller_(std::move(caller)), resp_(resp) {
    absl::StatusOr<std::unique_ptr<UploadSlots::Slot>> slot =
        uploads->Acquire(caller_.name, "UploadDataset", [this, idle_timeout] {
          Finish(grpc::Status(
              grpc::StatusCode::DEADLINE_EXCEEDED,
              absl::StrCat("the upload sent nothing for ", absl::FormatDuration(idle_timeout),
                           " (limits.upload_idle_timeout); its bytes are kept to be resumed")));
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
    if (!ok) {                             // every message read, or the client went away
      if (ctx_->IsCancelled()) {
        Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                            "the upload was cancelled; its bytes are kept to be resumed"));
        return;
      }
      if (upload_ == nullptr) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "header: the first message must be the header"));
        return;
      }
      files_->Post([this] {
        absl::StatusOr<traind::v1::Dataset> d = upload_->Finish();
        if (d.ok()) *resp_ = *std::move(d);
        Finish(ToGrpc(d.status()));
      });
      return;
    }
    if (upload_ == nullptr) {
      if (!message_.has_header()) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "header: the first message must be the header"));
        return;
      }
      files_->Post([this] {
        traind::v1::Dataset recorded;
        absl::StatusOr<std::unique_ptr<DatasetCatalog::Upload>> up =
            catalog_->StartUpload(caller_, message_.header(), &recorded);
        if (!up.ok()) {
          Finish(ToGrpc(up.status()));
        } else if (*up == nullptr) {
          *resp_ = std::move(recorded);  // traind had the bytes: nothing to read
          Finish(grpc::Status::OK);
        } else {
          upload_ = *std::move(up);
          Read();
        }
      });
      return;
    }
    if (!message_.has_data()) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "data: every message after the header carries the file's bytes"));
      return;
    }
    files_->Post([this] {
      if (absl::Status s = upload_->Append(message_.mutable_data()); !s.ok()) {
        Finish(ToGrpc(s));
        return;
      }
      Read();
    });
  }

  void OnDone() override { delete this; }

 private:
  void Read() {
    slot_->WaitingForMessage();
    StartRead(&message_);
  }

  DatasetCatalog* const catalog_;
  WorkPool* const files_;
  CallbackServerContext* const ctx_;
  const Caller caller_;
  traind::v1::Dataset* const resp_;
  UploadDatasetRequest message_;
  std::unique_ptr<DatasetCatalog::Upload> upload_;
  std::unique_ptr<UploadSlots::Slot> slot_;  // last: released first
};

}  // namespace

absl::Status TrainingServiceImpl::RequireDatasets() const {
  if (datasets_ == nullptr) {
    return absl::FailedPreconditionError("this traind stores no datasets");
  }
  return absl::OkStatus();
}

ServerUnaryReactor* TrainingServiceImpl::OnFiles(CallbackServerContext* ctx,
                                                 std::function<absl::Status()> work) {
  ServerUnaryReactor* reactor = ctx->DefaultReactor();
  files_->Post([reactor, work = std::move(work)] { reactor->Finish(ToGrpc(work())); });
  return reactor;
}

ServerUnaryReactor* TrainingServiceImpl::PrepareDatasetUpload(
    CallbackServerContext* ctx, const traind::v1::PrepareDatasetUploadRequest* req,
    traind::v1::PrepareDatasetUploadResponse* resp) {
  absl::StatusOr<Caller> caller = Authorize(ctx, Rpc::kPrepareDatasetUpload);
  if (!caller.ok()) return Reply(ctx, caller.status());
  if (absl::Status s = RequireDatasets(); !s.ok()) return Reply(ctx, s);
  return OnFiles(ctx, [this, req, resp, caller = *std::move(caller)]() -> absl::Status {
    absl::StatusOr<traind::v1::PrepareDatasetUploadResponse> r = datasets_->Prepare(caller, *req);
    if (r.ok()) *resp = *std::move(r);
    return r.status();
  });
}

grpc::ServerReadReactor<UploadDatasetRequest>* TrainingServiceImpl::UploadDataset(
    CallbackServerContext* ctx, traind::v1::Dataset* resp) {
  absl::StatusOr<Caller> caller = Authorize(ctx, Rpc::kUploadDataset);
  absl::Status s = caller.ok() ? RequireDatasets() : caller.status();
  if (!s.ok()) {
    class Refused final : public grpc::ServerReadReactor<UploadDatasetRequest> {
     public:
      explicit Refused(const absl::Status& s) { Finish(ToGrpc(s)); }
      void OnDone() override { delete this; }
    };
    return new Refused(s);
  }
  return new UploadReactor(datasets_, files_.get(), uploads_.get(),
                           policy_.limits.upload_idle_timeout, ctx, *std::move(caller), resp);
}

ServerUnaryReactor* TrainingServiceImpl::ListDatasets(CallbackServerContext* ctx,
                                                      const traind::v1::ListDatasetsRequest* req,
                                                      traind::v1::ListDatasetsResponse* resp) {
  absl::StatusOr<Caller> caller = Authorize(ctx, Rpc::kListDatasets);
  if (!caller.ok()) return Reply(ctx, caller.status());
  if (absl::Status s = RequireDatasets(); !s.ok()) return Reply(ctx, s);
  return OnStoreReads(ctx, [this, req, resp, caller = *std::move(caller)]() -> absl::Status {
    absl::StatusOr<std::vector<traind::v1::Dataset>> list = datasets_->List(caller, *req);
    if (!list.ok()) return list.status();
    for (traind::v1::Dataset& d : *list) *resp->add_datasets() = std::move(d);
    return absl::OkStatus();
  });
}

ServerUnaryReactor* TrainingServiceImpl::GetDataset(CallbackServerContext* ctx,
                                                    const traind::v1::GetDatasetRequest* req,
                                                    traind::v1::Dataset* resp) {
  absl::StatusOr<Caller> caller = Authorize(ctx, Rpc::kGetDataset);
  if (!caller.ok()) return Reply(ctx, caller.status());
  if (absl::Status s = RequireDatasets(); !s.ok()) return Reply(ctx, s);
  return OnStoreReads(ctx, [this, req, resp, caller = *std::move(caller)]() -> absl::Status {
    absl::StatusOr<traind::v1::Dataset> d = datasets_->Get(caller, *req);
    if (d.ok()) *resp = *std::move(d);
    return d.status();
  });
}

ServerUnaryReactor* TrainingServiceImpl::DeleteDataset(CallbackServerContext* ctx,
                                                       const traind::v1::DeleteDatasetRequest* req,
                                                       traind::v1::DeleteDatasetResponse* resp) {
  absl::StatusOr<Caller> caller = Authorize(ctx, Rpc::kDeleteDataset);
  if (!caller.ok()) return Reply(ctx, caller.status());
  if (absl::Status s = RequireDatasets(); !s.ok()) return Reply(ctx, s);
  return OnFiles(ctx, [this, req, resp, caller = *std::move(caller)]() -> absl::Status {
    absl::StatusOr<std::vector<traind::v1::Dataset>> gone = datasets_->Delete(caller, *req);
    if (!gone.ok()) return gone.status();
    for (traind::v1::Dataset& d : *gone) *resp->add_deleted() = std::move(d);
    return absl::OkStatus();
  });
}

}  // namespace traind::server
