// The CPU backend's convolution and pooling kernels against their definitions
// in double (testing/conv_reference.h), over every option; the reference's
// gradients against finite differences of its forward pass.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/backend/activation_math.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/testing/conv_reference.h"
#include "worker/engine/testing/cpu_backend_fixture.h"

namespace traind::engine {
namespace {

std::vector<double> ToDouble(const Tensor& t) {
  return std::vector<double>(t.f32(), t.f32() + t.size());
}

// Each value within 1e-4 of the reference, relative to the larger of 1 and
// the reference's largest magnitude (sums of a few hundred float products).
void ExpectNear(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(got.size()), want.size()) << what;
  double scale = 1;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  int shown = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::fabs(got.f32()[i] - want[i]) > 1e-4 * scale && shown++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] = " << got.f32()[i] << ", want " << want[i];
    }
  }
}

struct ConvCase {
  std::string name;
  Conv2dGeometry g;
  bool bias = true;
  DenseActivation activation = DenseActivation::kLinear;
};

Conv2dGeometry Conv(int64_t batch, int64_t c, int64_t h, int64_t w, int64_t f, int64_t kh,
                    int64_t kw) {
  Conv2dGeometry g;
  g.batch = batch;
  g.in_channels = c;
  g.in_height = h;
  g.in_width = w;
  g.out_channels = f;
  g.kernel_height = kh;
  g.kernel_width = kw;
  return g;
}

std::vector<ConvCase> ConvCases() {
  std::vector<ConvCase> cases;
  cases.push_back({"3x3", Conv(2, 3, 7, 6, 4, 3, 3)});
  ConvCase same{"3x3_padding_1_relu", Conv(2, 3, 7, 6, 4, 3, 3), true, DenseActivation::kRelu};
  same.g.pad_top = same.g.pad_left = same.g.pad_bottom = same.g.pad_right = 1;
  cases.push_back(same);
  ConvCase strided{"stride_2x1_asymmetric_padding", Conv(3, 2, 9, 8, 5, 3, 2)};
  strided.g.stride_height = 2;
  strided.g.pad_top = 1;
  strided.g.pad_right = 1;
  cases.push_back(strided);
  ConvCase dilated{"dilation_2_tanh", Conv(2, 2, 9, 9, 3, 3, 3), true, DenseActivation::kTanh};
  dilated.g.dilation_height = dilated.g.dilation_width = 2;
  dilated.g.pad_top = dilated.g.pad_left = dilated.g.pad_bottom = dilated.g.pad_right = 2;
  cases.push_back(dilated);
  ConvCase grouped{"groups_2_no_bias", Conv(2, 4, 6, 5, 6, 3, 3), false};
  grouped.g.groups = 2;
  grouped.g.pad_top = grouped.g.pad_bottom = 1;
  cases.push_back(grouped);
  ConvCase depthwise{"depthwise_leaky_relu", Conv(2, 3, 8, 8, 3, 5, 5), true,
                     DenseActivation::kLeakyRelu};
  depthwise.g.groups = 3;
  depthwise.g.stride_height = depthwise.g.stride_width = 2;
  depthwise.g.pad_top = depthwise.g.pad_left = depthwise.g.pad_bottom = depthwise.g.pad_right = 2;
  cases.push_back(depthwise);
  cases.push_back({"1x1_sigmoid", Conv(4, 8, 3, 3, 5, 1, 1), true, DenseActivation::kSigmoid});
  cases.push_back({"one_image_one_channel_28x28", Conv(1, 1, 28, 28, 8, 3, 3)});
  return cases;
}

class CpuConvKernelTest : public CpuBackendTest, public ::testing::WithParamInterface<ConvCase> {};

TEST_P(CpuConvKernelTest, ForwardAndBackwardMatchTheDefinition) {
  const ConvCase& c = GetParam();
  const Conv2dGeometry& g = c.g;
  Rng rng(11);
  Tensor x = Random2d(g.batch, g.in_size(), 1.0, rng);
  Tensor w = Random2d(g.out_channels, g.weight_cols(), 0.5, rng);
  Tensor b = Random1d(g.out_channels, 0.5, rng);
  Tensor y = std::move(backend_->Allocate2d(DType::kF32, g.batch, g.out_size())).value();
  Conv2dKernelOptions options;
  options.bias = c.bias;
  options.activation.kind = c.activation;
  options.activation.alpha = c.activation == DenseActivation::kLeakyRelu ? 0.1f : 0.0f;
  absl::StatusOr<std::unique_ptr<Conv2dKernel>> kernel = backend_->CreateConv2dKernel(g, options);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE((*kernel)->Forward(x, w, b, &y).ok());

  const std::vector<double> z = reference::ConvForward(
      g, ToDouble(x), ToDouble(w), c.bias ? ToDouble(b) : std::vector<double>());
  std::vector<double> want_y(z.size());
  for (size_t i = 0; i < z.size(); ++i) {
    want_y[i] =
        activation_math::Activate(c.activation, options.activation.alpha, static_cast<float>(z[i]));
  }
  ExpectNear(y, want_y, c.name + " y");

  Tensor dy = Random2d(g.batch, g.out_size(), 1.0, rng);
  std::vector<double> dz = ToDouble(dy);
  for (size_t i = 0; i < dz.size(); ++i) {
    dz[i] *= activation_math::Derivative(c.activation, options.activation.alpha,
                                         static_cast<float>(z[i]), static_cast<float>(want_y[i]));
  }
  Tensor dw = std::move(backend_->Allocate2d(DType::kF32, g.out_channels, g.weight_cols())).value();
  Tensor db = std::move(backend_->Allocate1d(DType::kF32, g.out_channels)).value();
  Tensor dx = std::move(backend_->Allocate2d(DType::kF32, g.batch, g.in_size())).value();
  ASSERT_TRUE((*kernel)->Backward(x, w, y, &dy, &dw, c.bias ? &db : nullptr, &dx).ok());
  const reference::ConvGrads want = reference::ConvBackward(g, ToDouble(x), ToDouble(w), dz);
  ExpectNear(dy, dz, c.name + " dz");
  ExpectNear(dw, want.dw, c.name + " dw");
  if (c.bias) ExpectNear(db, want.db, c.name + " db");
  ExpectNear(dx, want.dx, c.name + " dx");

  // Without dx (the first layer), the parameters' gradients are the same.
  Tensor dy2 = Random2d(g.batch, g.out_size(), 1.0, rng);
  std::vector<double> dz2 = ToDouble(dy2);
  for (size_t i = 0; i < dz2.size(); ++i) {
    dz2[i] *= activation_math::Derivative(c.activation, options.activation.alpha,
                                          static_cast<float>(z[i]), static_cast<float>(want_y[i]));
  }
  ASSERT_TRUE((*kernel)->Backward(x, w, y, &dy2, &dw, nullptr, nullptr).ok());
  ExpectNear(dw, reference::ConvBackward(g, ToDouble(x), ToDouble(w), dz2).dw,
             c.name + " dw without dx");
}

// NCHW rows <-> NHWC rows (backend.h, "Image tensors").
Tensor Transposed(Backend& backend, const Tensor& t, int64_t rows, int64_t cols) {
  Tensor out = std::move(backend.Allocate2d(DType::kF32, t.rows(), t.cols())).value();
  EXPECT_TRUE(backend.TransposeBlocks(t, t.rows(), rows, cols, &out).ok());
  return out;
}

// The same kernel on channels-last images: read and written NHWC, the same
// values as the definition's (NCHW) once transposed back.
TEST_P(CpuConvKernelTest, ChannelsLastMatchesTheDefinition) {
  const ConvCase& c = GetParam();
  const Conv2dGeometry& g = c.g;
  const int64_t in_pixels = g.in_height * g.in_width, out_pixels = g.out_height() * g.out_width();
  Rng rng(13);
  Tensor x = Random2d(g.batch, g.in_size(), 1.0, rng);
  Tensor w = Random2d(g.out_channels, g.weight_cols(), 0.5, rng);
  Tensor b = Random1d(g.out_channels, 0.5, rng);
  Tensor y = std::move(backend_->Allocate2d(DType::kF32, g.batch, g.out_size())).value();
  Conv2dKernelOptions options;
  options.bias = c.bias;
  options.activation.kind = c.activation;
  options.activation.alpha = c.activation == DenseActivation::kLeakyRelu ? 0.1f : 0.0f;
  options.channels_last = true;
  absl::StatusOr<std::unique_ptr<Conv2dKernel>> kernel = backend_->CreateConv2dKernel(g, options);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  const Tensor x_last = Transposed(*backend_, x, g.in_channels, in_pixels);
  ASSERT_TRUE((*kernel)->Forward(x_last, w, b, &y).ok());
  const std::vector<double> z = reference::ConvForward(
      g, ToDouble(x), ToDouble(w), c.bias ? ToDouble(b) : std::vector<double>());
  std::vector<double> want_y(z.size());
  for (size_t i = 0; i < z.size(); ++i) {
    want_y[i] =
        activation_math::Activate(c.activation, options.activation.alpha, static_cast<float>(z[i]));
  }
  ExpectNear(Transposed(*backend_, y, out_pixels, g.out_channels), want_y, c.name + " y");
  Tensor dy = Random2d(g.batch, g.out_size(), 1.0, rng);
  std::vector<double> dz = ToDouble(dy);
  for (size_t i = 0; i < dz.size(); ++i) {
    dz[i] *= activation_math::Derivative(c.activation, options.activation.alpha,
                                         static_cast<float>(z[i]), static_cast<float>(want_y[i]));
  }
  Tensor dy_last = Transposed(*backend_, dy, g.out_channels, out_pixels);
  Tensor dw = std::move(backend_->Allocate2d(DType::kF32, g.out_channels, g.weight_cols())).value();
  Tensor db = std::move(backend_->Allocate1d(DType::kF32, g.out_channels)).value();
  Tensor dx = std::move(backend_->Allocate2d(DType::kF32, g.batch, g.in_size())).value();
  ASSERT_TRUE((*kernel)->Backward(x_last, w, y, &dy_last, &dw, c.bias ? &db : nullptr, &dx).ok());
  const reference::ConvGrads want = reference::ConvBackward(g, ToDouble(x), ToDouble(w), dz);
  ExpectNear(dw, want.dw, c.name + " dw");
  if (c.bias) ExpectNear(db, want.db, c.name + " db");
  ExpectNear(Transposed(*backend_, dx, in_pixels, g.in_channels), want.dx, c.name + " dx");
}

// A float rounded to bf16 (to nearest, ties to even), as oneDNN's reorders
// convert.
double Bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

std::vector<double> RoundedToBf16(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.size()));
  for (int64_t i = 0; i < t.size(); ++i) out[i] = Bf16(t.f32()[i]);
  return out;
}

// training.precision: bf16: the products read bf16 images, weights and
// output gradients and accumulate in f32, so the results are the
// definition's on the bf16-rounded operands (and not on the f32 ones).
TEST(CpuConvKernelBf16Test, ProductsOfBf16OperandsAccumulatedInF32) {
  if (!CpuSupportsBf16()) GTEST_SKIP() << "no bf16 matmuls on this CPU";
  std::unique_ptr<Backend> backend = std::move(CreateCpuBackend(traind::v1::BF16)).value();
  for (ConvCase c : ConvCases()) {
    if (c.activation != DenseActivation::kLinear) continue;  // the product alone
    const Conv2dGeometry& g = c.g;
    Rng rng(12);
    auto random = [&](int64_t rows, int64_t cols, double scale) {
      Tensor t = std::move(backend->Allocate2d(DType::kF32, rows, cols)).value();
      for (int64_t i = 0; i < t.size(); ++i) {
        t.f32()[i] = static_cast<float>(scale * (2 * rng.Uniform() - 1));
      }
      return t;
    };
    Tensor x = random(g.batch, g.in_size(), 1.0), w = random(g.out_channels, g.weight_cols(), 0.5);
    Tensor b = random(1, g.out_channels, 0.5);
    Tensor y = std::move(backend->Allocate2d(DType::kF32, g.batch, g.out_size())).value();
    Conv2dKernelOptions options;
    options.bias = c.bias;
    absl::StatusOr<std::unique_ptr<Conv2dKernel>> kernel = backend->CreateConv2dKernel(g, options);
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    ASSERT_TRUE((*kernel)->Forward(x, w, b, &y).ok());
    const std::vector<double> bias = c.bias ? ToDouble(b) : std::vector<double>();
    ExpectNear(y, reference::ConvForward(g, RoundedToBf16(x), RoundedToBf16(w), bias),
               c.name + " bf16 y");
    // Not the f32 operands' result: the largest difference is that of bf16.
    const std::vector<double> f32 = reference::ConvForward(g, ToDouble(x), ToDouble(w), bias);
    double largest = 0;
    for (size_t i = 0; i < f32.size(); ++i)
      largest = std::max(largest, std::fabs(y.f32()[i] - f32[i]));
    EXPECT_GT(largest, 1e-4) << c.name;

    Tensor dy = random(g.batch, g.out_size(), 1.0);
    const std::vector<double> dz = RoundedToBf16(dy);
    Tensor dw =
        std::move(backend->Allocate2d(DType::kF32, g.out_channels, g.weight_cols())).value();
    Tensor db = std::move(backend->Allocate1d(DType::kF32, g.out_channels)).value();
    Tensor dx = std::move(backend->Allocate2d(DType::kF32, g.batch, g.in_size())).value();
    ASSERT_TRUE((*kernel)->Backward(x, w, y, &dy, &dw, c.bias ? &db : nullptr, &dx).ok());
    const reference::ConvGrads want =
        reference::ConvBackward(g, RoundedToBf16(x), RoundedToBf16(w), dz);
    ExpectNear(dw, want.dw, c.name + " bf16 dw");
    ExpectNear(dx, want.dx, c.name + " bf16 dx");
    if (c.bias) ExpectNear(db, want.db, c.name + " bf16 db");
  }
}

INSTANTIATE_TEST_SUITE_P(Geometries, CpuConvKernelTest, ::testing::ValuesIn(ConvCases()),
                         [](const ::testing::TestParamInfo<ConvCase>& info) {
                           return info.param.name;
                         });

// The reference's gradients are those of its forward pass: central
// differences of L = Σ dz ⊙ (conv(x, w) + b), in double.
TEST(ConvReferenceTest, GradientsAreTheForwardPassesFiniteDifferences) {
  Conv2dGeometry g = Conv(2, 4, 5, 6, 4, 3, 2);
  g.groups = 2;
  g.stride_height = 2;
  g.dilation_width = 2;
  g.pad_top = 1;
  g.pad_right = 2;
  Rng rng(3);
  auto random = [&](int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& e : v) e = 2 * rng.Uniform() - 1;
    return v;
  };
  std::vector<double> x = random(g.batch * g.in_size());
  std::vector<double> w = random(g.out_channels * g.weight_cols());
  std::vector<double> b = random(g.out_channels);
  const std::vector<double> dz = random(g.batch * g.out_size());
  auto loss = [&]() {
    const std::vector<double> z = reference::ConvForward(g, x, w, b);
    double l = 0;
    for (size_t i = 0; i < z.size(); ++i) l += dz[i] * z[i];
    return l;
  };
  const reference::ConvGrads grads = reference::ConvBackward(g, x, w, dz);
  const double e = 1e-6;
  for (auto [values, grad, name] :
       {std::tuple{&x, &grads.dx, "dx"}, std::tuple{&w, &grads.dw, "dw"},
        std::tuple{&b, &grads.db, "db"}}) {
    for (size_t i = 0; i < values->size(); ++i) {
      const double kept = (*values)[i];
      (*values)[i] = kept + e;
      const double up = loss();
      (*values)[i] = kept - e;
      const double down = loss();
      (*values)[i] = kept;
      EXPECT_NEAR((*grad)[i], (up - down) / (2 * e), 1e-6) << name << "[" << i << "]";
    }
  }
}

struct PoolCase {
  std::string name;
  Pool2dGeometry g;
  PoolKind kind;
};

Pool2dGeometry Pool(int64_t batch, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw,
                    int64_t stride, int64_t pad) {
  Pool2dGeometry g;
  g.batch = batch;
  g.channels = c;
  g.in_height = h;
  g.in_width = w;
  g.kernel_height = kh;
  g.kernel_width = kw;
  g.stride_height = g.stride_width = stride;
  g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = pad;
  return g;
}

std::vector<PoolCase> PoolCases() {
  return {
      {"max_2x2_stride_2", Pool(2, 3, 8, 6, 2, 2, 2, 0), PoolKind::kMax},
      {"max_3x3_stride_2_padding_1", Pool(2, 3, 7, 9, 3, 3, 2, 1), PoolKind::kMax},
      {"max_2x2_stride_2_odd_input", Pool(1, 2, 7, 5, 2, 2, 2, 0), PoolKind::kMax},
      {"average_3x3_stride_1_padding_1", Pool(2, 2, 6, 5, 3, 3, 1, 1), PoolKind::kAverage},
      {"average_excluding_padding", Pool(2, 2, 6, 5, 3, 3, 1, 1), PoolKind::kAverageExcludePadding},
      {"global_average_5x7", Pool(3, 4, 5, 7, 5, 7, 1, 0), PoolKind::kAverage},
  };
}

class CpuPoolKernelTest : public CpuBackendTest, public ::testing::WithParamInterface<PoolCase> {};

TEST_P(CpuPoolKernelTest, ForwardAndBackwardMatchTheDefinition) {
  const PoolCase& c = GetParam();
  const Pool2dGeometry& g = c.g;
  Rng rng(5);
  Tensor x = Random2d(g.batch, g.in_size(), 1.0, rng);
  Tensor y = std::move(backend_->Allocate2d(DType::kF32, g.batch, g.out_size())).value();
  absl::StatusOr<std::unique_ptr<Pool2dKernel>> kernel = backend_->CreatePool2dKernel(g, c.kind);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  // An evaluation pass, then a training pass: the same values.
  ASSERT_TRUE((*kernel)->Forward(false, x, &y).ok());
  const std::vector<double> want = reference::PoolForward(g, c.kind, ToDouble(x));
  ExpectNear(y, want, c.name + " y (evaluation)");
  ASSERT_TRUE(backend_->Fill(0.0f, &y).ok());
  ASSERT_TRUE((*kernel)->Forward(true, x, &y).ok());
  ExpectNear(y, want, c.name + " y");

  Tensor dy = Random2d(g.batch, g.out_size(), 1.0, rng);
  Tensor dx = std::move(backend_->Allocate2d(DType::kF32, g.batch, g.in_size())).value();
  ASSERT_TRUE(backend_->Fill(7.0f, &dx).ok());  // overwritten, not accumulated
  ASSERT_TRUE((*kernel)->Backward(dy, &dx).ok());
  ExpectNear(dx, reference::PoolBackward(g, c.kind, ToDouble(x), ToDouble(dy)), c.name + " dx");
}

TEST_P(CpuPoolKernelTest, ChannelsLastMatchesTheDefinition) {
  const PoolCase& c = GetParam();
  const Pool2dGeometry& g = c.g;
  const int64_t in_pixels = g.in_height * g.in_width, out_pixels = g.out_height() * g.out_width();
  Rng rng(6);
  Tensor x = Random2d(g.batch, g.in_size(), 1.0, rng);
  Tensor y = std::move(backend_->Allocate2d(DType::kF32, g.batch, g.out_size())).value();
  Pool2dKernelOptions options;
  options.kind = c.kind;
  options.channels_last = true;
  absl::StatusOr<std::unique_ptr<Pool2dKernel>> kernel = backend_->CreatePool2dKernel(g, options);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_TRUE((*kernel)->Forward(true, Transposed(*backend_, x, g.channels, in_pixels), &y).ok());
  ExpectNear(Transposed(*backend_, y, out_pixels, g.channels),
             reference::PoolForward(g, c.kind, ToDouble(x)), c.name + " y");
  Tensor dy = Random2d(g.batch, g.out_size(), 1.0, rng);
  Tensor dx = std::move(backend_->Allocate2d(DType::kF32, g.batch, g.in_size())).value();
  ASSERT_TRUE((*kernel)->Backward(Transposed(*backend_, dy, g.channels, out_pixels), &dx).ok());
  ExpectNear(Transposed(*backend_, dx, in_pixels, g.channels),
             reference::PoolBackward(g, c.kind, ToDouble(x), ToDouble(dy)), c.name + " dx");
}

INSTANTIATE_TEST_SUITE_P(Geometries, CpuPoolKernelTest, ::testing::ValuesIn(PoolCases()),
                         [](const ::testing::TestParamInfo<PoolCase>& info) {
                           return info.param.name;
                         });

TEST_F(CpuBackendTest, BadConvAndPoolGeometriesAreRefusedNamingTheProblem) {
  Conv2dGeometry g = Conv(1, 3, 8, 8, 4, 3, 3);
  g.groups = 2;
  absl::StatusOr<std::unique_ptr<Conv2dKernel>> conv =
      backend_->CreateConv2dKernel(g, Conv2dKernelOptions());
  ASSERT_FALSE(conv.ok());
  EXPECT_EQ(conv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(conv.status().message().find("not divisible by 2 groups"), std::string::npos)
      << conv.status();
  g = Conv(1, 3, 2, 2, 4, 3, 3);
  conv = backend_->CreateConv2dKernel(g, Conv2dKernelOptions());
  ASSERT_FALSE(conv.ok());
  EXPECT_NE(conv.status().message().find("kernel 3×3 (dilation 1×1) on a 2×2 input"),
            std::string::npos)
      << conv.status();
  absl::StatusOr<std::unique_ptr<Pool2dKernel>> pool =
      backend_->CreatePool2dKernel(Pool(1, 1, 4, 4, 2, 2, 2, 2), PoolKind::kMax);
  ASSERT_FALSE(pool.ok());
  EXPECT_NE(pool.status().message().find("padding at most half the kernel"), std::string::npos)
      << pool.status();
  pool = backend_->CreatePool2dKernel(Pool(1, 1, 2, 2, 3, 3, 1, 0), PoolKind::kMax);
  ASSERT_FALSE(pool.ok());
  EXPECT_NE(pool.status().message().find("kernel 3×3 on a 2×2 input"), std::string::npos)
      << pool.status();
  // A stride past the input too (floor division, not truncation toward 0).
  pool = backend_->CreatePool2dKernel(Pool(1, 1, 1, 1, 3, 3, 3, 0), PoolKind::kMax);
  ASSERT_FALSE(pool.ok());
  EXPECT_NE(pool.status().message().find("kernel 3×3 on a 1×1 input"), std::string::npos)
      << pool.status();
  g = Conv(1, 3, 1, 1, 4, 3, 3);
  g.stride_height = g.stride_width = 2;
  EXPECT_FALSE(backend_->CreateConv2dKernel(g, Conv2dKernelOptions()).ok());
}

// A pooling backward pass needs a training forward pass before it.
TEST_F(CpuBackendTest, PoolBackwardBeforeATrainingForwardIsRefused) {
  const Pool2dGeometry g = Pool(1, 1, 4, 4, 2, 2, 2, 0);
  absl::StatusOr<std::unique_ptr<Pool2dKernel>> pool =
      backend_->CreatePool2dKernel(g, PoolKind::kMax);
  ASSERT_TRUE(pool.ok());
  Rng rng(1);
  Tensor dy = Random2d(1, g.out_size(), 1.0, rng);
  Tensor dx = std::move(backend_->Allocate2d(DType::kF32, 1, g.in_size())).value();
  EXPECT_EQ((*pool)->Backward(dy, &dx).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace traind::engine
