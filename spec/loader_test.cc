#include "spec/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "tests/testing/temp_dir.h"

namespace traind::spec {
namespace {

using ::testing::HasSubstr;
using ::traind::v1::JobSpec;

constexpr char kIrisYaml[] = R"(name: iris-cv
data: {path: examples/data/iris.csv, label: species, standardize: true}
cross_validation: {folds: 5, stratified: true, shuffle: true}
seed: 42
model:
  layers:
    - dense: {units: 16, activation: relu, init: xavier_uniform}
    - dense: {units: 3}
loss: {softmax_cross_entropy: {}}
optimizer: {adam: {learning_rate: 0.01}}
training: {epochs: 60, batch_size: 16}
metrics: {train: [loss, accuracy], val: [loss, accuracy]}
resources: {device: cpu}
)";

constexpr char kIrisJson[] = R"({
  "name": "iris-cv",
  "data": {"path": "examples/data/iris.csv", "label": "species", "standardize": true},
  "crossValidation": {"folds": 5, "stratified": true, "shuffle": true},
  "seed": "42",
  "model": {
    "layers": [
      {"dense": {"units": 16, "activation": "RELU", "init": "XAVIER_UNIFORM"}},
      {"dense": {"units": 3}}
    ]
  },
  "loss": {"softmax_cross_entropy": {}},
  "optimizer": {"adam": {"learningRate": 0.01}},
  "training": {"epochs": 60, "batch_size": 16},
  "metrics": {"train": ["LOSS", "ACCURACY"], "val": ["loss", "accuracy"]},
  "resources": {"device": "CPU"}
})";

JobSpec MustParse(const std::string& text) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "test.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

std::string ErrorOf(const std::string& text, const std::string& source = "iris-cv.yaml") {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, source);
  EXPECT_FALSE(spec.ok());
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(spec.status().message());
}

TEST(ParseJobSpecTest, IrisYamlHasEveryField) {
  JobSpec spec = MustParse(kIrisYaml);
  EXPECT_EQ(spec.name(), "iris-cv");
  EXPECT_EQ(spec.data().path(), "examples/data/iris.csv");
  EXPECT_EQ(spec.data().label(), "species");
  EXPECT_TRUE(spec.data().standardize());
  EXPECT_EQ(spec.cross_validation().folds(), 5);
  EXPECT_TRUE(spec.cross_validation().has_stratified());
  EXPECT_TRUE(spec.cross_validation().stratified());
  EXPECT_TRUE(spec.cross_validation().shuffle());
  EXPECT_EQ(spec.seed(), 42u);
  ASSERT_EQ(spec.model().layers_size(), 2);
  EXPECT_EQ(spec.model().layers(0).dense().units(), 16);
  EXPECT_EQ(spec.model().layers(0).dense().activation(), v1::RELU);
  EXPECT_EQ(spec.model().layers(0).dense().init(), v1::XAVIER_UNIFORM);
  EXPECT_EQ(spec.model().layers(1).dense().units(), 3);
  EXPECT_EQ(spec.model().layers(1).dense().activation(), v1::LINEAR);
  EXPECT_TRUE(spec.loss().has_softmax_cross_entropy());
  EXPECT_DOUBLE_EQ(spec.optimizer().adam().learning_rate(), 0.01);
  EXPECT_FALSE(spec.optimizer().adam().has_beta1());
  EXPECT_EQ(spec.training().epochs(), 60);
  EXPECT_EQ(spec.training().batch_size(), 16);
  ASSERT_EQ(spec.metrics().train_size(), 2);
  EXPECT_EQ(spec.metrics().train(0), v1::LOSS);
  EXPECT_EQ(spec.metrics().train(1), v1::ACCURACY);
  ASSERT_EQ(spec.metrics().val_size(), 2);
  EXPECT_EQ(spec.resources().device(), v1::CPU);
}

TEST(ParseJobSpecTest, YamlAndJsonFormsAreEqual) {
  JobSpec from_yaml = MustParse(kIrisYaml);
  JobSpec from_json = MustParse(kIrisJson);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(from_yaml, from_json))
      << from_yaml.DebugString() << "\nvs\n"
      << from_json.DebugString();
}

TEST(ParseJobSpecTest, CompactJsonParses) {
  JobSpec spec = MustParse(
      R"({"name":"x","training":{"epochs":3},"model":{"layers":[{"dense":{"units":2}}]}})");
  EXPECT_EQ(spec.name(), "x");
  EXPECT_EQ(spec.training().epochs(), 3);
  EXPECT_EQ(spec.model().layers(0).dense().units(), 2);
}

TEST(ParseJobSpecTest, EnumValuesInAnyCase) {
  for (const char* activation : {"relu", "RELU", "Relu"}) {
    JobSpec spec = MustParse(std::string("model: {layers: [{dense: {units: 1, activation: ") +
                             activation + "}}]}");
    EXPECT_EQ(spec.model().layers(0).dense().activation(), v1::RELU) << activation;
  }
  EXPECT_EQ(MustParse("resources: {device: gpu, count: 2}").resources().device(), v1::GPU);
  EXPECT_EQ(MustParse("model: {layers: [{dense: {init: xavier_normal}}]}")
                .model()
                .layers(0)
                .dense()
                .init(),
            v1::XAVIER_NORMAL);
}

TEST(ParseJobSpecTest, QuotedNumberIsAString) {
  EXPECT_EQ(MustParse("name: \"42\"").name(), "42");
  EXPECT_EQ(MustParse("name: '42'").name(), "42");
  EXPECT_EQ(MustParse("name: !!str 42").name(), "42");
  EXPECT_EQ(MustParse("data: {label: 'true'}").data().label(), "true");
}

TEST(ParseJobSpecTest, PlainNumberForStringFieldIsAnError) {
  std::string error = ErrorOf("name: 42\n");
  EXPECT_THAT(error, HasSubstr("iris-cv.yaml: name: invalid value 42"));
  EXPECT_THAT(error, HasSubstr("line 1"));
}

TEST(ParseJobSpecTest, YamlNumberForms) {
  EXPECT_EQ(MustParse("seed: 0x10").seed(), 16u);
  EXPECT_EQ(MustParse("seed: 0o17").seed(), 15u);
  EXPECT_EQ(MustParse("seed: +007").seed(), 7u);
  EXPECT_EQ(MustParse("seed: 18446744073709551615").seed(), 18446744073709551615ull);
  EXPECT_EQ(MustParse("training: {epochs: 60.0}").training().epochs(), 60);
  EXPECT_DOUBLE_EQ(
      MustParse("optimizer: {sgd: {learning_rate: .5}}").optimizer().sgd().learning_rate(), 0.5);
  EXPECT_DOUBLE_EQ(
      MustParse("optimizer: {sgd: {learning_rate: 1e-3}}").optimizer().sgd().learning_rate(), 1e-3);
  EXPECT_DOUBLE_EQ(
      MustParse("optimizer: {sgd: {learning_rate: 2.}}").optimizer().sgd().learning_rate(), 2.0);
  EXPECT_TRUE(
      std::isinf(MustParse("optimizer: {adam: {epsilon: .inf}}").optimizer().adam().epsilon()));
}

TEST(ParseJobSpecTest, NullLeavesFieldsUnset) {
  JobSpec spec = MustParse("name: ~\ncross_validation:\nseed: null\n");
  EXPECT_EQ(spec.name(), "");
  EXPECT_FALSE(spec.has_cross_validation());
  EXPECT_EQ(spec.seed(), 0u);
}

TEST(ParseJobSpecTest, YesIsNotABoolean) {
  // YAML 1.2 core schema: yes/no are plain strings, so protobuf rejects them
  // for a bool only if it does not accept the string; "on" is rejected.
  std::string error = ErrorOf("data: {standardize: on}\n");
  EXPECT_THAT(error, HasSubstr("data.standardize"));
}

TEST(ParseJobSpecTest, UnknownFieldIsNamedWithItsLine) {
  std::string error = ErrorOf(
      "name: iris-cv\n"
      "model:\n"
      "  layers:\n"
      "    - dense: {unit: 16}\n");
  EXPECT_THAT(error, HasSubstr("iris-cv.yaml: model.layers[0].dense: unknown "
                               "field \"unit\""));
  EXPECT_THAT(error, HasSubstr("line 4"));
}

TEST(ParseJobSpecTest, UnknownTopLevelField) {
  std::string error = ErrorOf("name: x\nepochs: 3\n");
  EXPECT_EQ(error, "iris-cv.yaml: unknown field \"epochs\" (line 2, column 1)");
}

TEST(ParseJobSpecTest, UnknownFieldUnderCamelCaseParent) {
  std::string error = ErrorOf("crossValidation:\n  folds: 3\n  fold: 2\n");
  EXPECT_THAT(error, HasSubstr("cross_validation: unknown field \"fold\" (line 3"));
}

TEST(ParseJobSpecTest, YamlSyntaxErrorNamesLineAndColumn) {
  std::string error = ErrorOf(
      "name: iris-cv\n"
      "data: {path: a.csv, label: species\n"
      "seed: 42\n");
  EXPECT_THAT(error, HasSubstr("iris-cv.yaml: YAML syntax error: "));
  EXPECT_THAT(error, HasSubstr("(line "));
  EXPECT_THAT(error, HasSubstr(", column "));

  error = ErrorOf("name: x\n  bad: indent: here\n");
  EXPECT_THAT(error, HasSubstr("YAML syntax error"));
  EXPECT_THAT(error, HasSubstr("line 2"));
}

TEST(ParseJobSpecTest, WrongTypeIsNamed) {
  std::string error = ErrorOf("training:\n  epochs: many\n");
  EXPECT_EQ(error,
            "iris-cv.yaml: training.epochs: invalid value \"many\" (expected "
            "int32) (line 2, column 3)");
  error = ErrorOf("training: {epochs: 1.5}\n");
  EXPECT_THAT(error, HasSubstr("training.epochs: invalid value 1.5"));
  error = ErrorOf("seed: -1\n");
  EXPECT_THAT(error, HasSubstr("seed: invalid value -1 (expected uint64)"));
  error = ErrorOf("model: 3\n");
  EXPECT_THAT(error, HasSubstr("model: invalid value 3 (expected a mapping)"));
  error = ErrorOf("data: [a, b]\n");
  EXPECT_THAT(error, HasSubstr("data: expected a single value, not a list"));
  error = ErrorOf("name: {a: 1}\n");
  EXPECT_THAT(error, HasSubstr("name: expected a single value, not a mapping"));
}

TEST(ParseJobSpecTest, BadEnumValueListsTheChoices) {
  std::string error = ErrorOf("model:\n  layers:\n    - dense: {units: 3, activation: rellu}\n");
  EXPECT_THAT(error, HasSubstr("model.layers[0].dense.activation: invalid value "
                               "\"rellu\" (expected one of: linear, relu, leaky_relu, elu, gelu, "
                               "sigmoid, tanh, softplus, swish)"));
  EXPECT_THAT(error, HasSubstr("line 3"));
  error = ErrorOf("metrics: {val: [loss, f1]}\n");
  EXPECT_THAT(error, HasSubstr("metrics.val[1]: invalid value \"f1\" (expected "
                               "one of: loss, accuracy, top_k_accuracy, precision_macro,"));
}

TEST(ParseJobSpecTest, TwoOneofAlternativesAreAnError) {
  std::string error = ErrorOf("optimizer: {adam: {}, sgd: {}}\n");
  EXPECT_THAT(error, HasSubstr("optimizer: only one of"));
}

TEST(ParseJobSpecTest, DuplicateKeyIsAnError) {
  std::string error = ErrorOf("name: a\nseed: 1\nname: b\n");
  EXPECT_EQ(error, "iris-cv.yaml: name: duplicate key (line 3, column 1)");
}

TEST(ParseJobSpecTest, TopLevelMustBeAMapping) {
  EXPECT_THAT(ErrorOf("- a\n- b\n"), HasSubstr("expected a mapping"));
  EXPECT_THAT(ErrorOf("just text\n"), HasSubstr("expected a mapping"));
  EXPECT_EQ(ErrorOf(""), "iris-cv.yaml: empty spec");
  EXPECT_EQ(ErrorOf("# only a comment\n"), "iris-cv.yaml: empty spec");
  EXPECT_THAT(ErrorOf("name: a\n---\nname: b\n"), HasSubstr("expected one YAML document"));
  // Streams on which yaml-cpp 0.7's LoadAll never ends (yaml-cpp#1040): a
  // named error, at once.
  for (const char* text : {",", "\n,", ",a", "# c\r\n,\nname: x", "\r\n,"}) {
    EXPECT_THAT(ErrorOf(text), HasSubstr("YAML syntax error")) << text;
  }
}

TEST(ParseJobSpecTest, SpecialCharactersInStrings) {
  JobSpec spec = MustParse("name: \"a \\\"quoted\\\" \\\\ name\\t\\u00e9\"\n");
  EXPECT_EQ(spec.name(), "a \"quoted\" \\ name\t\xc3\xa9");
}

TEST(ParseJobSpecTest, AnchorsAndAliases) {
  JobSpec spec = MustParse(
      "model:\n  layers:\n    - &hidden {dense: {units: 8, activation: relu}}\n"
      "    - *hidden\n    - dense: {units: 3}\n");
  ASSERT_EQ(spec.model().layers_size(), 3);
  EXPECT_EQ(spec.model().layers(1).dense().units(), 8);
}

class LoadJobSpecFileTest : public ::testing::Test {
 protected:
  std::string WriteTemp(const std::string& text) {
    std::string path =
        ::testing::TempDir() + "spec_file_test_" + std::to_string(::getpid()) + ".yaml";
    std::ofstream(path) << text;
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const auto& p : paths_) std::remove(p.c_str());
  }
  std::vector<std::string> paths_;
};

TEST_F(LoadJobSpecFileTest, ReadsAFile) {
  std::string path = WriteTemp(kIrisYaml);
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile(path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "iris-cv");
}

TEST_F(LoadJobSpecFileTest, ErrorsNameThePath) {
  std::string path = WriteTemp("name: x\nbogus: 1\n");
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile(path);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), path + ": unknown field \"bogus\" (line 2, column 1)");
}

TEST_F(LoadJobSpecFileTest, MissingFile) {
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile("/nonexistent/spec.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(),
            "/nonexistent/spec.yaml: cannot open: No such file or directory");
}

TEST(SetJobSpecFieldTest, SetsScalarsNestedFieldsAndListElements) {
  JobSpec spec = MustParse(kIrisYaml);
  ASSERT_TRUE(SetJobSpecField(&spec, "training.epochs", "5").ok());
  EXPECT_EQ(spec.training().epochs(), 5);
  ASSERT_TRUE(SetJobSpecField(&spec, "model.layers[0].dense.units", "32").ok());
  EXPECT_EQ(spec.model().layers(0).dense().units(), 32);
  EXPECT_EQ(spec.model().layers(0).dense().activation(), v1::RELU);
  ASSERT_TRUE(SetJobSpecField(&spec, "model.layers[1].dense.activation", "relu").ok());
  EXPECT_EQ(spec.model().layers(1).dense().activation(), v1::RELU);
  ASSERT_TRUE(SetJobSpecField(&spec, "name", "'007'").ok());
  EXPECT_EQ(spec.name(), "007");
  ASSERT_TRUE(SetJobSpecField(&spec, "crossValidation.folds", "10").ok());
  EXPECT_EQ(spec.cross_validation().folds(), 10);
  EXPECT_TRUE(spec.cross_validation().stratified());
  ASSERT_TRUE(SetJobSpecField(&spec, "seed", "18446744073709551615").ok());
  EXPECT_EQ(spec.seed(), 18446744073709551615ull);
  ASSERT_TRUE(SetJobSpecField(&spec, "metrics.val", "[accuracy]").ok());
  ASSERT_EQ(spec.metrics().val_size(), 1);
  EXPECT_EQ(spec.metrics().val(0), v1::ACCURACY);
  // Everything else is untouched.
  EXPECT_EQ(spec.data().path(), "examples/data/iris.csv");
  EXPECT_DOUBLE_EQ(spec.optimizer().adam().learning_rate(), 0.01);
}

TEST(SetJobSpecFieldTest, AppendsAndReplacesWholeMessages) {
  JobSpec spec = MustParse(kIrisYaml);
  ASSERT_TRUE(SetJobSpecField(&spec, "model.layers[+]", "{dense: {units: 4}}").ok());
  ASSERT_EQ(spec.model().layers_size(), 3);
  EXPECT_EQ(spec.model().layers(2).dense().units(), 4);
  ASSERT_TRUE(SetJobSpecField(&spec, "model.layers[+].dense.units", "2").ok());
  ASSERT_EQ(spec.model().layers_size(), 4);
  EXPECT_EQ(spec.model().layers(3).dense().units(), 2);
  // The element just added is there to set further.
  ASSERT_TRUE(SetJobSpecField(&spec, "model.layers[3].dense.activation", "relu").ok());
  EXPECT_EQ(spec.model().layers(3).dense().activation(), v1::RELU);
  ASSERT_TRUE(SetJobSpecField(&spec, "metrics.val[+]", "roc_auc").ok());
  EXPECT_EQ(spec.metrics().val(spec.metrics().val_size() - 1), v1::ROC_AUC);
  ASSERT_TRUE(SetJobSpecField(&spec, "data", "{path: b.csv}").ok());
  EXPECT_EQ(spec.data().path(), "b.csv");
  EXPECT_EQ(spec.data().label(), "");
  ASSERT_TRUE(SetJobSpecField(&spec, "cross_validation", "").ok());
  EXPECT_FALSE(spec.has_cross_validation());
}

// An index past the last element is a typo, never a silent append: the
// error says how many there are and how to append.
TEST(SetJobSpecFieldTest, AnIndexPastTheEndIsRefusedNamingTheAppendSyntax) {
  JobSpec spec = MustParse(kIrisYaml);
  ASSERT_EQ(spec.model().layers_size(), 2);
  const JobSpec before = spec;
  absl::Status s = SetJobSpecField(&spec, "model.layers[2].dense.units", "3");
  EXPECT_EQ(s.message(),
            "model.layers[2].dense.units: index 2 is past the end (model.layers has 2 elements "
            "([0] to [1])); write model.layers[+] to append one");
  s = SetJobSpecField(&spec, "model.layers[7]", "{dense: {units: 3}}");
  EXPECT_EQ(s.message(),
            "model.layers[7]: index 7 is past the end (model.layers has 2 elements ([0] to "
            "[1])); write model.layers[+] to append one");
  s = SetJobSpecField(&spec, "data.categorical[0]", "region");
  EXPECT_EQ(s.message(),
            "data.categorical[0]: index 0 is past the end (data.categorical is empty); write "
            "data.categorical[+] to append one");
  EXPECT_EQ(SetJobSpecField(&spec, "model.layers[]", "{}").message(),
            "model.layers[]: bad index [] in path");
  EXPECT_EQ(spec.DebugString(), before.DebugString());
}

TEST(SetJobSpecFieldTest, SettingAOneofMemberClearsTheOthers) {
  JobSpec spec = MustParse(kIrisYaml);
  ASSERT_TRUE(SetJobSpecField(&spec, "optimizer.sgd.learning_rate", "0.1").ok());
  EXPECT_TRUE(spec.optimizer().has_sgd());
  EXPECT_DOUBLE_EQ(spec.optimizer().sgd().learning_rate(), 0.1);
}

TEST(SetJobSpecFieldTest, ErrorsLeaveTheSpecUnchanged) {
  JobSpec spec = MustParse(kIrisYaml);
  const JobSpec before = spec;
  auto expect_error = [&](const std::string& path, const std::string& value,
                          const std::string& want) {
    absl::Status status = SetJobSpecField(&spec, path, value);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << path << "=" << value;
    EXPECT_THAT(std::string(status.message()), HasSubstr(want)) << path << "=" << value;
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(spec, before));
  };
  expect_error("training.epoch", "5", "unknown field \"epoch\" in training");
  expect_error("training.epochs", "many", "invalid value \"many\"");
  expect_error("model.layers[5].dense.units", "1", "past the end");
  expect_error("model.layers.dense", "1", "is a list");
  expect_error("name.first", "1", "has no fields");
  expect_error("seed[0]", "1", "not a list");
  expect_error("model.layers[x]", "1", "bad index");
  expect_error("", "1", "empty field name");
  expect_error("name", "{a: [", "YAML syntax error");
  expect_error("model.layers[0].dense.activation", "sigmod",
               "expected one of: linear, relu, leaky_relu");
}

// Hostile spec text: bounded in time and memory, refused with a message that
// says which limit.
TEST(ParseJobSpecTest, AnAliasBombIsRefusedInBoundedMemory) {
  // 9 levels of 9 aliases each: 9^9 (387 million) leaves once expanded.
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 9; ++j) text += (j ? ", *a" : "*a") + std::to_string(i - 1);
    text += "]\n";
  }
  text += "name: *a9\n";
  struct rusage before {};
  getrusage(RUSAGE_SELF, &before);
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "bomb.yaml");
  struct rusage after {};
  getrusage(RUSAGE_SELF, &after);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message().rfind("bomb.yaml: a", 0), 0u) << spec.status();
  EXPECT_THAT(spec.status().message(),
              HasSubstr(": the spec expands to more than 100000 values or 1048576 bytes (YAML "
                        "aliases are expanded) (line "));
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 200 * 1024) << "KiB";
}

TEST(ParseJobSpecTest, TextOverTheSizeLimitAndDeepNestingAreRefused) {
  absl::StatusOr<JobSpec> big =
      ParseJobSpec("name: " + std::string(kMaxSpecBytes, 'x'), "big.yaml");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().message(), absl::StrCat("big.yaml: the spec is ", kMaxSpecBytes + 6,
                                                 " bytes; a spec may hold at most 1048576"));
  const std::string deep = "name: " + std::string(100000, '[') + std::string(100000, ']');
  absl::StatusOr<JobSpec> nested = ParseJobSpec(deep, "deep.yaml");
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(nested.status().message(), HasSubstr("deep.yaml: "));
}

TEST(LoadJobSpecFileKindTest, OnlyRegularFilesAreRead) {
  const testing::TempDir scratch("traind-spec");
  ASSERT_FALSE(scratch.path().empty());
  const std::string dir = scratch.path();
  const std::string fifo = scratch.Path("spec.yaml");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::StatusOr<JobSpec> spec = LoadJobSpecFile(fifo);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), fifo + ": not a regular file (a spec is a YAML or JSON file)");
  spec = LoadJobSpecFile(dir);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), dir + ": not a regular file (a spec is a YAML or JSON file)");
}

}  // namespace
}  // namespace traind::spec
