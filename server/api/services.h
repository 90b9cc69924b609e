// gRPC adapters: translate the public TrainingService and the internal
// WorkerService into Scheduler calls. No scheduling or storage logic here.
#ifndef TRAIND_SERVER_API_SERVICES_H_
#define TRAIND_SERVER_API_SERVICES_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/scheduler/scheduler.h"
#include "traind/v1/training_service.grpc.pb.h"
#include "traind/v1/worker_service.grpc.pb.h"

namespace traind::server {

struct ServerDescription {
  std::string version;
  std::string state_dir;
  std::vector<std::string> listen_addresses;
  int cpu_slots = 1;
  int worker_threads = 1;
  absl::Time start_time;
};

class TrainingServiceImpl final : public traind::v1::TrainingService::CallbackService {
 public:
  TrainingServiceImpl(Scheduler* scheduler, ServerDescription description);

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
  grpc::ServerWriteReactor<traind::v1::JobEvent>* WatchJob(
      grpc::CallbackServerContext* ctx, const traind::v1::WatchJobRequest* req) override;
  grpc::ServerUnaryReactor* GetJobResult(grpc::CallbackServerContext* ctx,
                                         const traind::v1::GetJobResultRequest* req,
                                         traind::v1::JobResult* resp) override;
  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* ctx,
                                        const traind::v1::ListDevicesRequest* req,
                                        traind::v1::ListDevicesResponse* resp) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx,
                                          const traind::v1::GetServerInfoRequest* req,
                                          traind::v1::ServerInfo* resp) override;

 private:
  Scheduler* const scheduler_;
  const ServerDescription description_;
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

 private:
  Scheduler* const scheduler_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_API_SERVICES_H_
