// A whole network of every layer kind, trained through each loss: backward
// against central finite differences for every parameter.
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/random.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/layers/channels_last.h"
#include "worker/engine/losses.h"
#include "worker/engine/network.h"
#include "worker/engine/testing/gradient_check.h"

namespace traind::engine {
namespace {

traind::v1::ModelSpec MixedModel(int outputs) {
  traind::v1::ModelSpec model;
  auto* d0 = model.add_layers()->mutable_dense();
  d0->set_units(7);
  d0->set_activation(traind::v1::GELU);
  d0->set_init(traind::v1::HE_NORMAL);
  model.add_layers()->mutable_layer_norm();
  auto* d1 = model.add_layers()->mutable_dense();
  d1->set_units(6);
  d1->set_activation(traind::v1::TANH);
  d1->set_bias(false);
  model.add_layers()->mutable_batch_norm();
  model.add_layers()->mutable_activation()->set_function(traind::v1::SWISH);
  model.add_layers()->mutable_dropout()->set_rate(0.25);
  auto* d2 = model.add_layers()->mutable_dense();
  d2->set_units(outputs);
  d2->set_activation(traind::v1::LINEAR);
  return model;
}

// Image layers of every kind and option between an image input and the
// head: conv2d (same padding, gelu unfused; grouped, no bias, tanh fused),
// batch norm per channel, max and average pooling (with padding outside
// the mean), dropout on an image, global average pooling. 2×6×6 -> 4×6×6 -> 4×3×3 -> 4×2×2 -> 4×3×3
// -> 4 -> outputs.
traind::v1::ModelSpec ConvModel(int outputs) {
  traind::v1::ModelSpec model;
  auto* c0 = model.add_layers()->mutable_conv2d();
  c0->set_filters(4);
  c0->add_kernel(3);
  c0->mutable_padding()->set_string_value("same");
  c0->set_activation(traind::v1::GELU);
  c0->set_init(traind::v1::HE_NORMAL);
  model.add_layers()->mutable_max_pool2d()->add_kernel(2);
  auto* c1 = model.add_layers()->mutable_conv2d();
  c1->set_filters(4);
  c1->add_kernel(2);
  c1->set_groups(2);
  c1->set_bias(false);
  c1->set_activation(traind::v1::TANH);
  model.add_layers()->mutable_batch_norm();  // per channel
  auto* avg = model.add_layers()->mutable_avg_pool2d();
  avg->add_kernel(2);
  avg->add_stride(1);
  avg->mutable_padding()->set_number_value(1);
  avg->set_count_include_pad(false);
  model.add_layers()->mutable_dropout()->set_rate(0.25);
  model.add_layers()->mutable_global_avg_pool2d();
  auto* d = model.add_layers()->mutable_dense();
  d->set_units(outputs);
  return model;
}

void CheckNetwork(const traind::v1::LossSpec& loss_spec, data::TargetKind target, int outputs,
                  const BatchTargets& targets, bool conv = false) {
  const int64_t batch = 6;
  const spec::ValueShape input =
      conv ? spec::ValueShape::Image(2, 6, 6) : spec::ValueShape::Features(5);
  const int64_t inputs = input.features;
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  absl::StatusOr<Network> created =
      Network::Create(backend.get(), input, conv ? ConvModel(outputs) : MixedModel(outputs));
  ASSERT_TRUE(created.ok()) << created.status();
  Network net = std::move(created).value();
  Rng rng(77);
  ASSERT_TRUE(net.Initialize(rng).ok());
  std::unique_ptr<Loss> loss = std::move(Loss::Create(loss_spec, target, outputs)).value();
  Tensor x = std::move(backend->Allocate2d(DType::kF32, batch, inputs)).value();
  for (int64_t i = 0; i < x.size(); ++i) x.f32()[i] = static_cast<float>(2 * rng.Uniform() - 1);
  Tensor dout = std::move(backend->Allocate2d(DType::kF32, batch, outputs)).value();
  ForwardMode mode;
  mode.seed = 5;  // the same dropout mask in every evaluation
  std::vector<float> host(static_cast<size_t>(batch * outputs)), grad(host.size());

  auto value = [&]() {
    Tensor* out = net.Forward(x, mode).value();
    std::copy(out->f32(), out->f32() + out->size(), host.begin());
    LossSums sums;
    loss->Compute(host.data(), batch, targets, nullptr, &sums);
    return sums.value_sum / sums.weight_sum;
  };
  (void)value();
  Tensor* out = net.Forward(x, mode).value();
  std::copy(out->f32(), out->f32() + out->size(), host.begin());
  LossSums sums;
  loss->Compute(host.data(), batch, targets, grad.data(), &sums);
  std::copy(grad.begin(), grad.end(), dout.f32());
  ASSERT_TRUE(net.Backward(x, &dout).ok());
  // The conv network's max pooling is not differentiable where a window's
  // maximum changes hands: a perturbation that moves one (seen in layer 0's
  // output, the pooling's input) is skipped.
  std::function<bool()> smooth = [] { return true; };
  std::vector<int64_t> base_winners;
  Tensor pooled_in;
  if (conv) {
    pooled_in = std::move(backend->Allocate2d(DType::kF32, batch, net.layers()[0]->out())).value();
    auto winners = [&]() {
      EXPECT_TRUE(net.layers()[0]->Forward(x, mode, &pooled_in).ok());
      std::vector<int64_t> w;
      const float* v = pooled_in.f32();
      // Layer 0's output as the next layer reads it: channels-last on a
      // backend with channels-last images (layers/channels_last.h).
      const bool channels_last = backend->ChannelsLastImages();
      for (int64_t plane = 0; plane < batch * 4; ++plane) {
        for (int64_t i = 0; i < 3; ++i) {
          for (int64_t j = 0; j < 3; ++j) {
            int64_t best = -1;
            for (int64_t p = 0; p < 2; ++p) {
              for (int64_t q = 0; q < 2; ++q) {
                const int64_t pixel = (2 * i + p) * 6 + 2 * j + q;
                const int64_t at =
                    channels_last ? (plane / 4) * 144 + pixel * 4 + plane % 4 : plane * 36 + pixel;
                if (best < 0 || v[at] > v[best]) best = at;
              }
            }
            w.push_back(best);
          }
        }
      }
      return w;
    };
    base_winners = winners();
    smooth = [&, winners] { return winners() == base_winners; };
  }
  int checked = 0, skipped = 0;
  for (const Parameter& p : net.parameters()) {
    const std::vector<float> analytic(p.grad->f32(), p.grad->f32() + p.grad->size());
    testing::GradientCheckResult r = testing::CheckGradient(
        p.name, p.value, analytic.data(), value, smooth, conv ? 3e-3f : 1e-2f, 5e-4, 2e-2);
    checked += r.checked;
    skipped += r.skipped;
  }
  EXPECT_LE(skipped, checked / 4);
  EXPECT_GT(checked, conv ? 80 : 100);
}

TEST(NetworkGradientTest, SoftmaxWithWeightsAndSmoothing) {
  traind::v1::LossSpec spec;
  spec.mutable_softmax_cross_entropy()->set_label_smoothing(0.1);
  for (double w : {1.0, 2.0, 0.5}) spec.mutable_softmax_cross_entropy()->add_class_weights(w);
  const int32_t y[6] = {0, 1, 2, 1, 0, 2};
  CheckNetwork(spec, data::TargetKind::kClasses, 3, {y, nullptr});
}

TEST(NetworkGradientTest, MultiLabelSigmoid) {
  traind::v1::LossSpec spec;
  for (double w : {1.0, 3.0}) spec.mutable_sigmoid_binary_cross_entropy()->add_pos_weight(w);
  const float y[12] = {1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 1};
  CheckNetwork(spec, data::TargetKind::kMultiLabel, 2, {nullptr, y});
}

TEST(NetworkGradientTest, Huber) {
  traind::v1::LossSpec spec;
  spec.mutable_huber()->set_delta(0.5);
  const float y[6] = {0.3f, -1.0f, 2.0f, 0.0f, 0.7f, -0.2f};
  CheckNetwork(spec, data::TargetKind::kRegression, 1, {nullptr, y});
}

TEST(NetworkGradientTest, ConvNetworkWithSoftmax) {
  traind::v1::LossSpec spec;
  spec.mutable_softmax_cross_entropy();
  const int32_t y[6] = {0, 1, 2, 1, 0, 2};
  CheckNetwork(spec, data::TargetKind::kClasses, 3, {y, nullptr}, /*conv=*/true);
}

// Images kept channels-last between image layers (layers/channels_last.h)
// compute what the same network computes in C, H, W order: outputs in
// training and evaluation, and every parameter's gradient. Two runs of image
// layers, each converting at both ends: a 3-channel input, a layer_norm
// (per-element parameters, so C, H, W order) between them, and a dense layer
// reading the last run's image.
TEST(NetworkGradientTest, ChannelsLastImagesComputeWhatChannelsFirstDoes) {
  traind::v1::ModelSpec model;
  auto* c0 = model.add_layers()->mutable_conv2d();
  c0->set_filters(5);
  c0->add_kernel(3);
  c0->mutable_padding()->set_string_value("same");
  c0->set_activation(traind::v1::RELU);
  auto* pool = model.add_layers()->mutable_max_pool2d();
  pool->add_kernel(2);
  pool->mutable_padding()->set_string_value("same");
  model.add_layers()->mutable_batch_norm();
  model.add_layers()->mutable_activation()->set_function(traind::v1::ELU);
  auto* c1 = model.add_layers()->mutable_conv2d();
  c1->set_filters(6);
  c1->add_kernel(2);
  c1->set_activation(traind::v1::GELU);
  model.add_layers()->mutable_layer_norm();
  auto* c2 = model.add_layers()->mutable_conv2d();
  c2->set_filters(4);
  c2->add_kernel(1);
  auto* avg = model.add_layers()->mutable_avg_pool2d();
  avg->add_kernel(2);
  avg->add_stride(1);
  model.add_layers()->mutable_dense()->set_units(3);
  const spec::ValueShape input = spec::ValueShape::Image(3, 7, 7);
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  ASSERT_TRUE(backend->ChannelsLastImages());
  Network last = std::move(Network::Create(backend.get(), input, model)).value();
  Network first = std::move(Network::Create(backend.get(), input, model, false)).value();
  // The conversions sit where the runs begin and end.
  int boundaries = 0;
  for (auto& layer : last.layers()) {
    boundaries += dynamic_cast<ChannelsLastBoundary*>(layer.get()) != nullptr;
  }
  EXPECT_EQ(boundaries, 4);  // layers 0, 4, 6 and 7
  for (auto& layer : first.layers()) {
    EXPECT_EQ(dynamic_cast<ChannelsLastBoundary*>(layer.get()), nullptr);
  }
  Rng rng_a(3), rng_b(3);
  ASSERT_TRUE(last.Initialize(rng_a).ok());
  ASSERT_TRUE(first.Initialize(rng_b).ok());
  const int64_t batch = 4;
  Tensor x = std::move(backend->Allocate2d(DType::kF32, batch, input.features)).value();
  Rng rng(9);
  for (int64_t i = 0; i < x.size(); ++i) x.f32()[i] = static_cast<float>(2 * rng.Uniform() - 1);
  auto expect_close = [](const float* a, const float* b, int64_t n, const std::string& what) {
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!(std::abs(a[i] - b[i]) <= 1e-5f + 1e-4f * std::abs(b[i])) && ++bad <= 3) {
        ADD_FAILURE() << what << "[" << i << "]: " << a[i] << " vs " << b[i];
      }
    }
  };
  for (bool training : {false, true}) {
    ForwardMode mode;
    mode.training = training;
    mode.seed = 5;
    Tensor* a = last.Forward(x, mode).value();
    Tensor* b = first.Forward(x, mode).value();
    expect_close(a->f32(), b->f32(), a->size(), training ? "training output" : "output");
  }
  Tensor da = std::move(backend->Allocate2d(DType::kF32, batch, 3)).value();
  Tensor db = std::move(backend->Allocate2d(DType::kF32, batch, 3)).value();
  for (int64_t i = 0; i < da.size(); ++i) {
    da.f32()[i] = db.f32()[i] = static_cast<float>(rng.Uniform() - 0.5);
  }
  ASSERT_TRUE(last.Backward(x, &da).ok());
  ASSERT_TRUE(first.Backward(x, &db).ok());
  const std::vector<Parameter> pa = last.parameters(), pb = first.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_EQ(pa[i].name, pb[i].name);
    expect_close(pa[i].grad->f32(), pb[i].grad->f32(), pa[i].grad->size(), pa[i].name);
  }
}

}  // namespace
}  // namespace traind::engine
