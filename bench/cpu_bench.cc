// CPU training-speed benchmark, traind's side. Driven by
// bench/run_cpu_bench.sh (bench/peers/driver.py), which runs it alternately
// with the PyTorch peer on the same data file and prints the tables.
//
//   cpu_bench fit --data FILE --hidden 512,256 --batch 128 --epochs 3 [--rows N]
//                 [--precision fp32|bf16] [--gemmset-sets N] [--update-in-backward 0|1]
//       Trains an MLP (Dense+ReLU hidden layers, a linear Dense to the
//       classes, softmax cross-entropy, SGD lr 0.01 momentum 0.9, xavier
//       uniform weights and zero bias, rows reshuffled every epoch) through
//       the public engine::Fit API on every row of FILE (no validation rows),
//       and prints one JSON line with each epoch's EpochMetrics.seconds and
//       training loss. --precision sets training.precision (default fp32).
//       --gemmset-sets N (fp32): after each epoch, once its clock has
//       stopped, runs the step's GEMM set (gemmset below) N times back to
//       back and prints its sustained GFLOP/s per epoch.
//       --update-in-backward 0: FitOptions::update_in_backward false (every
//       parameter updated from its gradient after the backward pass).
//   cpu_bench sgemm --m M --n N --k K [--reps R]
//       f32 oneDNN matmul C[M,N] = A[M,K] B[K,N]; prints the best and median
//       GFLOP/s of R timed runs (after a warm-up) as one JSON line.
//   cpu_bench gemmset --features F --hidden 512,256 --classes C --batch B [--reps R]
//                     [--momentum M]
//       The GEMM set of one fp32 training step of that MLP alone, with the
//       library calls the CPU backend makes (bench/gemm_set.h
//       GemmSetRunner: row-slab layers as the row-slab kernel runs them,
//       cpu_gemm.h's rule and TRAIND_CPU_GEMM; the backend's memory
//       descriptors and alignment). Runs R sets back to back after a warm-up
//       and prints the best, median and sustained (total flops ÷ total time)
//       GFLOP/s and each product's mean milliseconds: the ceiling of an fp32
//       step, every other op taking no time. --momentum (default 0.9, fit's;
//       0: none): the row-slab layers' weight gradients accumulate with it,
//       as SGD with momentum makes them when it updates those layers in
//       their backward pass.
//   cpu_bench gemmlibs --batch B --in I --out O [--reps R] [--w-offset BYTES]
//       The three products of one dense layer (forward x·w, weight gradient
//       xᵀ·dz, input gradient dz·wᵀ) as the CPU backend's row-slab kernel
//       runs them (one single-threaded call per thread on its slab of w), in
//       oneDNN and in OpenBLAS alternately, on operands aligned as the
//       backend's tensors, w starting BYTES past that alignment (default 0):
//       one JSON line per product with each library's median GFLOP/s of R
//       runs. What backend/cpu/cpu_gemm.h's rule was measured with.
//   cpu_bench profile --data FILE --hidden 512,256 --batch B [--steps S]
//                     [--update-in-backward 0|1] [--interleave-rounds R]
//       One training step of `fit`'s model, op by op through the engine's own
//       parts (backend, network, loss kernel, optimizer), each timed over S
//       steps after a warm-up: prints the median milliseconds of the batch
//       gather, the forward pass, the loss, each layer's backward pass and
//       the optimizer update as one JSON line. As in fit, row-slab layers
//       update their weights inside their backward pass
//       (Optimizer::BeginStep), so the update's time is the rest; unless
//       --update-in-backward 0 (FitOptions::update_in_backward, also fit's).
//       --interleave-rounds R (default 0: none) [--interleave-block B]: then
//       R rounds of B whole steps (no clock inside them) and B GEMM sets
//       (gemmset's, same shapes and momentum), in turn first: "interleaved"
//       gives the median and quartiles over rounds of the set's time ÷ the
//       steps' — the share of the set, each block beside the other.
//   cpu_bench convprofile --spec FILE [--shape C,H,W] [--batch B] [--steps S]
//                         [--precision fp32|bf16]
//       A convolutional network's step, op by op, and its image layers'
//       kernels alone on the same shapes (bench/conv_profile.cc).
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
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/random.h"
#include "bench/conv_profile.h"
#include "bench/gemm_set.h"
#include "data/dataset.h"
#include "data/split.h"
#include "dnnl.hpp"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/cpu/cpu_gemm.h"
#include "worker/engine/data/huge_pages.h"
#include "worker/engine/fit.h"
#include "worker/engine/losses.h"
#include "worker/engine/network.h"
#include "worker/engine/optimizers.h"

namespace {

using traind::bench::AlignedBuffers;
using traind::bench::GemmSetRunner;
using traind::bench::SecondsSince;
using traind::bench::SlabProducts;
using traind::data::Dataset;
using traind::data::FoldRows;

class SecondsObserver final : public traind::engine::FitObserver {
 public:
  absl::Status OnEpochEnd(const traind::v1::EpochMetrics& m) override {
    seconds.push_back(m.seconds());
    batches.push_back(m.batches());
    loss.push_back(m.train().count("loss") ? m.train().at("loss") : 0.0);
    // After the epoch's clock stopped, before the next one's starts.
    if (after_epoch) after_epoch();
    return absl::OkStatus();
  }
  bool StopRequested() override { return false; }
  std::vector<double> seconds, loss;
  std::vector<int64_t> batches;
  std::function<void()> after_epoch;
};

bool ReadData(const std::string& path, int64_t max_rows, traind::data::Dataset* d) {
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
  d->target = traind::data::TargetKind::kClasses;
  for (int64_t f = 0; f < features; ++f) d->feature_names.push_back(absl::StrCat("f", f));
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

// Arg's value as a whole number (atoll: 0 when it is none).
int64_t IntArg(int argc, char** argv, const std::string& name, int64_t def) {
  return std::atoll(Arg(argc, argv, name, std::to_string(def)).c_str());
}

std::vector<int> IntList(const std::string& text) {
  std::vector<int> values;
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (absl::SimpleAtoi(s, &v)) values.push_back(v);
  }
  return values;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// fit's SGD momentum; the GEMM set's weight gradients accumulate with it.
constexpr float kMomentum = 0.9f;

// The benchmark's model: Dense+ReLU hidden layers, a linear Dense to the
// classes, softmax cross-entropy, SGD lr 0.01 momentum 0.9.
traind::v1::JobSpec MlpSpec(const std::string& data_path, const std::vector<int>& hidden,
                            int64_t classes, int batch, int epochs,
                            traind::v1::Precision precision) {
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
  out->set_units(static_cast<int32_t>(classes));
  out->set_init(traind::v1::XAVIER_UNIFORM);
  spec.mutable_loss()->mutable_softmax_cross_entropy();
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.01);
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(kMomentum);
  spec.mutable_training()->set_epochs(epochs);
  spec.mutable_training()->set_batch_size(batch);
  spec.mutable_training()->set_shuffle(true);
  spec.mutable_training()->set_precision(precision);
  spec.mutable_metrics()->add_train(traind::v1::LOSS);
  spec.mutable_resources()->set_device(traind::v1::CPU);
  return spec;
}

int Sgemm(int argc, char** argv) {
  const int64_t m = IntArg(argc, argv, "--m", 2048);
  const int64_t n = IntArg(argc, argv, "--n", 2048);
  const int64_t k = IntArg(argc, argv, "--k", 2048);
  const int reps = static_cast<int>(IntArg(argc, argv, "--reps", 10));
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
    for (size_t i = 0; i < count; ++i)
      p[i] = scale * static_cast<float>((i * 2654435761u) % 1000) / 1000.f;
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
  std::printf(
      "{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"threads\": %d, \"best_gflops\": %.2f, "
      "\"median_gflops\": %.2f, \"impl\": \"%s\"}\n",
      static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
      omp_get_max_threads(), gflops.back(), gflops[gflops.size() / 2], pd.impl_info_str());
  return 0;
}

int GemmSet(int argc, char** argv) {
  const int64_t features = IntArg(argc, argv, "--features", 784);
  const int64_t classes = IntArg(argc, argv, "--classes", 10);
  const int64_t batch = IntArg(argc, argv, "--batch", 128);
  const int reps = static_cast<int>(IntArg(argc, argv, "--reps", 200));
  const float momentum = std::stof(Arg(argc, argv, "--momentum", "0.9"));
  absl::StatusOr<std::unique_ptr<GemmSetRunner>> set = GemmSetRunner::Create(
      features, IntList(Arg(argc, argv, "--hidden", "512,256")), classes, batch, momentum);
  if (!set.ok()) {
    std::fprintf(stderr, "cpu_bench: %s\n", std::string(set.status().message()).c_str());
    return 2;
  }
  std::vector<double> seconds;
  const double total = (*set)->Run(reps, 10, &seconds);
  std::sort(seconds.begin(), seconds.end());
  const double flops = (*set)->flops();
  // best: the fastest set; median: the middle set; sustained: every set
  // back to back (total flops ÷ total time), as an epoch's rate sums its
  // steps. products_ms: each product's mean milliseconds.
  std::printf(
      "{\"batch\": %lld, \"gemms\": %zu, \"openblas_gemms\": %d, \"slab_gemms\": %d, "
      "\"set_mflop\": %.3f, \"momentum\": %.2f, \"threads\": %d, \"sets\": %d, \"best_gflops\": "
      "%.2f, "
      "\"median_gflops\": %.2f, \"sustained_gflops\": %.2f, \"products_ms\": {%s}}\n",
      static_cast<long long>(batch), (*set)->gemms(), (*set)->openblas_gemms(),
      (*set)->slab_gemms(), flops / 1e6, momentum, omp_get_max_threads(), reps,
      flops / seconds.front() / 1e9, flops / seconds[seconds.size() / 2] / 1e9,
      flops * reps / total / 1e9, (*set)->ProductsJson().c_str());
  return 0;
}

int Fit(int argc, char** argv) {
  const std::string data_path = Arg(argc, argv, "--data", "");
  const std::vector<int> hidden = IntList(Arg(argc, argv, "--hidden", "512,256"));
  const int batch = static_cast<int>(IntArg(argc, argv, "--batch", 128));
  const int epochs = static_cast<int>(IntArg(argc, argv, "--epochs", 3));
  const int64_t max_rows = IntArg(argc, argv, "--rows", 0);
  traind::engine::FitOptions options;
  options.update_in_backward = IntArg(argc, argv, "--update-in-backward", 1) != 0;
  const std::string precision_name = Arg(argc, argv, "--precision", "fp32");
  traind::v1::Precision precision = traind::v1::FP32;
  if (precision_name == "bf16") {
    precision = traind::v1::BF16;
  } else if (precision_name != "fp32") {
    std::fprintf(stderr, "cpu_bench: --precision must be fp32 or bf16\n");
    return 2;
  }
  traind::data::Dataset data;
  if (!ReadData(data_path, max_rows, &data)) {
    std::fprintf(stderr, "cpu_bench: cannot read %s\n", data_path.c_str());
    return 2;
  }
  const traind::v1::JobSpec spec = MlpSpec(
      data_path, hidden, static_cast<int64_t>(data.classes.size()), batch, epochs, precision);

  traind::data::FoldRows rows;
  rows.train.resize(static_cast<size_t>(data.rows));
  std::iota(rows.train.begin(), rows.train.end(), 0);
  SecondsObserver observer;
  // The step's GEMM set, `sets` times back to back after each epoch: its
  // sustained rate in the same process, right after the epoch it is
  // compared with.
  const int sets = static_cast<int>(IntArg(argc, argv, "--gemmset-sets", 0));
  std::unique_ptr<GemmSetRunner> gemm_set;
  std::vector<double> set_gflops;
  if (sets > 0) {
    if (precision != traind::v1::FP32) {
      std::fprintf(stderr, "cpu_bench: --gemmset-sets needs --precision fp32\n");
      return 2;
    }
    absl::StatusOr<std::unique_ptr<GemmSetRunner>> created = GemmSetRunner::Create(
        data.features, hidden, static_cast<int64_t>(data.classes.size()), batch, kMomentum);
    if (!created.ok()) {
      std::fprintf(stderr, "cpu_bench: %s\n", std::string(created.status().message()).c_str());
      return 2;
    }
    gemm_set = *std::move(created);
    observer.after_epoch = [&] {
      if (set_gflops.empty()) {
        // Planned again once the fit has made its own allocations, as
        // profile plans its set: its operands then land elsewhere, and the
        // set measured 2–4% faster so than planned before the fit (4 pairs
        // of runs) — the stricter ceiling.
        absl::StatusOr<std::unique_ptr<GemmSetRunner>> again = GemmSetRunner::Create(
            data.features, hidden, static_cast<int64_t>(data.classes.size()), batch, kMomentum);
        if (again.ok()) gemm_set = *std::move(again);
      }
      set_gflops.push_back(gemm_set->flops() * sets / gemm_set->Run(sets, 10, nullptr) / 1e9);
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<traind::v1::FoldResult> r =
      traind::engine::Fit(spec, data, rows, 0, options, &observer);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) {
    std::fprintf(stderr, "cpu_bench: Fit: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  std::string gemmset_json;
  if (gemm_set != nullptr) {
    gemmset_json = absl::StrFormat(
        ", \"gemmset_sets\": %d, \"set_mflop\": %.3f, \"gemmset_gflops_after_epoch\": [%s]", sets,
        gemm_set->flops() / 1e6, absl::StrJoin(set_gflops, ", ", [](std::string* o, double v) {
          o->append(absl::StrFormat("%.2f", v));
        }));
  }
  std::printf(
      "{\"engine\": \"traind\", \"precision\": \"%s\", \"rows\": %lld, \"batch\": %d, "
      "\"threads\": %d, \"fit_seconds\": %.6f, \"epoch_seconds\": [%s], \"epoch_loss\": "
      "[%s]%s}\n",
      precision_name.c_str(), static_cast<long long>(data.rows), batch, omp_get_max_threads(),
      total,
      absl::StrJoin(observer.seconds, ", ",
                    [](std::string* o, double v) { o->append(std::to_string(v)); })
          .c_str(),
      absl::StrJoin(observer.loss, ", ",
                    [](std::string* o, double v) { o->append(std::to_string(v)); })
          .c_str(),
      gemmset_json.c_str());
  return 0;
}

// Exits with a message when `status` is an error.
void Check(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "cpu_bench: %s: %s\n", what, std::string(status.message()).c_str());
  std::exit(1);
}
template <typename T>
T Check(absl::StatusOr<T> value, const char* what) {
  Check(value.status(), what);
  return std::move(value).value();
}

int GemmLibs(int argc, char** argv) {
  namespace cpu = traind::engine::cpu;
  const int64_t batch = IntArg(argc, argv, "--batch", 256);
  const int64_t in = IntArg(argc, argv, "--in", 4096);
  const int64_t out = IntArg(argc, argv, "--out", 4096);
  const int reps = static_cast<int>(IntArg(argc, argv, "--reps", 20));
  const int64_t offset = IntArg(argc, argv, "--w-offset", 0);
  absl::StatusOr<const cpu::OpenBlas*> blas = cpu::LoadOpenBlas();
  if (!blas.ok()) {
    std::fprintf(stderr, "cpu_bench: %s\n", std::string(blas.status().message()).c_str());
    return 2;
  }
  const int parts = omp_get_max_threads();
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  AlignedBuffers buffers;
  // Both libraries planned, so that either can run each product.
  SlabProducts layer(eng, *blas, parts, batch, in, out, &buffers, offset);
  const char* names[] = {"forward x·w", "weight gradient xᵀ·dz", "input gradient dz·wᵀ"};
  const SlabProducts::Op ops[] = {SlabProducts::kForward, SlabProducts::kWeights,
                                  SlabProducts::kData};
  for (int op = 0; op < 3; ++op) {
    auto run = [&](bool openblas) { layer.Run(ops[op], openblas); };
    std::vector<double> times[2];
    for (int i = 0; i < 3; ++i) {
      run(false);
      run(true);
    }
    for (int i = 0; i < reps; ++i) {
      for (int lib = 0; lib < 2; ++lib) {
        const auto t0 = std::chrono::steady_clock::now();
        run(lib == 1);
        times[lib].push_back(SecondsSince(t0));
      }
    }
    const double flops = 2.0 * static_cast<double>(batch * in * out);
    std::printf(
        "{\"product\": \"%s\", \"batch\": %lld, \"in\": %lld, \"out\": %lld, "
        "\"threads\": %d, \"w_offset\": %lld, \"onednn_gflops\": %.1f, "
        "\"openblas_gflops\": %.1f}\n",
        names[op], static_cast<long long>(batch), static_cast<long long>(in),
        static_cast<long long>(out), parts, static_cast<long long>(offset),
        flops / Median(times[0]) / 1e9, flops / Median(times[1]) / 1e9);
  }
  return 0;
}

int Profile(int argc, char** argv) {
  using traind::engine::DType;
  using traind::engine::Tensor;
  const std::string data_path = Arg(argc, argv, "--data", "");
  const std::vector<int> hidden = IntList(Arg(argc, argv, "--hidden", "512,256"));
  const int64_t batch = IntArg(argc, argv, "--batch", 128);
  const int steps = static_cast<int>(IntArg(argc, argv, "--steps", 200));
  const bool update_in_backward = IntArg(argc, argv, "--update-in-backward", 1) != 0;
  const int rounds = static_cast<int>(IntArg(argc, argv, "--interleave-rounds", 0));
  const int block = static_cast<int>(IntArg(argc, argv, "--interleave-block", 25));
  if (block < 1) {
    std::fprintf(stderr, "cpu_bench: --interleave-block must be at least 1\n");
    return 2;
  }
  traind::data::Dataset data;
  if (!ReadData(data_path, 0, &data)) {
    std::fprintf(stderr, "cpu_bench: cannot read %s\n", data_path.c_str());
    return 2;
  }
  const int64_t classes = static_cast<int64_t>(data.classes.size());
  const traind::v1::JobSpec spec =
      MlpSpec(data_path, hidden, classes, static_cast<int>(batch), 1, traind::v1::FP32);
  std::unique_ptr<traind::engine::Backend> backend =
      Check(traind::engine::CreateCpuBackend(traind::v1::FP32), "backend");
  traind::engine::Network network =
      Check(traind::engine::Network::Create(backend.get(), data.features, spec.model()), "network");
  traind::Rng rng(42);
  Check(network.Initialize(rng), "initialize");
  std::unique_ptr<traind::engine::Optimizer> optimizer =
      Check(traind::engine::CreateOptimizer(spec.optimizer(), backend.get(), network.parameters()),
            "optimizer");
  std::unique_ptr<traind::engine::Loss> loss =
      Check(traind::engine::Loss::Create(spec.loss(), traind::data::TargetKind::kClasses, classes),
            "loss");
  std::unique_ptr<traind::engine::LossKernel> loss_kernel =
      Check(backend->CreateLossKernel(loss->KernelOptions(batch, 1)), "loss kernel");
  Tensor x = Check(backend->Allocate2d(DType::kF32, batch, data.features), "x");
  Tensor y = Check(backend->Allocate1d(DType::kS32, batch), "y");
  Tensor dout = Check(backend->Allocate2d(DType::kF32, batch, classes), "doutputs");
  // The rows as fit holds them (FitTask::features): a FeatureMatrix.
  const traind::engine::FeatureMatrix features(data.x.begin(), data.x.end());
  std::vector<int64_t> order(static_cast<size_t>(data.rows));
  std::iota(order.begin(), order.end(), 0);
  // Shuffled, as fit's epochs are: a batch's rows are scattered over the data.
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));
  const int64_t batches = data.rows / batch;
  const size_t layers = static_cast<size_t>(spec.model().layers_size());
  std::vector<double> gather, forward, loss_ms, update, step;
  std::vector<std::vector<double>> backward(layers);
  // Step i (batch i of the shuffled order, round and round); its parts'
  // times recorded when `timed`.
  const auto run_step = [&](int i, bool timed) {
    const absl::Span<const int64_t> rows = absl::MakeConstSpan(order).subspan(
        static_cast<size_t>((i % batches) * batch), static_cast<size_t>(batch));
    const auto t_step = std::chrono::steady_clock::now();
    auto t0 = t_step;
    // As fit's one-rank step: row-slab layers update in their backward pass.
    if (update_in_backward) optimizer->BeginStep(0.01);
    Check(backend->GatherRows(features.data(), data.features, rows, &x), "gather");
    Check(backend->GatherLabels(data.y.data(), rows, &y), "gather");
    if (timed) gather.push_back(1e3 * SecondsSince(t0));
    t0 = std::chrono::steady_clock::now();
    Tensor* outputs = Check(network.Forward(x, traind::engine::ForwardMode()), "forward");
    if (timed) forward.push_back(1e3 * SecondsSince(t0));
    t0 = std::chrono::steady_clock::now();
    Check(loss_kernel->Compute(*outputs, y, 1.0 / static_cast<double>(batch), &dout, nullptr, 0),
          "loss");
    if (timed) loss_ms.push_back(1e3 * SecondsSince(t0));
    t0 = std::chrono::steady_clock::now();
    Check(network.Backward(x, &dout,
                           [&](size_t layer) -> absl::Status {
                             if (timed) backward[layer].push_back(1e3 * SecondsSince(t0));
                             t0 = std::chrono::steady_clock::now();
                             return absl::OkStatus();
                           }),
          "backward");
    t0 = std::chrono::steady_clock::now();
    Check(optimizer->Step(0.01), "optimizer");
    if (timed) {
      update.push_back(1e3 * SecondsSince(t0));
      step.push_back(1e3 * SecondsSince(t_step));
    }
  };
  const int warmup = 20;
  int next = 0;
  for (; next < warmup + steps; ++next) run_step(next, next >= warmup);
  // Whole steps against the GEMM set, in alternating blocks: each round
  // times `block` steps (no clock inside them) and `block` sets back to
  // back, in turn first, so that both see the same minute of the machine.
  std::string interleaved;
  if (rounds > 0) {
    absl::StatusOr<std::unique_ptr<GemmSetRunner>> created = GemmSetRunner::Create(
        data.features, hidden, classes, batch, update_in_backward ? kMomentum : 0.0f);
    if (!created.ok()) {
      std::fprintf(stderr, "cpu_bench: %s\n", std::string(created.status().message()).c_str());
      return 2;
    }
    GemmSetRunner& set = **created;
    set.Run(block, block, nullptr);  // plans run, caches warm
    std::vector<double> shares, step_ms, set_ms;
    for (int r = 0; r < rounds; ++r) {
      double steps_s = 0, sets_s = 0;
      for (int k = 0; k < 2; ++k) {
        if ((k == 0) == (r % 2 == 0)) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int j = 0; j < block; ++j) run_step(next++, false);
          steps_s = SecondsSince(t0);
        } else {
          sets_s = set.Run(block, 0, nullptr);
        }
      }
      shares.push_back(sets_s / steps_s);
      step_ms.push_back(1e3 * steps_s / block);
      set_ms.push_back(1e3 * sets_s / block);
    }
    std::sort(shares.begin(), shares.end());
    interleaved = absl::StrFormat(
        ", \"interleaved\": {\"rounds\": %d, \"block\": %d, \"share_median\": %.4f, "
        "\"share_p25\": %.4f, \"share_p75\": %.4f, \"step_ms\": %.4f, \"set_ms\": %.4f}",
        rounds, block, Median(shares), shares[shares.size() / 4], shares[shares.size() * 3 / 4],
        Median(step_ms), Median(set_ms));
  }
  std::string per_layer;
  for (size_t l = 0; l < layers; ++l) {
    absl::StrAppend(&per_layer, l > 0 ? ", " : "", Median(backward[l]));
  }
  // The mean as well: an epoch's time is the sum of its steps, slow ones
  // included.
  const double step_mean = std::accumulate(step.begin(), step.end(), 0.0) /
                           static_cast<double>(std::max<size_t>(1, step.size()));
  std::printf(
      "{\"batch\": %lld, \"steps\": %d, \"threads\": %d, \"step_ms\": %.4f, "
      "\"step_mean_ms\": %.4f, \"gather_ms\": %.4f, \"forward_ms\": %.4f, \"loss_ms\": %.4f, "
      "\"backward_ms_by_layer\": [%s], \"optimizer_ms\": %.4f%s}\n",
      static_cast<long long>(batch), steps, omp_get_max_threads(), Median(step), step_mean,
      Median(gather), Median(forward), Median(loss_ms), per_layer.c_str(), Median(update),
      interleaved.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  traind::engine::DisableOneDnnProfilerHooks();  // as traind-worker does
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "fit") return Fit(argc, argv);
  if (mode == "sgemm") return Sgemm(argc, argv);
  if (mode == "gemmset") return GemmSet(argc, argv);
  if (mode == "profile") return Profile(argc, argv);
  if (mode == "gemmlibs") return GemmLibs(argc, argv);
  if (mode == "convprofile") return traind::bench::ConvProfile(argc, argv);
  std::fprintf(
      stderr,
      "usage: cpu_bench fit --data FILE --hidden 512,256 --batch 128 --epochs 3 "
      "[--rows N] [--precision fp32|bf16]\n"
      "       cpu_bench sgemm --m M --n N --k K [--reps R]\n"
      "       cpu_bench gemmset --features F --hidden 512,256 --classes C --batch B [--reps R]\n"
      "       cpu_bench gemmlibs --batch B --in I --out O [--reps R] [--w-offset BYTES]\n"
      "       cpu_bench profile --data FILE --hidden 512,256 --batch B [--steps S]\n"
      "       cpu_bench convprofile --spec FILE [--shape C,H,W] [--batch B] [--steps S]\n");
  return 2;
}
