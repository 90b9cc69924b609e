// The worker's side of WorkerService: one attempt's calls to traind, with
// their deadlines, retries and backoff (call_retry.h).
//
// gRPC stays in daemon_client.cc: this header names only the service's
// messages.
#ifndef TRAIND_WORKER_DAEMON_CLIENT_H_
#define TRAIND_WORKER_DAEMON_CLIENT_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "traind/v1/worker_service.pb.h"
#include "worker/epoch_reporter.h"

namespace traind::worker {

// Every call carries the attempt's credentials. Errors are the call's gRPC
// status as an absl::Status (same code, same message). An answer that says
// stop (the job is being cancelled) is remembered: StopRequested().
//
// Thread-safe: the epoch reporter's thread and the training thread call it
// at the same time.
class DaemonClient final : public EpochSink {
 public:
  // A client of the WorkerService at `server` (a gRPC target, e.g.
  // "unix:/run/traind/worker.sock"). Connects on the first call.
  static std::unique_ptr<DaemonClient> Create(const std::string& server,
                                              traind::v1::AttemptCredentials credentials);
  ~DaemonClient() override;
  DaemonClient(const DaemonClient&) = delete;
  DaemonClient& operator=(const DaemonClient&) = delete;

  const traind::v1::AttemptCredentials& credentials() const { return credentials_; }

  // The attempt's assignment: one try, waiting for the daemon at most 10 s.
  absl::Status GetTask(traind::v1::TaskAssignment* task);

  // ReportEvent with kReportRetry; each try has a 10 s deadline.
  absl::Status ReportEvent(traind::v1::ReportEventRequest req);

  // EpochSink: ReportEpoch with kReportRetry (sets req's credentials).
  absl::Status ReportEpochs(traind::v1::ReportEpochRequest* req) override;
  // EpochSink: one Heartbeat, 5 s deadline; its failure is ignored (the
  // next one follows).
  void Heartbeat() override;

  // Multi-GPU: rank 0 posts `posted` (its NCCL unique id); every rank gets
  // rank 0's id. Retries with kRendezvousRetry while the daemon is
  // unreachable; waits for rank 0 at most `timeout` in all.
  absl::StatusOr<std::string> Rendezvous(int world_size, const std::string& posted,
                                         absl::Duration timeout);

  // True once an answer of the daemon said stop.
  bool StopRequested() const { return stop_.load(std::memory_order_relaxed); }

 private:
  struct Rpc;  // the channel and stub (daemon_client.cc)

  DaemonClient(std::unique_ptr<Rpc> rpc, traind::v1::AttemptCredentials credentials);

  const std::unique_ptr<Rpc> rpc_;
  const traind::v1::AttemptCredentials credentials_;
  std::atomic<bool> stop_{false};
};

}  // namespace traind::worker

#endif  // TRAIND_WORKER_DAEMON_CLIENT_H_
