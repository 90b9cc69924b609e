// Gradient checks on the GPU: whole networks of every layer kind and
// activation run on the CUDA backend, backward against central finite
// differences of the loss (flashlight's jacobianTestImpl pattern), through
// both dense paths (cuBLASLt epilogues and cuBLAS + kernel); and the
// gradient of the backend's softmax cross-entropy loss kernel. Skips without
// a device.
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/random.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cuda/cuda_backend.h"
#include "worker/engine/backend/cuda/cuda_status.h"
#include "worker/engine/losses.h"
#include "worker/engine/network.h"

namespace traind::engine {
namespace {

class CudaGradientTest : public ::testing::Test {
 public:
  static std::vector<float> Host(Backend& b, const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.size()));
    EXPECT_TRUE(b.CopyToHost(t, v.data()).ok());
    return v;
  }

 protected:
  void SetUp() override {
    std::string reason;
    if (cuda::DeviceCount(&reason) == 0) GTEST_SKIP() << reason;
  }

  static std::unique_ptr<Backend> Gpu(bool use_cublaslt) {
    CudaBackendOptions options;
    options.use_cublaslt = use_cublaslt;
    absl::StatusOr<std::unique_ptr<Backend>> gpu = CreateCudaBackend(options);
    EXPECT_TRUE(gpu.ok()) << gpu.status();
    return gpu.ok() ? std::move(*gpu) : nullptr;
  }
};

// Every layer kind; smooth activations only (no kinks for the differences
// to cross).
traind::v1::ModelSpec SmoothModel(int outputs) {
  traind::v1::ModelSpec model;
  auto* d0 = model.add_layers()->mutable_dense();
  d0->set_units(7);
  d0->set_activation(traind::v1::GELU);  // linear kernel + activation op
  d0->set_init(traind::v1::HE_NORMAL);
  model.add_layers()->mutable_layer_norm();
  auto* d1 = model.add_layers()->mutable_dense();
  d1->set_units(6);
  d1->set_activation(traind::v1::TANH);  // fused into the kernel
  d1->set_bias(false);
  model.add_layers()->mutable_batch_norm();
  model.add_layers()->mutable_activation()->set_function(traind::v1::SWISH);
  model.add_layers()->mutable_dropout()->set_rate(0.25);
  auto* d2 = model.add_layers()->mutable_dense();
  d2->set_units(6);
  d2->set_activation(traind::v1::SIGMOID);
  auto* d3 = model.add_layers()->mutable_dense();
  d3->set_units(5);
  d3->set_activation(traind::v1::SOFTPLUS);
  auto* d4 = model.add_layers()->mutable_dense();
  d4->set_units(outputs);
  return model;
}

// The activations with kinks (ReLU's fused cuBLASLt epilogue among them).
traind::v1::ModelSpec KinkedModel(int outputs) {
  traind::v1::ModelSpec model;
  auto* d0 = model.add_layers()->mutable_dense();
  d0->set_units(8);
  d0->set_activation(traind::v1::RELU);
  auto* d1 = model.add_layers()->mutable_dense();
  d1->set_units(7);
  d1->set_activation(traind::v1::LEAKY_RELU);
  d1->set_alpha(0.1);
  auto* d2 = model.add_layers()->mutable_dense();
  d2->set_units(6);
  d2->set_activation(traind::v1::ELU);
  d2->set_alpha(0.7);
  auto* d3 = model.add_layers()->mutable_dense();
  d3->set_units(outputs);
  return model;
}

// Backward on the GPU vs central differences (step eps) of the batch loss,
// for every parameter element. With `kinks`, a coordinate whose perturbation
// crosses a kink (the two one-sided differences disagree) is skipped and
// counted.
void CheckNetwork(Backend& gpu, const traind::v1::ModelSpec& model, float eps, bool kinks,
                  int* checked, int* skipped) {
  const int64_t batch = 6, inputs = 5, outputs = 3;
  absl::StatusOr<Network> created = Network::Create(&gpu, inputs, model);
  ASSERT_TRUE(created.ok()) << created.status();
  Network net = std::move(*created);
  Rng rng(77);
  ASSERT_TRUE(net.Initialize(rng).ok());
  traind::v1::LossSpec loss_spec;
  loss_spec.mutable_softmax_cross_entropy()->set_label_smoothing(0.1);
  for (double w : {1.0, 2.0, 0.5}) loss_spec.mutable_softmax_cross_entropy()->add_class_weights(w);
  std::unique_ptr<Loss> loss =
      std::move(Loss::Create(loss_spec, data::TargetKind::kClasses, outputs)).value();
  const int32_t labels[batch] = {0, 1, 2, 1, 0, 2};
  const BatchTargets targets{labels, nullptr};

  Tensor x = std::move(gpu.Allocate2d(DType::kF32, batch, inputs)).value();
  std::vector<float> host_x(static_cast<size_t>(batch * inputs));
  for (float& v : host_x) v = static_cast<float>(2 * rng.Uniform() - 1);
  ASSERT_TRUE(gpu.CopyFromHost(host_x.data(), &x).ok());
  Tensor dout = std::move(gpu.Allocate2d(DType::kF32, batch, outputs)).value();
  ForwardMode mode;
  mode.seed = 5;  // the same dropout mask in every evaluation
  std::vector<float> host(static_cast<size_t>(batch * outputs)), grad(host.size());

  auto value = [&]() {
    absl::StatusOr<Tensor*> out = net.Forward(x, mode);
    EXPECT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(gpu.CopyToHost(**out, host.data()).ok());
    LossSums sums;
    loss->Compute(host.data(), batch, targets, nullptr, &sums);
    return sums.value_sum / sums.weight_sum;
  };
  Tensor* out = net.Forward(x, mode).value();
  ASSERT_TRUE(gpu.CopyToHost(*out, host.data()).ok());
  LossSums sums;
  loss->Compute(host.data(), batch, targets, grad.data(), &sums);
  ASSERT_TRUE(gpu.CopyFromHost(grad.data(), &dout).ok());
  ASSERT_TRUE(net.Backward(x, &dout).ok());

  for (const Parameter& p : net.parameters()) {
    const std::vector<float> analytic = CudaGradientTest::Host(gpu, *p.grad);
    std::vector<float> values = CudaGradientTest::Host(gpu, *p.value);
    for (size_t i = 0; i < values.size(); ++i) {
      const float saved = values[i];
      const float hi = saved + eps, lo = saved - eps;
      values[i] = hi;
      ASSERT_TRUE(gpu.CopyFromHost(values.data(), p.value).ok());
      const double f_hi = value();
      values[i] = lo;
      ASSERT_TRUE(gpu.CopyFromHost(values.data(), p.value).ok());
      const double f_lo = value();
      values[i] = saved;
      ASSERT_TRUE(gpu.CopyFromHost(values.data(), p.value).ok());
      const double f_0 = value();
      const double right = (f_hi - f_0) / (double{hi} - saved);
      const double left = (f_0 - f_lo) / (double{saved} - lo);
      if (kinks && std::abs(right - left) > 0.02 * (std::abs(right) + std::abs(left)) + 2e-4) {
        ++*skipped;  // a kink between lo and hi
        continue;
      }
      ++*checked;
      const double numeric = (f_hi - f_lo) / (double{hi} - double{lo});
      EXPECT_NEAR(analytic[i], numeric, 5e-4 + 2e-2 * std::abs(numeric))
          << p.name << "[" << i << "]";
    }
  }
}

TEST_F(CudaGradientTest, EveryLayerKindSmoothActivations) {
  for (bool lt : {true, false}) {
    SCOPED_TRACE(lt ? "cuBLASLt" : "cuBLAS");
    std::unique_ptr<Backend> gpu = Gpu(lt);
    ASSERT_NE(gpu, nullptr);
    int checked = 0, skipped = 0;
    CheckNetwork(*gpu, SmoothModel(3), 1e-2f, /*kinks=*/false, &checked, &skipped);
    EXPECT_GT(checked, 150);
  }
}

TEST_F(CudaGradientTest, ReluLeakyReluElu) {
  for (bool lt : {true, false}) {
    SCOPED_TRACE(lt ? "cuBLASLt" : "cuBLAS");
    std::unique_ptr<Backend> gpu = Gpu(lt);
    ASSERT_NE(gpu, nullptr);
    int checked = 0, skipped = 0;
    CheckNetwork(*gpu, KinkedModel(3), 3e-3f, /*kinks=*/true, &checked, &skipped);
    EXPECT_GT(checked, 90) << skipped << " skipped";
  }
}

TEST_F(CudaGradientTest, SoftmaxCrossEntropyGradient) {
  std::unique_ptr<Backend> gpu = Gpu(true);
  ASSERT_NE(gpu, nullptr);
  const int64_t batch = 5, classes = 4;
  Rng rng(11);
  std::vector<float> logits(static_cast<size_t>(batch * classes));
  for (float& v : logits) v = static_cast<float>(4 * rng.Uniform() - 2);
  const std::vector<int32_t> labels = {3, 0, 2, 1, 3};
  Tensor t_logits = std::move(gpu->Allocate2d(DType::kF32, batch, classes)).value();
  Tensor t_labels = std::move(gpu->Allocate1d(DType::kS32, batch)).value();
  Tensor t_grad = std::move(gpu->Allocate2d(DType::kF32, batch, classes)).value();
  ASSERT_TRUE(gpu->CopyFromHost(labels.data(), &t_labels).ok());
  // Plain, then with class weights and label smoothing.
  for (bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "weighted, smoothed" : "plain");
    LossKernelOptions options;
    options.width = classes;
    options.max_batch = batch;
    if (weighted) {
      options.weights = {1.0, 2.0, 0.5, 1.5};
      options.label_smoothing = 0.1;
    }
    absl::StatusOr<std::unique_ptr<LossKernel>> kernel = gpu->CreateLossKernel(options);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    // The mean over the batch: grad_scale 1 / batch.
    auto mean_loss = [&](Tensor* dlogits) {
      EXPECT_TRUE(gpu->CopyFromHost(logits.data(), &t_logits).ok());
      EXPECT_TRUE((*kernel)->Compute(t_logits, t_labels, 1.0 / batch, dlogits, nullptr, 0).ok());
      double sum = 0;
      EXPECT_TRUE((*kernel)->ReadSlots(0, 1, &sum).ok());
      return sum / batch;
    };
    (void)mean_loss(&t_grad);
    const std::vector<float> analytic = Host(*gpu, t_grad);
    const float eps = 1e-2f;
    for (size_t i = 0; i < logits.size(); ++i) {
      const float saved = logits[i];
      logits[i] = saved + eps;
      const double f_hi = mean_loss(nullptr);
      logits[i] = saved - eps;
      const double f_lo = mean_loss(nullptr);
      logits[i] = saved;
      const double numeric = (f_hi - f_lo) / (2.0 * eps);
      EXPECT_NEAR(analytic[i], numeric, 1e-4 + 1e-2 * std::abs(numeric)) << "dlogits[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace traind::engine
