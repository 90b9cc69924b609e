// Whole-network gradient check: dL/dθ for every parameter of a network with
// two hidden ReLU layers, against central differences of the mean
// softmax cross-entropy.
#include "worker/engine/network.h"

#include <memory>
#include <utility>
#include <vector>

#include "base/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/testing/gradient_check.h"

namespace traind::engine {
namespace {

using testing::CheckGradient;
using testing::GradientCheckResult;

traind::v1::ModelSpec Model(std::vector<std::pair<int, traind::v1::Activation>> layers) {
  traind::v1::ModelSpec model;
  for (const auto& [units, activation] : layers) {
    traind::v1::Dense* dense = model.add_layers()->mutable_dense();
    dense->set_units(units);
    dense->set_activation(activation);
  }
  return model;
}

TEST(NetworkTest, GradientOfEveryParameterMatchesFiniteDifferences) {
  const int64_t batch = 7, inputs = 4, classes = 3;
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  absl::StatusOr<Network> created = Network::Create(
      backend.get(), inputs,
      Model({{6, traind::v1::RELU}, {5, traind::v1::RELU}, {3, traind::v1::LINEAR}}));
  ASSERT_TRUE(created.ok()) << created.status();
  Network net = std::move(*created);
  Rng rng(23);
  ASSERT_TRUE(net.Initialize(rng).ok());
  // Nonzero biases, so the bias gradients carry information.
  for (auto& l : net.layers()) {
    Dense& layer = static_cast<Dense&>(*l);
    for (int64_t i = 0; i < layer.bias().size(); ++i) {
      layer.bias().f32()[i] = static_cast<float>(0.2 * (2 * rng.Uniform() - 1));
    }
  }
  Tensor x = std::move(backend->Allocate2d(DType::kF32, batch, inputs)).value();
  for (int64_t i = 0; i < x.size(); ++i) x.f32()[i] = static_cast<float>(2 * rng.Uniform() - 1);
  Tensor labels = std::move(backend->Allocate1d(DType::kS32, batch)).value();
  for (int64_t r = 0; r < batch; ++r) labels.s32()[r] = static_cast<int32_t>(r % classes);
  Tensor dlogits = std::move(backend->Allocate2d(DType::kF32, batch, classes)).value();

  LossKernelOptions ce;  // softmax cross-entropy, mean over the batch
  ce.width = classes;
  ce.max_batch = batch;
  std::unique_ptr<LossKernel> ce_loss = std::move(backend->CreateLossKernel(ce)).value();
  absl::StatusOr<Tensor*> logits = net.Forward(x);
  ASSERT_TRUE(logits.ok()) << logits.status();
  ASSERT_TRUE(ce_loss->Compute(**logits, labels, 1.0 / batch, &dlogits, nullptr, 0).ok());
  // Hidden activations of the unperturbed pass, for kink detection.
  std::vector<std::vector<float>> hidden;
  auto hidden_now = [&]() {
    std::vector<std::vector<float>> h;
    // Recompute layer by layer into scratch tensors.
    const Tensor* in = &x;
    std::vector<Tensor> outs;
    outs.reserve(net.layers().size());  // `in` points into it
    for (size_t l = 0; l + 1 < net.layers().size(); ++l) {
      outs.push_back(
          std::move(backend->Allocate2d(DType::kF32, batch, net.layers()[l]->out())).value());
      EXPECT_TRUE(net.layers()[l]->Forward(*in, ForwardMode(), &outs.back()).ok());
      h.emplace_back(outs.back().f32(), outs.back().f32() + outs.back().size());
      in = &outs.back();
    }
    return h;
  };
  hidden = hidden_now();
  ASSERT_TRUE(net.Backward(x, &dlogits).ok());

  std::vector<Parameter> params = net.parameters();
  ASSERT_EQ(params.size(), 6u);
  std::vector<std::vector<float>> analytic;
  for (const Parameter& p : params)
    analytic.emplace_back(p.grad->f32(), p.grad->f32() + p.grad->size());

  auto loss = [&]() {
    absl::StatusOr<Tensor*> z = net.Forward(x);
    EXPECT_TRUE(z.ok());
    double sum = 0;
    EXPECT_TRUE(ce_loss->Compute(**z, labels, 0, nullptr, nullptr, 0).ok());
    EXPECT_TRUE(ce_loss->ReadSlots(0, 1, &sum).ok());
    return sum / batch;
  };
  auto smooth = [&]() {
    std::vector<std::vector<float>> h = hidden_now();
    for (size_t l = 0; l < h.size(); ++l) {
      for (size_t i = 0; i < h[l].size(); ++i) {
        if ((h[l][i] > 0) != (hidden[l][i] > 0)) return false;
      }
    }
    return true;
  };
  int checked = 0, total = 0;
  for (size_t p = 0; p < params.size(); ++p) {
    GradientCheckResult r = CheckGradient(params[p].name, params[p].value, analytic[p].data(), loss,
                                          smooth, 1e-2f, 5e-4, 1e-2);
    checked += r.checked;
    total += r.checked + r.skipped;
  }
  EXPECT_EQ(total, 4 * 6 + 6 + 6 * 5 + 5 + 5 * 3 + 3);
  EXPECT_GE(checked, total * 9 / 10);
}

TEST(NetworkTest, BadModels) {
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend()).value();
  traind::v1::ModelSpec empty;
  absl::StatusOr<Network> net = Network::Create(backend.get(), 4, empty);
  EXPECT_EQ(FailureKindOf(net.status()), FailureKind::kInvalidSpec);
  EXPECT_EQ(net.status().message(), "model.layers: at least one layer is required");

  traind::v1::ModelSpec zero = Model({{8, traind::v1::RELU}, {0, traind::v1::LINEAR}});
  net = Network::Create(backend.get(), 4, zero);
  EXPECT_EQ(net.status().message(), "model.layers[1].dense.units: must be positive, got 0");

  traind::v1::ModelSpec unset = Model({{8, traind::v1::RELU}});
  unset.add_layers();
  net = Network::Create(backend.get(), 4, unset);
  EXPECT_EQ(net.status().message(),
            "model.layers[1]: the layer kind is not set (one of: dense, conv2d, max_pool2d, "
            "avg_pool2d, global_avg_pool2d, flatten, activation, dropout, batch_norm, layer_norm)");
}

}  // namespace
}  // namespace traind::engine
