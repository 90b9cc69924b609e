#include "worker/engine/fit/step_graph.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace traind::engine {

absl::Status StepGraph::Run(const Step& step, double grad_scale, int64_t slot, Tensor* pred) {
  if (graph_ == nullptr && warm_) {
    if (pred_.empty()) {
      TRAIND_ASSIGN_OR_RETURN(pred_, backend_->Allocate2d(DType::kF32, batch_, outputs_));
    }
    absl::StatusOr<std::unique_ptr<OpGraph>> graph = backend_->Capture(
        [&]() -> absl::Status { return step(LossKernel::kStoredGradScale, graph_slot_, &pred_); });
    if (graph.ok()) {
      graph_ = std::move(graph).value();
    } else {
      enabled_ = false;
      if (!absl::IsUnimplemented(graph.status()) && warn_) {
        warn_(absl::Status(graph.status().code(), absl::StrCat("training without a step graph: ",
                                                               graph.status().message())));
      }
    }
  }
  if (graph_ != nullptr) {
    TRAIND_RETURN_IF_ERROR(loss_->StoreGradScale(grad_scale));
    TRAIND_RETURN_IF_ERROR(graph_->Launch());
    TRAIND_RETURN_IF_ERROR(backend_->Copy(pred_, pred));
    return loss_->CopySlot(graph_slot_, slot);
  }
  warm_ = true;
  return step(grad_scale, slot, pred);
}

}  // namespace traind::engine
