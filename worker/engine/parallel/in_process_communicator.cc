#include "worker/engine/parallel/in_process_communicator.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace traind::engine {

// Started reductions are held until WaitAll() or the next collective, and
// then summed in the order they were started: like NCCL's stream, where a
// started sum is not there until it is waited for. (A fit loop that read a
// gradient before WaitAll would see it unsummed, and the N-rank == 1-rank
// tests fail.)
class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size_; }
  absl::Status AllReduceSum(float* data, int64_t count) override {
    if (absl::Status s = WaitAll(); !s.ok()) return s;
    return group_->AllReduce(rank_, data, count);
  }
  absl::Status AllReduceSum(double* data, int64_t count) override {
    if (absl::Status s = WaitAll(); !s.ok()) return s;
    return group_->AllReduce(rank_, data, count);
  }
  absl::Status StartAllReduceSum(float* data, int64_t count) override {
    started_.emplace_back(data, count);
    return absl::OkStatus();
  }
  absl::Status WaitAll() override {
    std::vector<std::pair<float*, int64_t>> started;
    started.swap(started_);
    for (const auto& [data, count] : started) {
      if (absl::Status s = group_->AllReduce(rank_, data, count); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  void Abort(absl::string_view reason) override {
    group_->Abort(absl::StrCat("rank ", rank_, " aborted: ", reason));
  }

 private:
  InProcessGroup* const group_;
  const int rank_;
  std::vector<std::pair<float*, int64_t>> started_;
};

InProcessGroup::InProcessGroup(int size, absl::Duration timeout)
    : size_(size), timeout_(timeout), buffers_(size, nullptr) {}

std::unique_ptr<Communicator> InProcessGroup::Rank(int rank) {
  return std::make_unique<InProcessCommunicator>(this, rank);
}

void InProcessGroup::Abort(absl::string_view reason) {
  absl::MutexLock lock(&mu_);
  if (aborted_.empty()) aborted_ = std::string(reason);
}

template <typename T>
absl::Status InProcessGroup::AllReduce(int rank, T* data, int64_t count) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout_;
  auto failed = [&]() -> absl::Status {
    return absl::AbortedError(aborted_.empty() ? "a rank did not reach the collective in time"
                                               : aborted_);
  };
  // Wait until the previous round has fully drained.
  auto previous_done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !aborted_.empty() || departed_ == 0 || departed_ == size_;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&previous_done), deadline) || !aborted_.empty()) {
    return failed();
  }
  if (departed_ == size_) {  // the first rank of a new round resets it
    departed_ = 0;
    arrived_ = 0;
    reduced_ = false;
    count_ = -1;
    ++round_;
  }
  if (count_ >= 0 && count_ != count) {
    aborted_ = absl::StrCat("rank ", rank, " reduces ", count, " values, another rank ", count_);
    return failed();
  }
  count_ = count;
  buffers_[rank] = data;
  ++arrived_;
  auto all_here = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !aborted_.empty() || arrived_ == size_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&all_here), deadline);
  if (arrived_ < size_) {  // aborted, or a rank is missing
    if (aborted_.empty()) aborted_ = "a rank did not reach the collective in time";
    return failed();
  }
  // Every rank is here: the round completes even when a rank aborts before
  // the others have taken its result (that rank has already returned).
  if (!reduced_) {
    // Sum in rank order into the group's scratch, which stays valid until
    // every rank has copied it (the next round starts only then).
    scratch_.assign(count * sizeof(T), 0);
    T* out = reinterpret_cast<T*>(scratch_.data());
    for (int r = 0; r < size_; ++r) {
      const T* in = static_cast<const T*>(buffers_[r]);
      for (int64_t i = 0; i < count; ++i) out[i] += in[i];
    }
    reduced_ = true;
  }
  const T* sum = reinterpret_cast<const T*>(scratch_.data());
  for (int64_t i = 0; i < count; ++i) data[i] = sum[i];
  ++departed_;
  return absl::OkStatus();
}

template absl::Status InProcessGroup::AllReduce<float>(int, float*, int64_t);
template absl::Status InProcessGroup::AllReduce<double>(int, double*, int64_t);

}  // namespace traind::engine
