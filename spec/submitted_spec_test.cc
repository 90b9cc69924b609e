#include "spec/submitted_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "spec/loader.h"

namespace traind::spec {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::traind::v1::JobSpec;

constexpr char kIris[] = R"(name: iris-cv
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
)";

absl::StatusOr<JobSpec> FromText(const std::string& text, std::vector<std::string> overrides = {},
                                 std::string base_dir = "/base") {
  SpecSubmission s;
  s.spec_text = &text;
  s.overrides = std::move(overrides);
  s.base_dir = std::move(base_dir);
  return BuildSubmittedSpec(s);
}

std::string ErrorOf(const absl::StatusOr<JobSpec>& spec) {
  EXPECT_FALSE(spec.ok());
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(spec.status().message());
}

TEST(BuildSubmittedSpecTest, TextParsesAsTheFileLoaderParsesIt) {
  absl::StatusOr<JobSpec> spec = FromText(kIris, {}, "/src/traind");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<JobSpec> file = ParseJobSpec(kIris, "iris.yaml");
  ASSERT_TRUE(file.ok());
  // The same spec, but for the data path joined to base_dir.
  file->mutable_data()->set_path("/src/traind/examples/data/iris.csv");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*spec, *file))
      << spec->DebugString();
  EXPECT_EQ(spec->model().layers(0).dense().activation(), v1::RELU);
  EXPECT_EQ(spec->metrics().val(1), v1::ACCURACY);
}

TEST(BuildSubmittedSpecTest, JsonTextInCamelCaseWithUpperCaseEnums) {
  absl::StatusOr<JobSpec> spec = FromText(
      R"({"data": {"path": "/d/iris.csv", "label": "species"},
          "crossValidation": {"folds": 3},
          "model": {"layers": [{"dense": {"units": 3, "activation": "RELU"}}]},
          "trainingXX": 1})");
  EXPECT_EQ(ErrorOf(spec), "spec_text: unknown field \"trainingXX\" (line 4, column 11)");
  spec = FromText(
      R"({"data": {"path": "/d/iris.csv", "label": "species"},
          "crossValidation": {"folds": 3},
          "model": {"layers": [{"dense": {"units": 3, "activation": "RELU"}}]}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->cross_validation().folds(), 3);
  EXPECT_EQ(spec->data().path(), "/d/iris.csv");  // absolute: unchanged
}

TEST(BuildSubmittedSpecTest, ParseErrorsNameSpecTextTheFieldPathAndLine) {
  std::string text = kIris;
  text.replace(text.find("units: 16"), 9, "unit: 16");
  EXPECT_EQ(ErrorOf(FromText(text)),
            "spec_text: model.layers[0].dense: unknown field \"unit\" (line 7, "
            "column 15)");
  text = kIris;
  text.replace(text.find("relu"), 4, "rellu");
  EXPECT_THAT(ErrorOf(FromText(text)),
              StartsWith("spec_text: model.layers[0].dense.activation: "
                         "invalid value \"rellu\" (expected one of: linear, "
                         "relu,"));
  EXPECT_THAT(ErrorOf(FromText("name: x\n  bad: indent: here\n")),
              StartsWith("spec_text: YAML syntax error: "));
  EXPECT_EQ(ErrorOf(FromText("")), "spec_text: empty spec");
}

TEST(BuildSubmittedSpecTest, OverridesApplyInOrderAsTrainctlSetDoes) {
  absl::StatusOr<JobSpec> spec =
      FromText(kIris, {"training.epochs=5", "model.layers[0].dense.units=32", "training.epochs=7",
                       "metrics.val=[loss]", "name=\"42\"", "cross_validation.folds=3"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().epochs(), 7);
  EXPECT_EQ(spec->model().layers(0).dense().units(), 32);
  ASSERT_EQ(spec->metrics().val_size(), 1);
  EXPECT_EQ(spec->name(), "42");
  EXPECT_EQ(spec->cross_validation().folds(), 3);

  // The same overrides as trainctl's --set give the same spec.
  absl::StatusOr<JobSpec> by_hand = ParseJobSpec(kIris, "x");
  ASSERT_TRUE(by_hand.ok());
  ASSERT_TRUE(SetJobSpecField(&*by_hand, "training.epochs", "7").ok());
  absl::StatusOr<JobSpec> one = FromText(kIris, {"training.epochs=7"}, "");
  ASSERT_FALSE(one.ok());  // relative data path without base_dir
  one = FromText(kIris, {"training.epochs=7", "data.path=/abs.csv"}, "");
  ASSERT_TRUE(one.ok()) << one.status();
  by_hand->mutable_data()->set_path("/abs.csv");
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*one, *by_hand));
}

TEST(BuildSubmittedSpecTest, BadOverridesNameTheirIndex) {
  EXPECT_EQ(ErrorOf(FromText(kIris, {"training.epochs=5", "epochs"})),
            "overrides[1]: expected PATH=VALUE, got \"epochs\"");
  EXPECT_EQ(ErrorOf(FromText(kIris, {"=5"})), "overrides[0]: expected PATH=VALUE, got \"=5\"");
  EXPECT_THAT(ErrorOf(FromText(kIris, {"training.epochz=5"})),
              StartsWith("overrides[0]: training.epochz: unknown field "
                         "\"epochz\""));
  EXPECT_THAT(ErrorOf(FromText(kIris, {"training.epochs=ten"})),
              AllOf(StartsWith("overrides[0]: training.epochs=ten: "),
                    HasSubstr("training.epochs: invalid value")));
  std::vector<std::string> many(kMaxSpecOverrides + 1, "seed=1");
  EXPECT_THAT(ErrorOf(FromText(kIris, many)), StartsWith("overrides: "));
}

TEST(BuildSubmittedSpecTest, RelativePathsJoinBaseDirOrAreRefused) {
  absl::StatusOr<JobSpec> spec = FromText(kIris, {}, "/home/u/traind/");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().path(), "/home/u/traind/examples/data/iris.csv");

  // ".." is kept for the server's confinement to resolve.
  spec = FromText(
      kIris,
      {"data.path=../x.csv", "cross_validation.validation_path=v.csv", "cross_validation.folds="},
      "/a/b");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().path(), "/a/b/../x.csv");
  EXPECT_EQ(spec->cross_validation().validation_path(), "/a/b/v.csv");

  EXPECT_EQ(ErrorOf(FromText(kIris, {}, "")),
            "spec.data.path: examples/data/iris.csv is a relative path: give "
            "base_dir (the directory it is relative to, e.g. the client's "
            "working directory) or an absolute path");
  EXPECT_THAT(ErrorOf(FromText(kIris,
                               {"data.path=/d.csv", "cross_validation.validation_path=v.csv",
                                "cross_validation.folds="},
                               "")),
              StartsWith("spec.cross_validation.validation_path: v.csv is a relative "
                         "path: give base_dir"));
  EXPECT_EQ(ErrorOf(FromText(kIris, {}, "rel/dir")), "base_dir: rel/dir is not an absolute path");
  // No data path at all is the validator's to report, not ours.
  EXPECT_TRUE(FromText("name: x\n", {}, "").ok());
}

TEST(BuildSubmittedSpecTest, StructuredSpecGetsOverridesAndPathsToo) {
  absl::StatusOr<JobSpec> parsed = ParseJobSpec(kIris, "x");
  ASSERT_TRUE(parsed.ok());
  SpecSubmission s;
  s.spec = &*parsed;
  s.overrides = {"training.epochs=2"};
  s.base_dir = "/src";
  absl::StatusOr<JobSpec> spec = BuildSubmittedSpec(s);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training().epochs(), 2);
  EXPECT_EQ(spec->data().path(), "/src/examples/data/iris.csv");
  EXPECT_EQ(parsed->training().epochs(), 60);  // the input is not changed

  s.base_dir.clear();
  EXPECT_THAT(ErrorOf(BuildSubmittedSpec(s)), StartsWith("spec.data.path: "));
}

TEST(BuildSubmittedSpecTest, ExactlyOneSource) {
  EXPECT_THAT(ErrorOf(BuildSubmittedSpec(SpecSubmission())),
              StartsWith("spec or spec_text: required"));
  JobSpec spec;
  std::string text = "name: x\n";
  SpecSubmission both;
  both.spec = &spec;
  both.spec_text = &text;
  EXPECT_THAT(ErrorOf(BuildSubmittedSpec(both)), StartsWith("spec, spec_text"));
}

// The server parses text from any client: size, nesting and alias expansion
// are bounded, and each gives an error instead of exhausting the daemon.
TEST(BuildSubmittedSpecTest, HostileTextIsRefused) {
  std::string big = "name: x\n# " + std::string(kMaxSpecTextBytes, 'x') + "\n";
  EXPECT_THAT(ErrorOf(FromText(big)), StartsWith("spec_text: "));
  EXPECT_THAT(ErrorOf(FromText(big)), HasSubstr("more than 1048576"));

  std::string deep = "name: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
  EXPECT_THAT(ErrorOf(FromText(deep)), StartsWith("spec_text: "));

  // "Billion laughs": 9 levels of 10 aliases each would expand to 10^9 items.
  std::string laughs = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    std::string prev = absl::StrCat("*a", i - 1);
    laughs += absl::StrCat("a", i, ": &a", i, " [", prev);
    for (int k = 1; k < 10; ++k) laughs += ", " + prev;
    laughs += "]\n";
  }
  EXPECT_THAT(ErrorOf(FromText(laughs)), StartsWith("spec_text: a"));
  EXPECT_THAT(ErrorOf(FromText(laughs)),
              HasSubstr(": the spec expands to more than 100000 values or 1048576 bytes"));
}

}  // namespace
}  // namespace traind::spec
