// Convolutional networks on images, through the real binaries: IDX files
// (gzipped) under a data root, a CV job with augmentation and a refit
// submitted and watched with trainctl, each fold in its own worker; traind
// sets data.shape from the files; trainctl predict scores held-out images
// sent as an NPY upload; ONNX Runtime running the job's model.onnx on the
// same pixels agrees within 1e-5. The images are made here: three kinds of
// 12×12 strokes (a row, a column, a diagonal) at random places with noise.
// And an image folder of PNG files, trained on and predicted.
#include <png.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/temp_dir.h"

namespace traind::testing {
namespace {

namespace fs = std::filesystem;
using traind::v1::Job;

constexpr int kSide = 12;

struct Images {
  std::vector<uint8_t> pixels;  // [n, 12, 12]
  std::vector<uint8_t> labels;
};

Images MakeImages(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  Images out;
  for (int i = 0; i < n; ++i) {
    const int kind = i % 3;
    const int at = 2 + static_cast<int>(rng() % 8);
    std::vector<uint8_t> image(kSide * kSide);
    for (int y = 0; y < kSide; ++y) {
      for (int x = 0; x < kSide; ++x) {
        const bool on = kind == 0 ? y == at : kind == 1 ? x == at : x - y == at - 6;
        image[y * kSide + x] = static_cast<uint8_t>((on ? 180 : 20) + rng() % 60);
      }
    }
    out.pixels.insert(out.pixels.end(), image.begin(), image.end());
    out.labels.push_back(static_cast<uint8_t>(kind));
  }
  return out;
}

void WriteGzipIdx(const std::string& path, const std::vector<uint32_t>& dims,
                  const std::vector<uint8_t>& bytes) {
  std::string out = {0, 0, 0x08, static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((d >> s) & 0xFF));
  }
  out.append(bytes.begin(), bytes.end());
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, out.data(), static_cast<unsigned>(out.size())),
            static_cast<int>(out.size()));
  gzclose(f);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::map<std::string, std::vector<std::string>> Columns(const std::string& text) {
  std::map<std::string, std::vector<std::string>> columns;
  std::vector<std::string> header;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    absl::ConsumeSuffix(&line, "\r");
    std::vector<std::string> cells = absl::StrSplit(line, ',');
    if (header.empty()) {
      header = cells;
      continue;
    }
    for (size_t c = 0; c < header.size() && c < cells.size(); ++c) {
      columns[header[c]].push_back(cells[c]);
    }
  }
  return columns;
}

TEST(ImagesDaemonTest, IdxCvJobPredictsAnNpyUploadAndAgreesWithOnnxRuntime) {
  TempDir dir;
  const Images train = MakeImages(270, 1), heldout = MakeImages(60, 2);
  WriteGzipIdx(dir.Path("train-images-idx3-ubyte.gz"), {270, kSide, kSide}, train.pixels);
  WriteGzipIdx(dir.Path("train-labels-idx1-ubyte.gz"), {270}, train.labels);
  // The held-out images as a NumPy array ([60, 12, 12] uint8), no labels.
  std::string npy_header = "{'descr': '|u1', 'fortran_order': False, 'shape': (60, 12, 12), }";
  while ((10 + npy_header.size() + 1) % 64 != 0) npy_header.push_back(' ');
  npy_header.push_back('\n');
  std::string npy = "\x93NUMPY";
  npy += std::string({1, 0, static_cast<char>(npy_header.size()), 0});
  npy += npy_header;
  npy.append(heldout.pixels.begin(), heldout.pixels.end());
  const std::string heldout_path = dir.Write("heldout.npy", npy);

  const std::string spec_path =
      dir.Write("spec.yaml", absl::StrCat(R"(name: strokes
data:
  path: )",
                                          dir.Path("train-images-idx3-ubyte.gz"), R"(
  labels_path: )",
                                          dir.Path("train-labels-idx1-ubyte.gz"), R"(
  class_names: [row, column, diagonal]
  scaling: standard
  augment: {crop_padding: 1, horizontal_flip: true}
cross_validation: {folds: 3, refit: true}
seed: 3
model:
  layers:
    - conv2d: {filters: 8, kernel: 3, padding: same, activation: relu, init: he_uniform}
    - max_pool2d: {kernel: 2}
    - conv2d: {filters: 8, kernel: 3, activation: relu, init: he_uniform}
    - global_avg_pool2d: {}
    - dense: {units: 3}
loss: {softmax_cross_entropy: {}}
optimizer: {adam: {learning_rate: 0.005}}
training: {epochs: 20, batch_size: 16}
metrics: {val: [loss, accuracy]}
)"));
  TraindProcess daemon(dir.path() + "/state", {"--cpu-slots=2", "--data-root=" + dir.path()});
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  const std::string trainctl = absl::StrCat(BinDir(), "/trainctl --address ", daemon.address());
  std::string out;
  ASSERT_EQ(RunCommand(absl::StrCat(trainctl, " submit ", spec_path, " --watch 2>&1"), &out), 0)
      << out << daemon.Log();
  traind::v1::ListJobsResponse jobs;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(daemon.stub()->ListJobs(ctx.get(), traind::v1::ListJobsRequest(), &jobs).ok());
  }
  ASSERT_EQ(jobs.jobs_size(), 1);
  const Job job = GetJob(daemon.stub(), jobs.jobs(0).id());
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.DebugString() << daemon.Log();
  // The shape traind read from the files, stored with the job.
  ASSERT_EQ(job.spec().data().shape_size(), 3);
  EXPECT_EQ(job.spec().data().shape(0), 1);
  EXPECT_EQ(job.spec().data().shape(1), kSide);
  EXPECT_EQ(job.spec().data().shape(2), kSide);
  // Three folds of 90 validation images each, each in its own worker.
  traind::v1::JobResult result;
  {
    traind::v1::GetJobResultRequest req;
    req.set_job_id(job.id());
    auto ctx = Ctx();
    ASSERT_TRUE(daemon.stub()->GetJobResult(ctx.get(), req, &result).ok());
  }
  ASSERT_EQ(result.folds_size(), 3);
  for (const auto& fold : result.folds()) {
    EXPECT_EQ(fold.val_rows(), 90);
    EXPECT_GE(fold.val().at("accuracy"), 0.9) << fold.DebugString();
    std::printf("[images] fold %d: val accuracy %.3f\n", fold.fold(), fold.val().at("accuracy"));
  }
  EXPECT_EQ(result.classes_size(), 3);
  EXPECT_EQ(result.classes(2), "diagonal");
  EXPECT_TRUE(result.has_refit());

  // Predict the NPY images (uploaded: traind knows them by their bytes).
  const std::string predicted = dir.Path("predicted.csv");
  ASSERT_EQ(RunCommand(absl::StrCat(trainctl, " predict ", job.id(), " ", heldout_path, " -O ",
                                    predicted, " 2>&1"),
                       &out),
            0)
      << out;
  const auto traind_columns = Columns(ReadAll(predicted));
  ASSERT_EQ(traind_columns.count("label"), 1u) << ReadAll(predicted);
  const std::vector<std::string>& labels = traind_columns.at("label");
  ASSERT_EQ(labels.size(), 60u);
  const char* const kNames[] = {"row", "column", "diagonal"};
  int right = 0;
  for (size_t i = 0; i < labels.size(); ++i) right += labels[i] == kNames[heldout.labels[i]];
  EXPECT_GE(right, 54) << "of 60";
  std::printf("[images] held-out: %d of 60 right\n", right);

  // model.onnx in ONNX Runtime: one input per pixel, named as the features.
  const std::string ort_dir = SourceDir() + "/tests/onnx";
  const bool have_ort = fs::exists(ort_dir + "/node_modules/onnxruntime-node/package.json") &&
                        std::system("command -v node >/dev/null 2>&1") == 0;
  if (!have_ort) GTEST_SKIP() << "onnxruntime-node is not installed in " << ort_dir;
  std::string csv;
  for (int y = 0; y < kSide; ++y) {
    for (int x = 0; x < kSide; ++x)
      absl::StrAppend(&csv, csv.empty() ? "" : ",", "c0_y", y, "_x", x);
  }
  csv += "\n";
  for (int i = 0; i < 60; ++i) {
    for (int p = 0; p < kSide * kSide; ++p) {
      absl::StrAppend(&csv, p == 0 ? "" : ",",
                      static_cast<int>(heldout.pixels[i * kSide * kSide + p]));
    }
    csv += "\n";
  }
  const std::string pixels_csv = dir.Write("pixels.csv", csv);
  const std::string onnx = daemon.state_dir() + "/jobs/" + job.id() + "/task-3/model.onnx";
  ASSERT_TRUE(fs::exists(onnx)) << onnx;
  const std::string ort_out = dir.Path("ort.csv");
  ASSERT_EQ(RunCommand(absl::StrCat("node ", ort_dir, "/run_onnx.mjs ", onnx, " ", pixels_csv, " ",
                                    ort_out, " 2>&1"),
                       &out),
            0)
      << out;
  const auto ort_columns = Columns(ReadAll(ort_out));
  double largest = 0;
  for (const auto& [name, values] : traind_columns) {
    ASSERT_EQ(ort_columns.count(name), 1u) << name << " not in ONNX Runtime's output";
    const std::vector<std::string>& theirs = ort_columns.at(name);
    ASSERT_EQ(theirs.size(), values.size()) << name;
    for (size_t r = 0; r < values.size(); ++r) {
      if (name == "label" || name == "row") {
        EXPECT_EQ(theirs[r], values[r]) << name << " row " << r;
        continue;
      }
      const double a = std::stod(values[r]), b = std::stod(theirs[r]);
      largest = std::max(largest, std::fabs(a - b));
      EXPECT_NEAR(a, b, 1e-5) << name << " row " << r;
    }
  }
  std::printf("[images] max |ONNX Runtime - traind predict| = %.3g\n", largest);
}

// An RGB PNG of w × h: the left half bright for class 0, the right half for
// class 1, with noise.
void WritePng(const std::string& path, int w, int h, int kind, std::mt19937& rng) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w * h * 3));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const bool bright = (x < w / 2) == (kind == 0);
      for (int c = 0; c < 3; ++c) {
        rgb[(y * w + x) * 3 + c] = static_cast<uint8_t>((bright ? 170 : 30) + rng() % 60);
      }
    }
  }
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = static_cast<png_uint_32>(h);
  image.format = PNG_FORMAT_RGB;
  ASSERT_NE(png_image_write_to_file(&image, path.c_str(), 0, rgb.data(), 0, nullptr), 0) << path;
}

// An image folder (PNG files of two sizes, resized by data.image_size) from
// submit to predict: the worker decodes it, and Predict reads another folder
// named on the server as the model takes it.
TEST(ImagesDaemonTest, ImageFolderTrainsAndPredictsAFolder) {
  TempDir dir;
  std::mt19937 rng(5);
  const char* const kClasses[] = {"left", "right"};
  for (int k = 0; k < 2; ++k) {
    fs::create_directories(dir.Path(std::string("train/") + kClasses[k]));
    fs::create_directories(dir.Path(std::string("heldout/") + kClasses[k]));
    for (int i = 0; i < 40; ++i) {
      const int side = i % 2 == 0 ? 10 : 14;
      WritePng(dir.Path(absl::StrCat("train/", kClasses[k], "/", i, ".png")), side, side, k, rng);
    }
    for (int i = 0; i < 5; ++i) {
      WritePng(dir.Path(absl::StrCat("heldout/", kClasses[k], "/", i, ".png")), 12, 12, k, rng);
    }
  }
  const std::string spec_path = dir.Write("spec.yaml", absl::StrCat(R"(name: halves
data:
  path: )",
                                                                    dir.Path("train"), R"(
  image_size: [8, 8]
  scaling: standard
cross_validation: {folds: 2, refit: true}
seed: 4
model:
  layers:
    - conv2d: {filters: 4, kernel: 3, padding: same, activation: relu, init: he_uniform}
    - max_pool2d: {kernel: 2}
    - flatten: {}
    - dense: {units: 2}
loss: {softmax_cross_entropy: {}}
optimizer: {adam: {learning_rate: 0.01}}
training: {epochs: 10, batch_size: 8}
metrics: {val: [loss, accuracy]}
)"));
  TraindProcess daemon(dir.path() + "/state", {"--cpu-slots=2", "--data-root=" + dir.path()});
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  const std::string trainctl = absl::StrCat(BinDir(), "/trainctl --address ", daemon.address());
  std::string out;
  ASSERT_EQ(RunCommand(absl::StrCat(trainctl, " submit ", spec_path, " --watch 2>&1"), &out), 0)
      << out << daemon.Log();
  traind::v1::ListJobsResponse jobs;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(daemon.stub()->ListJobs(ctx.get(), traind::v1::ListJobsRequest(), &jobs).ok());
  }
  ASSERT_EQ(jobs.jobs_size(), 1);
  const Job job = GetJob(daemon.stub(), jobs.jobs(0).id());
  ASSERT_EQ(job.state(), Job::SUCCEEDED) << job.DebugString() << daemon.Log();
  ASSERT_EQ(job.spec().data().shape_size(), 3);
  EXPECT_EQ(job.spec().data().shape(0), 3);  // RGB, the default
  EXPECT_EQ(job.spec().data().shape(1), 8);
  // A folder is not uploaded: trainctl says how to name it.
  EXPECT_NE(
      RunCommand(absl::StrCat(trainctl, " predict ", job.id(), " ", dir.Path("heldout"), " 2>&1"),
                 &out),
      0);
  EXPECT_TRUE(absl::StrContains(out,
                                "a directory (an image folder) is not uploaded; name one "
                                "on traind's machine with --server-path"))
      << out;
  const std::string predicted = dir.Path("predicted.csv");
  ASSERT_EQ(RunCommand(absl::StrCat(trainctl, " predict ", job.id(), " ", dir.Path("heldout"),
                                    " --server-path -O ", predicted, " 2>&1"),
                       &out),
            0)
      << out;
  const auto columns = Columns(ReadAll(predicted));
  ASSERT_EQ(columns.count("label"), 1u) << ReadAll(predicted);
  const std::vector<std::string>& labels = columns.at("label");
  ASSERT_EQ(labels.size(), 10u);
  int right = 0;
  for (size_t i = 0; i < labels.size(); ++i) right += labels[i] == kClasses[i / 5];
  EXPECT_GE(right, 9) << "of 10";
  std::printf("[images] folder held-out: %d of 10 right\n", right);
  // Each row names its file, "<class>/<file>" as the folder holds it.
  ASSERT_EQ(columns.count("file"), 1u) << ReadAll(predicted);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(columns.at("file")[i], absl::StrCat(kClasses[i / 5], "/", i % 5, ".png"));
  }
  // The out-of-fold predictions too, with their fold and true class: 80
  // distinct files, each scored by one of the two folds.
  const auto oof = Columns(ReadAll(daemon.state_dir() + "/jobs/" + job.id() + "/predictions.csv"));
  ASSERT_EQ(oof.count("file"), 1u);
  ASSERT_EQ(oof.at("file").size(), 80u);
  std::set<std::string> files;
  for (size_t i = 0; i < 80; ++i) {
    const std::string& file = oof.at("file")[i];
    files.insert(file);
    EXPECT_EQ(file.substr(0, file.find('/')), oof.at("true_label")[i]) << file;
    EXPECT_TRUE(oof.at("fold")[i] == "0" || oof.at("fold")[i] == "1") << file;
  }
  EXPECT_EQ(files.size(), 80u);
}

}  // namespace
}  // namespace traind::testing
