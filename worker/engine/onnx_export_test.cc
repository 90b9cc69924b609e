// The ONNX export: the graph's interface (inputs, outputs, opsets, metadata)
// as docs/spec.md documents it, and, for models covering every layer,
// activation and head, ONNX Runtime's outputs (tests/onnx/run_onnx.mjs,
// onnxruntime-node) against the engine's own forward pass on the same rows.
#include "worker/engine/onnx_export.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"
#include "spec/model_shapes.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/network.h"

namespace traind::engine {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

traind::v1::Layer DenseLayer(int units, traind::v1::Activation activation = traind::v1::LINEAR) {
  traind::v1::Layer layer;
  layer.mutable_dense()->set_units(units);
  layer.mutable_dense()->set_activation(activation);
  return layer;
}

traind::v1::Layer ActivationLayer(traind::v1::Activation f) {
  traind::v1::Layer layer;
  layer.mutable_activation()->set_function(f);
  return layer;
}

// A model with its test rows: numeric cells (NaN: missing) and string cells.
struct Case {
  TrainedModel model;
  std::vector<std::vector<float>> numeric;        // [rows][features]
  std::vector<std::vector<std::string>> strings;  // [rows][categorical]
  // How a missing numeric cell is written (cycled): "", NA, NaN, ...
  std::vector<std::string> missing_tokens = {"", "NA", "NaN", "nan", "null"};
};

// The network of `model` on the CPU backend, initialized from `seed`, with
// non-trivial biases, normalization parameters and running statistics;
// model.state receives its state, by name.
class Fixture {
 public:
  Fixture() : backend_(std::move(CreateCpuBackend()).value()) {}

  Network Build(TrainedModel& model, uint64_t seed) {
    int64_t inputs = static_cast<int64_t>(model.feature_names.size());
    for (const TrainedModel::Categorical& c : model.categorical) {
      inputs += static_cast<int64_t>(c.categories.size());
    }
    absl::StatusOr<spec::ValueShape> input = spec::ModelInputShape(model.spec.data(), inputs);
    EXPECT_TRUE(input.ok()) << input.status();
    absl::StatusOr<Network> created = Network::Create(backend_.get(), *input, model.spec.model());
    EXPECT_TRUE(created.ok()) << created.status();
    Network net = std::move(created).value();
    Rng rng(seed);
    EXPECT_TRUE(net.Initialize(rng).ok());
    auto u = [&] { return static_cast<float>(2 * rng.Uniform() - 1); };
    model.state.clear();
    for (const Parameter& p : net.state()) {
      float* v = p.value->f32();
      const std::string& name = p.name;
      auto ends_with = [&](const std::string& suffix) {
        return name.size() >= suffix.size() &&
               name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
      };
      for (int64_t i = 0; i < p.value->size(); ++i) {
        if (ends_with(".weight")) {
          v[i] *= 1.5f;
        } else if (ends_with(".bias") || ends_with(".beta")) {
          v[i] = 0.3f * u();
        } else if (ends_with(".gamma")) {
          v[i] = 1.0f + 0.4f * u();
        } else if (ends_with(".running_mean")) {
          v[i] = 0.5f * u();
        } else if (ends_with(".running_var")) {
          v[i] = 0.6f + 0.5f * u();
        }
      }
      TrainedModel::NamedTensor t;
      t.name = name;
      if (p.value->rank() == 1) {
        t.shape = {p.value->size()};
      } else {
        t.shape = {p.value->rows(), p.value->cols()};
      }
      t.values.assign(v, v + p.value->size());
      model.state.push_back(std::move(t));
    }
    return net;
  }

  // The engine's outputs for the case's rows: the preprocessing as
  // FeaturePipeline::Transform computes it, Network::Forward in evaluation
  // mode, then the head (softmax, sigmoid). [rows][outputs of the head].
  std::vector<std::vector<double>> Expected(Network& net, const Case& c,
                                            std::vector<std::string>* labels) {
    const TrainedModel& m = c.model;
    const int64_t rows = static_cast<int64_t>(c.numeric.size());
    const int64_t width = net.inputs();
    std::vector<float> x(static_cast<size_t>(rows * width), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = x.data() + r * width;
      int64_t col = 0;
      for (size_t j = 0; j < m.feature_names.size(); ++j) {
        const float in = c.numeric[r][j];
        const double v = std::isnan(in) ? m.impute[j] : in;
        row[col++] = static_cast<float>((v - m.offset[j]) / m.scale[j]);
      }
      for (size_t k = 0; k < m.categorical.size(); ++k) {
        const std::vector<std::string>& cats = m.categorical[k].categories;
        const auto it = std::find(cats.begin(), cats.end(), c.strings[r][k]);
        if (it != cats.end()) row[col + (it - cats.begin())] = 1.0f;
        col += static_cast<int64_t>(cats.size());
      }
    }
    Tensor input = std::move(backend_->Allocate2d(DType::kF32, rows, width)).value();
    EXPECT_TRUE(backend_->CopyFromHost(x.data(), &input).ok());
    ForwardMode mode;
    mode.training = false;
    absl::StatusOr<Tensor*> out = net.Forward(input, mode);
    EXPECT_TRUE(out.ok()) << out.status();
    const int64_t k = (*out)->cols();
    std::vector<float> y(static_cast<size_t>(rows * k));
    EXPECT_TRUE(backend_->CopyToHost(**out, y.data()).ok());

    std::vector<std::vector<double>> expected(static_cast<size_t>(rows));
    labels->clear();
    for (int64_t r = 0; r < rows; ++r) {
      const float* z = y.data() + r * k;
      std::vector<double>& e = expected[r];
      switch (m.target) {
        case data::TargetKind::kClasses: {
          double top = z[0];
          for (int64_t j = 1; j < k; ++j) top = std::max<double>(top, z[j]);
          double sum = 0;
          for (int64_t j = 0; j < k; ++j) sum += std::exp(z[j] - top);
          int64_t best = 0;
          for (int64_t j = 0; j < k; ++j) {
            e.push_back(std::exp(z[j] - top) / sum);
            if (e[j] > e[best]) best = j;
          }
          labels->push_back(m.classes[best]);
          break;
        }
        case data::TargetKind::kBinary: {
          const double p = 1 / (1 + std::exp(-static_cast<double>(z[0])));
          e = {1 - p, p};
          labels->push_back(m.classes[p > 0.5 ? 1 : 0]);
          break;
        }
        case data::TargetKind::kMultiLabel:
          for (int64_t j = 0; j < k; ++j)
            e.push_back(1 / (1 + std::exp(-static_cast<double>(z[j]))));
          break;
        case data::TargetKind::kRegression:
          e.assign(z, z + k);
          break;
      }
    }
    return expected;
  }

 private:
  std::unique_ptr<Backend> backend_;
};

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (const char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// A CSV with a header; fields may be quoted.
std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"' && field.empty()) {
      quoted = any = true;
    } else if (c == ',') {
      row.push_back(field);
      field.clear();
      any = true;
    } else if (c == '\n') {
      row.push_back(field);
      rows.push_back(row);
      row.clear();
      field.clear();
      any = false;
    } else {
      field += c;
      any = true;
    }
  }
  if (any) {
    row.push_back(field);
    rows.push_back(row);
  }
  return rows;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The case's rows as INPUT.csv: an id column the model ignores, then the
// columns in reverse order (the runner feeds inputs by name).
std::string InputCsv(const Case& c) {
  const TrainedModel& m = c.model;
  std::vector<std::string> header = {"id"};
  for (size_t k = m.categorical.size(); k-- > 0;) header.push_back(CsvField(m.categorical[k].name));
  for (size_t j = m.feature_names.size(); j-- > 0;) header.push_back(CsvField(m.feature_names[j]));
  std::string text = absl::StrJoin(header, ",") + "\n";
  size_t missing = 0;
  for (size_t r = 0; r < c.numeric.size(); ++r) {
    std::vector<std::string> cells = {absl::StrCat("row", r)};
    for (size_t k = m.categorical.size(); k-- > 0;) cells.push_back(CsvField(c.strings[r][k]));
    for (size_t j = m.feature_names.size(); j-- > 0;) {
      const float v = c.numeric[r][j];
      cells.push_back(std::isnan(v) ? c.missing_tokens[missing++ % c.missing_tokens.size()]
                                    : absl::StrFormat("%.9g", v));
    }
    text += absl::StrJoin(cells, ",") + "\n";
  }
  return text;
}

// Rows of raw numeric values around each feature's offset, every
// `nan_every`-th cell missing (0: none), and the categorical cells cycling
// through `values` (which include unseen and missing ones).
void FillRows(Case& c, int rows, uint64_t seed, int nan_every,
              const std::vector<std::vector<std::string>>& values) {
  Rng rng(seed);
  int cell = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> numeric;
    for (size_t j = 0; j < c.model.feature_names.size(); ++j) {
      ++cell;
      if (nan_every > 0 && cell % nan_every == 0) {
        numeric.push_back(kNaN);
      } else {
        numeric.push_back(static_cast<float>(c.model.offset[j] +
                                             2.0 * c.model.scale[j] * (2 * rng.Uniform() - 1)));
      }
    }
    c.numeric.push_back(numeric);
    std::vector<std::string> strings;
    for (size_t k = 0; k < c.model.categorical.size(); ++k) {
      strings.push_back(values[k][static_cast<size_t>(r) % values[k].size()]);
    }
    c.strings.push_back(strings);
  }
}

void SetPreprocessing(TrainedModel& m, const std::vector<std::string>& features) {
  m.feature_names = features;
  for (size_t j = 0; j < features.size(); ++j) {
    m.impute.push_back(3.25 + 1.5 * j);
    m.offset.push_back(2.0 + 0.75 * j);
    m.scale.push_back(0.5 + 0.8 * j);
  }
}

// (a) Multi-class: batch norm (default and explicit epsilon), dropout,
// gelu, a dense layer without bias; imputed numeric features.
Case MultiClass() {
  Case c;
  TrainedModel& m = c.model;
  m.task = 3;
  m.epoch = 17;
  m.target = data::TargetKind::kClasses;
  m.classes = {"setosa", "versi,color", "virginica"};
  SetPreprocessing(m, {"sepal length", "sepal_width", "petal.length", "petal_width"});
  m.spec.mutable_data()->set_label("species");
  m.spec.mutable_data()->set_missing(traind::v1::IMPUTE_MEAN);
  m.spec.mutable_loss()->mutable_softmax_cross_entropy();
  traind::v1::ModelSpec* model = m.spec.mutable_model();
  *model->add_layers() = DenseLayer(8, traind::v1::RELU);
  model->add_layers()->mutable_batch_norm();
  model->add_layers()->mutable_dropout()->set_rate(0.3);
  traind::v1::Layer no_bias = DenseLayer(6, traind::v1::GELU);
  no_bias.mutable_dense()->set_bias(false);
  *model->add_layers() = no_bias;
  traind::v1::Layer bn;
  bn.mutable_batch_norm()->set_epsilon(1e-3);
  bn.mutable_batch_norm()->set_momentum(0.2);
  *model->add_layers() = bn;
  *model->add_layers() = DenseLayer(3);
  return c;
}

// (b) Binary: a categorical column beside the numeric ones.
Case Binary() {
  Case c;
  TrainedModel& m = c.model;
  m.target = data::TargetKind::kBinary;
  m.classes = {"no", "yes"};
  SetPreprocessing(m, {"age", "income", "score"});
  m.categorical = {{"colour", {"blue", "green", "red"}}};
  m.spec.mutable_data()->set_label("bought");
  m.spec.mutable_data()->set_missing(traind::v1::IMPUTE_MEDIAN);
  m.spec.mutable_loss()->mutable_sigmoid_binary_cross_entropy();
  *m.spec.mutable_model()->add_layers() = DenseLayer(5, traind::v1::TANH);
  *m.spec.mutable_model()->add_layers() = DenseLayer(1);
  return c;
}

// (c) Multi-label: swish, batch norm; no imputation (no missing cells).
Case MultiLabel() {
  Case c;
  TrainedModel& m = c.model;
  m.target = data::TargetKind::kMultiLabel;
  m.target_names = {"a", "b", "c"};
  SetPreprocessing(m, {"f0", "f1", "f2", "f3", "f4"});
  m.impute.clear();
  for (const char* label : {"a", "b", "c"}) m.spec.mutable_data()->add_labels(label);
  m.spec.mutable_loss()->mutable_sigmoid_binary_cross_entropy();
  *m.spec.mutable_model()->add_layers() = DenseLayer(6, traind::v1::SWISH);
  m.spec.mutable_model()->add_layers()->mutable_batch_norm();
  *m.spec.mutable_model()->add_layers() = DenseLayer(3);
  return c;
}

// (d) Regression with two categorical columns and imputation.
Case Regression() {
  Case c;
  TrainedModel& m = c.model;
  m.task = 1;
  m.epoch = 250;
  m.target = data::TargetKind::kRegression;
  m.target_names = {"y1", "y2"};
  SetPreprocessing(m, {"x0", "x1", "x2"});
  m.categorical = {{"colour", {"blue", "green", "light, \"blue\"", "red"}},
                   {"size", {"L", "M", "S"}}};
  m.spec.mutable_data()->add_labels("y1");
  m.spec.mutable_data()->add_labels("y2");
  m.spec.mutable_data()->set_missing(traind::v1::IMPUTE_MEAN);
  m.spec.mutable_loss()->mutable_mse();
  traind::v1::Layer elu = DenseLayer(6, traind::v1::ELU);
  elu.mutable_dense()->set_alpha(0.7);
  *m.spec.mutable_model()->add_layers() = elu;
  *m.spec.mutable_model()->add_layers() = DenseLayer(2);
  return c;
}

// (e) Layer norm and every activation, in dense layers and as layers.
Case EveryActivation() {
  Case c;
  TrainedModel& m = c.model;
  m.target = data::TargetKind::kRegression;
  m.target_names = {"target"};
  SetPreprocessing(m, {"u", "v", "w", "x"});
  m.impute.clear();
  m.spec.mutable_data()->set_label("target");
  m.spec.mutable_loss()->mutable_huber();
  traind::v1::ModelSpec* model = m.spec.mutable_model();
  *model->add_layers() = DenseLayer(7, traind::v1::RELU);
  traind::v1::Layer ln;
  ln.mutable_layer_norm()->set_epsilon(1e-3);
  *model->add_layers() = ln;
  traind::v1::Layer leaky = DenseLayer(7, traind::v1::LEAKY_RELU);
  leaky.mutable_dense()->set_alpha(0.2);
  *model->add_layers() = leaky;
  *model->add_layers() = ActivationLayer(traind::v1::ELU);  // alpha 1
  *model->add_layers() = DenseLayer(7);
  *model->add_layers() = ActivationLayer(traind::v1::GELU);
  model->add_layers()->mutable_layer_norm();  // epsilon 1e-5
  *model->add_layers() = DenseLayer(7, traind::v1::SIGMOID);
  *model->add_layers() = DenseLayer(7, traind::v1::TANH);
  *model->add_layers() = DenseLayer(7, traind::v1::SOFTPLUS);
  *model->add_layers() = DenseLayer(7, traind::v1::SWISH);
  *model->add_layers() = ActivationLayer(traind::v1::LEAKY_RELU);  // alpha 0.01
  *model->add_layers() = ActivationLayer(traind::v1::SOFTPLUS);
  *model->add_layers() = ActivationLayer(traind::v1::SIGMOID);
  *model->add_layers() = ActivationLayer(traind::v1::TANH);
  *model->add_layers() = ActivationLayer(traind::v1::SWISH);
  *model->add_layers() = ActivationLayer(traind::v1::RELU);
  *model->add_layers() = ActivationLayer(traind::v1::LINEAR);
  traind::v1::Layer elu = DenseLayer(5, traind::v1::ELU);
  elu.mutable_dense()->set_alpha(1.5);
  *model->add_layers() = elu;
  *model->add_layers() = DenseLayer(6, traind::v1::GELU);
  *model->add_layers() = DenseLayer(1);
  return c;
}

onnx::ModelProto Parse(const std::string& bytes) {
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  return m;
}

std::string Metadata(const onnx::ModelProto& m, const std::string& key) {
  for (const onnx::StringStringEntryProto& e : m.metadata_props()) {
    if (e.key() == key) return e.value();
  }
  return "<missing>";
}

// "float[N,1]", "string[N]".
std::string TypeOf(const onnx::ValueInfoProto& v) {
  const onnx::TypeProto_Tensor& t = v.type().tensor_type();
  std::vector<std::string> dims;
  for (const onnx::TensorShapeProto_Dimension& d : t.shape().dim()) {
    dims.push_back(d.has_dim_param() ? d.dim_param() : absl::StrCat(d.dim_value()));
  }
  const std::string type = t.elem_type() == onnx::TensorProto::FLOAT    ? "float"
                           : t.elem_type() == onnx::TensorProto::STRING ? "string"
                                                                        : "other";
  return absl::StrCat(type, "[", absl::StrJoin(dims, ","), "]");
}

std::vector<std::string> Describe(
    const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& values) {
  std::vector<std::string> out;
  for (const onnx::ValueInfoProto& v : values) {
    out.push_back(absl::StrCat(v.name(), ":", TypeOf(v)));
    EXPECT_FALSE(v.doc_string().empty()) << v.name();
  }
  return out;
}

absl::StatusOr<onnx::ModelProto> Export(Case c, uint64_t seed = 7) {
  Fixture fixture;
  Network net = fixture.Build(c.model, seed);
  absl::StatusOr<std::string> bytes = ExportOnnx(c.model);
  if (!bytes.ok()) return bytes.status();
  return Parse(*bytes);
}

TEST(OnnxExportTest, MultiClassInterface) {
  absl::StatusOr<onnx::ModelProto> m = Export(MultiClass());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NO_THROW(onnx::checker::check_model(*m));
  EXPECT_EQ(m->ir_version(), 8);
  EXPECT_EQ(m->producer_name(), "traind");
  EXPECT_FALSE(m->producer_version().empty());
  ASSERT_EQ(m->opset_import_size(), 2);
  EXPECT_EQ(m->opset_import(0).domain(), "");
  EXPECT_EQ(m->opset_import(0).version(), 17);
  EXPECT_EQ(m->opset_import(1).domain(), "ai.onnx.ml");
  EXPECT_EQ(m->opset_import(1).version(), 3);
  EXPECT_THAT(Describe(m->graph().input()),
              ElementsAre("sepal length:float[N,1]", "sepal_width:float[N,1]",
                          "petal.length:float[N,1]", "petal_width:float[N,1]"));
  EXPECT_THAT(Describe(m->graph().output()),
              ElementsAre("label:string[N]", "probabilities:float[N,3]"));
  EXPECT_EQ(Metadata(*m, "target_kind"), "classes");
  EXPECT_EQ(Metadata(*m, "classes"), R"(["setosa","versi,color","virginica"])");
  EXPECT_EQ(Metadata(*m, "numeric_features"),
            R"(["sepal length","sepal_width","petal.length","petal_width"])");
  EXPECT_EQ(Metadata(*m, "categorical_features"), "[]");
  EXPECT_EQ(Metadata(*m, "task"), "3");
  EXPECT_EQ(Metadata(*m, "epoch"), "17");
  EXPECT_EQ(Metadata(*m, "output_columns"),
            R"({"label":["label"],"probabilities":["p_setosa","p_versi,color","p_virginica"]})");
  EXPECT_THAT(Metadata(*m, "spec"), HasSubstr(R"("label":"species")"));
  EXPECT_THAT(Metadata(*m, "inputs"), HasSubstr(R"({"name":"sepal length","type":"float"})"));
  // Batch norm in inference form, dropout as the identity, gelu in its erf
  // form; no training-mode op.
  std::vector<std::string> ops;
  for (const onnx::NodeProto& n : m->graph().node()) ops.push_back(n.op_type());
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "BatchNormalization"), 2);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Erf"), 1);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Dropout"), 0);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "MatMul"), 1);  // the dense layer without bias
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Where"), 1);   // imputation
}

TEST(OnnxExportTest, BinaryInterface) {
  absl::StatusOr<onnx::ModelProto> m = Export(Binary());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(Describe(m->graph().input()), ElementsAre("age:float[N,1]", "income:float[N,1]",
                                                        "score:float[N,1]", "colour:string[N,1]"));
  EXPECT_THAT(Describe(m->graph().output()),
              ElementsAre("label:string[N]", "probabilities:float[N,2]"));
  EXPECT_EQ(Metadata(*m, "target_kind"), "binary");
  EXPECT_EQ(Metadata(*m, "categorical_features"),
            R"([{"name":"colour","categories":["blue","green","red"]}])");
  EXPECT_EQ(Metadata(*m, "output_columns"),
            R"({"label":["label"],"probabilities":["p_no","p_yes"]})");
}

TEST(OnnxExportTest, MultiLabelInterface) {
  absl::StatusOr<onnx::ModelProto> m = Export(MultiLabel());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(Describe(m->graph().output()), ElementsAre("probabilities:float[N,3]"));
  EXPECT_EQ(Metadata(*m, "target_kind"), "multi_label");
  EXPECT_EQ(Metadata(*m, "target_names"), R"(["a","b","c"])");
  // No imputation: the spec does not impute.
  for (const onnx::NodeProto& n : m->graph().node()) EXPECT_NE(n.op_type(), "Where");
}

TEST(OnnxExportTest, RegressionInterface) {
  absl::StatusOr<onnx::ModelProto> m = Export(Regression());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(Describe(m->graph().input()),
              ElementsAre("x0:float[N,1]", "x1:float[N,1]", "x2:float[N,1]", "colour:string[N,1]",
                          "size:string[N,1]"));
  EXPECT_THAT(Describe(m->graph().output()), ElementsAre("predictions:float[N,2]"));
  EXPECT_EQ(Metadata(*m, "target_kind"), "regression");
  EXPECT_EQ(Metadata(*m, "output_columns"), R"({"predictions":["y1","y2"]})");
  EXPECT_EQ(Metadata(*m, "categorical_features"),
            R"([{"name":"colour","categories":["blue","green","light, \"blue\"","red"]},)"
            R"({"name":"size","categories":["L","M","S"]}])");
  int one_hot = 0;
  for (const onnx::NodeProto& n : m->graph().node()) {
    if (n.op_type() != "OneHotEncoder") continue;
    ++one_hot;
    EXPECT_EQ(n.domain(), "ai.onnx.ml");
  }
  EXPECT_EQ(one_hot, 2);

  Case single = EveryActivation();
  absl::StatusOr<onnx::ModelProto> one = Export(single);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(Describe(one->graph().output()), ElementsAre("predictions:float[N,1]"));
  EXPECT_EQ(Metadata(*one, "output_columns"), R"({"predictions":["prediction"]})");
}

TEST(OnnxExportTest, RejectsModelsThatDoNotFit) {
  {
    Case c = MultiClass();
    Fixture fixture;
    Network net = fixture.Build(c.model, 1);
    c.model.state.erase(c.model.state.begin() + 1);  // layers[0].bias
    absl::StatusOr<std::string> bytes = ExportOnnx(c.model);
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bytes.status().message(), HasSubstr("layers[0].bias"));
  }
  {
    Case c = MultiClass();
    Fixture fixture;
    Network net = fixture.Build(c.model, 1);
    c.model.state[0].shape = {8, 4};  // layers[0].weight is [4, 8]
    absl::StatusOr<std::string> bytes = ExportOnnx(c.model);
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bytes.status().message(), HasSubstr("layers[0].weight"));
  }
  {
    Case c = MultiClass();
    Fixture fixture;
    Network net = fixture.Build(c.model, 1);
    c.model.classes.pop_back();
    EXPECT_EQ(ExportOnnx(c.model).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    Case c = Binary();
    Fixture fixture;
    Network net = fixture.Build(c.model, 1);
    c.model.categorical[0].name = "age";
    EXPECT_THAT(ExportOnnx(c.model).status().message(), HasSubstr("appears twice"));
    c.model.categorical[0].name = "label";
    EXPECT_THAT(ExportOnnx(c.model).status().message(), HasSubstr("name of a model output"));
  }
}

TEST(OnnxExportTest, WritesTheFileAtomically) {
  Case c = Binary();
  Fixture fixture;
  Network net = fixture.Build(c.model, 2);
  const std::string dir = ::testing::TempDir() + "/onnx_export_write";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/model.onnx";
  ASSERT_TRUE(WriteOnnxFile(c.model, path).ok());
  EXPECT_EQ(ReadFile(path), *ExportOnnx(c.model));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);  // no temporary file left
  absl::Status status = WriteOnnxFile(c.model, dir + "/missing/model.onnx");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("missing/model.onnx"));
  fs::remove_all(dir);
}

// ONNX Runtime against the engine.

struct Runner {
  std::string script;  // tests/onnx/run_onnx.mjs
  std::string skip;    // why it cannot run (empty: it can)
};

Runner FindRunner() {
  Runner r;
  const std::string dir = std::string(TRAIND_SOURCE_DIR) + "/tests/onnx";
  r.script = dir + "/run_onnx.mjs";
  if (std::system("command -v node >/dev/null 2>&1") != 0) {
    r.skip = "node is not on PATH (apt-get install nodejs npm)";
  } else if (!fs::exists(dir + "/node_modules/onnxruntime-node/package.json")) {
    r.skip = absl::StrCat(
        "onnxruntime-node is not installed in ", dir,
        " (tests/run.sh installs it: ONNXRUNTIME_NODE_INSTALL=skip npm ci --ignore-scripts "
        "--prefix tests/onnx)");
  }
  return r;
}

bool Required() {
  const char* v = std::getenv("TRAIND_REQUIRE_ONNXRUNTIME");
  return v != nullptr && v[0] != '\0' && std::string(v) != "0";
}

// (f) A convolutional network on 2×6×5 images (data.shape): "same"
// padding on a 3×2 kernel (odd padding after), max pooling with padding,
// batch norm per channel, average pooling leaving the padding out, an activation and dropout on an
// image, flatten, dense.
Case ConvNet() {
  Case c;
  TrainedModel& m = c.model;
  m.target = data::TargetKind::kClasses;
  m.classes = {"a", "b", "c"};
  std::vector<std::string> pixels;
  for (int i = 0; i < 60; ++i) pixels.push_back(absl::StrCat("px", i));
  SetPreprocessing(m, pixels);
  m.impute.clear();
  m.spec.mutable_data()->set_label("y");
  for (int d : {2, 6, 5}) m.spec.mutable_data()->add_shape(d);
  m.spec.mutable_loss()->mutable_softmax_cross_entropy();
  traind::v1::ModelSpec* model = m.spec.mutable_model();
  auto* c0 = model->add_layers()->mutable_conv2d();
  c0->set_filters(4);
  c0->add_kernel(3);
  c0->add_kernel(2);
  c0->mutable_padding()->set_string_value("same");
  c0->set_activation(traind::v1::TANH);
  auto* max = model->add_layers()->mutable_max_pool2d();  // 4×6×5 -> 4×4×3
  max->add_kernel(2);
  max->mutable_padding()->set_number_value(1);
  model->add_layers()->mutable_batch_norm()->set_epsilon(1e-3);  // per channel
  auto* avg = model->add_layers()->mutable_avg_pool2d();         // -> 4×5×4
  avg->add_kernel(2);
  avg->add_stride(1);
  avg->mutable_padding()->set_number_value(1);
  avg->set_count_include_pad(false);
  *model->add_layers() = ActivationLayer(traind::v1::SWISH);
  model->add_layers()->mutable_dropout()->set_rate(0.2);
  model->add_layers()->mutable_flatten();
  *model->add_layers() = DenseLayer(3);
  return c;
}

// (g) Groups, dilation, stride, explicit asymmetric padding, no bias, a
// gelu convolution (unfused in training), average pooling counting the
// padding, global average pooling, then dense layers (no flatten given).
Case ConvNetGlobalPooling() {
  Case c;
  TrainedModel& m = c.model;
  m.target = data::TargetKind::kRegression;
  m.target_names = {"t"};
  std::vector<std::string> pixels;
  for (int i = 0; i < 3 * 9 * 8; ++i) pixels.push_back(absl::StrCat("p", i));
  SetPreprocessing(m, pixels);
  m.impute.clear();
  m.spec.mutable_data()->set_label("t");
  for (int d : {3, 9, 8}) m.spec.mutable_data()->add_shape(d);
  m.spec.mutable_loss()->mutable_mse();
  traind::v1::ModelSpec* model = m.spec.mutable_model();
  auto* c0 = model->add_layers()->mutable_conv2d();  // 3×9×8 -> 6×4×8
  c0->set_filters(6);
  c0->add_kernel(3);
  c0->add_stride(2);
  c0->add_stride(1);
  c0->add_dilation(1);
  c0->add_dilation(2);
  c0->set_groups(3);
  c0->set_bias(false);
  for (int p : {0, 2, 1, 2})
    c0->mutable_padding()->mutable_list_value()->add_values()->set_number_value(p);
  c0->set_activation(traind::v1::GELU);
  auto* avg = model->add_layers()->mutable_avg_pool2d();
  avg->add_kernel(3);
  avg->add_stride(1);
  avg->mutable_padding()->set_number_value(1);
  auto* c1 = model->add_layers()->mutable_conv2d();
  c1->set_filters(5);
  c1->add_kernel(1);
  c1->set_activation(traind::v1::RELU);
  model->add_layers()->mutable_global_avg_pool2d();
  *model->add_layers() = DenseLayer(4, traind::v1::ELU);
  *model->add_layers() = DenseLayer(1);
  return c;
}

// Scores the case's rows in ONNX Runtime and in the engine; every number
// within 1e-5 (absolute, relative beyond 1), the labels equal.
void CheckAgainstOnnxRuntime(Case c, const std::string& name, uint64_t seed, int rows,
                             int nan_every, const std::vector<std::vector<std::string>>& values) {
  const Runner runner = FindRunner();
  if (!runner.skip.empty()) {
    if (Required()) FAIL() << runner.skip << " (TRAIND_REQUIRE_ONNXRUNTIME is set)";
    GTEST_SKIP() << runner.skip;
  }
  FillRows(c, rows, seed + 100, nan_every, values);
  Fixture fixture;
  Network net = fixture.Build(c.model, seed);
  std::vector<std::string> labels;
  const std::vector<std::vector<double>> expected = fixture.Expected(net, c, &labels);

  const std::string dir = absl::StrCat(::testing::TempDir(), "/onnx_ort_", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string model_path = dir + "/model.onnx", input = dir + "/input.csv",
                    output = dir + "/output.csv", log = dir + "/stderr.txt";
  const absl::Status written = WriteOnnxFile(c.model, model_path);
  ASSERT_TRUE(written.ok()) << written;
  {
    std::ofstream out(input, std::ios::binary);
    out << InputCsv(c);
  }
  const std::string command = absl::StrFormat("node '%s' '%s' '%s' '%s' 2>'%s'", runner.script,
                                              model_path, input, output, log);
  ASSERT_EQ(std::system(command.c_str()), 0) << command << "\n" << ReadFile(log);

  const std::vector<std::vector<std::string>> got = ParseCsv(ReadFile(output));
  ASSERT_EQ(got.size(), expected.size() + 1);
  const bool has_label =
      c.model.target == data::TargetKind::kClasses || c.model.target == data::TargetKind::kBinary;
  const size_t first = has_label ? 2 : 1;
  ASSERT_EQ(got[0][0], "row");
  if (has_label) {
    ASSERT_EQ(got[0][1], "label");
  }
  double max_diff = 0;
  for (size_t r = 0; r < expected.size(); ++r) {
    const std::vector<std::string>& line = got[r + 1];
    ASSERT_EQ(line.size(), first + expected[r].size()) << "row " << r;
    EXPECT_EQ(line[0], absl::StrCat(r));
    if (has_label) {
      EXPECT_EQ(line[1], labels[r]) << "row " << r;
    }
    for (size_t j = 0; j < expected[r].size(); ++j) {
      const double ort = std::strtod(line[first + j].c_str(), nullptr);
      const double engine = expected[r][j];
      ASSERT_TRUE(std::isfinite(ort)) << "row " << r << " column " << j << ": " << line[first + j];
      const double diff = std::fabs(ort - engine);
      max_diff = std::max(max_diff, diff);
      EXPECT_LE(diff, 1e-5 * std::max(1.0, std::fabs(engine)))
          << "row " << r << " column " << got[0][first + j] << ": ONNX Runtime " << ort
          << ", engine " << engine;
    }
  }
  std::cout << absl::StrFormat("[ onnx     ] %s: %d rows, max |ONNX Runtime - engine| = %.3g\n",
                               name, expected.size(), max_diff);
  ::testing::Test::RecordProperty("max_abs_diff", absl::StrFormat("%.3g", max_diff));
  fs::remove_all(dir);
}

TEST(OnnxRuntimeTest, MultiClassWithBatchNormDropoutGelu) {
  CheckAgainstOnnxRuntime(MultiClass(), "multi_class", 11, 64, 7, {});
}

TEST(OnnxRuntimeTest, Binary) {
  // "purple" was not seen in training; "" and "NA" are missing.
  CheckAgainstOnnxRuntime(Binary(), "binary", 12, 64, 9,
                          {{"blue", "green", "red", "purple", "", "NA"}});
}

TEST(OnnxRuntimeTest, MultiLabel) {
  CheckAgainstOnnxRuntime(MultiLabel(), "multi_label", 13, 64, 0, {});
}

TEST(OnnxRuntimeTest, RegressionWithCategoricalColumnsAndImputation) {
  CheckAgainstOnnxRuntime(Regression(), "regression", 14, 64, 5,
                          {{"red", "light, \"blue\"", "purple", "", "blue", "green", "Red"},
                           {"S", "M", "L", "XL", ""}});
}

TEST(OnnxRuntimeTest, LayerNormAndEveryActivation) {
  CheckAgainstOnnxRuntime(EveryActivation(), "every_activation", 15, 64, 0, {});
}

TEST(OnnxRuntimeTest, ConvNetOnImagesOfTwoChannels) {
  CheckAgainstOnnxRuntime(ConvNet(), "conv_net", 16, 48, 0, {});
}

TEST(OnnxRuntimeTest, GroupedDilatedConvolutionsAndGlobalPooling) {
  CheckAgainstOnnxRuntime(ConvNetGlobalPooling(), "conv_global_pooling", 17, 48, 0, {});
}

}  // namespace
}  // namespace traind::engine
