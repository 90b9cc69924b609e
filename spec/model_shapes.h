// What flows between a model's layers: a row of features, or an image
// (data.shape: [C, H, W]) that image layers (conv2d, pooling) turn into
// other images; the windows of those layers resolved on their inputs
// ("same" padding, defaults); and each layer's output shape, with an error
// naming the layer where one cannot apply. The engine builds its layers
// from these, so what validates at submit is what trains.
#ifndef TRAIND_SPEC_MODEL_SHAPES_H_
#define TRAIND_SPEC_MODEL_SHAPES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"

namespace traind::spec {

// A row of `features` values, or an image of channels × height × width
// (features = their product, in C, H, W order).
struct ValueShape {
  int64_t features = 0;
  int64_t channels = 0, height = 0, width = 0;  // 0: not an image

  bool image() const { return height > 0; }
  static ValueShape Features(int64_t n) {
    ValueShape s;
    s.features = n;
    return s;
  }
  static ValueShape Image(int64_t c, int64_t h, int64_t w) {
    ValueShape s;
    s.channels = c;
    s.height = h;
    s.width = w;
    s.features = c * h * w;
    return s;
  }
  // "3×28×28" or "784 features".
  std::string ToString() const;
  bool operator==(const ValueShape& o) const {
    return features == o.features && channels == o.channels && height == o.height &&
           width == o.width;
  }
};

// A conv2d's or a pooling's window on its input, every default resolved.
struct Window2d {
  int64_t kernel_height = 1, kernel_width = 1;
  int64_t stride_height = 1, stride_width = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t dilation_height = 1, dilation_width = 1;

  // Output pixels for `in` input pixels (0 when the window does not fit).
  int64_t out_height(int64_t in) const {
    return Out(in + pad_top + pad_bottom - dilation_height * (kernel_height - 1) - 1,
               stride_height);
  }
  int64_t out_width(int64_t in) const {
    return Out(in + pad_left + pad_right - dilation_width * (kernel_width - 1) - 1, stride_width);
  }

 private:
  // floor(span / stride) + 1 for span >= 0; 0 for a window past the input.
  static int64_t Out(int64_t span, int64_t stride) { return span < 0 ? 0 : span / stride + 1; }
};

// The model's input: the image data.shape names, or `features` values.
// Errors (InvalidSpecError) name data.shape: not three positive numbers, or
// a product that is not `features`.
absl::StatusOr<ValueShape> ModelInputShape(const traind::v1::DataSpec& data, int64_t features);

// The window of a conv2d / max_pool2d / avg_pool2d on `in` (an image).
// `path` is the layer's ("model.layers[2].conv2d") for errors.
absl::StatusOr<Window2d> Conv2dWindow(const traind::v1::Conv2d& conv, const ValueShape& in,
                                      const std::string& path);
absl::StatusOr<Window2d> Pool2dWindow(const traind::v1::Pool2d& pool, const ValueShape& in,
                                      const std::string& path);

// Each layer's output shape, for `input` (ModelInputShape). Errors
// (InvalidSpecError) name the layer: an image layer on a row of features
// ("model.layers[0].conv2d: needs an image input (set data.shape: [C, H,
// W]), got 64 features"), a window larger than its padded input
// ("model.layers[3].max_pool2d: kernel 3×3 on a 2×2 input"), groups that do
// not divide the channels.
// REQUIRES: CheckModelSpec(model) is ok.
absl::StatusOr<std::vector<ValueShape>> LayerShapes(const traind::v1::ModelSpec& model,
                                                    const ValueShape& input);

// The static checks of the image layers' fields (CheckModelSpec's part):
// `path` is the layer's.
absl::Status CheckConv2dFields(const traind::v1::Conv2d& conv, const std::string& path);
absl::Status CheckPool2dFields(const traind::v1::Pool2d& pool, const std::string& path);

}  // namespace traind::spec

#endif  // TRAIND_SPEC_MODEL_SHAPES_H_
