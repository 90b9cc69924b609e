// WorkPool: a few threads for the work a gRPC reactor must not do itself
// (it can wait on the disk): validating a spec against its data file and
// reading the store. A reactor hands the work over and finishes from it.
//
// Thread-safety: thread-safe. The destructor Stop()s.
#ifndef TRAIND_SERVER_CORE_WORK_POOL_H_
#define TRAIND_SERVER_CORE_WORK_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace traind::server {

class WorkPool final {
 public:
  // REQUIRES: threads >= 1.
  explicit WorkPool(int threads);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // Runs `work` on one of the pool's threads, in posting order (on the
  // caller's thread once the pool has stopped).
  void Post(std::function<void()> work);
  // Runs the work already posted, then joins the threads. Idempotent.
  void Stop();

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<std::function<void()>> work_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex join_mu_;  // one Stop() joins
  std::vector<std::thread> threads_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_CORE_WORK_POOL_H_
