// gRPC adapters: translate the public TrainingService and the internal
// WorkerService into Scheduler calls. No scheduling or storage logic here.
//
// Reactions stay fast: what can wait on the disk (validating a spec against
// its data file, store reads) runs on a WorkPool that finishes the call.
#ifndef TRAIND_SERVER_API_SERVICES_H_
#define TRAIND_SERVER_API_SERVICES_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/config.h"
#include "server/core/admission.h"
#include "server/core/auth.h"
#include "server/core/policy.h"
#include "server/core/read_api.h"
#include "server/core/sessions.h"
#include "server/core/upload_slots.h"
#include "server/core/work_pool.h"
#include "server/datasets/dataset_catalog.h"
#include "server/metrics/server_metrics.h"
#include "server/scheduler/scheduler.h"
#include "traind/v1/training_service.grpc.pb.h"
#include "traind/v1/worker_service.grpc.pb.h"

namespace traind::server {

// WatchJob is raw (bytes in and out): its streams write each event's bytes,
// serialized once for all of them (core/published_event.h).
class TrainingServiceImpl final
    : public traind::v1::TrainingService::WithRawCallbackMethod_WatchJob<
          traind::v1::TrainingService::CallbackService> {
 public:
  // `reads` answers the read calls (shared with the HTTP side door);
  // `sessions` (may be null: no HTTP) mints dashboard logins. Both must
  // outlive the service.
  // `metrics` (may be null) counts open watch streams.
  // `datasets` (may be null: no datasets) stores and resolves datasets.
  TrainingServiceImpl(Scheduler* scheduler, ReadApi* reads, AccessPolicy policy,
                      SessionStore* sessions = nullptr, ServerMetrics* metrics = nullptr,
                      DatasetCatalog* datasets = nullptr);

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const traind::v1::SubmitJobRequest* req,
                                      traind::v1::Job* resp) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const traind::v1::GetJobRequest* req,
                                   traind::v1::Job* resp) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const traind::v1::ListJobsRequest* req,
                                     traind::v1::ListJobsResponse* resp) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const traind::v1::CancelJobRequest* req,
                                      traind::v1::Job* resp) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchJob(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* req) override;
  grpc::ServerUnaryReactor* GetJobResult(grpc::CallbackServerContext* ctx,
                                         const traind::v1::GetJobResultRequest* req,
                                         traind::v1::JobResult* resp) override;
  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* ctx,
                                        const traind::v1::ListDevicesRequest* req,
                                        traind::v1::ListDevicesResponse* resp) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx,
                                          const traind::v1::GetServerInfoRequest* req,
                                          traind::v1::ServerInfo* resp) override;
  grpc::ServerUnaryReactor* CreateDashboardLogin(grpc::CallbackServerContext* ctx,
                                                 const traind::v1::CreateDashboardLoginRequest* req,
                                                 traind::v1::DashboardLogin* resp) override;
  grpc::ServerUnaryReactor* ListArtifacts(grpc::CallbackServerContext* ctx,
                                          const traind::v1::ListArtifactsRequest* req,
                                          traind::v1::ListArtifactsResponse* resp) override;
  grpc::ServerWriteReactor<traind::v1::ArtifactChunk>* GetArtifact(
      grpc::CallbackServerContext* ctx, const traind::v1::GetArtifactRequest* req) override;
  grpc::ServerReadReactor<traind::v1::PredictRequest>* Predict(
      grpc::CallbackServerContext* ctx, traind::v1::PredictResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                      const traind::v1::DeleteJobRequest* req,
                                      traind::v1::DeleteJobResponse* resp) override;
  // Datasets (dataset_services.cc; DownloadDataset in artifact_services.cc).
  grpc::ServerUnaryReactor* PrepareDatasetUpload(
      grpc::CallbackServerContext* ctx, const traind::v1::PrepareDatasetUploadRequest* req,
      traind::v1::PrepareDatasetUploadResponse* resp) override;
  grpc::ServerReadReactor<traind::v1::UploadDatasetRequest>* UploadDataset(
      grpc::CallbackServerContext* ctx, traind::v1::Dataset* resp) override;
  grpc::ServerUnaryReactor* ListDatasets(grpc::CallbackServerContext* ctx,
                                         const traind::v1::ListDatasetsRequest* req,
                                         traind::v1::ListDatasetsResponse* resp) override;
  grpc::ServerUnaryReactor* GetDataset(grpc::CallbackServerContext* ctx,
                                       const traind::v1::GetDatasetRequest* req,
                                       traind::v1::Dataset* resp) override;
  grpc::ServerUnaryReactor* DeleteDataset(grpc::CallbackServerContext* ctx,
                                          const traind::v1::DeleteDatasetRequest* req,
                                          traind::v1::DeleteDatasetResponse* resp) override;
  grpc::ServerWriteReactor<traind::v1::ArtifactChunk>* DownloadDataset(
      grpc::CallbackServerContext* ctx, const traind::v1::GetDatasetRequest* req) override;

  // Finishes the calls still on the work pools; call after the server's
  // Shutdown and before it is destroyed.
  void FinishPendingWork() {
    validation_->Stop();
    store_reads_->Stop();
    files_->Stop();
    deletions_->Stop();
    predictions_->Stop();
  }

 private:
  // The caller of `ctx`, if it may call `rpc`.
  absl::StatusOr<Caller> Authorize(grpc::CallbackServerContext* ctx, Rpc rpc) const;
  // SubmitJob after its cheap checks, on the validation pool.
  // Runs `work` (which may read the store) on the store-reads pool and
  // finishes the call with its status.
  grpc::ServerUnaryReactor* OnStoreReads(grpc::CallbackServerContext* ctx,
                                         std::function<absl::Status()> work);
  // The same on the files pool (uploads, deletions of files).
  grpc::ServerUnaryReactor* OnFiles(grpc::CallbackServerContext* ctx,
                                    std::function<absl::Status()> work);
  absl::Status RequireDatasets() const;

  // Predict once its CSV is in `csv_path` (an upload, or the header's
  // confined data_path), on the predictions pool.
  absl::Status RunPredict(const traind::v1::PredictRequest::Header& header,
                          const std::string& csv_path, traind::v1::PredictResponse* resp);
  friend class PredictReactor;

  // Specs validated at once; store reads at once.
  static constexpr int kValidationThreads = 2;
  static constexpr int kStoreReadThreads = 2;
  static constexpr int kFileThreads = 2;
  static constexpr int kPredictThreads = 2;

  Scheduler* const scheduler_;
  ReadApi* const reads_;
  const AccessPolicy policy_;
  DatasetCatalog* const datasets_;
  const Admission admission_{scheduler_, &policy_, datasets_};
  SessionStore* const sessions_;
  ServerMetrics* const metrics_;
  // Last: their threads run work that uses the members above, and finish
  // it before these are destroyed.
  std::unique_ptr<WorkPool> validation_;
  std::unique_ptr<WorkPool> store_reads_;
  // Artifact reads (downloads, uploads to Predict).
  std::unique_ptr<WorkPool> files_;
  // Deletions (one at a time; a delete with cancel waits for the job's end).
  std::unique_ptr<WorkPool> deletions_;
  // Predict calls waiting for their worker process.
  std::unique_ptr<WorkPool> predictions_;
  // Predict and UploadDataset uploads in flight (capped, ended when idle).
  std::unique_ptr<UploadSlots> uploads_;
};

class WorkerServiceImpl final : public traind::v1::WorkerService::CallbackService {
 public:
  explicit WorkerServiceImpl(Scheduler* scheduler) : scheduler_(scheduler) {}

  grpc::ServerUnaryReactor* GetTask(grpc::CallbackServerContext* ctx,
                                    const traind::v1::GetTaskRequest* req,
                                    traind::v1::TaskAssignment* resp) override;
  grpc::ServerUnaryReactor* ReportEpoch(grpc::CallbackServerContext* ctx,
                                        const traind::v1::ReportEpochRequest* req,
                                        traind::v1::ReportResponse* resp) override;
  grpc::ServerUnaryReactor* ReportEvent(grpc::CallbackServerContext* ctx,
                                        const traind::v1::ReportEventRequest* req,
                                        traind::v1::ReportResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const traind::v1::HeartbeatRequest* req,
                                      traind::v1::ReportResponse* resp) override;
  grpc::ServerUnaryReactor* Rendezvous(grpc::CallbackServerContext* ctx,
                                       const traind::v1::RendezvousRequest* req,
                                       traind::v1::RendezvousResponse* resp) override;

 private:
  // Runs `call` now, or once the launch of the credentials' attempt is
  // recorded (Scheduler::AfterLaunchRecorded): never waits.
  void Call(const traind::v1::AttemptCredentials& c, std::function<void()> call);
  // Finishes a report's call once what it reported is stored.
  void FinishOnceStored(grpc::ServerUnaryReactor* reactor, const absl::StatusOr<bool>& stop,
                        traind::v1::ReportResponse* resp);

  Scheduler* const scheduler_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_API_SERVICES_H_
