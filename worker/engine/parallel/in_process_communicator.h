// InProcessGroup: N ranks as N threads of one process, for testing the
// data-parallel logic on a CPU: equivalence of N ranks with one rank at the
// same global batch, and the abort path.
//
// Sums are taken in rank order (0, 1, ..., N-1) on every call, so results
// are deterministic and the same on every rank. A collective that every rank
// has reached completes on every rank, even if one of them aborts before the
// others return from it; Abort fails those not yet reached by all.
//
// Thread-safety: each rank's Communicator is used by one thread; the group
// synchronizes them.
#ifndef TRAIND_WORKER_ENGINE_PARALLEL_IN_PROCESS_COMMUNICATOR_H_
#define TRAIND_WORKER_ENGINE_PARALLEL_IN_PROCESS_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/engine/parallel/communicator.h"

namespace traind::engine {

class InProcessGroup final {
 public:
  // `timeout`: how long a collective waits for the other ranks before it
  // fails (a rank that never arrives must not hang the others forever).
  explicit InProcessGroup(int size, absl::Duration timeout = absl::Seconds(30));
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  // The communicator of rank `rank`. The group must outlive it.
  std::unique_ptr<Communicator> Rank(int rank);

 private:
  friend class InProcessCommunicator;
  template <typename T>
  absl::Status AllReduce(int rank, T* data, int64_t count);
  void Abort(absl::string_view reason);

  const int size_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  std::vector<void*> buffers_ ABSL_GUARDED_BY(mu_);  // this round's buffer of each rank
  int64_t count_ ABSL_GUARDED_BY(mu_) = -1;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int departed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  bool reduced_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<char> scratch_ ABSL_GUARDED_BY(mu_);
  std::string aborted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_PARALLEL_IN_PROCESS_COMMUNICATOR_H_
