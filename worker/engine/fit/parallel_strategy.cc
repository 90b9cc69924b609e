#include "worker/engine/fit/parallel_strategy.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "base/status.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/checkpoint.h"
#include "worker/engine/network.h"
#include "worker/engine/parallel/communicator.h"

namespace traind::engine {
namespace {

class SingleRank final : public ParallelStrategy {
 public:
  SingleRank() : ParallelStrategy(0, 1) {}

  Communicator* batch_norm_communicator() const override { return nullptr; }
  bool allows_step_graphs() const override { return true; }
  void Prepare(Network* network, int64_t values) override { network_ = network; }
  absl::Status CheckAgreement(absl::FunctionRef<uint32_t()>, int32_t, bool*, bool*) override {
    return absl::OkStatus();
  }
  absl::StatusOr<bool> AnyRank(bool mine) override { return mine; }
  absl::Status Backward(const Tensor& x, Tensor* doutputs) override {
    return network_->Backward(x, doutputs);
  }
  absl::Status JoinBackward(Backend* backend) override {
    if (network_->gradients().size() == 0) return absl::OkStatus();
    return backend->Fill(0.0f, &network_->gradients());
  }
  absl::Status FinishGradients() override { return absl::OkStatus(); }
  absl::Status SumValues(double*, int64_t) override { return absl::OkStatus(); }
  absl::Status ClearOthersRows(Backend*, Tensor*) override { return absl::OkStatus(); }
  void ClearOthersRows(std::vector<float>*) override {}
  absl::Status SumRows(float*, int64_t, LossSums*) override { return absl::OkStatus(); }
  absl::StatusOr<double> RankZeroValue(double mine) override { return mine; }
  absl::Status AllSucceeded() override { return absl::OkStatus(); }
  void AbortOthers(const absl::Status&) override {}

 private:
  Network* network_ = nullptr;
};

class DataParallel final : public ParallelStrategy {
 public:
  DataParallel(Communicator* comm, int64_t bucket_bytes)
      : ParallelStrategy(comm->rank(), comm->size()), comm_(comm), bucket_bytes_(bucket_bytes) {}

  Communicator* batch_norm_communicator() const override { return comm_; }
  bool allows_step_graphs() const override { return false; }

  // The gradient buckets, from the end of the flat gradients (backward
  // finishes the last layers first); the host buffer of reductions.
  void Prepare(Network* network, int64_t values) override {
    network_ = network;
    const int64_t total = network_->gradients().size();
    const int64_t per = std::max<int64_t>(Network::kGradientAlignment,
                                          bucket_bytes_ / static_cast<int64_t>(sizeof(float)));
    for (int64_t end = total; end > 0; end -= per) {
      buckets_.emplace_back(std::max<int64_t>(0, end - per), end);
    }
    reduce_piece_ = std::max<int64_t>(16, bucket_bytes_ / static_cast<int64_t>(sizeof(double)));
    reduce_.resize(static_cast<size_t>(std::min<int64_t>(2 + values, reduce_piece_)));
  }

  absl::Status CheckAgreement(absl::FunctionRef<uint32_t()> task_crc, int32_t epochs_done,
                              bool* artifacts, bool* every_rank_fails) override {
    constexpr int kFields = 3;
    std::vector<double> all(static_cast<size_t>(ranks() * kFields), 0.0);
    double* mine = all.data() + rank() * kFields;
    // The bucket size must agree too, or the ranks' collectives differ.
    const int64_t bucket = bucket_bytes_;
    mine[0] = epochs_done;
    mine[1] = Crc32(&bucket, sizeof(bucket), task_crc());
    mine[2] = *artifacts ? 1 : 0;
    TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(all.data(), static_cast<int64_t>(all.size())));
    *every_rank_fails = true;  // every rank sees the same sums
    for (int r = 1; r < ranks(); ++r) {
      const double* other = all.data() + r * kFields;
      if (other[1] != all[1]) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "data parallelism: rank %d was given another spec, task or rows than rank 0", r));
      }
      if (other[0] != all[0]) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "data parallelism: rank %d resumed after epoch %d, rank 0 after epoch %d (every "
            "rank needs the same checkpoint_dir)",
            r, static_cast<int>(other[0]), static_cast<int>(all[0])));
      }
    }
    *every_rank_fails = false;
    *artifacts = all[2] != 0;
    return absl::OkStatus();
  }

  absl::StatusOr<bool> AnyRank(bool mine) override {
    double asked = mine ? 1.0 : 0.0;
    TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(&asked, 1));
    return asked > 0;
  }

  // Each bucket's sum starts as soon as backward has finished it, and runs
  // while backward goes on.
  absl::Status Backward(const Tensor& x, Tensor* doutputs) override {
    next_bucket_ = 0;
    return network_->Backward(x, doutputs, [this](size_t layer) {
      return ReduceBucketsFrom(network_->gradients_ready_from(layer));
    });
  }
  // The collectives of the backward pass, in the same order.
  absl::Status JoinBackward(Backend* backend) override {
    next_bucket_ = 0;
    if (network_->gradients().size() > 0) {
      TRAIND_RETURN_IF_ERROR(backend->Fill(0.0f, &network_->gradients()));
    }
    return network_->JoinBackward(
        [this](size_t layer) { return ReduceBucketsFrom(network_->gradients_ready_from(layer)); });
  }
  absl::Status FinishGradients() override {
    TRAIND_RETURN_IF_ERROR(ReduceBucketsFrom(0));
    return comm_->WaitAll();
  }

  absl::Status SumValues(double* values, int64_t count) override {
    return comm_->AllReduceSum(values, count);
  }
  absl::Status ClearOthersRows(Backend* backend, Tensor* rows) override {
    return backend->Fill(0.0f, rows);
  }
  void ClearOthersRows(std::vector<float>* rows) override {
    std::fill(rows->begin(), rows->end(), 0.0f);
  }

  // Each value is summed alone, so the pieces change no result; the
  // buffers of a reduction (on the host, and NCCL's staging on the device)
  // do not grow with the data.
  absl::Status SumRows(float* values, int64_t count, LossSums* sums) override {
    reduce_[0] = sums != nullptr ? sums->value_sum : 0.0;
    reduce_[1] = sums != nullptr ? sums->weight_sum : 0.0;
    int64_t head = 2;  // the sums ride with the first piece
    for (int64_t first = 0; first < count || head > 0; head = 0) {
      const int64_t n = std::min(count - first, reduce_piece_ - head);
      for (int64_t i = 0; i < n; ++i) reduce_[static_cast<size_t>(head + i)] = values[first + i];
      TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(reduce_.data(), head + n));
      if (head > 0 && sums != nullptr) {
        sums->value_sum = reduce_[0];
        sums->weight_sum = reduce_[1];
      }
      for (int64_t i = 0; i < n; ++i) {
        values[first + i] = static_cast<float>(reduce_[static_cast<size_t>(head + i)]);
      }
      first += n;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> RankZeroValue(double mine) override {
    double value = rank() == 0 ? mine : 0.0;
    TRAIND_RETURN_IF_ERROR(comm_->AllReduceSum(&value, 1));
    return value;
  }

  // Every rank got here: none returns success while another failed.
  absl::Status AllSucceeded() override {
    double done = 1;
    return comm_->AllReduceSum(&done, 1);
  }
  void AbortOthers(const absl::Status& error) override { comm_->Abort(error.message()); }

 private:
  // Starts summing, across ranks, the gradient buckets not yet started that
  // start at or after flat offset `ready`, in bucket order (the same on
  // every rank); FinishGradients waits for them.
  absl::Status ReduceBucketsFrom(int64_t ready) {
    float* grads = network_->gradients().f32();
    while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].first >= ready) {
      const auto [begin, end] = buckets_[next_bucket_++];
      TRAIND_RETURN_IF_ERROR(comm_->StartAllReduceSum(grads + begin, end - begin));
    }
    return absl::OkStatus();
  }

  Communicator* const comm_;
  const int64_t bucket_bytes_;
  Network* network_ = nullptr;
  // Gradient buckets [begin, end) of the flat gradients, last first.
  std::vector<std::pair<int64_t, int64_t>> buckets_;
  size_t next_bucket_ = 0;
  std::vector<double> reduce_;
  int64_t reduce_piece_ = 16;
};

}  // namespace

std::unique_ptr<ParallelStrategy> NewSingleRank() { return std::make_unique<SingleRank>(); }

std::unique_ptr<ParallelStrategy> NewDataParallel(Communicator* communicator,
                                                  int64_t bucket_bytes) {
  return std::make_unique<DataParallel>(communicator, bucket_bytes);
}

}  // namespace traind::engine
