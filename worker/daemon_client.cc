#include "worker/daemon_client.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "grpcpp/grpcpp.h"
#include "traind/v1/worker_service.grpc.pb.h"
#include "worker/call_retry.h"

namespace traind::worker {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

void SleepFor(absl::Duration d) { std::this_thread::sleep_for(absl::ToChronoMilliseconds(d)); }

std::chrono::system_clock::time_point In(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

}  // namespace

struct DaemonClient::Rpc {
  std::unique_ptr<traind::v1::WorkerService::Stub> stub;
};

std::unique_ptr<DaemonClient> DaemonClient::Create(const std::string& server,
                                                   traind::v1::AttemptCredentials credentials) {
  auto rpc = std::make_unique<Rpc>();
  // A daemon on TCP with TLS (launcher: slurm) names the certificate to
  // trust in TRAIND_SERVER_CA (a PEM file); a unix socket needs none.
  std::shared_ptr<grpc::ChannelCredentials> channel = grpc::InsecureChannelCredentials();
  if (const char* ca = std::getenv("TRAIND_SERVER_CA"); ca != nullptr && *ca != '\0') {
    std::ifstream in(ca);
    std::stringstream pem;
    pem << in.rdbuf();
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = pem.str();
    channel = grpc::SslCredentials(tls);
  }
  rpc->stub = traind::v1::WorkerService::NewStub(grpc::CreateChannel(server, channel));
  return std::unique_ptr<DaemonClient>(new DaemonClient(std::move(rpc), std::move(credentials)));
}

DaemonClient::DaemonClient(std::unique_ptr<Rpc> rpc, traind::v1::AttemptCredentials credentials)
    : rpc_(std::move(rpc)), credentials_(std::move(credentials)) {}

DaemonClient::~DaemonClient() = default;

absl::Status DaemonClient::GetTask(traind::v1::TaskAssignment* task) {
  traind::v1::GetTaskRequest req;
  *req.mutable_credentials() = credentials_;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(10)));
  ctx.set_wait_for_ready(true);
  return FromGrpc(rpc_->stub->GetTask(&ctx, req, task));
}

absl::Status DaemonClient::ReportEvent(traind::v1::ReportEventRequest req) {
  *req.mutable_credentials() = credentials_;
  return CallWithRetry(
      kReportRetry,
      [&] {
        grpc::ClientContext ctx;
        ctx.set_deadline(In(absl::Seconds(10)));
        ctx.set_wait_for_ready(true);
        traind::v1::ReportResponse resp;
        grpc::Status s = rpc_->stub->ReportEvent(&ctx, req, &resp);
        if (s.ok() && resp.stop()) stop_.store(true);
        return FromGrpc(s);
      },
      SleepFor, [] { return false; });
}

absl::Status DaemonClient::ReportEpochs(traind::v1::ReportEpochRequest* req) {
  *req->mutable_credentials() = credentials_;
  return CallWithRetry(
      kReportRetry,
      [&] {
        grpc::ClientContext ctx;
        ctx.set_deadline(In(absl::Seconds(10)));
        ctx.set_wait_for_ready(true);
        traind::v1::ReportResponse resp;
        grpc::Status s = rpc_->stub->ReportEpoch(&ctx, *req, &resp);
        if (s.ok() && resp.stop()) stop_.store(true);
        return FromGrpc(s);
      },
      SleepFor, [] { return false; });
}

void DaemonClient::Heartbeat() {
  traind::v1::HeartbeatRequest req;
  *req.mutable_credentials() = credentials_;
  traind::v1::ReportResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(5)));
  if (rpc_->stub->Heartbeat(&ctx, req, &resp).ok() && resp.stop()) stop_.store(true);
}

absl::StatusOr<std::string> DaemonClient::Rendezvous(int world_size, const std::string& posted,
                                                     absl::Duration timeout) {
  traind::v1::RendezvousRequest req;
  *req.mutable_credentials() = credentials_;
  req.set_world_size(world_size);
  req.set_unique_id(posted);
  const auto deadline = In(timeout);
  traind::v1::RendezvousResponse resp;
  absl::Status s = CallWithRetry(
      kRendezvousRetry,
      [&] {
        grpc::ClientContext ctx;
        ctx.set_deadline(deadline);
        ctx.set_wait_for_ready(true);
        resp.Clear();
        return FromGrpc(rpc_->stub->Rendezvous(&ctx, req, &resp));
      },
      SleepFor, [&] { return std::chrono::system_clock::now() >= deadline; });
  if (!s.ok()) return s;
  return resp.unique_id();
}

}  // namespace traind::worker
