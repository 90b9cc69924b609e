// The fit loop of one task: epochs of steps over the shuffled training rows,
// the losses and predictions read back once per window of steps, a
// validation pass, then the callbacks (fit/callbacks.h) in order; resuming
// from and writing checkpoints (state by owner and key, checkpoint.h), and
// the final artifacts (predictions.csv, and model.ckpt in the model format
// of model_file.h). Ranks are the ParallelStrategy's business; the step
// graph is StepGraph's. Fit (fit.h) is its contract.
//
// Checkpoint records: "meta.*" (the spec, the task's identity, the
// classes), "loop.*" (epoch, steps, shuffle state, order, result),
// "state.<name>" (the model), "optimizer.<i>" and "optimizer.steps",
// "pipeline.*" (the fitted features), and each callback's "<name>.<key>".
//
// Thread safety: used by one thread (a rank's).
#ifndef TRAIND_WORKER_ENGINE_FIT_FIT_LOOP_H_
#define TRAIND_WORKER_ENGINE_FIT_FIT_LOOP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/random.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/checkpoint.h"
#include "worker/engine/fit.h"
#include "worker/engine/fit/callbacks.h"
#include "worker/engine/fit/fit_task.h"
#include "worker/engine/fit/parallel_strategy.h"
#include "worker/engine/fit/step_graph.h"
#include "worker/engine/model_file.h"

namespace traind::engine {

class FitLoop {
 public:
  // Nothing is owned; all outlive the loop. `observer` may be null.
  FitLoop(FitTask* task, ParallelStrategy* parallel, BackendFactory* factory, FitObserver* observer)
      : task_(*task), parallel_(*parallel), factory_(factory), observer_(observer) {}
  FitLoop(const FitLoop&) = delete;
  FitLoop& operator=(const FitLoop&) = delete;

  // Sets up, resumes, trains, finishes: the task's result.
  absl::StatusOr<traind::v1::FoldResult> Run();

  // True when Run's error is one every rank returns at the same point (a
  // divergence or stop seen in reduced values, ranks that disagree), so no
  // rank waits for another.
  bool every_rank_fails() const { return every_rank_fails_; }

 private:
  absl::Status Prepare();
  absl::Status CheckRanksAgree();
  void Phase(absl::string_view phase);
  absl::Status Train();
  absl::Status EndEpoch(int32_t epoch, double lr, traind::v1::EpochMetrics* report);
  absl::Status TrainStep(absl::Span<const int64_t> batch, int64_t start, int64_t window_start,
                         int64_t slot, double lr, int32_t epoch, double* weight);
  absl::Status ReadTrainWindow(int32_t epoch, int64_t first, int64_t end, int64_t end_row,
                               LossSums* sums);
  absl::Status Validate(LossSums* sums);
  absl::Status Importance(const LossSums& baseline);
  absl::Status Finish();
  absl::StatusOr<TrainedModel> FinalModel() const;
  bool StopsTraining() const;

  // Checkpoints.
  std::vector<int64_t> Identity() const;
  bool SameTask(const CheckpointReader& r) const;
  absl::Status Snapshot(CheckpointWriter* w);
  absl::Status Restore(const CheckpointReader& r);
  absl::Status LoadCallbacks(const CheckpointReader& r);
  absl::Status MaybeResume();
  void WritePeriodic(int32_t epoch);
  absl::Status WriteBestCheckpoint(int32_t epoch);
  void Warn(const absl::Status& s);

  FitTask& task_;
  ParallelStrategy& parallel_;
  BackendFactory* const factory_;
  FitObserver* const observer_;
  std::vector<std::unique_ptr<FitCallback>> callbacks_;
  BestSelection* selection_ = nullptr;  // callbacks_[0]
  std::unique_ptr<StepGraph> graph_;
  bool write_artifacts_ = false;
  bool every_rank_fails_ = false;

  // Loop state (checkpointed as "loop.*").
  int32_t epochs_done_ = 0;
  int64_t steps_ = 0;
  int64_t first_step_ = 0;  // steps_ when Train began (after a resume: > 0)
  Rng shuffle_rng_{0};
  std::vector<int64_t> order_;
  traind::v1::FoldResult result_;

  // The last completed epoch's checkpoint (written on a stop), and a host
  // buffer of the copies into it.
  CheckpointWriter snapshot_;
  bool snapshot_valid_ = false;
  std::vector<float> host_state_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_FIT_LOOP_H_
