// Asynchronous successive halving (ASHA) over a search's trials, each
// trial's score at a rung being the mean over its folds of the search
// metric at that epoch.
//
// Rungs at grace_epochs · reduction_factor^k epochs, below training.epochs.
// When the last fold of a trial reaches a rung, the trial's fold-mean is
// compared with the fold-means of the trials that reached that rung before
// it: below the (1 − 1/reduction_factor) quantile of those (linear
// interpolation, as numpy's percentile) it is pruned, else promoted; the
// first trial at a rung is always promoted. The rule of Ray Tune's
// ASHAScheduler and Determined's adaptive ASHA, on fold-means: no trial
// waits for stragglers beyond its own folds.
//
// Thread-safety: none (the scheduler's mutex guards it).
#ifndef TRAIND_SERVER_SCHEDULER_ASHA_H_
#define TRAIND_SERVER_SCHEDULER_ASHA_H_

#include <optional>
#include <string>
#include <vector>

#include "traind/v1/job.pb.h"

namespace traind::server {

class AshaRungs {
 public:
  enum class Decision { kNone, kPromote, kPrune };

  // For a search with `asha`; nothing otherwise. `key` is the search
  // metric's name ("accuracy"), `maximize` its direction.
  static std::optional<AshaRungs> ForJob(const traind::v1::JobSpec& spec, std::string key,
                                         bool maximize);
  // The same with search.metric and search.mode resolved as at submit.
  static std::optional<AshaRungs> ForJob(const traind::v1::JobSpec& spec);

  const std::vector<int>& rungs() const { return rungs_; }
  const std::string& key() const { return key_; }

  // Fold `fold` of trial `trial` reported `value` at `epoch` (the first
  // report of a fold at a rung counts). Returns the decision it completed.
  Decision Record(int trial, int fold, int epoch, double value);

  bool Pruned(int trial) const;
  // The epoch after which a fold of `trial` pauses: the first rung the
  // trial is not promoted at (0: none left).
  int PauseAfter(int trial) const;
  // Whether a fold of `trial` that has completed `epochs` epochs waits for
  // its trial's decision at a rung.
  bool WaitsAtRung(int trial, int epochs) const;
  // The fold-means recorded at rung k, in the order they were decided.
  const std::vector<double>& Recorded(int k) const { return recorded_[k]; }

 private:
  AshaRungs(std::vector<int> rungs, int trials, int folds, int reduction_factor, std::string key,
            bool maximize);
  int RungIndex(int epoch) const;

  std::vector<int> rungs_;
  int folds_ = 1;
  int reduction_factor_ = 3;
  std::string key_;
  bool maximize_ = true;
  // values_[trial][rung][fold]; have_[trial][rung][fold]
  std::vector<std::vector<std::vector<double>>> values_;
  std::vector<std::vector<std::vector<bool>>> have_;
  // decided_[trial][rung]: 0 undecided, 1 promoted, -1 pruned.
  std::vector<std::vector<int>> decided_;
  std::vector<std::vector<double>> recorded_;
};

// numpy.percentile(values, q) with linear interpolation. REQUIRES: values
// not empty, 0 <= q <= 100.
double Percentile(std::vector<double> values, double q);

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_ASHA_H_
