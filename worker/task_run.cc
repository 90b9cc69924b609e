#include "worker/task_run.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status.h"
#include "data/dataset.h"
#include "data/split.h"
#include "spec/task_rows.h"
#include "spec/validation.h"
#include "traind/v1/worker_service.pb.h"
#include "worker/attempt_timeline.h"
#include "worker/daemon_client.h"
#include "worker/daemon_fit_observer.h"
#include "worker/engine/fit.h"
#include "worker/epoch_reporter.h"
#include "worker/exit_code.h"
#include "worker/gpu_context.h"
#include "worker/process_setup.h"
#include "worker/stop_signal.h"
#include "worker/task_failure.h"

namespace traind::worker {

using traind::v1::Failure;

int RunTaskUnderDaemon(const TaskRunOptions& o) {
  // Never destroyed, as the client below: the process _exits.
  AttemptTimeline& timeline = *new AttemptTimeline(AttemptTimeline::FromEnvironment());
  timeline.Mark("main");
  const char* secret = std::getenv("TRAIND_WORKER_SECRET");
  if (secret == nullptr || *secret == '\0') {
    LogLine("error: TRAIND_WORKER_SECRET is not set (traind-worker is started by traind)");
    return kUsage;
  }
  const int task = o.task, attempt = o.attempt, rank = o.rank, world_size = o.world_size;
  traind::v1::AttemptCredentials creds;
  creds.set_job_id(o.job);
  creds.set_task(task);
  creds.set_attempt(attempt);
  creds.set_secret(secret);
  creds.set_rank(rank);
  unsetenv("TRAIND_WORKER_SECRET");
  const std::string where =
      world_size > 1 ? absl::StrFormat("job=%s task=%d attempt=%d rank=%d/%d", o.job, task, attempt,
                                       rank, world_size)
                     : absl::StrFormat("job=%s task=%d attempt=%d", o.job, task, attempt);

  // Never destroyed: the worker _exits right after this function returns,
  // once everything after them here (the device, the communicator) is
  // released and every report has been acknowledged. Joining the reporter's
  // thread and closing the channel took 4-100 ms per fold for nothing.
  DaemonClient& client = *DaemonClient::Create(o.server, creds).release();
  EpochReporter& reporter = *new EpochReporter(&client);
  DaemonFitObserver& observer = *new DaemonFitObserver(&client, &reporter);
  observer.set_timeline(&timeline);

  traind::v1::TaskAssignment assignment;
  if (absl::Status s = client.GetTask(&assignment); !s.ok()) {
    LogLine(absl::StrCat("error: cannot fetch the task from ", o.server, ": ", s.message()));
    return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ? kUnreachable : kFailed;
  }
  timeline.Mark("get_task");
  LogLine(absl::StrCat("task fetched ", where, " fold=", assignment.fold(), " pid=", getpid()));
  if (assignment.heartbeat_interval_ms() > 0) {
    reporter.set_heartbeat_every(std::chrono::milliseconds(assignment.heartbeat_interval_ms()));
  }
  reporter.Start();

  auto fail = [&](const absl::Status& s) {
    (void)reporter.Flush();  // the epochs before the failure, then the failure
    traind::v1::ReportEventRequest req;
    Failure* f = req.mutable_failed()->mutable_failure();
    f->set_reason(ReasonOf(s));
    f->set_message(std::string(s.message()));
    if (f->reason() == Failure::CANCELLED && PreemptSignalReceived()) {
      f->set_reason(Failure::PREEMPTED);
      f->set_message(absl::StrCat("stopped by SIGUSR2 (Slurm: a time limit ahead or a ",
                                  "preemption) after a checkpoint: ", s.message()));
    }
    LogLine(absl::StrCat("task failed ", where, " reason=", Failure::Reason_Name(f->reason()), ": ",
                         s.message()));
    absl::Status rs = client.ReportEvent(req);
    if (!rs.ok()) LogLine(absl::StrCat("error: cannot report the failure: ", rs.message()));
    return f->reason() == Failure::CANCELLED ? kCancelled : kFailed;
  };

  if (assignment.rank() != rank || std::max(assignment.world_size(), 1) != world_size) {
    return fail(absl::InternalError(
        absl::StrFormat("started as rank %d of %d, but traind assigned rank %d of %d", rank,
                        world_size, assignment.rank(), assignment.world_size())));
  }
  const traind::v1::JobSpec& spec = assignment.spec();
  // The task of `spec` (in a search: of the trial's spec) this one runs.
  const int spec_task = assignment.has_spec_task() ? assignment.spec_task() : task;
  observer.PauseAfter(assignment.pause_after_epoch());
  absl::StatusOr<data::Dataset> data = data::LoadDataset(spec, DecodeThreads());
  if (!data.ok()) return fail(data.status());
  timeline.Mark("load");
  absl::StatusOr<data::FoldRows> split = spec::RowsForTask(spec, *data, spec_task);
  if (!split.ok()) return fail(split.status());
  timeline.Mark("split");
  const data::FoldRows& rows = *split;

  // Released (communicator, then backend) when this function returns, on
  // every path out of here: before the process exits.
  GpuContext gpu;
  if (spec.resources().device() == traind::v1::GPU) {
    if (absl::Status s = OpenGpu(spec, world_size > 1 ? rank : 0, &gpu); !s.ok()) return fail(s);
    if (world_size > 1) {
      absl::Status s = ConnectRanks(
          rank, world_size,
          [&](const std::string& posted) {
            return client.Rendezvous(world_size, posted, kRankTimeout);
          },
          &gpu);
      if (!s.ok()) return fail(s);
    }
  } else if (world_size > 1) {
    return fail(traind::InvalidSpecError(
        "resources: several ranks need resources.device: gpu (one rank per GPU)"));
  }
  if (rank == 0) {
    traind::v1::ReportEventRequest req;
    traind::v1::TaskStarted* st = req.mutable_started();
    st->set_train_rows(static_cast<int64_t>(rows.train.size()));
    st->set_val_rows(static_cast<int64_t>(rows.val.size()));
    for (const std::string& c : data->classes) st->add_classes(c);
    st->set_epochs_total(spec.training().epochs());
    if (absl::Status rs = client.ReportEvent(req); !rs.ok()) {
      LogLine(absl::StrCat("error: cannot report the start: ", rs.message()));
      return kUnreachable;
    }
  }
  timeline.Mark(gpu.backend != nullptr ? "gpu_and_started" : "started");
  engine::FitOptions options;
  options.task = task;
  options.attempt = attempt;
  // Checkpoints outlive the attempt: a retry after a crash or a daemon
  // restart resumes from the latest one.
  options.artifacts_dir = assignment.artifacts_dir();
  options.checkpoint_dir = assignment.artifacts_dir() + "/checkpoints";
  options.tensorboard_dir = assignment.tensorboard_dir();
  options.backend = gpu.backend.get();            // null: the CPU backend
  options.communicator = gpu.communicator.get();  // null: one rank
  reporter.TrainingStarted();
  absl::StatusOr<traind::v1::FoldResult> result =
      engine::Fit(spec, *data, rows, spec_task, options, &observer);
  if (!result.ok()) return fail(result.status());
  if (rank != 0) {
    // Rank 0 reports the result; the attempt succeeds when every rank exits 0.
    LogLine(absl::StrCat("task succeeded ", where));
    return kSucceeded;
  }
  if (absl::Status flushed = reporter.Flush(); !flushed.ok()) {
    LogLine(absl::StrCat("error: ", flushed.message()));
    return kUnreachable;
  }
  traind::v1::ReportEventRequest req;
  *req.mutable_finished()->mutable_result() = *result;
  if (absl::Status rs = client.ReportEvent(req); !rs.ok()) {
    LogLine(absl::StrCat("error: cannot report the result: ", rs.message()));
    return kUnreachable;
  }
  timeline.Mark("report");
  LogLine(absl::StrCat("task succeeded ", where, " best_epoch=", result->best_epoch()));
  LogLine(absl::StrCat("task phases ", where, ": ", timeline.Summary()));
  return kSucceeded;
}

}  // namespace traind::worker
