// ReadApi: the answers of the public read calls, computed once for every
// transport (gRPC's TrainingService and the HTTP side door), so both
// return the same messages.
//
// Calls marked "may read the store" can wait on the disk: gRPC runs them on
// a work pool, the HTTP server on its own connection threads.
//
// Thread-safety: thread-safe.
#ifndef TRAIND_SERVER_CORE_READ_API_H_
#define TRAIND_SERVER_CORE_READ_API_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/scheduler/scheduler.h"
#include "traind/v1/training_service.pb.h"

namespace traind::server {

struct ServerDescription {
  std::string version;
  std::string state_dir;
  std::vector<std::string> listen_addresses;
  int cpu_slots = 1;
  int worker_threads = 1;
  absl::Time start_time;
  // The HTTP side door is being started: GetServerInfo waits (up to 2 s)
  // for SetListenAddresses, which main calls once http_url is known too.
  bool http_pending = false;
  // ServerInfo.launcher.
  std::string launcher = "local";
  std::vector<std::string> data_roots;
  int64_t max_dataset_bytes = 0;
  int64_t dataset_quota_bytes = 0;
};

class ReadApi final {
 public:
  ReadApi(Scheduler* scheduler, ServerDescription description);

  // The job if it needs no store read (live, or finished recently).
  std::optional<traind::v1::Job> GetJobInMemory(const std::string& job_id);
  // INVALID_ARGUMENT without an id, NOT_FOUND for an unknown one. May read
  // the store.
  absl::StatusOr<traind::v1::Job> GetJob(const std::string& job_id);
  // May read the store.
  absl::StatusOr<traind::v1::ListJobsResponse> ListJobs(const traind::v1::ListJobsRequest& req);
  // May read the store.
  absl::StatusOr<traind::v1::JobResult> GetJobResult(const std::string& job_id);
  traind::v1::ListDevicesResponse ListDevices();
  traind::v1::ServerInfo GetServerInfo();

  // The listen addresses GetServerInfo reports, with the ports the kernel
  // chose for ":0" (known only once the servers listen); GetServerInfo waits
  // (up to 2 s) for them when an address ends in ":0".
  void SetListenAddresses(std::vector<std::string> addresses);
  // The HTTP side door's URL ("" when off).
  void SetHttpUrl(std::string url);
  std::string http_url();

  Scheduler* scheduler() const { return scheduler_; }
  const ServerDescription& description() const { return description_; }

 private:
  Scheduler* const scheduler_;
  const ServerDescription description_;
  absl::Mutex mu_;
  std::vector<std::string> listen_addresses_ ABSL_GUARDED_BY(mu_);
  bool listen_addresses_known_ ABSL_GUARDED_BY(mu_) = true;
  std::string http_url_ ABSL_GUARDED_BY(mu_);
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_CORE_READ_API_H_
