#include "server/core/read_api.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "server/devices/cpu_info.h"

namespace traind::server {

using google::protobuf::util::TimeUtil;

namespace {

absl::Status RequireJobId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("job_id: required");
  return absl::OkStatus();
}

}  // namespace

ReadApi::ReadApi(Scheduler* scheduler, ServerDescription description)
    : scheduler_(scheduler), description_(std::move(description)) {
  listen_addresses_ = description_.listen_addresses;
  if (description_.http_pending) listen_addresses_known_ = false;
  for (const std::string& a : listen_addresses_) {
    if (absl::EndsWith(a, ":0") && !absl::StartsWith(a, "unix")) listen_addresses_known_ = false;
  }
}

void ReadApi::SetListenAddresses(std::vector<std::string> addresses) {
  absl::MutexLock lock(&mu_);
  listen_addresses_ = std::move(addresses);
  listen_addresses_known_ = true;
}

void ReadApi::SetHttpUrl(std::string url) {
  absl::MutexLock lock(&mu_);
  http_url_ = std::move(url);
}

std::string ReadApi::http_url() {
  absl::MutexLock lock(&mu_);
  return http_url_;
}

std::optional<traind::v1::Job> ReadApi::GetJobInMemory(const std::string& job_id) {
  return scheduler_->GetJobInMemory(job_id);
}

absl::StatusOr<traind::v1::Job> ReadApi::GetJob(const std::string& job_id) {
  if (absl::Status s = RequireJobId(job_id); !s.ok()) return s;
  if (std::optional<traind::v1::Job> job = scheduler_->GetJobInMemory(job_id); job.has_value()) {
    return *std::move(job);
  }
  return scheduler_->GetJob(job_id);
}

absl::StatusOr<traind::v1::ListJobsResponse> ReadApi::ListJobs(
    const traind::v1::ListJobsRequest& req) {
  return scheduler_->ListJobs(req);
}

absl::StatusOr<traind::v1::JobResult> ReadApi::GetJobResult(const std::string& job_id) {
  if (absl::Status s = RequireJobId(job_id); !s.ok()) return s;
  if (std::optional<traind::v1::Job> job = scheduler_->GetJobInMemory(job_id); job.has_value()) {
    return job->result();
  }
  return scheduler_->GetResult(job_id);
}

traind::v1::ListDevicesResponse ReadApi::ListDevices() {
  traind::v1::ListDevicesResponse resp;
  CpuInfo cpu = ReadCpuInfo();
  SchedulerStats stats = scheduler_->Stats();
  traind::v1::Device* d = resp.add_devices();
  d->set_id("cpu");
  d->set_kind(traind::v1::CPU);
  d->set_name(cpu.model);
  d->set_slots(description_.cpu_slots);
  d->set_slots_in_use(stats.tasks_running);
  d->set_state(stats.tasks_running > 0 ? traind::v1::Device::BUSY : traind::v1::Device::IDLE);
  d->set_cores(cpu.cores);
  d->set_memory_total_bytes(cpu.memory_total_bytes);
  d->set_memory_available_bytes(cpu.memory_available_bytes);
  std::string unavailable;
  for (const GpuPool::Gpu& g : scheduler_->Gpus(&unavailable)) {
    traind::v1::Device* gd = resp.add_devices();
    gd->set_id(absl::StrCat("gpu", g.index));
    gd->set_kind(traind::v1::GPU);
    gd->set_name(g.last.name);
    gd->set_uuid(g.last.uuid);
    gd->set_memory_total_bytes(g.last.total_bytes);
    gd->set_memory_available_bytes(g.last.total_bytes - g.last.used_bytes);
    switch (g.state) {
      case GpuPool::State::kIdle:
        gd->set_state(traind::v1::Device::IDLE);
        break;
      case GpuPool::State::kBusy:
        gd->set_state(traind::v1::Device::BUSY);
        gd->set_worker_pid(g.pid);
        break;
      case GpuPool::State::kDraining:
        gd->set_state(traind::v1::Device::DRAINING);
        gd->set_worker_pid(g.pid);
        break;
      case GpuPool::State::kUnhealthy:
        gd->set_state(traind::v1::Device::UNHEALTHY);
        gd->set_note(g.note);
        break;
    }
  }
  std::string why;
  if (scheduler_->UsableGpus(&why) == 0) resp.set_gpu_note(why);
  return resp;
}

traind::v1::ServerInfo ReadApi::GetServerInfo() {
  traind::v1::ServerInfo resp;
  SchedulerStats stats = scheduler_->Stats();
  resp.set_version(description_.version);
  *resp.mutable_start_time() =
      TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(description_.start_time));
  resp.set_state_dir(description_.state_dir);
  resp.set_launcher(description_.launcher);
  for (const std::string& root : description_.data_roots) resp.add_data_roots(root);
  resp.set_max_dataset_bytes(description_.max_dataset_bytes);
  resp.set_dataset_quota_bytes(description_.dataset_quota_bytes);
  resp.set_state_dir_bytes(scheduler_->state_dir_bytes());
  if (absl::Status store = scheduler_->StoreStatus(); !store.ok()) {
    resp.set_store_error(std::string(store.message()));
  }
  {
    // Between BuildAndStart and SetListenAddresses (microseconds at start
    // up) the ports of ":0" addresses are not known yet: wait for them.
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&listen_addresses_known_), absl::Seconds(2));
    for (const std::string& a : listen_addresses_) resp.add_listen_addresses(a);
    resp.set_http_url(http_url_);
  }
  resp.set_cpu_slots(description_.cpu_slots);
  resp.set_worker_threads(description_.worker_threads);
  resp.set_jobs_active(stats.jobs_active);
  resp.set_tasks_running(stats.tasks_running);
  resp.set_tasks_queued(stats.tasks_queued);
  return resp;
}

}  // namespace traind::server
