// Communicator: the collectives data-parallel training needs, behind an
// interface so the same fit loop runs with NCCL across GPUs, and with an
// in-process group of threads in tests on any machine.
//
// Every rank calls the same collectives in the same order. A rank that
// cannot go on calls Abort(): every pending and later call, on every rank of
// the group, then fails fast instead of waiting forever for it.
#ifndef TRAIND_WORKER_ENGINE_PARALLEL_COMMUNICATOR_H_
#define TRAIND_WORKER_ENGINE_PARALLEL_COMMUNICATOR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace traind::engine {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums `count` values across ranks, in place. `data` lives where the
  // backend keeps its tensors (host memory for the CPU backend, device
  // memory for CUDA). The result is identical on every rank.
  virtual absl::Status AllReduceSum(float* data, int64_t count) = 0;
  // Host doubles (metric sums and counts).
  virtual absl::Status AllReduceSum(double* data, int64_t count) = 0;

  // Starts summing `count` floats across ranks in place, as AllReduceSum,
  // without waiting for the sum: the caller may enqueue more work (the rest
  // of the backward pass) meanwhile. The sum is there, for the backend's
  // later ops and for the host, once WaitAll() has returned OK; until then
  // `data` must not be touched. Collectives of a rank complete in the order
  // they were started or called. Default: AllReduceSum at once.
  virtual absl::Status StartAllReduceSum(float* data, int64_t count) {
    return AllReduceSum(data, count);
  }
  // Waits for every reduction started so far (failing as AllReduceSum
  // would: a dead peer or an abort ends the wait with the reason).
  virtual absl::Status WaitAll() { return absl::OkStatus(); }
  // Fails every pending and later collective of the group with `reason`.
  virtual void Abort(absl::string_view reason) = 0;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_PARALLEL_COMMUNICATOR_H_
