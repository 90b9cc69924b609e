// The step graph (FitOptions::step_graphs): the forward pass, loss and
// backward pass of a full training batch, recorded once as an op graph
// (Backend::Capture; a CUDA graph on a GPU) and replayed as one launch.
// The first full batch runs op by op (planning every kernel and buffer);
// the second records the graph and launches it. The graph reads the
// gradient scale stored before each launch, and writes the predictions and
// the loss to buffers of its own, copied to the caller's after it. A
// backend without graphs (the CPU's), or an op it cannot record, turns the
// graph off: the ops run one by one from then on.
//
// Thread safety: used by one thread at a time, as its backend.
#ifndef TRAIND_WORKER_ENGINE_FIT_STEP_GRAPH_H_
#define TRAIND_WORKER_ENGINE_FIT_STEP_GRAPH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/tensor.h"

namespace traind::engine {

class StepGraph {
 public:
  // The ops of one step: the loss's gradient scaled by `grad_scale`
  // (LossKernel::kStoredGradScale while recording), the loss sum in the
  // loss kernel's slot `slot`, the predictions in *pred ([batch, outputs]).
  using Step = std::function<absl::Status(double grad_scale, int64_t slot, Tensor* pred)>;
  // Called with the error when recording fails for another reason than
  // the backend having no graphs; training goes on op by op.
  using Warn = std::function<void(const absl::Status&)>;

  // `backend` and `loss` are not owned and outlive the graph; `graph_slot`
  // is a loss slot for the graph alone; full batches have `batch` rows of
  // `outputs` predictions. `enabled`: false runs every step op by op.
  StepGraph(Backend* backend, LossKernel* loss, int64_t graph_slot, int64_t batch, int64_t outputs,
            bool enabled, Warn warn)
      : backend_(backend),
        loss_(loss),
        graph_slot_(graph_slot),
        batch_(batch),
        outputs_(outputs),
        enabled_(enabled),
        warn_(std::move(warn)) {}
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // True while full batches go through Run.
  bool enabled() const { return enabled_; }

  // One full batch: `step` op by op, or the graph's replay with `grad_scale`
  // stored, its predictions copied to *pred and its loss to slot `slot`.
  absl::Status Run(const Step& step, double grad_scale, int64_t slot, Tensor* pred);

 private:
  Backend* const backend_;
  LossKernel* const loss_;
  const int64_t graph_slot_, batch_, outputs_;
  bool enabled_;
  Warn warn_;
  bool warm_ = false;  // a full batch ran op by op
  Tensor pred_;        // the graph's predictions
  std::unique_ptr<OpGraph> graph_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_STEP_GRAPH_H_
