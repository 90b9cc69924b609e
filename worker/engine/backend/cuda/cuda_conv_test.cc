// The CUDA backend's image ops against the CPU backend's (oneDNN): every
// convolution option (stride, symmetric and asymmetric padding, dilation,
// groups, bias, each activation a convolution fuses) forward and backward,
// every pooling kind, the block transposes of per-channel batch norm; and a
// small convolutional network trained on the GPU as on the CPU, the same
// way twice (deterministic algorithms: what an exact resume needs), with
// step graphs exactly as op by op. Skipped without a device.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "gtest/gtest.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/cuda/cuda_backend.h"
#include "worker/engine/backend/cuda/cuda_conv_kernel.h"
#include "worker/engine/backend/cuda/cuda_status.h"
#include "worker/engine/backend/cuda/testing/cuda_vs_cpu_fixture.h"
#include "worker/engine/fit.h"
#include "worker/engine/testing/epoch_recorder.h"

namespace traind::engine {
namespace {

using traind::v1::JobSpec;

// Sums over receptive fields in another order (and cuDNN's algorithms
// split them differently): GEMM's bounds.
constexpr double kConvRtol = 2e-4, kConvAtol = 2e-5;

struct ConvCase {
  const char* name;
  Conv2dGeometry g;
  DenseActivation act;
  bool bias;
};

Conv2dGeometry Geometry(int64_t c, int64_t h, int64_t w, int64_t f, int64_t k, int64_t stride,
                        int64_t pads[4], int64_t dilation, int64_t groups) {
  Conv2dGeometry g;
  g.batch = 5;
  g.in_channels = c;
  g.in_height = h;
  g.in_width = w;
  g.out_channels = f;
  g.kernel_height = g.kernel_width = k;
  g.stride_height = g.stride_width = stride;
  g.pad_top = pads[0];
  g.pad_left = pads[1];
  g.pad_bottom = pads[2];
  g.pad_right = pads[3];
  g.dilation_height = g.dilation_width = dilation;
  g.groups = groups;
  return g;
}

std::vector<ConvCase> ConvCases() {
  int64_t none[4] = {0, 0, 0, 0}, one[4] = {1, 1, 1, 1}, same_even[4] = {0, 0, 1, 1},
          same_stride[4] = {1, 0, 1, 1}, wide[4] = {2, 2, 2, 2};
  return {
      {"3x3 valid relu", Geometry(3, 9, 8, 6, 3, 1, none, 1, 1), DenseActivation::kRelu, true},
      {"3x3 same tanh", Geometry(2, 7, 7, 4, 3, 1, one, 1, 1), DenseActivation::kTanh, true},
      {"2x2 same (asymmetric) linear", Geometry(3, 6, 5, 4, 2, 1, same_even, 1, 1),
       DenseActivation::kLinear, true},
      {"3x3 stride 2 asymmetric sigmoid", Geometry(2, 8, 7, 3, 3, 2, same_stride, 1, 1),
       DenseActivation::kSigmoid, true},
      {"3x3 dilation 2 elu", Geometry(2, 11, 10, 4, 3, 1, wide, 2, 1), DenseActivation::kElu, true},
      {"groups 2 no bias", Geometry(4, 7, 6, 6, 3, 1, one, 1, 2), DenseActivation::kRelu, false},
      {"depthwise leaky relu", Geometry(4, 6, 6, 4, 3, 1, one, 1, 4), DenseActivation::kLeakyRelu,
       true},
      {"1x1", Geometry(8, 5, 5, 3, 1, 1, none, 1, 1), DenseActivation::kLinear, false},
  };
}

TEST_F(CudaVsCpuTest, Conv2dEveryOptionForwardAndBackward) {
  for (const ConvCase& c : ConvCases()) {
    SCOPED_TRACE(c.name);
    const Conv2dGeometry& g = c.g;
    Conv2dKernelOptions options;
    options.activation.kind = c.act;
    options.activation.alpha = c.act == DenseActivation::kElu         ? 0.7f
                               : c.act == DenseActivation::kLeakyRelu ? 0.1f
                                                                      : 0.0f;
    options.bias = c.bias;
    auto cpu_kernel = cpu_->CreateConv2dKernel(g, options);
    auto gpu_kernel = gpu_->CreateConv2dKernel(g, options);
    ASSERT_TRUE(cpu_kernel.ok()) << cpu_kernel.status();
    ASSERT_TRUE(gpu_kernel.ok()) << gpu_kernel.status();
    Pair x = Random(g.batch, g.in_size(), -1, 1);
    Pair w = Random(g.out_channels, g.weight_cols(), -0.5, 0.5);
    Pair b = Random(1, g.out_channels, -0.3, 0.3);
    Pair y = Zeros(g.batch, g.out_size());
    ASSERT_TRUE((*cpu_kernel)->Forward(x.cpu, w.cpu, b.cpu, &y.cpu).ok());
    ASSERT_TRUE((*gpu_kernel)->Forward(x.gpu, w.gpu, b.gpu, &y.gpu).ok());
    ExpectClose(y, kConvRtol, kConvAtol, "y");
    Pair dy = Random(g.batch, g.out_size(), -1, 1);
    Pair dw = Zeros(g.out_channels, g.weight_cols());
    Pair db = Zeros(1, g.out_channels);
    Pair dx = Zeros(g.batch, g.in_size());
    // CPU from CPU y, GPU from GPU y: each backend's own forward pass.
    ASSERT_TRUE(
        (*cpu_kernel)->Backward(x.cpu, w.cpu, y.cpu, &dy.cpu, &dw.cpu, &db.cpu, &dx.cpu).ok());
    const absl::Status s =
        (*gpu_kernel)->Backward(x.gpu, w.gpu, y.gpu, &dy.gpu, &dw.gpu, &db.gpu, &dx.gpu);
    ASSERT_TRUE(s.ok()) << s;
    ExpectClose(dy, kConvRtol, kConvAtol, "dz");
    ExpectClose(dw, kConvRtol, 1e-4, "dw");
    if (c.bias) ExpectClose(db, kConvRtol, 1e-4, "db");
    ExpectClose(dx, kConvRtol, kConvAtol, "dx");
  }
}

TEST_F(CudaVsCpuTest, Conv2dWorkspaceStaysWithinTheEstimate) {
  // A geometry whose fastest algorithms would take more: the kernel plans
  // within the unfolded input (spec/memory_estimate.cc's allowance).
  int64_t one[4] = {1, 1, 1, 1};
  const Conv2dGeometry g = Geometry(32, 28, 28, 64, 3, 1, one, 1, 1);
  size_t free_before = 0, free_after = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  auto kernel = gpu_->CreateConv2dKernel(g, Conv2dKernelOptions());
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  // The allocator rounds up to 2 MiB pages.
  EXPECT_LE(static_cast<int64_t>(free_before) - static_cast<int64_t>(free_after),
            ConvWorkspaceCap(g) + (int64_t{4} << 20));
}

TEST_F(CudaVsCpuTest, Pool2dEveryKindForwardAndBackward) {
  struct PoolCase {
    const char* name;
    PoolKind kind;
    int64_t k, stride, pads[4];
  };
  const PoolCase cases[] = {
      {"max 2", PoolKind::kMax, 2, 2, {0, 0, 0, 0}},
      {"max 3 stride 2 padded", PoolKind::kMax, 3, 2, {1, 1, 1, 1}},
      {"max 2 stride 1 asymmetric", PoolKind::kMax, 2, 1, {0, 1, 1, 0}},
      {"avg 3 stride 1 padded", PoolKind::kAverage, 3, 1, {1, 1, 1, 1}},
      {"avg 2 asymmetric", PoolKind::kAverage, 2, 2, {1, 0, 0, 1}},
      {"avg exclude padding", PoolKind::kAverageExcludePadding, 3, 2, {1, 1, 1, 1}},
      {"global avg", PoolKind::kAverage, 7, 1, {0, 0, 0, 0}},
  };
  for (const PoolCase& c : cases) {
    SCOPED_TRACE(c.name);
    Pool2dGeometry g;
    g.batch = 4;
    g.channels = 3;
    g.in_height = 7;
    g.in_width = 7;
    g.kernel_height = g.kernel_width = c.k;
    g.stride_height = g.stride_width = c.stride;
    g.pad_top = c.pads[0];
    g.pad_left = c.pads[1];
    g.pad_bottom = c.pads[2];
    g.pad_right = c.pads[3];
    auto cpu_kernel = cpu_->CreatePool2dKernel(g, c.kind);
    auto gpu_kernel = gpu_->CreatePool2dKernel(g, c.kind);
    ASSERT_TRUE(cpu_kernel.ok()) << cpu_kernel.status();
    ASSERT_TRUE(gpu_kernel.ok()) << gpu_kernel.status();
    Pair x = Random(g.batch, g.in_size(), -2, 2);  // no ties among floats drawn at random
    Pair y = Zeros(g.batch, g.out_size());
    ASSERT_TRUE((*cpu_kernel)->Forward(true, x.cpu, &y.cpu).ok());
    ASSERT_TRUE((*gpu_kernel)->Forward(true, x.gpu, &y.gpu).ok());
    ExpectClose(y, kRtol, kAtol, "y");
    Pair dy = Random(g.batch, g.out_size(), -1, 1);
    Pair dx = Random(g.batch, g.in_size(), 5, 6);  // overwritten
    ASSERT_TRUE((*cpu_kernel)->Backward(dy.cpu, &dx.cpu).ok());
    ASSERT_TRUE((*gpu_kernel)->Backward(dy.gpu, &dx.gpu).ok());
    ExpectClose(dx, kRtol, kAtol, "dx");
    // Inference keeps the training pass's maxima for Backward.
    Pair other = Random(g.batch, g.in_size(), -2, 2);
    ASSERT_TRUE((*gpu_kernel)->Forward(false, other.gpu, &y.gpu).ok());
    ASSERT_TRUE((*gpu_kernel)->Backward(dy.gpu, &dx.gpu).ok());
    ExpectClose(dx, kRtol, kAtol, "dx after an inference pass");
  }
}

TEST_F(CudaVsCpuTest, TransposeBlocksIsExact) {
  Pair x = Random(6, 5 * 7, -1, 1);
  Pair y = Zeros(6, 5 * 7);
  ASSERT_TRUE(cpu_->TransposeBlocks(x.cpu, 6, 5, 7, &y.cpu).ok());
  ASSERT_TRUE(gpu_->TransposeBlocks(x.gpu, 6, 5, 7, &y.gpu).ok());
  ExpectClose(y, 0, 0, "transposed");
  Pair bad = Zeros(6, 34);
  EXPECT_EQ(gpu_->TransposeBlocks(x.gpu, 6, 5, 7, &bad.gpu).code(),
            absl::StatusCode::kInvalidArgument);
}

// Byte images of three classes (a bar, a column, a diagonal) with noise.
data::Dataset Images(int64_t rows) {
  data::Dataset images;
  images.rows = rows;
  images.features = 144;
  images.image_shape = {1, 12, 12};
  images.target = data::TargetKind::kClasses;
  images.classes = {"bar", "column", "diagonal"};
  Rng rng(4);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t label = static_cast<int32_t>(r % 3);
    images.y.push_back(label);
    images.lines.push_back(r);
    for (int p = 0; p < 144; ++p) {
      const int i = p / 12, j = p % 12;
      const bool on = label == 0 ? i == 5 : label == 1 ? j == 6 : i == j;
      images.pixels.push_back(static_cast<uint8_t>((on ? 150 : 30) + rng.UniformInt(70)));
    }
  }
  images.outputs = 3;
  return images;
}

JobSpec ConvSpec() {
  JobSpec spec;
  spec.set_seed(5);
  spec.mutable_data()->set_scaling(traind::v1::STANDARD);
  for (int d : {1, 12, 12}) spec.mutable_data()->add_shape(d);
  auto* conv = spec.mutable_model()->add_layers()->mutable_conv2d();
  conv->set_filters(8);
  conv->add_kernel(3);
  conv->mutable_padding()->set_string_value("same");
  conv->set_activation(traind::v1::RELU);
  spec.mutable_model()->add_layers()->mutable_batch_norm();
  spec.mutable_model()->add_layers()->mutable_max_pool2d()->add_kernel(2);
  auto* conv2 = spec.mutable_model()->add_layers()->mutable_conv2d();
  conv2->set_filters(8);
  conv2->add_kernel(2);
  conv2->add_stride(2);
  conv2->mutable_padding()->set_string_value("same");
  conv2->set_activation(traind::v1::TANH);
  spec.mutable_model()->add_layers()->mutable_avg_pool2d()->add_kernel(3);
  spec.mutable_model()->add_layers()->mutable_flatten();
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  spec.mutable_loss()->mutable_softmax_cross_entropy();
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.01);
  spec.mutable_training()->set_epochs(4);
  spec.mutable_training()->set_batch_size(32);
  spec.mutable_metrics()->add_val(traind::v1::LOSS);
  spec.mutable_metrics()->add_val(traind::v1::ACCURACY);
  return spec;
}

struct Run {
  absl::StatusOr<traind::v1::FoldResult> result = absl::UnknownError("not run");
  testing::EpochRecorder recorder;
};

std::unique_ptr<Run> FitOn(Backend* backend, const data::Dataset& data, bool graphs) {
  data::FoldRows rows;
  for (int64_t r = 0; r < data.rows; ++r) (r % 5 == 0 ? rows.val : rows.train).push_back(r);
  auto run = std::make_unique<Run>();
  FitOptions options;
  options.backend = backend;
  options.step_graphs = graphs;
  run->result = Fit(ConvSpec(), data, rows, 0, options, &run->recorder);
  return run;
}

TEST(CudaConvFitTest, ConvNetTrainsAsOnTheCpuAndTheSameWayTwice) {
  std::string reason;
  if (cuda::DeviceCount(&reason) == 0) GTEST_SKIP() << reason;
  const data::Dataset data = Images(300);
  auto gpu_a = CreateCudaBackend();
  auto gpu_b = CreateCudaBackend();
  auto cpu = CreateCpuBackend();
  ASSERT_TRUE(gpu_a.ok() && gpu_b.ok() && cpu.ok());
  auto graphs = FitOn(gpu_a->get(), data, true);
  auto ops = FitOn(gpu_b->get(), data, false);
  auto on_cpu = FitOn(cpu->get(), data, false);
  ASSERT_TRUE(graphs->result.ok()) << graphs->result.status();
  ASSERT_TRUE(ops->result.ok()) << ops->result.status();
  ASSERT_TRUE(on_cpu->result.ok()) << on_cpu->result.status();
  EXPECT_TRUE(graphs->recorder.warnings.empty()) << graphs->recorder.warnings[0];
  ASSERT_EQ(ops->recorder.epochs.size(), 4u);
  for (size_t e = 0; e < 4; ++e) {
    const double loss = on_cpu->recorder.epochs[e].val().at("loss");
    // Graphs replay the same kernels: bit-identical; the CPU within rounding.
    EXPECT_EQ(graphs->recorder.epochs[e].val().at("loss"), ops->recorder.epochs[e].val().at("loss"))
        << "epoch " << e + 1;
    EXPECT_NEAR(ops->recorder.epochs[e].val().at("loss"), loss, 5e-3 * loss) << "epoch " << e + 1;
  }
  EXPECT_GT(ops->recorder.epochs.back().val().at("accuracy"), 0.9);
  // A second run on a fresh backend: the same algorithms, the same bits.
  auto again_backend = CreateCudaBackend();
  ASSERT_TRUE(again_backend.ok());
  auto again = FitOn(again_backend->get(), data, false);
  ASSERT_TRUE(again->result.ok()) << again->result.status();
  for (size_t e = 0; e < 4; ++e) {
    EXPECT_EQ(again->recorder.epochs[e].train().at("loss"),
              ops->recorder.epochs[e].train().at("loss"));
    EXPECT_EQ(again->recorder.epochs[e].val().at("loss"), ops->recorder.epochs[e].val().at("loss"));
  }
}

}  // namespace
}  // namespace traind::engine
