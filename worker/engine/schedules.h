// Per-epoch learning-rate schedules.
#ifndef TRAIND_WORKER_ENGINE_SCHEDULES_H_
#define TRAIND_WORKER_ENGINE_SCHEDULES_H_

#include <cstdint>
#include <vector>

#include "traind/v1/job.pb.h"

namespace traind::engine {

// Thread safety: not thread-safe.
class LearningRateSchedule {
 public:
  // `base` is the optimizer's learning rate; `epochs` the run's length (the
  // cosine schedule's default total).
  LearningRateSchedule(const traind::v1::LearningRateSchedule& spec, double base, int64_t epochs);

  // The learning rate of epoch `epoch` (0-based).
  //   step:        base · gamma^floor(epoch / step_size)
  //   cosine:      base · (epoch + 1) / warmup for epoch < warmup, then
  //                min + (base - min)(1 + cos(π t)) / 2,
  //                t = min(1, (epoch - warmup) / max(1, total - warmup))
  //   exponential: base · gamma^epoch
  //   plateau:     the current rate (see Observe); constant: base.
  double LearningRate(int64_t epoch) const;

  // reduce_on_plateau only: the monitored value after an epoch (PyTorch's
  // ReduceLROnPlateau with an absolute threshold min_delta).
  void Observe(double value, bool maximize);

  // State for checkpoints: [current lr, best, has best, bad epochs, cooldown].
  std::vector<double> State() const;
  void Restore(const std::vector<double>& state);

 private:
  traind::v1::LearningRateSchedule spec_;
  double base_;
  int64_t epochs_;
  double current_;
  double best_ = 0;
  bool has_best_ = false;
  int64_t bad_epochs_ = 0;
  int64_t cooldown_ = 0;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_SCHEDULES_H_
