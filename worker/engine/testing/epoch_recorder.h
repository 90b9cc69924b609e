// What a Fit run tells its observer, recorded for tests; it can also ask the
// run to stop after a number of polls, or fail the report of an epoch.
#ifndef TRAIND_WORKER_ENGINE_TESTING_EPOCH_RECORDER_H_
#define TRAIND_WORKER_ENGINE_TESTING_EPOCH_RECORDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/fit.h"

namespace traind::engine::testing {

class EpochRecorder : public FitObserver {
 public:
  absl::Status OnEpochEnd(const traind::v1::EpochMetrics& metrics) override {
    epochs.push_back(metrics);
    if (fail_at_epoch > 0 && metrics.epoch() == fail_at_epoch) {
      return absl::UnavailableError("report failed");
    }
    return absl::OkStatus();
  }
  bool StopRequested() override {
    ++polls;
    return stop_after_polls > 0 && polls >= stop_after_polls;
  }
  void OnResume(int32_t completed) override { resumed_after = completed; }
  void OnWarning(absl::string_view message) override { warnings.emplace_back(message); }

  std::vector<traind::v1::EpochMetrics> epochs;  // every epoch reported, in order
  std::vector<std::string> warnings;
  int polls = 0;             // StopRequested calls
  int stop_after_polls = 0;  // > 0: stop at that poll
  int fail_at_epoch = 0;     // > 0: that epoch's report fails (UNAVAILABLE)
  int resumed_after = -1;    // OnResume's epochs completed, -1 if none
};

}  // namespace traind::engine::testing

#endif  // TRAIND_WORKER_ENGINE_TESTING_EPOCH_RECORDER_H_
