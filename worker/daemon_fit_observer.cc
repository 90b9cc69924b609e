#include "worker/daemon_fit_observer.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "worker/stop_signal.h"

namespace traind::worker {

absl::Status DaemonFitObserver::OnEpochEnd(const traind::v1::EpochMetrics& metrics) {
  reporter_->NotifyProgress();
  if (pause_after_ > 0 && metrics.epoch() >= pause_after_ && !paused_) {
    paused_ = true;
    LogLine(absl::StrCat("pausing after epoch ", metrics.epoch(), ": its trial waits at a rung"));
  }
  if (!reports_epochs_) return absl::OkStatus();
  return reporter_->Add(metrics);
}

bool DaemonFitObserver::StopRequested() {
  reporter_->NotifyProgress();
  return paused_ || client_->StopRequested() || StopSignalReceived();
}

void DaemonFitObserver::OnResume(int32_t completed_epochs) {
  LogLine(absl::StrCat("resuming from the checkpoint after epoch ", completed_epochs));
  if (!reports_epochs_) return;
  traind::v1::ReportEventRequest req;
  req.mutable_resumed()->set_completed_epochs(completed_epochs);
  absl::Status s = client_->ReportEvent(req);
  if (!s.ok()) LogLine(absl::StrCat("error: cannot report the resume: ", s.message()));
}

void DaemonFitObserver::OnWarning(absl::string_view message) {
  LogLine(absl::StrCat("warning: ", message));
  const int32_t rank = client_->credentials().rank();
  traind::v1::ReportEventRequest req;
  req.mutable_warning()->set_message(rank == 0 ? std::string(message)
                                               : absl::StrCat("rank ", rank, ": ", message));
  (void)client_->ReportEvent(req);  // best effort: the warning is in the log either way
}

}  // namespace traind::worker
