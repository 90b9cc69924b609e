// CPU training-speed benchmark, traind's side (issue 7). Driven by
// bench/run_cpu_bench.sh (bench/peers/driver.py), which runs it alternately
// with the PyTorch peer on the same data file and prints the tables.
//
//   cpu_bench fit --data FILE --hidden 512,256 --batch 128 --epochs 3 [--rows N]
//                 [--precision fp32|bf16]
//       Trains an MLP (Dense+ReLU hidden layers, a linear Dense to the
//       classes, softmax cross-entropy, SGD lr 0.01 momentum 0.9, xavier
//       uniform weights and zero bias, rows reshuffled every epoch) through
//       the public engine::Fit API on every row of FILE (no validation rows),
//       and prints one JSON line with each epoch's EpochMetrics.seconds and
//       training loss. --precision sets training.precision (default fp32).
//   cpu_bench sgemm --m M --n N --k K [--reps R]
//       f32 oneDNN matmul C[M,N] = A[M,K] B[K,N]; prints the best and median
//       GFLOP/s of R timed runs (after a warm-up) as one JSON line.
//
// FILE (written by the driver): "TRDB", int64 rows, int64 features,
// int64 classes, float32 x[rows * features] (row-major), int32 y[rows].
// Threads: OMP_NUM_THREADS of the environment (oneDNN runs on OpenMP).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dnnl.hpp"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/data/dataset.h"
#include "worker/engine/data/split.h"
#include "worker/engine/fit.h"

namespace {

using traind::engine::Dataset;
using traind::engine::FoldRows;

class SecondsObserver final : public traind::engine::FitObserver {
 public:
  absl::Status OnEpochEnd(const traind::v1::EpochMetrics& m) override {
    seconds.push_back(m.seconds());
    batches.push_back(m.batches());
    loss.push_back(m.train().count("loss") ? m.train().at("loss") : 0.0);
    return absl::OkStatus();
  }
  bool StopRequested() override { return false; }
  std::vector<double> seconds, loss;
  std::vector<int64_t> batches;
};

bool ReadData(const std::string& path, int64_t max_rows, Dataset* d) {
  std::ifstream in(path, std::ios::binary);
  char magic[4];
  int64_t rows = 0, features = 0, classes = 0;
  in.read(magic, 4);
  in.read(reinterpret_cast<char*>(&rows), 8);
  in.read(reinterpret_cast<char*>(&features), 8);
  in.read(reinterpret_cast<char*>(&classes), 8);
  if (!in || std::memcmp(magic, "TRDB", 4) != 0) return false;
  std::vector<float> x(static_cast<size_t>(rows * features));
  std::vector<int32_t> y(static_cast<size_t>(rows));
  in.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(x.size() * 4));
  in.read(reinterpret_cast<char*>(y.data()), static_cast<std::streamsize>(y.size() * 4));
  if (!in) return false;
  const int64_t n = max_rows > 0 ? std::min(rows, max_rows) : rows;
  x.resize(static_cast<size_t>(n * features));
  y.resize(static_cast<size_t>(n));
  d->rows = n;
  d->features = features;
  d->x = std::move(x);
  d->y = std::move(y);
  d->target = traind::engine::TargetKind::kClasses;
  for (int64_t f = 0; f < features; ++f) d->feature_names.push_back("f" + std::to_string(f));
  for (int64_t c = 0; c < classes; ++c) d->classes.push_back(std::to_string(c));
  d->lines.resize(static_cast<size_t>(n));
  std::iota(d->lines.begin(), d->lines.end(), 2);
  d->path = path;
  return true;
}

std::string Arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (argv[i] == name) return argv[i + 1];
  }
  return def;
}

int Fit(int argc, char** argv) {
  const std::string data_path = Arg(argc, argv, "--data", "");
  std::vector<int> hidden;
  for (absl::string_view s : absl::StrSplit(Arg(argc, argv, "--hidden", "512,256"), ',',
                                            absl::SkipEmpty())) {
    int v = 0;
    if (absl::SimpleAtoi(s, &v)) hidden.push_back(v);
  }
  const int batch = std::atoi(Arg(argc, argv, "--batch", "128").c_str());
  const int epochs = std::atoi(Arg(argc, argv, "--epochs", "3").c_str());
  const int64_t max_rows = std::atoll(Arg(argc, argv, "--rows", "0").c_str());
  const std::string precision_name = Arg(argc, argv, "--precision", "fp32");
  traind::v1::Precision precision = traind::v1::FP32;
  if (precision_name == "bf16") {
    precision = traind::v1::BF16;
  } else if (precision_name != "fp32") {
    std::fprintf(stderr, "cpu_bench: --precision must be fp32 or bf16\n");
    return 2;
  }
  Dataset data;
  if (!ReadData(data_path, max_rows, &data)) {
    std::fprintf(stderr, "cpu_bench: cannot read %s\n", data_path.c_str());
    return 2;
  }
  traind::v1::JobSpec spec;
  spec.set_name("cpu-bench");
  spec.set_seed(42);
  spec.mutable_data()->set_path(data_path);
  spec.mutable_data()->set_label("label");
  for (int units : hidden) {
    auto* dense = spec.mutable_model()->add_layers()->mutable_dense();
    dense->set_units(units);
    dense->set_activation(traind::v1::RELU);
    dense->set_init(traind::v1::XAVIER_UNIFORM);
  }
  auto* out = spec.mutable_model()->add_layers()->mutable_dense();
  out->set_units(static_cast<int32_t>(data.classes.size()));
  out->set_init(traind::v1::XAVIER_UNIFORM);
  spec.mutable_loss()->mutable_softmax_cross_entropy();
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.01);
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(0.9);
  spec.mutable_training()->set_epochs(epochs);
  spec.mutable_training()->set_batch_size(batch);
  spec.mutable_training()->set_shuffle(true);
  spec.mutable_training()->set_precision(precision);
  spec.mutable_metrics()->add_train(traind::v1::LOSS);
  spec.mutable_resources()->set_device(traind::v1::CPU);

  FoldRows rows;
  rows.train.resize(static_cast<size_t>(data.rows));
  std::iota(rows.train.begin(), rows.train.end(), 0);
  SecondsObserver observer;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<traind::v1::FoldResult> r =
      traind::engine::Fit(spec, data, rows, 0, traind::engine::FitOptions{}, &observer);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) {
    std::fprintf(stderr, "cpu_bench: Fit: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  std::printf(
      "{\"engine\": \"traind\", \"precision\": \"%s\", \"rows\": %lld, \"batch\": %d, "
      "\"threads\": %d, \"fit_seconds\": %.6f, \"epoch_seconds\": [%s], \"epoch_loss\": [%s]}\n",
      precision_name.c_str(), static_cast<long long>(data.rows), batch, omp_get_max_threads(),
      total,
      absl::StrJoin(observer.seconds, ", ",
                    [](std::string* o, double v) { o->append(std::to_string(v)); })
          .c_str(),
      absl::StrJoin(observer.loss, ", ",
                    [](std::string* o, double v) { o->append(std::to_string(v)); })
          .c_str());
  return 0;
}

int Sgemm(int argc, char** argv) {
  const int64_t m = std::atoll(Arg(argc, argv, "--m", "2048").c_str());
  const int64_t n = std::atoll(Arg(argc, argv, "--n", "2048").c_str());
  const int64_t k = std::atoll(Arg(argc, argv, "--k", "2048").c_str());
  const int reps = std::atoi(Arg(argc, argv, "--reps", "10").c_str());
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  dnnl::memory::desc a_md({m, k}, dt::f32, tag::ab), b_md({k, n}, dt::f32, tag::ab),
      c_md({m, n}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
  dnnl::matmul mm(pd);
  dnnl::memory a(a_md, eng), b(b_md, eng), c(c_md, eng);
  auto fill = [](dnnl::memory& mem, size_t count, float scale) {
    float* p = static_cast<float*>(mem.get_data_handle());
    for (size_t i = 0; i < count; ++i) p[i] = scale * static_cast<float>((i * 2654435761u) % 1000) / 1000.f;
  };
  fill(a, static_cast<size_t>(m * k), 1.f);
  fill(b, static_cast<size_t>(k * n), 0.5f);
  auto run = [&] {
    mm.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
  };
  run();
  run();
  std::vector<double> gflops;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gflops.push_back(2.0 * m * n * k / s / 1e9);
  }
  std::sort(gflops.begin(), gflops.end());
  std::printf("{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"threads\": %d, \"best_gflops\": %.2f, "
              "\"median_gflops\": %.2f, \"impl\": \"%s\"}\n",
              static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
              omp_get_max_threads(), gflops.back(), gflops[gflops.size() / 2],
              pd.impl_info_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  traind::engine::DisableOneDnnProfilerHooks();  // as traind-worker does
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "fit") return Fit(argc, argv);
  if (mode == "sgemm") return Sgemm(argc, argv);
  std::fprintf(stderr,
               "usage: cpu_bench fit --data FILE --hidden 512,256 --batch 128 --epochs 3 "
               "[--rows N] [--precision fp32|bf16]\n"
               "       cpu_bench sgemm --m M --n N --k K [--reps R]\n");
  return 2;
}
