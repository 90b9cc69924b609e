// cpu_bench convprofile: one training step of a convolutional network (a
// spec's model on its data.shape, e.g. examples/fashion-mnist-cnn.yaml) op by
// op through the engine's own parts, and each image layer's kernels alone on
// the same shapes, so that the step's share of its primitives' own rate is
// visible:
//
//   cpu_bench convprofile --spec FILE [--shape C,H,W] [--batch B] [--steps S]
//                         [--precision fp32|bf16] [--layout auto|nchw]
//
// --shape: the images' shape where the spec states none (its files do).
// --layout nchw: images in C, H, W order between all layers (each kernel
// reordering into and out of its primitives' layouts), for comparison with
// the default, channels-last between image layers (layers/channels_last.h).
// Prints one JSON line: the median milliseconds of the forward pass, the
// loss, each layer's backward pass (last layer first in time, listed by
// layer) and the optimizer update; for every conv2d and pooling layer, its
// kernel's Forward and Backward timed alone (fresh tensors of the layer's
// shapes, S runs after a warm-up); "kernels_ms", their sum; and
// "kernels_share" = kernels_ms / step_ms, the part of the step the
// primitives themselves take (the rest: dense layers, dropout, the
// activations not fused, copies, the loss and the update).
// Inputs are random pixels already normalized (no data file is read).
#include "bench/conv_profile.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/random.h"
#include "bench/gemm_set.h"
#include "spec/loader.h"
#include "spec/model_shapes.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/layers/channels_last.h"
#include "worker/engine/layers/image.h"
#include "worker/engine/losses.h"
#include "worker/engine/network.h"
#include "worker/engine/optimizers.h"

namespace traind::bench {
namespace {

using engine::DType;
using engine::Tensor;

void Die(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "cpu_bench convprofile: %s: %s\n", what, std::string(s.message()).c_str());
  std::exit(2);
}
template <typename T>
T Must(absl::StatusOr<T> v, const char* what) {
  Die(v.status(), what);
  return std::move(v).value();
}

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

const char* ArgOf(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == name) return argv[i + 1];
  }
  return fallback;
}

Tensor RandomTensor(engine::Backend& b, int64_t rows, int64_t cols, Rng& rng) {
  Tensor t = Must(b.Allocate2d(DType::kF32, rows, cols), "allocate");
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (float& x : v) x = static_cast<float>(rng.Uniform() * 2 - 1);
  Die(b.CopyFromHost(v.data(), &t), "copy");
  return t;
}

// Median milliseconds of `op` over `steps` runs after 5 warm-up runs.
template <typename Op>
double TimeMs(int steps, Op op) {
  std::vector<double> ms;
  for (int i = 0; i < 5 + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    op();
    if (i >= 5) ms.push_back(1e3 * SecondsSince(t0));
  }
  return MedianOf(ms);
}

}  // namespace

int ConvProfile(int argc, char** argv) {
  const std::string spec_path = ArgOf(argc, argv, "--spec", "");
  const int64_t batch = std::atoll(ArgOf(argc, argv, "--batch", "128"));
  const int steps = std::atoi(ArgOf(argc, argv, "--steps", "50"));
  const std::string precision_name = ArgOf(argc, argv, "--precision", "fp32");
  const bool channels_first = std::string(ArgOf(argc, argv, "--layout", "auto")) == "nchw";
  if (spec_path.empty() || batch < 1 || steps < 1 ||
      (precision_name != "fp32" && precision_name != "bf16")) {
    std::fprintf(stderr,
                 "usage: cpu_bench convprofile --spec FILE [--shape C,H,W] [--batch B] "
                 "[--steps S] [--precision fp32|bf16]\n");
    return 2;
  }
  const v1::Precision precision = precision_name == "bf16" ? v1::BF16 : v1::FP32;
  v1::JobSpec spec = Must(spec::LoadJobSpecFile(spec_path), "spec");
  // The images' shape: --shape C,H,W, or the spec's data.shape (a spec whose
  // files state it, as IDX files do, states none).
  if (const std::string shape = ArgOf(argc, argv, "--shape", ""); !shape.empty()) {
    spec.mutable_data()->clear_shape();
    for (absl::string_view d : absl::StrSplit(shape, ',')) {
      int v = 0;
      if (!absl::SimpleAtoi(d, &v) || v < 1) {
        std::fprintf(stderr, "cpu_bench convprofile: --shape: give C,H,W\n");
        return 2;
      }
      spec.mutable_data()->add_shape(v);
    }
  }
  if (spec.data().shape_size() != 3) {
    std::fprintf(stderr,
                 "cpu_bench convprofile: no image shape: give --shape C,H,W (or data.shape)\n");
    return 2;
  }
  const spec::ValueShape input =
      spec::ValueShape::Image(spec.data().shape(0), spec.data().shape(1), spec.data().shape(2));
  std::unique_ptr<engine::Backend> backend = Must(engine::CreateCpuBackend(precision), "backend");
  engine::Network network =
      Must(engine::Network::Create(backend.get(), input, spec.model(), !channels_first), "network");
  Rng rng(42);
  Die(network.Initialize(rng), "initialize");
  std::unique_ptr<engine::Optimizer> optimizer = Must(
      engine::CreateOptimizer(spec.optimizer(), backend.get(), network.parameters()), "optimizer");
  const int64_t classes = network.outputs();
  std::unique_ptr<engine::Loss> loss =
      Must(engine::Loss::Create(spec.loss(), data::TargetKind::kClasses, classes), "loss");
  std::unique_ptr<engine::LossKernel> loss_kernel =
      Must(backend->CreateLossKernel(loss->KernelOptions(batch, 1)), "loss kernel");
  const Tensor x = RandomTensor(*backend, batch, input.features, rng);
  Tensor y = Must(backend->Allocate1d(DType::kS32, batch), "y");
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % classes);
  Die(backend->CopyFromHost(labels.data(), &y), "labels");
  Tensor dout = Must(backend->Allocate2d(DType::kF32, batch, classes), "doutputs");

  const size_t layers = network.layers().size();
  std::vector<double> forward, loss_ms, update, step;
  std::vector<std::vector<double>> backward(layers);
  for (int i = 0; i < 5 + steps; ++i) {
    const bool timed = i >= 5;
    const auto t_step = std::chrono::steady_clock::now();
    optimizer->BeginStep(0.001);
    auto t0 = std::chrono::steady_clock::now();
    engine::ForwardMode mode;
    mode.seed = static_cast<uint64_t>(i + 1);
    Tensor* outputs = Must(network.Forward(x, mode), "forward");
    if (timed) forward.push_back(1e3 * SecondsSince(t0));
    t0 = std::chrono::steady_clock::now();
    Die(loss_kernel->Compute(*outputs, y, 1.0 / static_cast<double>(batch), &dout, nullptr, 0),
        "loss");
    if (timed) loss_ms.push_back(1e3 * SecondsSince(t0));
    t0 = std::chrono::steady_clock::now();
    Die(network.Backward(x, &dout,
                         [&](size_t layer) -> absl::Status {
                           if (timed) backward[layer].push_back(1e3 * SecondsSince(t0));
                           t0 = std::chrono::steady_clock::now();
                           return absl::OkStatus();
                         }),
        "backward");
    t0 = std::chrono::steady_clock::now();
    Die(optimizer->Step(0.001), "optimizer");
    if (timed) {
      update.push_back(1e3 * SecondsSince(t0));
      step.push_back(1e3 * SecondsSince(t_step));
    }
  }
  const double step_ms = MedianOf(step);

  // Each image layer's kernel alone, on fresh tensors of its shapes.
  std::string kernels;
  double kernels_ms = 0;
  for (size_t l = 0; l < layers; ++l) {
    engine::Layer* layer = network.layers()[l].get();
    if (auto* boundary = dynamic_cast<engine::ChannelsLastBoundary*>(layer)) {
      layer = boundary->inner();  // its kernels run channels-last
    }
    double fwd = 0, bwd = 0;
    const char* kind = nullptr;
    if (auto* conv = dynamic_cast<engine::Conv2d*>(layer)) {
      kind = "conv2d";
      engine::Conv2dGeometry g = conv->geometry();
      g.batch = batch;
      engine::Conv2dKernelOptions options;
      options.activation = conv->activation();
      options.bias = conv->has_bias();
      options.channels_last = conv->channels_last();
      if (!engine::DerivativeFromOutput(options.activation.kind)) {
        options.activation = engine::ActivationFn();  // applied by the layer after the kernel
      }
      std::unique_ptr<engine::Conv2dKernel> k =
          Must(backend->CreateConv2dKernel(g, options), "conv2d kernel");
      Tensor in = RandomTensor(*backend, batch, g.in_size(), rng);
      Tensor w = RandomTensor(*backend, g.out_channels, g.weight_cols(), rng);
      Tensor b = RandomTensor(*backend, 1, g.out_channels, rng);
      Tensor out = RandomTensor(*backend, batch, g.out_size(), rng);
      Tensor dy = RandomTensor(*backend, batch, g.out_size(), rng);
      Tensor dw = RandomTensor(*backend, g.out_channels, g.weight_cols(), rng);
      Tensor db = RandomTensor(*backend, 1, g.out_channels, rng);
      Tensor dx = RandomTensor(*backend, batch, g.in_size(), rng);
      fwd = TimeMs(steps, [&] { Die(k->Forward(in, w, b, &out), "conv2d forward"); });
      // The network's first layer computes no input gradient.
      Tensor* dx_or_null = l == 0 ? nullptr : &dx;
      bwd = TimeMs(steps, [&] {
        Die(k->Backward(in, w, out, &dy, &dw, &db, dx_or_null), "conv2d backward");
      });
    } else if (auto* pool = dynamic_cast<engine::Pool2d*>(layer)) {
      kind = pool->kind() == engine::PoolKind::kMax ? "max_pool2d" : "avg_pool2d";
      engine::Pool2dGeometry g = pool->geometry();
      g.batch = batch;
      engine::Pool2dKernelOptions options;
      options.kind = pool->kind();
      options.channels_last = pool->channels_last();
      std::unique_ptr<engine::Pool2dKernel> k =
          Must(backend->CreatePool2dKernel(g, options), "pool2d kernel");
      Tensor in = RandomTensor(*backend, batch, g.in_size(), rng);
      Tensor out = RandomTensor(*backend, batch, g.out_size(), rng);
      Tensor dx = RandomTensor(*backend, batch, g.in_size(), rng);
      fwd = TimeMs(steps, [&] { Die(k->Forward(true, in, &out), "pool2d forward"); });
      bwd = TimeMs(steps, [&] { Die(k->Backward(out, &dx), "pool2d backward"); });
    }
    if (kind == nullptr) continue;
    kernels_ms += fwd + bwd;
    absl::StrAppend(&kernels, kernels.empty() ? "" : ", ",
                    absl::StrFormat("{\"layer\": %d, \"kind\": \"%s\", \"forward_ms\": %.4f, "
                                    "\"backward_ms\": %.4f}",
                                    l, kind, fwd, bwd));
  }
  std::string per_layer;
  for (size_t l = 0; l < layers; ++l) {
    absl::StrAppend(&per_layer, l > 0 ? ", " : "", absl::StrFormat("%.4f", MedianOf(backward[l])));
  }
  std::printf(
      "{\"batch\": %lld, \"steps\": %d, \"threads\": %d, \"precision\": \"%s\", "
      "\"layout\": \"%s\", "
      "\"step_ms\": %.4f, \"forward_ms\": %.4f, \"loss_ms\": %.4f, "
      "\"backward_ms_by_layer\": [%s], \"optimizer_ms\": %.4f, \"kernels\": [%s], "
      "\"kernels_ms\": %.4f, \"kernels_share\": %.4f}\n",
      static_cast<long long>(batch), steps, omp_get_max_threads(), precision_name.c_str(),
      channels_first ? "nchw" : "channels_last_between_image_layers", step_ms, MedianOf(forward),
      MedianOf(loss_ms), per_layer.c_str(), MedianOf(update), kernels.c_str(), kernels_ms,
      step_ms > 0 ? kernels_ms / step_ms : 0.0);
  return 0;
}

}  // namespace traind::bench
