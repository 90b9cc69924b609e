#include "spec/memory_estimate.h"

#include <algorithm>

#include "base/status.h"
#include "spec/model_shapes.h"
#include "spec/search.h"

namespace traind::spec {

MemoryEstimate EstimateMemory(const traind::v1::JobSpec& spec, int64_t features, int64_t outputs) {
  constexpr int64_t kFloat = 4;
  const int64_t batch = std::max<int64_t>(1, spec.training().batch_size());
  int64_t trainable = 0, buffers = 0;
  int64_t per_row = features + 2 * outputs;  // input batch, loss gradient, targets
  int64_t width = features;
  int64_t workspace = 0;
  // bf16 products: each dense layer keeps bf16 (2-byte) copies of its input
  // batch, its weights and its output gradient.
  const bool bf16 = spec.training().precision() == traind::v1::BF16;
  const bool gpu = spec.resources().device() == traind::v1::GPU;
  int64_t bf16_copies = 0;
  // Image layers: each layer's input and output shapes (data.shape); a
  // model that does not fit its input is refused at validation, and is
  // estimated here as rows of `width` values.
  absl::StatusOr<ValueShape> input = ModelInputShape(spec.data(), features);
  std::vector<ValueShape> shapes;
  if (input.ok()) {
    absl::StatusOr<std::vector<ValueShape>> s = LayerShapes(spec.model(), *input);
    if (s.ok()) shapes = *std::move(s);
  }
  ValueShape in = input.ok() ? *input : ValueShape::Features(features);
  int64_t largest_image = 0;  // values of the largest image between layers
  for (int l = 0; l < spec.model().layers_size(); ++l) {
    const traind::v1::Layer& layer = spec.model().layers(l);
    const ValueShape out =
        shapes.empty() ? ValueShape::Features(width) : shapes[static_cast<size_t>(l)];
    const ValueShape layer_in = in;
    in = out;
    if (layer_in.image()) largest_image = std::max(largest_image, layer_in.features);
    if (out.image()) largest_image = std::max(largest_image, out.features);
    switch (layer.kind_case()) {
      case traind::v1::Layer::kConv2D: {
        const auto& c = layer.conv2d();
        const int64_t groups = c.groups() == 0 ? 1 : c.groups();
        const int64_t kh = c.kernel_size() > 0 ? c.kernel(0) : 1;
        const int64_t kw = c.kernel_size() > 1 ? c.kernel(1) : kh;
        const int64_t receptive = std::max<int64_t>(1, layer_in.channels / groups) * kh * kw;
        trainable += c.filters() * receptive + ((!c.has_bias() || c.bias()) ? c.filters() : 0);
        per_row += 2 * out.features;  // y and dy
        const auto a = c.activation();
        if (a == traind::v1::GELU || a == traind::v1::SOFTPLUS || a == traind::v1::SWISH) {
          per_row += out.features;  // pre-activation
        }
        // oneDNN's or cuDNN's workspace: at most the unfolded input (im2col):
        // each output pixel's receptive field, for every group.
        workspace += batch * out.height * out.width * receptive * groups * kFloat;
        // On a GPU, an asymmetric padding is applied into padded copies of
        // x and dx (cuDNN pads symmetrically only).
        const absl::StatusOr<Window2d> window = Conv2dWindow(c, layer_in, "");
        if (gpu && window.ok() &&
            (window->pad_top != window->pad_bottom || window->pad_left != window->pad_right)) {
          workspace += 2 * batch * layer_in.channels *
                       (layer_in.height + window->pad_top + window->pad_bottom) *
                       (layer_in.width + window->pad_left + window->pad_right) * kFloat;
        }
        width = out.features;
        break;
      }
      case traind::v1::Layer::kMaxPool2D:
        per_row += 3 * out.features;  // y, dy and where each maximum was
        width = out.features;
        break;
      case traind::v1::Layer::kAvgPool2D:
      case traind::v1::Layer::kGlobalAvgPool2D:
      case traind::v1::Layer::kFlatten:
        per_row += 2 * out.features;
        width = out.features;
        break;
      case traind::v1::Layer::kDense: {
        const auto& d = layer.dense();
        const int64_t units = d.units();
        trainable += width * units + ((!d.has_bias() || d.bias()) ? units : 0);
        per_row += 2 * units;  // y and dy
        const auto a = d.activation();
        if (a == traind::v1::GELU || a == traind::v1::SOFTPLUS || a == traind::v1::SWISH) {
          per_row += units;  // pre-activation
        }
        // oneDNN matmul scratchpads: at most a packed copy of the weights.
        workspace += 3 * width * units * kFloat;
        if (bf16) bf16_copies += 2 * (batch * width + width * units + batch * units);
        width = units;
        break;
      }
      case traind::v1::Layer::kBatchNorm: {
        // Per channel of an image, whose rows are transposed (x, y, dy).
        const int64_t n = layer_in.image() ? layer_in.channels : width;
        trainable += 2 * n;
        buffers += 6 * n;  // running and saved statistics
        per_row += (layer_in.image() ? 5 : 2) * width;
        break;
      }
      case traind::v1::Layer::kLayerNorm:
        trainable += 2 * width;
        per_row += 2 * width + 2;
        break;
      case traind::v1::Layer::kDropout:
        per_row += 3 * width;  // y, dy, mask
        break;
      default:
        per_row += 2 * width;
        break;
    }
  }
  // On the CPU, images run channels-last between image layers, converted
  // where a run begins and ends (worker/engine/layers/channels_last.h): at
  // most an image and its gradient on each side.
  if (!gpu) per_row += 4 * largest_image;
  int64_t state_copies = 0;
  const auto& o = spec.optimizer();
  if (o.has_sgd()) {
    state_copies = o.sgd().momentum() > 0 ? 1 : 0;
  } else if (o.has_adam() || o.has_adamw()) {
    state_copies = 2;
  } else if (o.has_rmsprop()) {
    state_copies = o.rmsprop().momentum() > 0 ? 2 : 1;
  }
  const bool keeps_best = (spec.has_early_stopping() && spec.early_stopping().restore_best()) ||
                          (spec.has_checkpoint() && spec.checkpoint().save_best());
  MemoryEstimate e;
  e.parameters = (trainable + buffers) * kFloat;
  e.gradients = trainable * kFloat;
  e.optimizer_state = state_copies * trainable * kFloat;
  e.best_weights = keeps_best ? (trainable + buffers) * kFloat : 0;
  // A training batch and an evaluation batch of the same size, and the
  // predictions of a window of training and of validation batches (fit.cc:
  // 32768 rows, or one batch when larger).
  e.activations =
      2 * batch * per_row * kFloat + 2 * std::max<int64_t>(batch, 32768) * outputs * kFloat;
  e.workspace = workspace + bf16_copies + (trainable + buffers) * (2 + state_copies) * kFloat +
                (16 << 20);  // oneDNN, OpenMP and allocator overhead
  // On a GPU: the cuBLAS/cuBLASLt workspace (32 MiB, the size recommended
  // for Hopper), the multi-tensor optimizer's pointer tables, the loss
  // kernel's per-element partial sums (doubles) and the step graph's
  // predictions.
  if (gpu) {
    e.workspace += (32 << 20) + (64 << 10) + batch * outputs * (8 + kFloat);
  }
  return e;
}

int64_t EstimateMemoryBytes(const traind::v1::JobSpec& spec, int64_t features, int64_t outputs) {
  return EstimateMemory(spec, features, outputs).total();
}

absl::StatusOr<TaskMemory> EstimateTaskMemory(const traind::v1::JobSpec& spec, int64_t features,
                                              int64_t outputs, int64_t rows) {
  TaskMemory memory;
  // A batch larger than the rows is all of them (batch_size 2^31 on 150
  // rows trains on 150 at a time).
  const auto estimate = [&](const traind::v1::JobSpec& s) {
    if (rows > 0 && s.training().batch_size() > rows) {
      traind::v1::JobSpec clamped = s;
      clamped.mutable_training()->set_batch_size(static_cast<int32_t>(rows));
      return EstimateMemoryBytes(clamped, features, outputs);
    }
    return EstimateMemoryBytes(s, features, outputs);
  };
  memory.model_bytes = estimate(spec);
  const int64_t trials = SearchTrials(spec);
  for (int64_t i = 0; i < trials; ++i) {
    TRAIND_ASSIGN_OR_RETURN(Trial trial, MakeTrial(spec, static_cast<int>(i)));
    memory.model_bytes = std::max(memory.model_bytes, estimate(trial.spec));
  }
  const int64_t cells = rows * (features + outputs);
  memory.host_bytes = memory.model_bytes + 24 * cells + (int64_t{256} << 20);
  return memory;
}

}  // namespace traind::spec
