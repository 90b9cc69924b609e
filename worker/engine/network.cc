#include "worker/engine/network.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "spec/checks.h"
#include "worker/engine/layers/channels_last.h"
#include "worker/engine/layers/elementwise.h"
#include "worker/engine/layers/image.h"
#include "worker/engine/layers/normalization.h"

namespace traind::engine {
namespace {

// Rng is a counter: Rng(seed) after `draws` draws is Rng(AdvanceSeed(seed,
// draws)), whose outputs are those of Rng(seed) from draw `draws` on.
constexpr uint64_t AdvanceSeed(uint64_t seed, uint64_t draws) {
  return seed + draws * 0x9E3779B97F4A7C15ULL;
}
static_assert(
    [] {
      Rng rng(5);
      for (int i = 0; i < 3; ++i) rng.Next();
      return rng.state();
    }() == AdvanceSeed(5, 3),
    "Rng must stay a counter for Network::Forward's first_row");

// The deleter of a view: the flat buffer owns the memory.
void KeepMemory(void*) {}

}  // namespace

ActivationFn ToActivationFn(traind::v1::Activation activation, bool has_alpha, double alpha) {
  ActivationFn f;
  switch (activation) {
    case traind::v1::RELU:
      f.kind = DenseActivation::kRelu;
      break;
    case traind::v1::LEAKY_RELU:
      f.kind = DenseActivation::kLeakyRelu;
      f.alpha = has_alpha ? static_cast<float>(alpha) : 0.01f;
      break;
    case traind::v1::ELU:
      f.kind = DenseActivation::kElu;
      f.alpha = has_alpha ? static_cast<float>(alpha) : 1.0f;
      break;
    case traind::v1::GELU:
      f.kind = DenseActivation::kGelu;
      break;
    case traind::v1::SIGMOID:
      f.kind = DenseActivation::kSigmoid;
      break;
    case traind::v1::TANH:
      f.kind = DenseActivation::kTanh;
      break;
    case traind::v1::SOFTPLUS:
      f.kind = DenseActivation::kSoftplus;
      break;
    case traind::v1::SWISH:
      f.kind = DenseActivation::kSwish;
      break;
    default:
      f.kind = DenseActivation::kLinear;
      break;
  }
  return f;
}

absl::StatusOr<Network> Network::Create(Backend* backend, int64_t inputs,
                                        const traind::v1::ModelSpec& model) {
  return Create(backend, spec::ValueShape::Features(inputs), model);
}

namespace {

Conv2dGeometry GeometryOf(const spec::Window2d& w, const spec::ValueShape& in, int64_t filters,
                          int64_t groups) {
  Conv2dGeometry g;
  g.batch = 1;
  g.in_channels = in.channels;
  g.in_height = in.height;
  g.in_width = in.width;
  g.out_channels = filters;
  g.kernel_height = w.kernel_height;
  g.kernel_width = w.kernel_width;
  g.stride_height = w.stride_height;
  g.stride_width = w.stride_width;
  g.pad_top = w.pad_top;
  g.pad_left = w.pad_left;
  g.pad_bottom = w.pad_bottom;
  g.pad_right = w.pad_right;
  g.dilation_height = w.dilation_height;
  g.dilation_width = w.dilation_width;
  g.groups = groups;
  return g;
}

Pool2dGeometry PoolGeometryOf(const spec::Window2d& w, const spec::ValueShape& in) {
  Pool2dGeometry g;
  g.batch = 1;
  g.channels = in.channels;
  g.in_height = in.height;
  g.in_width = in.width;
  g.kernel_height = w.kernel_height;
  g.kernel_width = w.kernel_width;
  g.stride_height = w.stride_height;
  g.stride_width = w.stride_width;
  g.pad_top = w.pad_top;
  g.pad_left = w.pad_left;
  g.pad_bottom = w.pad_bottom;
  g.pad_right = w.pad_right;
  return g;
}

// Where layer i's images are channels-last (layers/channels_last.h): each
// run of image layers (conv2d, pooling, batch_norm on an image, with the
// activations and dropouts between them), from its first image layer to its
// last, which convert from and to C, H, W order.
struct LayoutPlan {
  bool channels_last = false;
  bool convert_in = false, convert_out = false;
};
std::vector<LayoutPlan> PlanChannelsLast(const traind::v1::ModelSpec& model,
                                         const spec::ValueShape& input,
                                         const std::vector<spec::ValueShape>& shapes) {
  const int n = model.layers_size();
  std::vector<LayoutPlan> plan(static_cast<size_t>(n));
  auto in_shape = [&](int i) { return i == 0 ? input : shapes[static_cast<size_t>(i - 1)]; };
  auto image_layer = [&](int i) {
    switch (model.layers(i).kind_case()) {
      case traind::v1::Layer::kConv2D:
      case traind::v1::Layer::kMaxPool2D:
      case traind::v1::Layer::kAvgPool2D:
      case traind::v1::Layer::kGlobalAvgPool2D:
        return true;
      case traind::v1::Layer::kBatchNorm:
        return in_shape(i).image();
      default:
        return false;
    }
  };
  auto between = [&](int i) {
    const auto kind = model.layers(i).kind_case();
    return kind == traind::v1::Layer::kActivation || kind == traind::v1::Layer::kDropout;
  };
  for (int i = 0; i < n;) {
    if (!image_layer(i)) {
      ++i;
      continue;
    }
    int last = i;
    for (int j = i; j < n && (image_layer(j) || between(j)); ++j) {
      if (image_layer(j)) last = j;
    }
    for (int j = i; j <= last; ++j) plan[static_cast<size_t>(j)].channels_last = true;
    plan[static_cast<size_t>(i)].convert_in = true;
    plan[static_cast<size_t>(last)].convert_out = true;
    i = last + 1;
  }
  return plan;
}

}  // namespace

absl::StatusOr<Network> Network::Create(Backend* backend, const spec::ValueShape& input,
                                        const traind::v1::ModelSpec& model, bool channels_last) {
  const int64_t inputs = input.features;
  if (inputs <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("network: %d inputs", inputs));
  }
  TRAIND_RETURN_IF_ERROR(spec::CheckModelSpec(model));
  TRAIND_ASSIGN_OR_RETURN(const std::vector<spec::ValueShape> shapes,
                          spec::LayerShapes(model, input));
  Network network(backend, inputs);
  int64_t width = inputs;
  spec::ValueShape shape = input;
  const std::vector<LayoutPlan> layout = channels_last && backend->ChannelsLastImages()
                                             ? PlanChannelsLast(model, input, shapes)
                                             : std::vector<LayoutPlan>(model.layers_size());
  for (int i = 0; i < model.layers_size(); ++i) {
    const traind::v1::Layer& spec = model.layers(i);
    const std::string path = absl::StrCat("model.layers[", i, "]");
    std::unique_ptr<Layer> layer;
    switch (spec.kind_case()) {
      case traind::v1::Layer::kConv2D: {
        const traind::v1::Conv2d& c = spec.conv2d();
        TRAIND_ASSIGN_OR_RETURN(const spec::Window2d w,
                                spec::Conv2dWindow(c, shape, path + ".conv2d"));
        WeightInit init;
        init.kind = c.init();
        if (c.has_gain()) init.gain = c.gain();
        if (c.has_stddev()) init.stddev = c.stddev();
        if (c.has_limit()) init.limit = c.limit();
        TRAIND_ASSIGN_OR_RETURN(
            Conv2d conv,
            Conv2d::Create(backend,
                           GeometryOf(w, shape, c.filters(), c.groups() == 0 ? 1 : c.groups()),
                           ToActivationFn(c.activation(), c.has_alpha(), c.alpha()),
                           !c.has_bias() || c.bias(), init));
        layer = std::make_unique<Conv2d>(std::move(conv));
        break;
      }
      case traind::v1::Layer::kMaxPool2D:
      case traind::v1::Layer::kAvgPool2D: {
        const bool max = spec.kind_case() == traind::v1::Layer::kMaxPool2D;
        const traind::v1::Pool2d& p = max ? spec.max_pool2d() : spec.avg_pool2d();
        TRAIND_ASSIGN_OR_RETURN(
            const spec::Window2d w,
            spec::Pool2dWindow(p, shape, path + (max ? ".max_pool2d" : ".avg_pool2d")));
        const PoolKind kind = max ? PoolKind::kMax
                              : (!p.has_count_include_pad() || p.count_include_pad())
                                  ? PoolKind::kAverage
                                  : PoolKind::kAverageExcludePadding;
        layer = std::make_unique<Pool2d>(backend, PoolGeometryOf(w, shape), kind);
        break;
      }
      case traind::v1::Layer::kGlobalAvgPool2D: {
        spec::Window2d w;
        w.kernel_height = shape.height;
        w.kernel_width = shape.width;
        layer = std::make_unique<Pool2d>(backend, PoolGeometryOf(w, shape), PoolKind::kAverage);
        break;
      }
      case traind::v1::Layer::kFlatten:
        layer = std::make_unique<Flatten>(backend, width);
        break;
      case traind::v1::Layer::kDense: {
        const traind::v1::Dense& d = spec.dense();
        WeightInit init;
        init.kind = d.init();
        if (d.has_gain()) init.gain = d.gain();
        if (d.has_stddev()) init.stddev = d.stddev();
        if (d.has_limit()) init.limit = d.limit();
        TRAIND_ASSIGN_OR_RETURN(
            Dense dense, Dense::Create(backend, width, d.units(),
                                       ToActivationFn(d.activation(), d.has_alpha(), d.alpha()),
                                       !d.has_bias() || d.bias(), init));
        layer = std::make_unique<Dense>(std::move(dense));
        break;
      }
      case traind::v1::Layer::kActivation: {
        const traind::v1::ActivationLayer& a = spec.activation();
        layer = std::make_unique<ActivationLayer>(
            backend, width, ToActivationFn(a.function(), a.has_alpha(), a.alpha()));
        break;
      }
      case traind::v1::Layer::kDropout:
        layer =
            std::make_unique<Dropout>(backend, width, static_cast<float>(spec.dropout().rate()));
        break;
      case traind::v1::Layer::kBatchNorm: {
        const traind::v1::BatchNorm& bn = spec.batch_norm();
        const float momentum = bn.has_momentum() ? static_cast<float>(bn.momentum()) : 0.1f;
        const float epsilon = bn.has_epsilon() ? static_cast<float>(bn.epsilon()) : 1e-5f;
        if (shape.image()) {  // per channel
          TRAIND_ASSIGN_OR_RETURN(
              layer, BatchNorm2d::Create(backend, shape.channels, shape.height * shape.width,
                                         momentum, epsilon));
        } else {
          TRAIND_ASSIGN_OR_RETURN(layer, BatchNorm::Create(backend, width, momentum, epsilon));
        }
        break;
      }
      case traind::v1::Layer::kLayerNorm: {
        const traind::v1::LayerNorm& ln = spec.layer_norm();
        TRAIND_ASSIGN_OR_RETURN(
            layer, LayerNorm::Create(backend, width,
                                     ln.has_epsilon() ? static_cast<float>(ln.epsilon()) : 1e-5f));
        break;
      }
      case traind::v1::Layer::KIND_NOT_SET:
        return absl::InternalError("unset layer kind");  // rejected by CheckModelSpec
    }
    const LayoutPlan& plan = layout[static_cast<size_t>(i)];
    if (plan.channels_last) {
      if (auto* conv = dynamic_cast<Conv2d*>(layer.get())) conv->set_channels_last(true);
      if (auto* pool = dynamic_cast<Pool2d*>(layer.get())) pool->set_channels_last(true);
      if (auto* bn = dynamic_cast<BatchNorm2d*>(layer.get())) bn->set_channels_last(true);
      if (plan.convert_in || plan.convert_out) {
        const spec::ValueShape& out = shapes[static_cast<size_t>(i)];
        ChannelsLastBoundary::Side in_side{shape.channels, shape.height * shape.width,
                                           plan.convert_in};
        ChannelsLastBoundary::Side out_side{out.channels, out.height * out.width, plan.convert_out};
        layer =
            std::make_unique<ChannelsLastBoundary>(backend, std::move(layer), in_side, out_side);
      }
    }
    width = layer->out();
    shape = shapes[static_cast<size_t>(i)];
    if (width != shape.features) {
      return absl::InternalError(absl::StrFormat("%s: %d outputs, the spec's shape says %s", path,
                                                 width, shape.ToString()));
    }
    network.layers_.push_back(std::move(layer));
  }
  TRAIND_RETURN_IF_ERROR(network.FlattenGradients());
  return network;
}

absl::Status Network::FlattenGradients() {
  auto padded = [](int64_t n) {
    return (n + kGradientAlignment - 1) / kGradientAlignment * kGradientAlignment;
  };
  std::vector<std::vector<Parameter>> per_layer(layers_.size());
  gradient_starts_.assign(layers_.size(), 0);
  int64_t total = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->AppendParameters("", &per_layer[l]);
    gradient_starts_[l] = total;
    for (const Parameter& p : per_layer[l]) {
      if (p.grad == nullptr || p.grad->dtype() != DType::kF32) {
        return absl::InternalError("network: a trainable parameter without an f32 gradient");
      }
      total += padded(p.grad->size());
    }
  }
  if (total == 0) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(gradients_, backend_->Allocate1d(DType::kF32, total));
  TRAIND_RETURN_IF_ERROR(backend_->Fill(0.0f, &gradients_));
  float* base = gradients_.f32();
  int64_t offset = 0;
  for (const std::vector<Parameter>& params : per_layer) {
    for (const Parameter& p : params) {
      Tensor* g = p.grad;
      // The layer's own gradient tensor is freed; the view takes its place.
      *g = Tensor(base + offset, &KeepMemory, DType::kF32, g->rows(), g->cols(), g->rank(),
                  gradients_.space());
      offset += padded(g->size());
    }
  }
  return absl::OkStatus();
}

absl::Status Network::Initialize(Rng& rng) {
  for (std::unique_ptr<Layer>& layer : layers_) TRAIND_RETURN_IF_ERROR(layer->Initialize(rng));
  return absl::OkStatus();
}

absl::StatusOr<Network::Workspace*> Network::WorkspaceFor(int64_t batch) {
  for (const std::unique_ptr<Workspace>& ws : workspaces_) {
    if (ws->batch == batch) return ws.get();
  }
  auto ws = std::make_unique<Workspace>();
  ws->batch = batch;
  for (size_t l = 0; l < layers_.size(); ++l) {
    TRAIND_ASSIGN_OR_RETURN(Tensor y, backend_->Allocate2d(DType::kF32, batch, layers_[l]->out()));
    ws->y.push_back(std::move(y));
    if (l + 1 < layers_.size()) {
      TRAIND_ASSIGN_OR_RETURN(Tensor dy,
                              backend_->Allocate2d(DType::kF32, batch, layers_[l]->out()));
      ws->dy.push_back(std::move(dy));
    }
  }
  workspaces_.push_back(std::move(ws));
  return workspaces_.back().get();
}

absl::StatusOr<Tensor*> Network::Forward(const Tensor& x, const ForwardMode& mode,
                                         int64_t first_row) {
  if (x.cols() != inputs_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "network forward: x has %d columns, the network %d inputs", x.cols(), inputs_));
  }
  TRAIND_ASSIGN_OR_RETURN(Workspace * ws, WorkspaceFor(x.rows()));
  // x: [batch, inputs] -> y[0]: [batch, w0] -> ... -> y[L-1]: [batch, outputs]
  const Tensor* input = &x;
  ForwardMode layer_mode = mode;
  for (size_t l = 0; l < layers_.size(); ++l) {
    layer_mode.seed = DeriveSeed(mode.seed, static_cast<uint64_t>(l));
    if (first_row > 0) {
      layer_mode.seed =
          AdvanceSeed(layer_mode.seed, static_cast<uint64_t>(first_row * layers_[l]->out()));
    }
    TRAIND_RETURN_IF_ERROR(layers_[l]->Forward(*input, layer_mode, &ws->y[l]));
    input = &ws->y[l];
  }
  return &ws->y.back();
}

absl::Status Network::Backward(const Tensor& x, Tensor* doutputs) {
  return Backward(x, doutputs, [](size_t) { return absl::OkStatus(); });
}

absl::Status Network::Backward(const Tensor& x, Tensor* doutputs,
                               absl::FunctionRef<absl::Status(size_t layer)> layer_done) {
  TRAIND_ASSIGN_OR_RETURN(Workspace * ws, WorkspaceFor(x.rows()));
  // doutputs: [batch, outputs] -> dy[L-2] -> ... -> dy[0]: [batch, w0].
  // The first layer's dx (the gradient w.r.t. the data) is never computed.
  for (size_t l = layers_.size(); l-- > 0;) {
    const Tensor& input = l == 0 ? x : ws->y[l - 1];
    Tensor* dy = l + 1 == layers_.size() ? doutputs : &ws->dy[l];
    Tensor* dx = l == 0 ? nullptr : &ws->dy[l - 1];
    TRAIND_RETURN_IF_ERROR(layers_[l]->Backward(input, ws->y[l], dy, dx));
    TRAIND_RETURN_IF_ERROR(layer_done(l));
  }
  return absl::OkStatus();
}

absl::Status Network::JoinForward(const ForwardMode& mode) {
  for (std::unique_ptr<Layer>& layer : layers_) TRAIND_RETURN_IF_ERROR(layer->JoinForward(mode));
  return absl::OkStatus();
}

absl::Status Network::JoinBackward(absl::FunctionRef<absl::Status(size_t layer)> layer_done) {
  for (size_t l = layers_.size(); l-- > 0;) {
    TRAIND_RETURN_IF_ERROR(layers_[l]->JoinBackward());
    TRAIND_RETURN_IF_ERROR(layer_done(l));
  }
  return absl::OkStatus();
}

std::vector<Parameter> Network::parameters() {
  std::vector<Parameter> params;
  for (size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->AppendParameters(absl::StrCat("layers[", l, "]"), &params);
  }
  return params;
}

std::vector<Parameter> Network::state() {
  std::vector<Parameter> all;
  for (size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->AppendParameters(absl::StrCat("layers[", l, "]"), &all);
    layers_[l]->AppendBuffers(absl::StrCat("layers[", l, "]"), &all);
  }
  return all;
}

}  // namespace traind::engine
