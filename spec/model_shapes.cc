#include "spec/model_shapes.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"

namespace traind::spec {
namespace {

absl::Status Bad(const std::string& path, const std::string& what) {
  return InvalidSpecError(absl::StrCat(path, ": ", what));
}

// kernel, stride or dilation: one number or [height, width], each >= 1
// (`required`: at least one number).
absl::Status CheckPair(const google::protobuf::RepeatedField<int32_t>& v, bool required,
                       const std::string& path) {
  if (v.empty() && !required) return absl::OkStatus();
  if (v.size() != 1 && v.size() != 2) {
    return Bad(path,
               absl::StrFormat("give one number or [height, width], got %d numbers", v.size()));
  }
  for (int32_t n : v) {
    if (n < 1) return Bad(path, absl::StrFormat("must be positive, got %d", n));
  }
  return absl::OkStatus();
}

void Pair(const google::protobuf::RepeatedField<int32_t>& v, int64_t fallback, int64_t* h,
          int64_t* w) {
  *h = v.empty() ? fallback : v[0];
  *w = v.empty() ? fallback : v[v.size() == 2 ? 1 : 0];
}

// What a padding Value says: "valid", "same" or numbers.
struct Padding {
  bool same = false;
  int64_t top = 0, left = 0, bottom = 0, right = 0;
};

bool WholeNumber(double v) { return std::isfinite(v) && v >= 0 && v == std::floor(v) && v < 1e6; }

absl::StatusOr<Padding> ParsePadding(const google::protobuf::Value& v, const std::string& path) {
  Padding p;
  constexpr const char* kForms =
      "\"valid\", \"same\", a number, [height, width] or [top, left, bottom, right]";
  switch (v.kind_case()) {
    case google::protobuf::Value::KIND_NOT_SET:
    case google::protobuf::Value::kNullValue:
      return p;
    case google::protobuf::Value::kStringValue:
      if (v.string_value() == "valid") return p;
      if (v.string_value() == "same") {
        p.same = true;
        return p;
      }
      return Bad(path, absl::StrCat("\"", v.string_value(), "\": expected ", kForms));
    case google::protobuf::Value::kNumberValue:
      if (!WholeNumber(v.number_value())) {
        return Bad(path, absl::StrFormat("must be a whole number >= 0, got %g", v.number_value()));
      }
      p.top = p.left = p.bottom = p.right = static_cast<int64_t>(v.number_value());
      return p;
    case google::protobuf::Value::kListValue: {
      const auto& list = v.list_value().values();
      if (list.size() != 2 && list.size() != 4) {
        return Bad(path, absl::StrCat("expected ", kForms, ", got a list of ", list.size()));
      }
      std::vector<int64_t> n;
      for (int i = 0; i < list.size(); ++i) {
        if (list[i].kind_case() != google::protobuf::Value::kNumberValue ||
            !WholeNumber(list[i].number_value())) {
          return Bad(absl::StrCat(path, "[", i, "]"), "must be a whole number >= 0");
        }
        n.push_back(static_cast<int64_t>(list[i].number_value()));
      }
      if (n.size() == 2) {
        p.top = p.bottom = n[0];
        p.left = p.right = n[1];
      } else {
        p.top = n[0];
        p.left = n[1];
        p.bottom = n[2];
        p.right = n[3];
      }
      return p;
    }
    default:
      return Bad(path, absl::StrCat("expected ", kForms));
  }
}

// "same": the output is ceil(in / stride), the padding split evenly with
// the odd pixel after (TensorFlow's rule; PyTorch's for stride 1).
void SamePadding(int64_t in, int64_t kernel, int64_t stride, int64_t dilation, int64_t* before,
                 int64_t* after) {
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>(0, (out - 1) * stride + dilation * (kernel - 1) + 1 - in);
  *before = total / 2;
  *after = total - *before;
}

absl::Status NeedsImage(const ValueShape& in, const std::string& path) {
  if (in.image()) return absl::OkStatus();
  return Bad(path,
             absl::StrCat("needs an image input (set data.shape: [C, H, W]), got ", in.ToString()));
}

}  // namespace

std::string ValueShape::ToString() const {
  if (image()) return absl::StrCat(channels, "×", height, "×", width);
  return absl::StrCat(features, features == 1 ? " feature" : " features");
}

absl::StatusOr<ValueShape> ModelInputShape(const traind::v1::DataSpec& data, int64_t features) {
  if (data.shape().empty()) return ValueShape::Features(features);
  if (data.shape_size() != 3) {
    return Bad("data.shape", absl::StrFormat("give [channels, height, width], got %d numbers",
                                             data.shape_size()));
  }
  for (int i = 0; i < 3; ++i) {
    if (data.shape(i) < 1) {
      return Bad(absl::StrCat("data.shape[", i, "]"),
                 absl::StrFormat("must be positive, got %d", data.shape(i)));
    }
  }
  const ValueShape s = ValueShape::Image(data.shape(0), data.shape(1), data.shape(2));
  if (s.features != features) {
    return Bad("data.shape",
               absl::StrFormat("%s is %d values per row, but the data has %d features",
                               s.ToString(), s.features, features));
  }
  return s;
}

absl::Status CheckConv2dFields(const traind::v1::Conv2d& conv, const std::string& path) {
  if (conv.filters() < 1) {
    return Bad(path + ".filters", absl::StrFormat("must be positive, got %d", conv.filters()));
  }
  TRAIND_RETURN_IF_ERROR(CheckPair(conv.kernel(), /*required=*/true, path + ".kernel"));
  TRAIND_RETURN_IF_ERROR(CheckPair(conv.stride(), false, path + ".stride"));
  TRAIND_RETURN_IF_ERROR(CheckPair(conv.dilation(), false, path + ".dilation"));
  if (conv.groups() < 0) {
    return Bad(path + ".groups", absl::StrFormat("must be positive, got %d", conv.groups()));
  }
  return ParsePadding(conv.padding(), path + ".padding").status();
}

absl::Status CheckPool2dFields(const traind::v1::Pool2d& pool, const std::string& path) {
  TRAIND_RETURN_IF_ERROR(CheckPair(pool.kernel(), /*required=*/true, path + ".kernel"));
  TRAIND_RETURN_IF_ERROR(CheckPair(pool.stride(), false, path + ".stride"));
  return ParsePadding(pool.padding(), path + ".padding").status();
}

absl::StatusOr<Window2d> Conv2dWindow(const traind::v1::Conv2d& conv, const ValueShape& in,
                                      const std::string& path) {
  TRAIND_RETURN_IF_ERROR(NeedsImage(in, path));
  Window2d w;
  Pair(conv.kernel(), 1, &w.kernel_height, &w.kernel_width);
  Pair(conv.stride(), 1, &w.stride_height, &w.stride_width);
  Pair(conv.dilation(), 1, &w.dilation_height, &w.dilation_width);
  TRAIND_ASSIGN_OR_RETURN(const Padding p, ParsePadding(conv.padding(), path + ".padding"));
  if (p.same) {
    SamePadding(in.height, w.kernel_height, w.stride_height, w.dilation_height, &w.pad_top,
                &w.pad_bottom);
    SamePadding(in.width, w.kernel_width, w.stride_width, w.dilation_width, &w.pad_left,
                &w.pad_right);
  } else {
    w.pad_top = p.top;
    w.pad_left = p.left;
    w.pad_bottom = p.bottom;
    w.pad_right = p.right;
  }
  if (w.out_height(in.height) < 1 || w.out_width(in.width) < 1) {
    const bool dilated = w.dilation_height > 1 || w.dilation_width > 1;
    return Bad(path,
               absl::StrFormat("kernel %d×%d%s on a %d×%d input%s", w.kernel_height, w.kernel_width,
                               dilated ? absl::StrFormat(" (dilation %d×%d)", w.dilation_height,
                                                         w.dilation_width)
                                       : "",
                               in.height, in.width,
                               p.top + p.left + p.bottom + p.right > 0 ? " with its padding" : ""));
  }
  const int64_t groups = conv.groups() == 0 ? 1 : conv.groups();
  if (in.channels % groups != 0 || conv.filters() % groups != 0) {
    return Bad(path + ".groups",
               absl::StrFormat("%d must divide the input's %d channels and the %d filters", groups,
                               in.channels, conv.filters()));
  }
  return w;
}

absl::StatusOr<Window2d> Pool2dWindow(const traind::v1::Pool2d& pool, const ValueShape& in,
                                      const std::string& path) {
  TRAIND_RETURN_IF_ERROR(NeedsImage(in, path));
  Window2d w;
  Pair(pool.kernel(), 1, &w.kernel_height, &w.kernel_width);
  if (pool.stride().empty()) {
    w.stride_height = w.kernel_height;
    w.stride_width = w.kernel_width;
  } else {
    Pair(pool.stride(), 1, &w.stride_height, &w.stride_width);
  }
  TRAIND_ASSIGN_OR_RETURN(const Padding p, ParsePadding(pool.padding(), path + ".padding"));
  if (p.same) {
    SamePadding(in.height, w.kernel_height, w.stride_height, 1, &w.pad_top, &w.pad_bottom);
    SamePadding(in.width, w.kernel_width, w.stride_width, 1, &w.pad_left, &w.pad_right);
  } else {
    w.pad_top = p.top;
    w.pad_left = p.left;
    w.pad_bottom = p.bottom;
    w.pad_right = p.right;
  }
  if (2 * std::max(w.pad_top, w.pad_bottom) > w.kernel_height ||
      2 * std::max(w.pad_left, w.pad_right) > w.kernel_width) {
    return Bad(path + ".padding",
               absl::StrFormat("at most half the kernel (%d×%d) on each side, got %d,%d,%d,%d "
                               "(top, left, bottom, right)",
                               w.kernel_height, w.kernel_width, w.pad_top, w.pad_left, w.pad_bottom,
                               w.pad_right));
  }
  if (w.out_height(in.height) < 1 || w.out_width(in.width) < 1) {
    return Bad(path, absl::StrFormat("kernel %d×%d on a %d×%d input", w.kernel_height,
                                     w.kernel_width, in.height, in.width));
  }
  return w;
}

absl::StatusOr<std::vector<ValueShape>> LayerShapes(const traind::v1::ModelSpec& model,
                                                    const ValueShape& input) {
  std::vector<ValueShape> out;
  ValueShape shape = input;
  for (int i = 0; i < model.layers_size(); ++i) {
    const traind::v1::Layer& layer = model.layers(i);
    const std::string path = absl::StrCat("model.layers[", i, "]");
    switch (layer.kind_case()) {
      case traind::v1::Layer::kDense:
        shape = ValueShape::Features(layer.dense().units());
        break;
      case traind::v1::Layer::kConv2D: {
        TRAIND_ASSIGN_OR_RETURN(const Window2d w,
                                Conv2dWindow(layer.conv2d(), shape, path + ".conv2d"));
        shape = ValueShape::Image(layer.conv2d().filters(), w.out_height(shape.height),
                                  w.out_width(shape.width));
        break;
      }
      case traind::v1::Layer::kMaxPool2D:
      case traind::v1::Layer::kAvgPool2D: {
        const bool max = layer.kind_case() == traind::v1::Layer::kMaxPool2D;
        TRAIND_ASSIGN_OR_RETURN(const Window2d w,
                                Pool2dWindow(max ? layer.max_pool2d() : layer.avg_pool2d(), shape,
                                             path + (max ? ".max_pool2d" : ".avg_pool2d")));
        shape =
            ValueShape::Image(shape.channels, w.out_height(shape.height), w.out_width(shape.width));
        break;
      }
      case traind::v1::Layer::kGlobalAvgPool2D:
        TRAIND_RETURN_IF_ERROR(NeedsImage(shape, path + ".global_avg_pool2d"));
        shape = ValueShape::Features(shape.channels);
        break;
      case traind::v1::Layer::kFlatten:
        shape = ValueShape::Features(shape.features);
        break;
      case traind::v1::Layer::kBatchNorm:  // on an image: per channel
      case traind::v1::Layer::kActivation:
      case traind::v1::Layer::kDropout:
      case traind::v1::Layer::kLayerNorm:
      case traind::v1::Layer::KIND_NOT_SET:
        break;  // elementwise or per row: the shape stays
    }
    out.push_back(shape);
  }
  return out;
}

}  // namespace traind::spec
