// A backend decorator that gives a backend without op graphs (the CPU's)
// faithful Backend::Capture semantics, as CUDA stream capture has them: for
// tests of code that records and replays op graphs, on machines without a
// GPU.
//
// Outside a capture every call is forwarded to the wrapped backend (and its
// kernels). During Capture(record):
// - an op that only reads and writes tensors (activations, dropout,
//   Multiply, Fill, Copy, the normalization ops, Scale, ClipByValue, the
//   optimizer updates, DenseKernel::Forward/Backward/BackwardUpdate, LossKernel::Compute
//   and CopySlot) does not run: it is recorded with its arguments as they
//   are at that moment (scalars and step structs by value; tensors by their
//   memory and shape, as a device kernel's arguments, so a temporary view
//   such as Tensor::Rows may go out of scope; spans of tensors copied) and
//   the call returns OK. The graph's Launch() runs the recorded ops in
//   order, on the tensors' contents at that time, and returns the first
//   error.
// - a call that cannot be recorded (allocation, host copies and gathers,
//   planning a kernel, SumOfSquares, LossKernel::ReadSlots, a nested
//   Capture, launching an op graph of this backend) fails with
//   FailedPrecondition "<method>: not allowed while capturing an op graph"
//   and invalidates the capture: Capture returns that error (unless record()
//   failed: then record()'s error) and no graph, and the ops recorded after
//   it fail too.
// - capture mode ends when record() returns, whether or not it succeeded.
//
// Unlike a device backend, which checks an op's arguments when the op is
// enqueued, the wrapped backend checks them when the graph runs: an invalid
// argument of a recorded op is reported by Launch().
//
// Lifetimes, as with CUDA graphs: the tensors a graph was recorded with must
// stay allocated while it is launched, and a graph must not outlive the
// backend and the kernels it was recorded from.
//
// Thread safety: a backend, its kernels and its graphs are used by one
// thread at a time.
#ifndef TRAIND_WORKER_ENGINE_TESTING_GRAPH_RECORDING_BACKEND_H_
#define TRAIND_WORKER_ENGINE_TESTING_GRAPH_RECORDING_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/tensor.h"

namespace traind::engine::testing {

namespace graph_recording_internal {

// A recorded op's tensor argument: a non-owning tensor over the argument's
// memory, with its shape (or null, for an optional argument not given).
class TensorArg {
 public:
  explicit TensorArg(const Tensor& t) : view_(ViewOf(t)), null_(false) {}
  explicit TensorArg(const Tensor* t)
      : view_(t == nullptr ? Tensor() : ViewOf(*t)), null_(t == nullptr) {}
  TensorArg(const TensorArg& other) : view_(ViewOf(other.view_)), null_(other.null_) {}
  TensorArg& operator=(const TensorArg& other) {
    view_ = ViewOf(other.view_);
    null_ = other.null_;
    return *this;
  }

  const Tensor& ref() const { return view_; }
  Tensor* ptr() const { return null_ ? nullptr : &view_; }

 private:
  static void NoDelete(void*) {}
  static Tensor ViewOf(const Tensor& t) {
    return Tensor(const_cast<void*>(t.raw()), &NoDelete, t.dtype(), t.rows(), t.cols(), t.rank(),
                  t.space());
  }

  mutable Tensor view_;
  bool null_;
};

// A recorded op's span of tensors, copied.
class TensorArgs {
 public:
  template <typename T>
  explicit TensorArgs(absl::Span<T* const> tensors) {
    args_.reserve(tensors.size());
    for (T* t : tensors) args_.emplace_back(static_cast<const Tensor*>(t));
    Link();
  }
  TensorArgs(const TensorArgs& other) : args_(other.args_) { Link(); }
  TensorArgs& operator=(const TensorArgs& other) {
    args_ = other.args_;
    Link();
    return *this;
  }

  absl::Span<Tensor* const> ptrs() const { return ptrs_; }
  absl::Span<const Tensor* const> const_ptrs() const { return const_ptrs_; }

 private:
  void Link() {
    ptrs_.clear();
    const_ptrs_.clear();
    for (const TensorArg& a : args_) {
      ptrs_.push_back(a.ptr());
      const_ptrs_.push_back(a.ptr());
    }
  }

  std::vector<TensorArg> args_;
  std::vector<Tensor*> ptrs_;
  std::vector<const Tensor*> const_ptrs_;
};

using Op = std::function<absl::Status()>;

// The capture state of a backend, shared with its kernels and graphs.
struct CaptureState {
  bool capturing = false;
  int64_t graphs = 0;    // captures that made a graph
  int64_t launches = 0;  // launches of this backend's graphs
  // Calls of its kernels' BackwardUpdate, and tensors given to SgdUpdateMany.
  int64_t backward_updates = 0, sgd_updated_tensors = 0;
  absl::Status failure;  // the first refused call of the capture
  std::vector<Op> ops;

  // Appends `op` to the capture (or fails, once the capture is invalid).
  absl::Status Record(absl::string_view method, Op op) {
    if (!failure.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          method, ": the op graph capture was invalidated earlier: ", failure.message()));
    }
    ops.push_back(std::move(op));
    return absl::OkStatus();
  }

  // A call that cannot be recorded: fails, and invalidates the capture.
  absl::Status Refuse(absl::string_view method) {
    absl::Status refused = absl::FailedPreconditionError(
        absl::StrCat(method, ": not allowed while capturing an op graph"));
    if (failure.ok()) failure = refused;
    return refused;
  }
};

class RecordedOpGraph final : public OpGraph {
 public:
  RecordedOpGraph(std::shared_ptr<CaptureState> state, std::vector<Op> ops)
      : state_(std::move(state)), ops_(std::move(ops)) {}

  absl::Status Launch() override {
    if (state_->capturing) return state_->Refuse("OpGraph::Launch");
    ++state_->launches;
    for (const Op& op : ops_) {
      if (absl::Status s = op(); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  const std::shared_ptr<CaptureState> state_;
  const std::vector<Op> ops_;
};

class RecordingDenseKernel final : public DenseKernel {
 public:
  RecordingDenseKernel(std::shared_ptr<CaptureState> state, std::unique_ptr<DenseKernel> inner)
      : state_(std::move(state)), inner_(std::move(inner)) {}

  absl::Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* y) override {
    if (!state_->capturing) return inner_->Forward(x, w, b, y);
    return state_->Record(
        "DenseKernel::Forward",
        [k = inner_.get(), x = TensorArg(x), w = TensorArg(w), b = TensorArg(b), y = TensorArg(y)] {
          return k->Forward(x.ref(), w.ref(), b.ref(), y.ptr());
        });
  }

  absl::Status Backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor* dy, Tensor* dw,
                        Tensor* db, Tensor* dx) override {
    if (!state_->capturing) return inner_->Backward(x, w, y, dy, dw, db, dx);
    return state_->Record(
        "DenseKernel::Backward",
        [k = inner_.get(), x = TensorArg(x), w = TensorArg(w), y = TensorArg(y), dy = TensorArg(dy),
         dw = TensorArg(dw), db = TensorArg(db), dx = TensorArg(dx)] {
          return k->Backward(x.ref(), w.ref(), y.ref(), dy.ptr(), dw.ptr(), db.ptr(), dx.ptr());
        });
  }

  bool UpdatesInBackward() const override { return inner_->UpdatesInBackward(); }
  absl::Status BackwardUpdate(const Tensor& x, Tensor* w, const Tensor& y, Tensor* dy, Tensor* db,
                              Tensor* dx, const SgdStep& sgd, Tensor* velocity) override {
    ++state_->backward_updates;
    if (!state_->capturing) return inner_->BackwardUpdate(x, w, y, dy, db, dx, sgd, velocity);
    return state_->Record(
        "DenseKernel::BackwardUpdate",
        [k = inner_.get(), x = TensorArg(x), w = TensorArg(w), y = TensorArg(y), dy = TensorArg(dy),
         db = TensorArg(db), dx = TensorArg(dx), sgd, v = TensorArg(velocity)] {
          return k->BackwardUpdate(x.ref(), w.ptr(), y.ref(), dy.ptr(), db.ptr(), dx.ptr(), sgd,
                                   v.ptr());
        });
  }

 private:
  const std::shared_ptr<CaptureState> state_;
  const std::unique_ptr<DenseKernel> inner_;
};

class RecordingLossKernel final : public LossKernel {
 public:
  RecordingLossKernel(std::shared_ptr<CaptureState> state, std::unique_ptr<LossKernel> inner)
      : state_(std::move(state)), inner_(std::move(inner)) {}

  absl::Status Compute(const Tensor& outputs, const Tensor& targets, double grad_scale,
                       Tensor* grad, Tensor* predictions, int64_t slot) override {
    if (!state_->capturing) {
      return inner_->Compute(outputs, targets, grad_scale, grad, predictions, slot);
    }
    return state_->Record(
        "LossKernel::Compute",
        [k = inner_.get(), outputs = TensorArg(outputs), targets = TensorArg(targets), grad_scale,
         grad = TensorArg(grad), predictions = TensorArg(predictions), slot] {
          return k->Compute(outputs.ref(), targets.ref(), grad_scale, grad.ptr(), predictions.ptr(),
                            slot);
        });
  }

  absl::Status ReadSlots(int64_t first, int64_t count, double* values) override {
    if (state_->capturing) return state_->Refuse("LossKernel::ReadSlots");
    return inner_->ReadSlots(first, count, values);
  }

  absl::Status StoreGradScale(double scale) override {
    if (!state_->capturing) return inner_->StoreGradScale(scale);
    return state_->Record("LossKernel::StoreGradScale",
                          [k = inner_.get(), scale] { return k->StoreGradScale(scale); });
  }

  absl::Status CopySlot(int64_t from, int64_t to) override {
    if (!state_->capturing) return inner_->CopySlot(from, to);
    return state_->Record("LossKernel::CopySlot",
                          [k = inner_.get(), from, to] { return k->CopySlot(from, to); });
  }

 private:
  const std::shared_ptr<CaptureState> state_;
  const std::unique_ptr<LossKernel> inner_;
};

}  // namespace graph_recording_internal

class GraphRecordingBackend final : public Backend {
 public:
  // `device`: the device it stands in for (a GPU backend's graphs, tested on
  // the CPU backend it wraps).
  GraphRecordingBackend(std::unique_ptr<Backend> inner, std::string name, BackendDevice device)
      : inner_(std::move(inner)),
        name_(std::move(name)),
        device_(device),
        state_(new graph_recording_internal::CaptureState()) {}

  using Backend::CreateDenseKernel;
  using Backend::SgdUpdate;

  // The wrapped backend.
  Backend* inner() const { return inner_.get(); }

  std::string name() const override { return name_; }
  BackendDevice device() const override { return device_; }

  absl::StatusOr<Tensor> Allocate1d(DType dtype, int64_t n) override {
    if (state_->capturing) return state_->Refuse("Allocate1d");
    return inner_->Allocate1d(dtype, n);
  }
  absl::StatusOr<Tensor> Allocate2d(DType dtype, int64_t rows, int64_t cols) override {
    if (state_->capturing) return state_->Refuse("Allocate2d");
    return inner_->Allocate2d(dtype, rows, cols);
  }

  absl::Status CopyFromHost(const void* src, Tensor* dst) override {
    if (state_->capturing) return state_->Refuse("CopyFromHost");
    return inner_->CopyFromHost(src, dst);
  }
  absl::Status CopyToHost(const Tensor& src, void* dst) override {
    if (state_->capturing) return state_->Refuse("CopyToHost");
    return inner_->CopyToHost(src, dst);
  }
  absl::Status Copy(const Tensor& src, Tensor* dst) override {
    if (!state_->capturing) return inner_->Copy(src, dst);
    return state_->Record("Copy", [b = inner_.get(), src = Arg(src), dst = Arg(dst)] {
      return b->Copy(src.ref(), dst.ptr());
    });
  }
  absl::Status Fill(float value, Tensor* dst) override {
    if (!state_->capturing) return inner_->Fill(value, dst);
    return state_->Record(
        "Fill", [b = inner_.get(), value, dst = Arg(dst)] { return b->Fill(value, dst.ptr()); });
  }

  absl::Status GatherRows(const float* src, int64_t cols, absl::Span<const int64_t> rows,
                          Tensor* dst) override {
    if (state_->capturing) return state_->Refuse("GatherRows");
    return inner_->GatherRows(src, cols, rows, dst);
  }
  absl::Status GatherLabels(const int32_t* src, absl::Span<const int64_t> rows,
                            Tensor* dst) override {
    if (state_->capturing) return state_->Refuse("GatherLabels");
    return inner_->GatherLabels(src, rows, dst);
  }

  absl::StatusOr<std::unique_ptr<DenseKernel>> CreateDenseKernel(
      int64_t batch, int64_t in, int64_t out, const DenseKernelOptions& options) override {
    if (state_->capturing) return state_->Refuse("CreateDenseKernel");
    absl::StatusOr<std::unique_ptr<DenseKernel>> kernel =
        inner_->CreateDenseKernel(batch, in, out, options);
    if (!kernel.ok()) return kernel.status();
    return std::unique_ptr<DenseKernel>(
        new graph_recording_internal::RecordingDenseKernel(state_, std::move(kernel).value()));
  }

  absl::Status ActivationForward(const ActivationFn& f, const Tensor& x, Tensor* y) override {
    if (!state_->capturing) return inner_->ActivationForward(f, x, y);
    return state_->Record("ActivationForward", [b = inner_.get(), f, x = Arg(x), y = Arg(y)] {
      return b->ActivationForward(f, x.ref(), y.ptr());
    });
  }
  absl::Status ActivationBackward(const ActivationFn& f, const Tensor& x, const Tensor& y,
                                  const Tensor& dy, Tensor* dx) override {
    if (!state_->capturing) return inner_->ActivationBackward(f, x, y, dy, dx);
    return state_->Record("ActivationBackward", [b = inner_.get(), f, x = Arg(x), y = Arg(y),
                                                 dy = Arg(dy), dx = Arg(dx)] {
      return b->ActivationBackward(f, x.ref(), y.ref(), dy.ref(), dx.ptr());
    });
  }

  absl::Status DropoutForward(float rate, uint64_t seed, const Tensor& x, Tensor* mask,
                              Tensor* y) override {
    if (!state_->capturing) return inner_->DropoutForward(rate, seed, x, mask, y);
    return state_->Record("DropoutForward",
                          [b = inner_.get(), rate, seed, x = Arg(x), mask = Arg(mask), y = Arg(y)] {
                            return b->DropoutForward(rate, seed, x.ref(), mask.ptr(), y.ptr());
                          });
  }
  absl::Status Multiply(const Tensor& a, const Tensor& b, Tensor* out) override {
    if (!state_->capturing) return inner_->Multiply(a, b, out);
    return state_->Record("Multiply", [be = inner_.get(), a = Arg(a), b = Arg(b), out = Arg(out)] {
      return be->Multiply(a.ref(), b.ref(), out.ptr());
    });
  }

  absl::Status BatchNormForward(bool training, float momentum, float epsilon, const Tensor& x,
                                const Tensor& gamma, const Tensor& beta, Tensor* running_mean,
                                Tensor* running_var, Tensor* mean, Tensor* rstd,
                                Tensor* y) override {
    if (!state_->capturing) {
      return inner_->BatchNormForward(training, momentum, epsilon, x, gamma, beta, running_mean,
                                      running_var, mean, rstd, y);
    }
    return state_->Record(
        "BatchNormForward",
        [b = inner_.get(), training, momentum, epsilon, x = Arg(x), gamma = Arg(gamma),
         beta = Arg(beta), running_mean = Arg(running_mean), running_var = Arg(running_var),
         mean = Arg(mean), rstd = Arg(rstd), y = Arg(y)] {
          return b->BatchNormForward(training, momentum, epsilon, x.ref(), gamma.ref(), beta.ref(),
                                     running_mean.ptr(), running_var.ptr(), mean.ptr(), rstd.ptr(),
                                     y.ptr());
        });
  }
  absl::Status BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    if (!state_->capturing) {
      return inner_->BatchNormBackward(x, gamma, mean, rstd, dy, dgamma, dbeta, dx);
    }
    return state_->Record(
        "BatchNormBackward",
        [b = inner_.get(), x = Arg(x), gamma = Arg(gamma), mean = Arg(mean), rstd = Arg(rstd),
         dy = Arg(dy), dgamma = Arg(dgamma), dbeta = Arg(dbeta), dx = Arg(dx)] {
          return b->BatchNormBackward(x.ref(), gamma.ref(), mean.ref(), rstd.ref(), dy.ref(),
                                      dgamma.ptr(), dbeta.ptr(), dx.ptr());
        });
  }
  absl::Status BatchNormColumnSums(const Tensor& x, Tensor* sum) override {
    if (!state_->capturing) return inner_->BatchNormColumnSums(x, sum);
    return state_->Record("BatchNormColumnSums", [b = inner_.get(), x = Arg(x), sum = Arg(sum)] {
      return b->BatchNormColumnSums(x.ref(), sum.ptr());
    });
  }
  absl::Status BatchNormSquaredDeviations(const Tensor& x, const Tensor& sum, int64_t count,
                                          Tensor* mean, Tensor* sq) override {
    if (!state_->capturing) return inner_->BatchNormSquaredDeviations(x, sum, count, mean, sq);
    return state_->Record(
        "BatchNormSquaredDeviations",
        [b = inner_.get(), x = Arg(x), sum = Arg(sum), count, mean = Arg(mean), sq = Arg(sq)] {
          return b->BatchNormSquaredDeviations(x.ref(), sum.ref(), count, mean.ptr(), sq.ptr());
        });
  }
  absl::Status BatchNormForwardFromMoments(float momentum, float epsilon, int64_t count,
                                           const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                           const Tensor& mean, const Tensor& sq,
                                           Tensor* running_mean, Tensor* running_var, Tensor* rstd,
                                           Tensor* y) override {
    if (!state_->capturing) {
      return inner_->BatchNormForwardFromMoments(momentum, epsilon, count, x, gamma, beta, mean, sq,
                                                 running_mean, running_var, rstd, y);
    }
    return state_->Record(
        "BatchNormForwardFromMoments",
        [b = inner_.get(), momentum, epsilon, count, x = Arg(x), gamma = Arg(gamma),
         beta = Arg(beta), mean = Arg(mean), sq = Arg(sq), running_mean = Arg(running_mean),
         running_var = Arg(running_var), rstd = Arg(rstd), y = Arg(y)] {
          return b->BatchNormForwardFromMoments(
              momentum, epsilon, count, x.ref(), gamma.ref(), beta.ref(), mean.ref(), sq.ref(),
              running_mean.ptr(), running_var.ptr(), rstd.ptr(), y.ptr());
        });
  }
  absl::Status BatchNormBackwardSums(const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& dy, Tensor* dgamma, Tensor* dbeta,
                                     Tensor* sums) override {
    if (!state_->capturing) {
      return inner_->BatchNormBackwardSums(x, mean, rstd, dy, dgamma, dbeta, sums);
    }
    return state_->Record(
        "BatchNormBackwardSums",
        [b = inner_.get(), x = Arg(x), mean = Arg(mean), rstd = Arg(rstd), dy = Arg(dy),
         dgamma = Arg(dgamma), dbeta = Arg(dbeta), sums = Arg(sums)] {
          return b->BatchNormBackwardSums(x.ref(), mean.ref(), rstd.ref(), dy.ref(), dgamma.ptr(),
                                          dbeta.ptr(), sums.ptr());
        });
  }
  absl::Status BatchNormBackwardData(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& dy, const Tensor& sums,
                                     int64_t count, Tensor* dx) override {
    if (!state_->capturing) {
      return inner_->BatchNormBackwardData(x, gamma, mean, rstd, dy, sums, count, dx);
    }
    return state_->Record("BatchNormBackwardData",
                          [b = inner_.get(), x = Arg(x), gamma = Arg(gamma), mean = Arg(mean),
                           rstd = Arg(rstd), dy = Arg(dy), sums = Arg(sums), count, dx = Arg(dx)] {
                            return b->BatchNormBackwardData(x.ref(), gamma.ref(), mean.ref(),
                                                            rstd.ref(), dy.ref(), sums.ref(), count,
                                                            dx.ptr());
                          });
  }
  absl::Status LayerNormForward(float epsilon, const Tensor& x, const Tensor& gamma,
                                const Tensor& beta, Tensor* mean, Tensor* rstd,
                                Tensor* y) override {
    if (!state_->capturing) return inner_->LayerNormForward(epsilon, x, gamma, beta, mean, rstd, y);
    return state_->Record("LayerNormForward",
                          [b = inner_.get(), epsilon, x = Arg(x), gamma = Arg(gamma),
                           beta = Arg(beta), mean = Arg(mean), rstd = Arg(rstd), y = Arg(y)] {
                            return b->LayerNormForward(epsilon, x.ref(), gamma.ref(), beta.ref(),
                                                       mean.ptr(), rstd.ptr(), y.ptr());
                          });
  }
  absl::Status LayerNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& dy, Tensor* dgamma,
                                 Tensor* dbeta, Tensor* dx) override {
    if (!state_->capturing) {
      return inner_->LayerNormBackward(x, gamma, mean, rstd, dy, dgamma, dbeta, dx);
    }
    return state_->Record(
        "LayerNormBackward",
        [b = inner_.get(), x = Arg(x), gamma = Arg(gamma), mean = Arg(mean), rstd = Arg(rstd),
         dy = Arg(dy), dgamma = Arg(dgamma), dbeta = Arg(dbeta), dx = Arg(dx)] {
          return b->LayerNormBackward(x.ref(), gamma.ref(), mean.ref(), rstd.ref(), dy.ref(),
                                      dgamma.ptr(), dbeta.ptr(), dx.ptr());
        });
  }

  absl::StatusOr<double> SumOfSquares(const Tensor& t) override {
    if (state_->capturing) return state_->Refuse("SumOfSquares");
    return inner_->SumOfSquares(t);
  }
  absl::Status Scale(float factor, Tensor* t) override {
    if (!state_->capturing) return inner_->Scale(factor, t);
    return state_->Record(
        "Scale", [b = inner_.get(), factor, t = Arg(t)] { return b->Scale(factor, t.ptr()); });
  }
  absl::Status ClipByValue(float limit, Tensor* t) override {
    if (!state_->capturing) return inner_->ClipByValue(limit, t);
    return state_->Record("ClipByValue", [b = inner_.get(), limit, t = Arg(t)] {
      return b->ClipByValue(limit, t.ptr());
    });
  }

  // Records the ops record() enqueues (see the top of this file). Errors:
  // record()'s; FailedPrecondition for a call that cannot be recorded (the
  // first) and for a Capture within a capture.
  // Graphs made by Capture, and launches of them, so far.
  int64_t graphs() const { return state_->graphs; }
  int64_t launches() const { return state_->launches; }
  // Dense kernels' BackwardUpdate calls, and the tensors SgdUpdateMany was
  // given, so far (recorded or run).
  int64_t backward_updates() const { return state_->backward_updates; }
  int64_t sgd_updated_tensors() const { return state_->sgd_updated_tensors; }

  absl::StatusOr<std::unique_ptr<OpGraph>> Capture(
      const std::function<absl::Status()>& record) override {
    if (state_->capturing) return state_->Refuse("Capture");
    state_->capturing = true;
    state_->failure = absl::OkStatus();
    state_->ops.clear();
    const absl::Status recorded = record();
    state_->capturing = false;
    std::vector<graph_recording_internal::Op> ops = std::move(state_->ops);
    state_->ops.clear();
    const absl::Status failure = std::exchange(state_->failure, absl::OkStatus());
    if (!recorded.ok()) return recorded;
    if (!failure.ok()) return failure;
    ++state_->graphs;
    return std::unique_ptr<OpGraph>(
        new graph_recording_internal::RecordedOpGraph(state_, std::move(ops)));
  }

  absl::StatusOr<std::unique_ptr<LossKernel>> CreateLossKernel(
      const LossKernelOptions& options) override {
    if (state_->capturing) return state_->Refuse("CreateLossKernel");
    absl::StatusOr<std::unique_ptr<LossKernel>> kernel = inner_->CreateLossKernel(options);
    if (!kernel.ok()) return kernel.status();
    return std::unique_ptr<LossKernel>(
        new graph_recording_internal::RecordingLossKernel(state_, std::move(kernel).value()));
  }

  absl::Status SgdUpdate(const SgdStep& step, const Tensor& grad, Tensor* velocity,
                         Tensor* param) override {
    if (!state_->capturing) return inner_->SgdUpdate(step, grad, velocity, param);
    return state_->Record("SgdUpdate", [b = inner_.get(), step, grad = Arg(grad),
                                        velocity = Arg(velocity), param = Arg(param)] {
      return b->SgdUpdate(step, grad.ref(), velocity.ptr(), param.ptr());
    });
  }
  absl::Status SgdUpdateMany(const SgdStep& step, absl::Span<const Tensor* const> grads,
                             absl::Span<Tensor* const> velocities,
                             absl::Span<Tensor* const> params) override {
    state_->sgd_updated_tensors += static_cast<int64_t>(params.size());
    if (!state_->capturing) return inner_->SgdUpdateMany(step, grads, velocities, params);
    return state_->Record("SgdUpdateMany", [b = inner_.get(), step, grads = Args(grads),
                                            velocities = Args(velocities), params = Args(params)] {
      return b->SgdUpdateMany(step, grads.const_ptrs(), velocities.ptrs(), params.ptrs());
    });
  }
  absl::Status AdamUpdate(const AdamStep& step, const Tensor& grad, Tensor* m, Tensor* v,
                          Tensor* param) override {
    if (!state_->capturing) return inner_->AdamUpdate(step, grad, m, v, param);
    return state_->Record("AdamUpdate", [b = inner_.get(), step, grad = Arg(grad), m = Arg(m),
                                         v = Arg(v), param = Arg(param)] {
      return b->AdamUpdate(step, grad.ref(), m.ptr(), v.ptr(), param.ptr());
    });
  }
  absl::Status AdamUpdateMany(const AdamStep& step, absl::Span<const Tensor* const> grads,
                              absl::Span<Tensor* const> m, absl::Span<Tensor* const> v,
                              absl::Span<Tensor* const> params) override {
    if (!state_->capturing) return inner_->AdamUpdateMany(step, grads, m, v, params);
    return state_->Record("AdamUpdateMany", [b = inner_.get(), step, grads = Args(grads),
                                             m = Args(m), v = Args(v), params = Args(params)] {
      return b->AdamUpdateMany(step, grads.const_ptrs(), m.ptrs(), v.ptrs(), params.ptrs());
    });
  }
  absl::Status RmsPropUpdate(const RmsPropStep& step, const Tensor& grad, Tensor* square_avg,
                             Tensor* buffer, Tensor* param) override {
    if (!state_->capturing) return inner_->RmsPropUpdate(step, grad, square_avg, buffer, param);
    return state_->Record(
        "RmsPropUpdate", [b = inner_.get(), step, grad = Arg(grad), square_avg = Arg(square_avg),
                          buffer = Arg(buffer), param = Arg(param)] {
          return b->RmsPropUpdate(step, grad.ref(), square_avg.ptr(), buffer.ptr(), param.ptr());
        });
  }

 private:
  template <typename T>
  static graph_recording_internal::TensorArg Arg(const T& t) {
    return graph_recording_internal::TensorArg(t);
  }
  template <typename T>
  static graph_recording_internal::TensorArgs Args(absl::Span<T* const> tensors) {
    return graph_recording_internal::TensorArgs(tensors);
  }

  const std::unique_ptr<Backend> inner_;
  const std::string name_;
  const BackendDevice device_;
  const std::shared_ptr<graph_recording_internal::CaptureState> state_;
};

// `inner` (owned) under the name `name`, with op graphs (see above),
// standing in for a backend on `device`.
inline std::unique_ptr<Backend> NewGraphRecordingBackend(
    std::unique_ptr<Backend> inner, std::string name, BackendDevice device = BackendDevice::kGpu) {
  return std::make_unique<GraphRecordingBackend>(std::move(inner), std::move(name), device);
}

}  // namespace traind::engine::testing

#endif  // TRAIND_WORKER_ENGINE_TESTING_GRAPH_RECORDING_BACKEND_H_
