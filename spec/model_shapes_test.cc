// Image layers in the spec: shapes layer by layer (hand-computed), "same"
// padding, and the errors that name the layer.
#include "spec/model_shapes.h"

#include <string>
#include <vector>

#include "base/status.h"
#include "gtest/gtest.h"
#include "spec/checks.h"
#include "spec/loader.h"

namespace traind::spec {
namespace {

using traind::v1::JobSpec;

JobSpec Parse(const std::string& yaml) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml, "test.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

// The layers of a spec whose model is `layers` (YAML list items).
JobSpec WithLayers(const std::string& layers) {
  return Parse("model:\n  layers:\n" + layers +
               "optimizer: {sgd: {learning_rate: 0.1}}\n"
               "training: {epochs: 1, batch_size: 8}\n");
}

std::string ShapeError(const JobSpec& spec, const ValueShape& input) {
  absl::Status checked = CheckModelSpec(spec.model());
  if (!checked.ok()) return std::string(checked.message());
  absl::StatusOr<std::vector<ValueShape>> shapes = LayerShapes(spec.model(), input);
  if (shapes.ok()) return "";
  EXPECT_EQ(FailureKindOf(shapes.status()), FailureKind::kInvalidSpec) << shapes.status();
  return std::string(shapes.status().message());
}

// The example network on Fashion-MNIST, by hand: 28 -conv3-> 26
// -pool2-> 13 -conv3-> 11 -pool2-> 5, 64·5·5 = 1600 -> 128 -> 10.
TEST(LayerShapesTest, TheExampleConvNet) {
  const JobSpec spec = WithLayers(
      "    - conv2d: {filters: 32, kernel: 3, activation: relu}\n"
      "    - max_pool2d: {kernel: 2}\n"
      "    - conv2d: {filters: 64, kernel: [3, 3], activation: relu}\n"
      "    - max_pool2d: {kernel: 2}\n"
      "    - dense: {units: 128, activation: relu}\n"
      "    - dropout: {rate: 0.5}\n"
      "    - dense: {units: 10}\n");
  ASSERT_TRUE(CheckModelSpec(spec.model()).ok()) << CheckModelSpec(spec.model());
  EXPECT_EQ(spec.model().layers(0).conv2d().kernel_size(), 1);  // "kernel: 3" is [3]
  absl::StatusOr<std::vector<ValueShape>> shapes =
      LayerShapes(spec.model(), ValueShape::Image(1, 28, 28));
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  const std::vector<ValueShape> want = {
      ValueShape::Image(32, 26, 26), ValueShape::Image(32, 13, 13), ValueShape::Image(64, 11, 11),
      ValueShape::Image(64, 5, 5),   ValueShape::Features(128),     ValueShape::Features(128),
      ValueShape::Features(10)};
  ASSERT_EQ(shapes->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*shapes)[i].ToString(), want[i].ToString()) << "layer " << i;
  }
}

// "same" keeps ceil(input / stride), the odd pixel of padding after.
TEST(LayerShapesTest, SamePaddingStridesDilationAndExplicitPadding) {
  const ValueShape in = ValueShape::Image(3, 7, 8);
  struct Case {
    std::string conv;
    int64_t h, w, top, left, bottom, right;
  };
  const std::vector<Case> cases = {
      // total = (k - 1) = 2 each way.
      {"{filters: 4, kernel: 3, padding: same}", 7, 8, 1, 1, 1, 1},
      // k 4: total 3, one before, two after.
      {"{filters: 4, kernel: 4, padding: same}", 7, 8, 1, 1, 2, 2},
      // stride 2: out 4×4; h: (4-1)·2 + 3 - 7 = 2; w: (4-1)·2 + 3 - 8 = 1.
      {"{filters: 4, kernel: 3, stride: 2, padding: same}", 4, 4, 1, 0, 1, 1},
      // dilation 2: extent 5, total 4.
      {"{filters: 4, kernel: 3, dilation: 2, padding: same}", 7, 8, 2, 2, 2, 2},
      // explicit: [h, w] and [top, left, bottom, right].
      {"{filters: 4, kernel: 3, padding: [1, 0]}", 7, 6, 1, 0, 1, 0},
      {"{filters: 4, kernel: [3, 2], stride: [2, 1], padding: [0, 1, 2, 3]}", 4, 11, 0, 1, 2, 3},
      {"{filters: 4, kernel: 3, padding: valid}", 5, 6, 0, 0, 0, 0},
  };
  for (const Case& c : cases) {
    const JobSpec spec = WithLayers("    - conv2d: " + c.conv + "\n    - dense: {units: 2}\n");
    ASSERT_TRUE(CheckModelSpec(spec.model()).ok())
        << c.conv << ": " << CheckModelSpec(spec.model());
    absl::StatusOr<Window2d> w = Conv2dWindow(spec.model().layers(0).conv2d(), in, "x");
    ASSERT_TRUE(w.ok()) << c.conv << ": " << w.status();
    EXPECT_EQ(w->out_height(in.height), c.h) << c.conv;
    EXPECT_EQ(w->out_width(in.width), c.w) << c.conv;
    EXPECT_EQ(w->pad_top, c.top) << c.conv;
    EXPECT_EQ(w->pad_left, c.left) << c.conv;
    EXPECT_EQ(w->pad_bottom, c.bottom) << c.conv;
    EXPECT_EQ(w->pad_right, c.right) << c.conv;
  }
}

TEST(LayerShapesTest, PoolingDefaultsItsStrideToTheKernelAndGlobalPoolingGivesChannels) {
  const JobSpec spec = WithLayers(
      "    - avg_pool2d: {kernel: [2, 3]}\n"
      "    - max_pool2d: {kernel: 3, stride: 1, padding: 1}\n"
      "    - global_avg_pool2d: {}\n"
      "    - dense: {units: 2}\n");
  absl::StatusOr<std::vector<ValueShape>> shapes =
      LayerShapes(spec.model(), ValueShape::Image(5, 9, 10));
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  EXPECT_EQ((*shapes)[0].ToString(), "5×4×3");
  EXPECT_EQ((*shapes)[1].ToString(), "5×4×3");
  EXPECT_EQ((*shapes)[2].ToString(), "5 features");
  const JobSpec flat = WithLayers("    - flatten: {}\n    - dense: {units: 2}\n");
  shapes = LayerShapes(flat.model(), ValueShape::Image(2, 3, 4));
  ASSERT_TRUE(shapes.ok());
  EXPECT_EQ((*shapes)[0].ToString(), "24 features");
}

TEST(LayerShapesTest, ErrorsNameTheLayerAndWhatDoesNotFit) {
  const ValueShape image = ValueShape::Image(3, 8, 8);
  EXPECT_EQ(ShapeError(WithLayers("    - conv2d: {filters: 4, kernel: 3}\n"
                                  "    - dense: {units: 2}\n"),
                       ValueShape::Features(64)),
            "model.layers[0].conv2d: needs an image input (set data.shape: [C, H, W]), got 64 "
            "features");
  EXPECT_EQ(ShapeError(WithLayers("    - conv2d: {filters: 4, kernel: 3}\n"
                                  "    - max_pool2d: {kernel: 2}\n"
                                  "    - max_pool2d: {kernel: 2}\n"
                                  "    - max_pool2d: {kernel: 3}\n"
                                  "    - dense: {units: 2}\n"),
                       image),
            "model.layers[3].max_pool2d: kernel 3×3 on a 1×1 input");
  EXPECT_EQ(ShapeError(WithLayers("    - conv2d: {filters: 4, kernel: 9}\n"
                                  "    - dense: {units: 2}\n"),
                       image),
            "model.layers[0].conv2d: kernel 9×9 on a 8×8 input");
  EXPECT_EQ(ShapeError(WithLayers("    - conv2d: {filters: 4, kernel: 3, groups: 2}\n"
                                  "    - dense: {units: 2}\n"),
                       image),
            "model.layers[0].conv2d.groups: 2 must divide the input's 3 channels and the 4 "
            "filters");
  EXPECT_EQ(ShapeError(WithLayers("    - max_pool2d: {kernel: 2, padding: 2}\n"
                                  "    - dense: {units: 2}\n"),
                       image),
            "model.layers[0].max_pool2d.padding: at most half the kernel (2×2) on each side, got "
            "2,2,2,2 (top, left, bottom, right)");
  EXPECT_EQ(ShapeError(WithLayers("    - dense: {units: 8}\n"
                                  "    - global_avg_pool2d: {}\n"
                                  "    - dense: {units: 2}\n"),
                       image),
            "model.layers[1].global_avg_pool2d: needs an image input (set data.shape: [C, H, W]), "
            "got 8 features");
  // Batch norm on an image: per channel, the shape stays.
  absl::StatusOr<std::vector<ValueShape>> bn = LayerShapes(
      WithLayers("    - batch_norm: {}\n    - flatten: {}\n    - dense: {units: 2}\n").model(),
      image);
  ASSERT_TRUE(bn.ok()) << bn.status();
  EXPECT_EQ((*bn)[0].ToString(), "3×8×8");
}

TEST(CheckModelSpecTest, ImageLayerFieldsAreCheckedWithTheirPaths) {
  auto message = [](const std::string& layer) {
    const JobSpec spec = WithLayers("    - " + layer + "\n    - dense: {units: 2}\n");
    return std::string(CheckModelSpec(spec.model()).message());
  };
  EXPECT_EQ(message("conv2d: {kernel: 3}"),
            "model.layers[0].conv2d.filters: must be positive, got 0");
  EXPECT_EQ(message("conv2d: {filters: 2}"),
            "model.layers[0].conv2d.kernel: give one number or [height, width], got 0 numbers");
  EXPECT_EQ(message("conv2d: {filters: 2, kernel: [1, 2, 3]}"),
            "model.layers[0].conv2d.kernel: give one number or [height, width], got 3 numbers");
  EXPECT_EQ(message("conv2d: {filters: 2, kernel: 3, stride: 0}"),
            "model.layers[0].conv2d.stride: must be positive, got 0");
  EXPECT_EQ(message("conv2d: {filters: 2, kernel: 3, padding: full}"),
            "model.layers[0].conv2d.padding: \"full\": expected \"valid\", \"same\", a number, "
            "[height, width] or [top, left, bottom, right]");
  EXPECT_EQ(message("conv2d: {filters: 2, kernel: 3, padding: 1.5}"),
            "model.layers[0].conv2d.padding: must be a whole number >= 0, got 1.5");
  EXPECT_EQ(message("conv2d: {filters: 2, kernel: 3, padding: [1, x]}"),
            "model.layers[0].conv2d.padding[1]: must be a whole number >= 0");
  EXPECT_EQ(message("max_pool2d: {stride: 2}"),
            "model.layers[0].max_pool2d.kernel: give one number or [height, width], got 0 numbers");
  EXPECT_EQ(message("conv2d: {filters: 2, kernel: 3, activation: 40}"),
            "model.layers[0].conv2d.activation: unknown value 40");
}

// Image layers train on the GPU too (cuDNN): a GPU job with them is accepted.
TEST(CheckTrainingSpecTest, ImageLayersOnAGpuAreAccepted) {
  JobSpec spec = WithLayers(
      "    - conv2d: {filters: 4, kernel: 3}\n"
      "    - max_pool2d: {kernel: 2}\n"
      "    - dense: {units: 2}\n");
  spec.mutable_resources()->set_device(traind::v1::GPU);
  EXPECT_TRUE(CheckTrainingSpec(spec).ok()) << CheckTrainingSpec(spec);
}

TEST(ModelInputShapeTest, DataShapeMustBeThreePositiveNumbersMatchingTheFeatures) {
  traind::v1::DataSpec data;
  absl::StatusOr<ValueShape> s = ModelInputShape(data, 12);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ToString(), "12 features");
  for (int v : {1, 3, 4}) data.add_shape(v);
  s = ModelInputShape(data, 12);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ToString(), "1×3×4");
  s = ModelInputShape(data, 13);
  EXPECT_EQ(s.status().message(),
            "data.shape: 1×3×4 is 12 values per row, but the data has 13 features");
  data.set_shape(1, 0);
  EXPECT_EQ(ModelInputShape(data, 0).status().message(), "data.shape[1]: must be positive, got 0");
  data.clear_shape();
  data.add_shape(28);
  data.add_shape(28);
  EXPECT_EQ(ModelInputShape(data, 784).status().message(),
            "data.shape: give [channels, height, width], got 2 numbers");
}

}  // namespace
}  // namespace traind::spec
