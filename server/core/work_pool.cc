#include "server/core/work_pool.h"

#include <utility>

namespace traind::server {

WorkPool::WorkPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WorkPool::~WorkPool() { Stop(); }

void WorkPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  absl::MutexLock lock(&join_mu_);
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void WorkPool::Post(std::function<void()> work) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      work_.push_back(std::move(work));
      return;
    }
  }
  work();
}

void WorkPool::Run() {
  for (;;) {
    std::function<void()> work;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !work_.empty() || stopping_; };
      mu_.Await(absl::Condition(&ready));
      if (work_.empty()) return;  // stopping, and nothing left
      work = std::move(work_.front());
      work_.pop_front();
    }
    work();
  }
}

}  // namespace traind::server
