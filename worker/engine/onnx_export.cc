#include "worker/engine/onnx_export.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/json.h"
#include "base/status.h"
#include "google/protobuf/util/json_util.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"
#include "spec/checks.h"
#include "spec/model_shapes.h"
#include "worker/engine/backend/activation_math.h"
#include "worker/engine/backend/backend.h"
#include "worker/engine/network.h"
#include "worker/engine/onnx_graph.h"

#ifndef TRAIND_VERSION
#define TRAIND_VERSION "unknown"
#endif

namespace traind::engine {
namespace {

constexpr int64_t kOpset = 17;
constexpr int64_t kMlOpset = 3;
constexpr int64_t kIrVersion = 8;  // ONNX 1.12
constexpr char kMlDomain[] = "ai.onnx.ml";
constexpr char kBatch[] = "N";

std::string JsonArray(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  quoted.reserve(items.size());
  for (const std::string& s : items) quoted.push_back(JsonQuote(s));
  return absl::StrCat("[", absl::StrJoin(quoted, ","), "]");
}

std::string TargetKindName(data::TargetKind kind) {
  switch (kind) {
    case data::TargetKind::kClasses:
      return "classes";
    case data::TargetKind::kBinary:
      return "binary";
    case data::TargetKind::kMultiLabel:
      return "multi_label";
    case data::TargetKind::kRegression:
      return "regression";
  }
  return "unknown";
}

void SetShape(onnx::ValueInfoProto* value, int32_t elem_type, std::initializer_list<int64_t> dims) {
  onnx::TypeProto_Tensor* tensor = value->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(elem_type);
  onnx::TensorShapeProto* shape = tensor->mutable_shape();
  for (const int64_t d : dims) {
    // -1: the batch dimension.
    if (d < 0) {
      shape->add_dim()->set_dim_param(kBatch);
    } else {
      shape->add_dim()->set_dim_value(d);
    }
  }
}

using onnx_internal::GraphBuilder;
using onnx_internal::StateTensors;

// A conv's or a pooling's window as ONNX attributes (pads: top, left,
// bottom, right).
void WindowAttrs(onnx::NodeProto* n, const spec::Window2d& w) {
  GraphBuilder::Attr(n, "kernel_shape", std::vector<int64_t>{w.kernel_height, w.kernel_width});
  GraphBuilder::Attr(n, "strides", std::vector<int64_t>{w.stride_height, w.stride_width});
  GraphBuilder::Attr(n, "pads",
                     std::vector<int64_t>{w.pad_top, w.pad_left, w.pad_bottom, w.pad_right});
}

// y = f(x) of one activation, the engine's formula (activation_math.h).
std::string Activation(GraphBuilder& b, const std::string& prefix, const ActivationFn& f,
                       const std::string& x) {
  using onnx::NodeProto;
  switch (f.kind) {
    case DenseActivation::kLinear:
      return x;
    case DenseActivation::kRelu:
      return b.Node("Relu", prefix + "/Relu", {x})->output(0);
    case DenseActivation::kLeakyRelu: {
      NodeProto* n = b.Node("LeakyRelu", prefix + "/LeakyRelu", {x});
      GraphBuilder::Attr(n, "alpha", f.alpha);
      return n->output(0);
    }
    case DenseActivation::kElu: {
      NodeProto* n = b.Node("Elu", prefix + "/Elu", {x});
      GraphBuilder::Attr(n, "alpha", f.alpha);
      return n->output(0);
    }
    case DenseActivation::kGelu: {
      // 0.5 x (1 + erf(x / √2)): opset 17 has no Gelu.
      const std::string scaled =
          b.Node("Mul", prefix + "/gelu/Mul", {x, b.Scalar(activation_math::kSqrtHalf)})->output(0);
      const std::string erf = b.Node("Erf", prefix + "/gelu/Erf", {scaled})->output(0);
      const std::string one_plus =
          b.Node("Add", prefix + "/gelu/Add", {erf, b.Scalar(1.0f)})->output(0);
      const std::string times_x = b.Node("Mul", prefix + "/gelu/Mul_x", {x, one_plus})->output(0);
      return b.Node("Mul", prefix + "/gelu/Mul_half", {times_x, b.Scalar(0.5f)})->output(0);
    }
    case DenseActivation::kSigmoid:
      return b.Node("Sigmoid", prefix + "/Sigmoid", {x})->output(0);
    case DenseActivation::kTanh:
      return b.Node("Tanh", prefix + "/Tanh", {x})->output(0);
    case DenseActivation::kSoftplus: {
      // max(x, 0) + log(1 + exp(-|x|)): no overflow for large x, in any
      // runtime (as the engine's Softplus).
      const std::string relu = b.Node("Relu", prefix + "/softplus/Relu", {x})->output(0);
      const std::string abs = b.Node("Abs", prefix + "/softplus/Abs", {x})->output(0);
      const std::string neg = b.Node("Neg", prefix + "/softplus/Neg", {abs})->output(0);
      const std::string exp = b.Node("Exp", prefix + "/softplus/Exp", {neg})->output(0);
      const std::string one_plus =
          b.Node("Add", prefix + "/softplus/Add_1", {exp, b.Scalar(1.0f)})->output(0);
      const std::string log = b.Node("Log", prefix + "/softplus/Log", {one_plus})->output(0);
      return b.Node("Add", prefix + "/softplus/Add", {relu, log})->output(0);
    }
    case DenseActivation::kSwish: {
      const std::string s = b.Node("Sigmoid", prefix + "/swish/Sigmoid", {x})->output(0);
      return b.Node("Mul", prefix + "/swish/Mul", {x, s})->output(0);
    }
  }
  return x;
}

// The width of every network input and the checks on the model's shape.
absl::Status CheckModel(const TrainedModel& model) {
  const size_t f = model.feature_names.size();
  const bool imputes = model.spec.data().missing() != traind::v1::MISSING_ERROR;
  if (model.offset.size() != f || model.scale.size() != f ||
      (imputes && model.impute.size() != f)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "onnx export: %d numeric features but %d impute, %d offset and %d scale values", f,
        model.impute.size(), model.offset.size(), model.scale.size()));
  }
  std::set<std::string> columns;
  auto add_column = [&](const std::string& name) -> absl::Status {
    if (name.empty())
      return absl::InvalidArgumentError("onnx export: a feature column without a name");
    if (!columns.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("onnx export: feature column \"%s\" appears twice", name));
    }
    if (name == "label" || name == "probabilities" || name == "predictions") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "onnx export: feature column \"%s\" has the name of a model output", name));
    }
    return absl::OkStatus();
  };
  for (const std::string& name : model.feature_names) TRAIND_RETURN_IF_ERROR(add_column(name));
  for (const TrainedModel::Categorical& c : model.categorical) {
    TRAIND_RETURN_IF_ERROR(add_column(c.name));
    std::set<std::string> seen;
    for (const std::string& category : c.categories) {
      if (!seen.insert(category).second) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "onnx export: category \"%s\" of column \"%s\" appears twice", category, c.name));
      }
    }
  }
  switch (model.target) {
    case data::TargetKind::kClasses:
      if (model.classes.size() < 2) {
        return absl::InvalidArgumentError(
            absl::StrFormat("onnx export: %d classes (at least 2)", model.classes.size()));
      }
      break;
    case data::TargetKind::kBinary:
      if (model.classes.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrFormat("onnx export: a binary target with %d classes", model.classes.size()));
      }
      break;
    case data::TargetKind::kMultiLabel:
    case data::TargetKind::kRegression:
      break;
  }
  return absl::OkStatus();
}

// The outputs the target kind has: width of the network's output -> the
// graph's outputs, with their column names (metadata "output_columns").
struct Head {
  int64_t width = 0;
  std::vector<std::string> probability_columns;  // or the predictions' columns
};

absl::StatusOr<Head> HeadOf(const TrainedModel& model, int64_t outputs) {
  Head head;
  head.width = outputs;
  auto needs = [&](int64_t want, const std::string& what) -> absl::Status {
    if (outputs == want) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "onnx export: the network has %d outputs; %s needs %d", outputs, what, want));
  };
  switch (model.target) {
    case data::TargetKind::kClasses:
      TRAIND_RETURN_IF_ERROR(
          needs(static_cast<int64_t>(model.classes.size()), "one per class (softmax)"));
      for (const std::string& c : model.classes) head.probability_columns.push_back("p_" + c);
      head.width = outputs;
      break;
    case data::TargetKind::kBinary:
      TRAIND_RETURN_IF_ERROR(needs(1, "a binary target (one logit)"));
      head.probability_columns = {"p_" + model.classes[0], "p_" + model.classes[1]};
      head.width = 2;
      break;
    case data::TargetKind::kMultiLabel:
      if (!model.target_names.empty()) {
        TRAIND_RETURN_IF_ERROR(
            needs(static_cast<int64_t>(model.target_names.size()), "one per label"));
      }
      for (int64_t j = 0; j < outputs; ++j) {
        head.probability_columns.push_back(
            "p_" + (model.target_names.empty() ? absl::StrCat(j) : model.target_names[j]));
      }
      break;
    case data::TargetKind::kRegression:
      if (!model.target_names.empty()) {
        TRAIND_RETURN_IF_ERROR(
            needs(static_cast<int64_t>(model.target_names.size()), "one per target column"));
      }
      if (outputs == 1) {
        head.probability_columns = {"prediction"};
      } else {
        for (int64_t j = 0; j < outputs; ++j) {
          head.probability_columns.push_back(model.target_names.empty() ? absl::StrCat("y", j)
                                                                        : model.target_names[j]);
        }
      }
      break;
  }
  return head;
}

void AddMetadata(onnx::ModelProto* m, const std::string& key, const std::string& value) {
  onnx::StringStringEntryProto* e = m->add_metadata_props();
  e->set_key(key);
  e->set_value(value);
}

absl::StatusOr<onnx::ModelProto> BuildModel(const TrainedModel& model) {
  TRAIND_RETURN_IF_ERROR(spec::CheckModelSpec(model.spec.model()));
  TRAIND_RETURN_IF_ERROR(CheckModel(model));
  const bool imputes = model.spec.data().missing() != traind::v1::MISSING_ERROR;

  onnx::ModelProto m;
  m.set_ir_version(kIrVersion);
  m.set_producer_name("traind");
  m.set_producer_version(TRAIND_VERSION);
  m.set_domain("traind");
  m.set_model_version(1);
  m.set_doc_string(absl::StrFormat(
      "A traind model (task %d, epoch %d, target: %s): the fitted preprocessing (imputation, "
      "scaling, one-hot encoding of string columns), the network in evaluation form and its "
      "head, from raw feature columns to %s.",
      model.task, model.epoch, TargetKindName(model.target),
      model.target == data::TargetKind::kRegression   ? "predictions"
      : model.target == data::TargetKind::kMultiLabel ? "label probabilities"
                                                      : "class probabilities and labels"));
  onnx::OperatorSetIdProto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  opset = m.add_opset_import();
  opset->set_domain(kMlDomain);
  opset->set_version(kMlOpset);

  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("traind_model");
  g->set_doc_string("Raw feature columns -> preprocessing -> network -> head.");
  GraphBuilder b(g);

  // Inputs: numeric columns, then categorical ones.
  std::vector<std::string> input_json;
  for (size_t i = 0; i < model.feature_names.size(); ++i) {
    onnx::ValueInfoProto* in = g->add_input();
    in->set_name(model.feature_names[i]);
    SetShape(in, onnx::TensorProto::FLOAT, {-1, 1});
    in->set_doc_string(
        imputes ? absl::StrFormat("Numeric feature column %d; NaN (missing) becomes %.17g, then "
                                  "(x - %.17g) / %.17g.",
                                  i, model.impute[i], model.offset[i], model.scale[i])
                : absl::StrFormat("Numeric feature column %d: (x - %.17g) / %.17g. The model "
                                  "was trained without missing values: NaN gives NaN outputs.",
                                  i, model.offset[i], model.scale[i]));
    input_json.push_back(
        absl::StrCat("{\"name\":", JsonQuote(model.feature_names[i]), ",\"type\":\"float\"}"));
  }
  for (const TrainedModel::Categorical& c : model.categorical) {
    onnx::ValueInfoProto* in = g->add_input();
    in->set_name(c.name);
    SetShape(in, onnx::TensorProto::STRING, {-1, 1});
    in->set_doc_string(absl::StrFormat(
        "Categorical feature column, one-hot over its %d training categories (metadata "
        "categorical_features); any other value, or a missing one (\"\"), encodes as all zeros.",
        c.categories.size()));
    input_json.push_back(absl::StrCat("{\"name\":", JsonQuote(c.name), ",\"type\":\"string\"}"));
  }

  // Preprocessing: [N, InputWidth] float, as FeaturePipeline::Transform (in
  // double, as it computes).
  std::vector<std::string> blocks;
  const int64_t f = static_cast<int64_t>(model.feature_names.size());
  if (f > 0) {
    onnx::NodeProto* concat = b.Node("Concat", "preprocess/numeric", model.feature_names);
    GraphBuilder::Attr(concat, "axis", int64_t{1});
    onnx::NodeProto* cast = b.Node("Cast", "preprocess/Cast_double", {concat->output(0)});
    GraphBuilder::Attr(cast, "to", int64_t{onnx::TensorProto::DOUBLE});
    std::string x = cast->output(0);
    if (imputes) {
      const std::string nan = b.Node("IsNaN", "preprocess/IsNaN", {x})->output(0);
      const std::string impute = b.Doubles("preprocess/impute", {f}, model.impute,
                                           "The value of a missing numeric feature.");
      x = b.Node("Where", "preprocess/impute/Where", {nan, impute, x})->output(0);
    }
    const std::string offset = b.Doubles("preprocess/offset", {f}, model.offset);
    const std::string scale = b.Doubles("preprocess/scale", {f}, model.scale);
    x = b.Node("Sub", "preprocess/Sub_offset", {x, offset})->output(0);
    x = b.Node("Div", "preprocess/Div_scale", {x, scale})->output(0);
    onnx::NodeProto* to_float = b.Node("Cast", "preprocess/Cast_float", {x});
    GraphBuilder::Attr(to_float, "to", int64_t{onnx::TensorProto::FLOAT});
    blocks.push_back(to_float->output(0));
  }
  for (size_t k = 0; k < model.categorical.size(); ++k) {
    const TrainedModel::Categorical& c = model.categorical[k];
    if (c.categories.empty()) continue;  // no network input; the graph input stays unused
    const std::string prefix = absl::StrCat("preprocess/categorical[", k, "]");
    // [N, 1] string -> [N, 1, C] (scikit-learn's converter's encoding).
    onnx::NodeProto* one_hot =
        b.Node("OneHotEncoder", prefix + "/OneHotEncoder", {c.name}, kMlDomain);
    GraphBuilder::Attr(one_hot, "cats_strings", c.categories);
    GraphBuilder::Attr(one_hot, "zeros", int64_t{1});
    // ONNX 1.12 infers no type for OneHotEncoder: its output is declared.
    onnx::ValueInfoProto* encoded = g->add_value_info();
    encoded->set_name(one_hot->output(0));
    SetShape(encoded, onnx::TensorProto::FLOAT, {-1, 1, static_cast<int64_t>(c.categories.size())});
    onnx::NodeProto* flat = b.Node("Flatten", prefix + "/Flatten", {one_hot->output(0)});
    GraphBuilder::Attr(flat, "axis", int64_t{1});
    blocks.push_back(flat->output(0));
  }
  const int64_t inputs = model.InputWidth();
  if (inputs <= 0 || blocks.empty()) {
    return absl::InvalidArgumentError("onnx export: the model has no network inputs");
  }
  std::string x = blocks[0];
  if (blocks.size() > 1) {
    onnx::NodeProto* concat = b.Node("Concat", "preprocess/features", blocks);
    GraphBuilder::Attr(concat, "axis", int64_t{1});
    x = concat->output(0);
  }

  // The network, layer by layer, in evaluation form.
  const StateTensors state(model);
  int64_t width = inputs;
  const traind::v1::ModelSpec& spec = model.spec.model();
  // Image layers take x as [N, C, H, W]: reshaped from the row before the
  // first, flattened back before a layer that takes rows.
  TRAIND_ASSIGN_OR_RETURN(spec::ValueShape shape, spec::ModelInputShape(model.spec.data(), inputs));
  TRAIND_ASSIGN_OR_RETURN(const std::vector<spec::ValueShape> shapes,
                          spec::LayerShapes(spec, shape));
  bool nchw = false;  // x is [N, C, H, W] now
  for (int l = 0; l < spec.layers_size(); ++l) {
    const traind::v1::Layer& layer = spec.layers(l);
    const std::string prefix = absl::StrCat("layers[", l, "]");
    const traind::v1::Layer::KindCase kind = layer.kind_case();
    // Batch norm of an image is per channel: BatchNormalization on NCHW.
    const bool image_layer =
        kind == traind::v1::Layer::kConv2D || kind == traind::v1::Layer::kMaxPool2D ||
        kind == traind::v1::Layer::kAvgPool2D || kind == traind::v1::Layer::kGlobalAvgPool2D ||
        (kind == traind::v1::Layer::kBatchNorm && shape.image());
    const bool elementwise =
        kind == traind::v1::Layer::kActivation || kind == traind::v1::Layer::kDropout;
    if (image_layer && !nchw) {
      const std::string dims =
          b.Int64s(prefix + "/shape", {4}, {-1, shape.channels, shape.height, shape.width});
      x = b.Node("Reshape", prefix + "/Reshape", {x, dims})->output(0);
      nchw = true;
    } else if (!image_layer && !elementwise && nchw) {
      onnx::NodeProto* flatten = b.Node("Flatten", prefix + "/Flatten", {x});
      GraphBuilder::Attr(flatten, "axis", int64_t{1});
      x = flatten->output(0);
      nchw = false;
    }
    const spec::ValueShape in = shape;
    shape = shapes[static_cast<size_t>(l)];
    switch (kind) {
      case traind::v1::Layer::kConv2D: {
        const traind::v1::Conv2d& c = layer.conv2d();
        TRAIND_ASSIGN_OR_RETURN(const spec::Window2d w,
                                spec::Conv2dWindow(c, in, "model." + prefix + ".conv2d"));
        const int64_t groups = c.groups() == 0 ? 1 : c.groups();
        const int64_t cols = in.channels / groups * w.kernel_height * w.kernel_width;
        TRAIND_ASSIGN_OR_RETURN(
            const std::string weights,
            state.Initializer(b, prefix + ".weight", {c.filters(), cols},
                              {c.filters(), in.channels / groups, w.kernel_height, w.kernel_width},
                              "Conv2d weights [filters, channels / groups, kh, kw]."));
        std::vector<std::string> args = {x, weights};
        if (!c.has_bias() || c.bias()) {
          TRAIND_ASSIGN_OR_RETURN(
              const std::string bias,
              state.Initializer(b, prefix + ".bias", {c.filters()}, "Conv2d bias."));
          args.push_back(bias);
        }
        onnx::NodeProto* n = b.Node("Conv", prefix + "/Conv", args);
        WindowAttrs(n, w);
        GraphBuilder::Attr(n, "dilations",
                           std::vector<int64_t>{w.dilation_height, w.dilation_width});
        GraphBuilder::Attr(n, "group", groups);
        x = Activation(b, prefix, ToActivationFn(c.activation(), c.has_alpha(), c.alpha()),
                       n->output(0));
        width = shape.features;
        break;
      }
      case traind::v1::Layer::kMaxPool2D:
      case traind::v1::Layer::kAvgPool2D: {
        const bool max = kind == traind::v1::Layer::kMaxPool2D;
        const traind::v1::Pool2d& p = max ? layer.max_pool2d() : layer.avg_pool2d();
        TRAIND_ASSIGN_OR_RETURN(
            const spec::Window2d w,
            spec::Pool2dWindow(p, in, "model." + prefix + (max ? ".max_pool2d" : ".avg_pool2d")));
        onnx::NodeProto* n = b.Node(max ? "MaxPool" : "AveragePool",
                                    prefix + (max ? "/MaxPool" : "/AveragePool"), {x});
        WindowAttrs(n, w);
        if (!max) {
          GraphBuilder::Attr(n, "count_include_pad",
                             int64_t{!p.has_count_include_pad() || p.count_include_pad()});
        }
        x = n->output(0);
        width = shape.features;
        break;
      }
      case traind::v1::Layer::kGlobalAvgPool2D: {
        // [N, C, 1, 1] -> [N, C].
        x = b.Node("GlobalAveragePool", prefix + "/GlobalAveragePool", {x})->output(0);
        onnx::NodeProto* flatten = b.Node("Flatten", prefix + "/Flatten", {x});
        GraphBuilder::Attr(flatten, "axis", int64_t{1});
        x = flatten->output(0);
        nchw = false;
        width = shape.features;
        break;
      }
      case traind::v1::Layer::kFlatten:
        // The Flatten node is made above when x is [N, C, H, W].
        width = shape.features;
        break;
      case traind::v1::Layer::kDense: {
        const traind::v1::Dense& d = layer.dense();
        const int64_t units = d.units();
        TRAIND_ASSIGN_OR_RETURN(
            const std::string w,
            state.Initializer(b, prefix + ".weight", {width, units}, "Dense weights [in, out]."));
        if (!d.has_bias() || d.bias()) {
          TRAIND_ASSIGN_OR_RETURN(const std::string bias,
                                  state.Initializer(b, prefix + ".bias", {units}, "Dense bias."));
          x = b.Node("Gemm", prefix + "/Gemm", {x, w, bias})->output(0);
        } else {
          x = b.Node("MatMul", prefix + "/MatMul", {x, w})->output(0);
        }
        x = Activation(b, prefix, ToActivationFn(d.activation(), d.has_alpha(), d.alpha()), x);
        width = units;
        break;
      }
      case traind::v1::Layer::kActivation: {
        const traind::v1::ActivationLayer& a = layer.activation();
        const std::string y =
            Activation(b, prefix, ToActivationFn(a.function(), a.has_alpha(), a.alpha()), x);
        x = y == x ? b.Node("Identity", prefix + "/Identity", {x})->output(0) : y;
        break;
      }
      case traind::v1::Layer::kDropout:
        // The identity at evaluation.
        x = b.Node("Identity", prefix + "/Dropout", {x})->output(0);
        break;
      case traind::v1::Layer::kBatchNorm: {
        const traind::v1::BatchNorm& bn = layer.batch_norm();
        const float epsilon = bn.has_epsilon() ? static_cast<float>(bn.epsilon()) : 1e-5f;
        // Per channel of an image ([N, C, H, W]: ONNX's axis 1), else per feature.
        const int64_t c = in.image() ? in.channels : width;
        TRAIND_ASSIGN_OR_RETURN(const std::string gamma,
                                state.Initializer(b, prefix + ".gamma", {c}, ""));
        TRAIND_ASSIGN_OR_RETURN(const std::string beta,
                                state.Initializer(b, prefix + ".beta", {c}, ""));
        TRAIND_ASSIGN_OR_RETURN(const std::string mean,
                                state.Initializer(b, prefix + ".running_mean", {c}, ""));
        TRAIND_ASSIGN_OR_RETURN(const std::string var,
                                state.Initializer(b, prefix + ".running_var", {c}, ""));
        // (x - running_mean) / sqrt(running_var + epsilon) gamma + beta.
        onnx::NodeProto* n = b.Node("BatchNormalization", prefix + "/BatchNormalization",
                                    {x, gamma, beta, mean, var});
        GraphBuilder::Attr(n, "epsilon", epsilon);
        GraphBuilder::Attr(n, "momentum",
                           bn.has_momentum() ? static_cast<float>(bn.momentum()) : 0.1f);
        x = n->output(0);
        break;
      }
      case traind::v1::Layer::kLayerNorm: {
        const traind::v1::LayerNorm& ln = layer.layer_norm();
        const float epsilon = ln.has_epsilon() ? static_cast<float>(ln.epsilon()) : 1e-5f;
        TRAIND_ASSIGN_OR_RETURN(const std::string gamma,
                                state.Initializer(b, prefix + ".gamma", {width}, ""));
        TRAIND_ASSIGN_OR_RETURN(const std::string beta,
                                state.Initializer(b, prefix + ".beta", {width}, ""));
        // Each row over its features, biased variance.
        onnx::NodeProto* n =
            b.Node("LayerNormalization", prefix + "/LayerNormalization", {x, gamma, beta});
        GraphBuilder::Attr(n, "axis", int64_t{-1});
        GraphBuilder::Attr(n, "epsilon", epsilon);
        x = n->output(0);
        break;
      }
      case traind::v1::Layer::KIND_NOT_SET:
        return absl::InternalError("onnx export: unset layer kind");  // rejected by CheckModelSpec
    }
  }
  // The head.
  TRAIND_ASSIGN_OR_RETURN(const Head head, HeadOf(model, width));
  std::vector<std::string> output_columns;
  auto add_output = [&](const std::string& name, int32_t type, bool matrix, const std::string& doc,
                        const std::vector<std::string>& columns) {
    onnx::ValueInfoProto* out = g->add_output();
    out->set_name(name);
    if (matrix) {
      SetShape(out, type, {-1, head.width});
    } else {
      SetShape(out, type, {-1});
    }
    out->set_doc_string(doc);
    output_columns.push_back(absl::StrCat(JsonQuote(name), ":", JsonArray(columns)));
  };
  auto label_encoder = [&](const std::string& index, const std::vector<std::string>& classes) {
    std::vector<int64_t> keys;
    for (size_t c = 0; c < classes.size(); ++c) keys.push_back(static_cast<int64_t>(c));
    onnx::NodeProto* n = b.Node("LabelEncoder", "label", {index}, kMlDomain);
    GraphBuilder::Attr(n, "keys_int64s", keys);
    GraphBuilder::Attr(n, "values_strings", classes);
    GraphBuilder::Attr(n, "default_string", std::string());
  };
  switch (model.target) {
    case data::TargetKind::kClasses: {
      onnx::NodeProto* softmax = b.Node("Softmax", "probabilities", {x});
      GraphBuilder::Attr(softmax, "axis", int64_t{-1});
      // The first most probable class, as the engine's metrics pick it.
      onnx::NodeProto* argmax = b.Node("ArgMax", "head/ArgMax", {softmax->output(0)});
      GraphBuilder::Attr(argmax, "axis", int64_t{1});
      GraphBuilder::Attr(argmax, "keepdims", int64_t{0});
      label_encoder(argmax->output(0), model.classes);
      add_output("label", onnx::TensorProto::STRING, false,
                 "The most probable class (the first one on a tie).", {"label"});
      add_output("probabilities", onnx::TensorProto::FLOAT, true,
                 absl::StrCat("Softmax probability of each class, in the order of metadata "
                              "classes: ",
                              JsonArray(model.classes), "."),
                 head.probability_columns);
      break;
    }
    case data::TargetKind::kBinary: {
      const std::string p = b.Node("Sigmoid", "head/Sigmoid", {x})->output(0);
      const std::string q = b.Node("Sub", "head/Sub", {b.Scalar(1.0f), p})->output(0);
      onnx::NodeProto* probabilities = b.Node("Concat", "probabilities", {q, p});
      GraphBuilder::Attr(probabilities, "axis", int64_t{1});
      // classes[1] when p > 0.5, as the engine's metrics decide.
      const std::string positive =
          b.Node("Greater", "head/Greater", {p, b.Scalar(0.5f)})->output(0);
      onnx::NodeProto* index = b.Node("Cast", "head/Cast", {positive});
      GraphBuilder::Attr(index, "to", int64_t{onnx::TensorProto::INT64});
      const std::string axes = b.Int64s("const/axes_1", {1}, {1});
      const std::string flat =
          b.Node("Squeeze", "head/Squeeze", {index->output(0), axes})->output(0);
      label_encoder(flat, model.classes);
      add_output("label", onnx::TensorProto::STRING, false,
                 absl::StrFormat("\"%s\" when the probability of \"%s\" is above 0.5, else \"%s\".",
                                 model.classes[1], model.classes[1], model.classes[0]),
                 {"label"});
      add_output("probabilities", onnx::TensorProto::FLOAT, true,
                 absl::StrFormat("[1 - p, p]: the probabilities of \"%s\" and \"%s\" (sigmoid of "
                                 "the network's logit).",
                                 model.classes[0], model.classes[1]),
                 head.probability_columns);
      break;
    }
    case data::TargetKind::kMultiLabel:
      b.Node("Sigmoid", "probabilities", {x});
      add_output("probabilities", onnx::TensorProto::FLOAT, true,
                 absl::StrCat("Sigmoid probability of each label, in the order of metadata "
                              "target_names: ",
                              JsonArray(model.target_names), "."),
                 head.probability_columns);
      break;
    case data::TargetKind::kRegression:
      b.Node("Identity", "predictions", {x});
      add_output("predictions", onnx::TensorProto::FLOAT, true,
                 absl::StrCat("The network's outputs, one per target column, in the order of "
                              "metadata target_names: ",
                              JsonArray(model.target_names), "."),
                 head.probability_columns);
      break;
  }

  // A column named as an internal tensor would alias it.
  for (const onnx::ValueInfoProto& in : g->input()) {
    if (b.names().count(in.name()) > 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "onnx export: feature column \"%s\" has the name of a tensor of the graph", in.name()));
    }
  }

  // Metadata.
  AddMetadata(&m, "target_kind", TargetKindName(model.target));
  AddMetadata(&m, "classes", JsonArray(model.classes));
  AddMetadata(&m, "target_names", JsonArray(model.target_names));
  AddMetadata(&m, "numeric_features", JsonArray(model.feature_names));
  std::vector<std::string> categorical;
  for (const TrainedModel::Categorical& c : model.categorical) {
    categorical.push_back(absl::StrCat("{\"name\":", JsonQuote(c.name),
                                       ",\"categories\":", JsonArray(c.categories), "}"));
  }
  AddMetadata(&m, "categorical_features", absl::StrCat("[", absl::StrJoin(categorical, ","), "]"));
  AddMetadata(&m, "inputs", absl::StrCat("[", absl::StrJoin(input_json, ","), "]"));
  AddMetadata(&m, "output_columns", absl::StrCat("{", absl::StrJoin(output_columns, ","), "}"));
  AddMetadata(&m, "task", absl::StrCat(model.task));
  AddMetadata(&m, "epoch", absl::StrCat(model.epoch));
  std::string spec_json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (google::protobuf::util::MessageToJsonString(model.spec, &spec_json, options).ok()) {
    AddMetadata(&m, "spec", spec_json);
  }
  return m;
}

// ONNX's checker and its strict shape inference (on a copy: the written
// model carries no inferred value_info).
absl::Status Check(const onnx::ModelProto& m) {
  try {
    onnx::checker::check_model(m);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("onnx export: onnx::checker::check_model: ", e.what()));
  }
  try {
    onnx::ModelProto inferred = m;
    onnx::ShapeInferenceOptions options(/*check_type_val=*/true, /*strict_mode_val=*/1,
                                        /*data_prop_val=*/true);
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("onnx export: onnx::shape_inference::InferShapes: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ExportOnnx(const TrainedModel& model) {
  TRAIND_ASSIGN_OR_RETURN(const onnx::ModelProto m, BuildModel(model));
  TRAIND_RETURN_IF_ERROR(Check(m));
  std::string bytes;
  if (!m.SerializeToString(&bytes)) {
    return absl::InternalError("onnx export: cannot serialize the ModelProto");
  }
  return bytes;
}

absl::Status WriteOnnxFile(const TrainedModel& model, const std::string& path) {
  TRAIND_ASSIGN_OR_RETURN(const std::string bytes, ExportOnnx(model));
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  auto fail = [&](const std::string& what) {
    const int error = errno;
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": cannot write: ", what, ": ", strerror(error)));
  };
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail("open");
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const absl::Status status = fail("write");
      close(fd);
      return status;
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    const absl::Status status = fail("fsync");
    close(fd);
    return status;
  }
  if (close(fd) != 0) return fail("close");
  if (rename(tmp.c_str(), path.c_str()) != 0) return fail("rename");
  return absl::OkStatus();
}

void PrewarmOnnxExport() { (void)onnx::OpSchemaRegistry::Schema("Gemm", 17, ""); }

}  // namespace traind::engine
