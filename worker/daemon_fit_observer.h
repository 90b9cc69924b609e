// What Fit sees of traind while a task runs under it: epochs go to the epoch
// reporter, resumes and warnings to the daemon, and a stop asked by the
// daemon or by a signal ends training.
#ifndef TRAIND_WORKER_DAEMON_FIT_OBSERVER_H_
#define TRAIND_WORKER_DAEMON_FIT_OBSERVER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "traind/v1/job.pb.h"
#include "worker/attempt_timeline.h"
#include "worker/daemon_client.h"
#include "worker/engine/fit.h"
#include "worker/epoch_reporter.h"

namespace traind::worker {

// Ranks other than 0 of a multi-GPU task report warnings (and heartbeats);
// their epochs and resumes are rank 0's (identical on every rank: Fit reduces
// them), so they are not sent. Every epoch and every batch counts as
// progress for the heartbeats.
//
// Not owned: `client` and `reporter` outlive the observer. Called on Fit's
// thread.
class DaemonFitObserver final : public engine::FitObserver {
 public:
  DaemonFitObserver(DaemonClient* client, EpochReporter* reporter)
      : client_(client), reporter_(reporter), reports_epochs_(client->credentials().rank() == 0) {}

  absl::Status OnEpochEnd(const traind::v1::EpochMetrics& metrics) override;
  // Polled after every batch.
  bool StopRequested() override;
  void OnResume(int32_t completed_epochs) override;
  void OnWarning(absl::string_view message) override;
  // Fit's milestones go to `timeline` (not owned; null: none). Once
  // training has ended, its last epochs go to traind while Fit writes the
  // artifacts.
  void OnPhase(absl::string_view phase) override {
    if (timeline_ != nullptr) timeline_->Mark(phase);
    if (phase == "train") reporter_->SendNow();
  }
  void set_timeline(AttemptTimeline* timeline) { timeline_ = timeline; }
  // ASHA: stop (as on a stop request: the checkpoint of that epoch is
  // written) once epoch `epoch` has ended; 0: never.
  void PauseAfter(int32_t epoch) { pause_after_ = epoch; }

 private:
  AttemptTimeline* timeline_ = nullptr;
  DaemonClient* const client_;
  EpochReporter* const reporter_;
  const bool reports_epochs_;  // rank 0
  int32_t pause_after_ = 0;
  bool paused_ = false;
};

}  // namespace traind::worker

#endif  // TRAIND_WORKER_DAEMON_FIT_OBSERVER_H_
