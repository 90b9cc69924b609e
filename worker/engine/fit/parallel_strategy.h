// How the ranks of a task share its work, behind one interface: one rank
// (SingleRank), or data parallelism over a Communicator (DataParallel; see
// FitOptions::communicator for what every rank does). The fit loop calls
// the same methods either way; with one rank they do nothing or act
// locally.
//
// Thread safety: used by one thread (a rank's) at a time.
#ifndef TRAIND_WORKER_ENGINE_FIT_PARALLEL_STRATEGY_H_
#define TRAIND_WORKER_ENGINE_FIT_PARALLEL_STRATEGY_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/losses.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

class Backend;
class Communicator;
class Network;

// The rows of a batch that one rank trains or evaluates: a contiguous
// share, the first rows % ranks ranks one row more than the others
// (possibly none).
struct Share {
  int64_t first = 0;
  int64_t rows = 0;
};

class ParallelStrategy {
 public:
  ParallelStrategy(int rank, int ranks) : rank_(rank), ranks_(ranks) {}
  virtual ~ParallelStrategy() = default;
  ParallelStrategy(const ParallelStrategy&) = delete;
  ParallelStrategy& operator=(const ParallelStrategy&) = delete;

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  // Only rank 0 writes checkpoints and artifacts.
  bool writes() const { return rank_ == 0; }
  // This rank's share of `rows` rows.
  Share ShareOf(int64_t rows) const {
    const int64_t base = rows / ranks_, extra = rows % ranks_;
    return {rank_ * base + std::min<int64_t>(rank_, extra), base + (rank_ < extra ? 1 : 0)};
  }

  // For ForwardMode::communicator (synchronized batch norm); null: one rank.
  virtual Communicator* batch_norm_communicator() const = 0;
  // Step graphs need a step without collectives.
  virtual bool allows_step_graphs() const = 0;

  // Before training: the gradients are network->gradients(); reductions of
  // predictions hold at most `values` floats at a time.
  virtual void Prepare(Network* network, int64_t values) = 0;
  // That every rank was given the same task (`task_crc()`: a CRC of the
  // spec, the checkpoint identity and the validation rows; not called with
  // one rank) and resumed after the same epoch. *artifacts: whether to write
  // artifacts, rank 0's decides (every rank takes part in the final
  // validation). *every_rank_fails: the error is one every rank returns.
  virtual absl::Status CheckAgreement(absl::FunctionRef<uint32_t()> task_crc, int32_t epochs_done,
                                      bool* artifacts, bool* every_rank_fails) = 0;

  // Whether `mine` or another rank's value is true (a stop requested).
  virtual absl::StatusOr<bool> AnyRank(bool mine) = 0;
  // This rank's backward pass of x: [rows, width] from doutputs, its
  // gradients summed with the other ranks' as they become final.
  virtual absl::Status Backward(const Tensor& x, Tensor* doutputs) = 0;
  // A rank without rows in a batch: a zero gradient joins the sum.
  virtual absl::Status JoinBackward(Backend* backend) = 0;
  // Waits for the gradient sums: the update may follow.
  virtual absl::Status FinishGradients() = 0;

  // values[0, count) summed across ranks.
  virtual absl::Status SumValues(double* values, int64_t count) = 0;
  // Before ranks write their own rows of *rows: zero where the other
  // ranks' rows go (data parallelism; nothing with one rank).
  virtual absl::Status ClearOthersRows(Backend* backend, Tensor* rows) = 0;
  virtual void ClearOthersRows(std::vector<float>* rows) = 0;
  // values[0, count) (this rank's rows set, the others' zero) and *sums
  // (unless null) summed across ranks, in pieces of the bucket size.
  virtual absl::Status SumRows(float* values, int64_t count, LossSums* sums) = 0;
  // Rank 0's `mine`, on every rank.
  virtual absl::StatusOr<double> RankZeroValue(double mine) = 0;

  // After this rank succeeded: succeeds when every rank did.
  virtual absl::Status AllSucceeded() = 0;
  // This rank failed alone: the others fail fast instead of waiting.
  virtual void AbortOthers(const absl::Status& error) = 0;

 private:
  const int rank_, ranks_;
};

// One rank, no collectives.
std::unique_ptr<ParallelStrategy> NewSingleRank();

// Rank communicator->rank() of communicator->size() (not owned; outlives
// the strategy): gradients summed in buckets of `bucket_bytes`, started as
// the backward pass finishes them.
std::unique_ptr<ParallelStrategy> NewDataParallel(Communicator* communicator, int64_t bucket_bytes);

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_PARALLEL_STRATEGY_H_
