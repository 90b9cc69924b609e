// traind's daemon: what `traind` runs once its settings are parsed. Create
// prepares the state directory, store, launchers and scheduler; Start
// listens and starts scheduling; GracefulStop is the stop on SIGTERM
// (unfinished tasks resume on the next start).
#ifndef TRAIND_SERVER_DAEMON_H_
#define TRAIND_SERVER_DAEMON_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/api/reflection.h"
#include "server/api/services.h"
#include "server/config.h"
#include "server/core/auth.h"
#include "server/core/policy.h"
#include "server/core/read_api.h"
#include "server/core/sessions.h"
#include "server/daemon_threads.h"
#include "server/devices/device_probe.h"
#include "server/http/http_server.h"
#include "server/launch/local_launcher.h"
#include "server/launch/slurm_launcher.h"
#include "server/metrics/server_metrics.h"
#include "server/scheduler/scheduler.h"
#include "server/store/job_store.h"

namespace traind::server {

class Daemon final {
 public:
  // Takes the state directory (its mode and lock), checks the data roots,
  // tokens and TLS files, opens (and checks) the store, probes the worker,
  // starts the worker zygote or the Slurm launcher and recovers the jobs.
  // The error says what stopped it: kInvalidArgument for a bad setting
  // (traind exits 2), any other code for a daemon that cannot start (1).
  static absl::StatusOr<std::unique_ptr<Daemon>> Create(ServerConfig config);

  // Listens (worker service, public API, HTTP side door), starts the
  // scheduler, the watchdog and retention, and tells systemd READY=1.
  absl::Status Start();

  // Refuses new work, turns health NOT_SERVING, drains the workers (up to
  // stop_grace), then stops the servers and releases the state directory.
  void GracefulStop();

  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

 private:
  explicit Daemon(ServerConfig config) : config_(std::move(config)) {}
  absl::Status Init();

  // Detaches the metrics from the scheduler before the scheduler goes.
  struct MetricsAttachment {
    ServerMetrics* metrics = nullptr;
    ~MetricsAttachment() {
      if (metrics) metrics->Detach();
    }
  };

  // In the order they are made; destroyed in reverse.
  ServerConfig config_;
  mode_t dir_mode_ = 0700;
  std::string state_dir_;
  int lock_fd_ = -1;
  std::optional<DataRoots> data_roots_;
  std::shared_ptr<const TokenStore> tokens_;
  std::shared_ptr<grpc::ServerCredentials> tcp_credentials_;
  std::string worker_path_;
  std::vector<std::string> listen_;
  bool slurm_ = false;
  std::string worker_address_;
  std::unique_ptr<JobStore> store_;
  // After store_: it records datasets there.
  std::unique_ptr<DatasetCatalog> datasets_;
  absl::Time start_time_;
  SchedulerOptions scheduler_options_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::vector<std::string> backends_;
  std::unique_ptr<DeviceProbe> gpu_probe_;
  std::unique_ptr<LocalLauncher> launcher_;
  std::unique_ptr<SlurmLauncher> slurm_launcher_;
  std::unique_ptr<Scheduler> scheduler_;
  MetricsAttachment metrics_attachment_;
  std::unique_ptr<WorkerServiceImpl> worker_service_;
  std::unique_ptr<grpc::Server> worker_server_;
  std::string http_listen_;
  std::unique_ptr<ReadApi> reads_;
  std::unique_ptr<SessionStore> sessions_;
  AccessPolicy policy_;
  std::unique_ptr<TrainingServiceImpl> training_service_;
  std::shared_ptr<const PublicSchema> schema_;
  std::unique_ptr<ReflectionV1> reflection_v1_;
  std::unique_ptr<ReflectionV1Alpha> reflection_v1alpha_;
  std::unique_ptr<grpc::Server> public_server_;
  std::atomic<bool> draining_{false};
  std::unique_ptr<HttpServer> http_;
  grpc::HealthCheckServiceInterface* health_ = nullptr;
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<RetentionSweeper> sweeper_;
  std::unique_ptr<DatasetSweeper> dataset_sweeper_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_DAEMON_H_
