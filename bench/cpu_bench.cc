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
//   cpu_bench gemmset --features F --hidden 512,256 --classes C --batch B [--reps R]
//       The GEMM set of one fp32 training step of that MLP alone: per dense
//       layer the forward x·w, the weight gradient xᵀ·dz and (but for the
//       first layer) the input gradient dz·wᵀ, as oneDNN matmuls with exactly
//       the CPU backend's memory descriptors (transposes as strided views);
//       the products that the CPU backend gives to OpenBLAS
//       (backend/cpu/cpu_gemm.h: its rule and TRAIND_CPU_GEMM) as the backend
//       runs them, one cblas_sgemm per thread on its row slab of w. Prints the
//       best and median GFLOP/s of R timed sets: the ceiling of an fp32 step,
//       every other op taking no time.
//   cpu_bench gemmlibs --batch B --in I --out O [--reps R] [--w-offset BYTES]
//       The three products of one dense layer (forward x·w, weight gradient
//       xᵀ·dz, input gradient dz·wᵀ) as the CPU backend's row-slab kernel
//       runs them (one single-threaded call per thread on its slab of w), in
//       oneDNN and in OpenBLAS alternately, on operands aligned as the
//       backend's tensors, w starting BYTES past that alignment (default 0):
//       one JSON line per product with each library's median GFLOP/s of R
//       runs. What backend/cpu/cpu_gemm.h's rule was measured with.
//   cpu_bench profile --data FILE --hidden 512,256 --batch B [--steps S]
//       One training step of `fit`'s model, op by op through the engine's own
//       parts (backend, network, loss kernel, optimizer), each timed over S
//       steps after a warm-up: prints the median milliseconds of the batch
//       gather, the forward pass, the loss, each layer's backward pass and
//       the optimizer update as one JSON line.
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
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dnnl.hpp"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/cpu/cpu_dense_kernel.h"
#include "worker/engine/backend/cpu/cpu_gemm.h"
#include "worker/engine/backend/cpu/cpu_parallel.h"
#include "worker/engine/data/dataset.h"
#include "worker/engine/data/split.h"
#include "worker/engine/fit.h"
#include "worker/engine/losses.h"
#include "worker/engine/network.h"
#include "worker/engine/optimizers.h"
#include "worker/engine/random.h"

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

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

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
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(0.9);
  spec.mutable_training()->set_epochs(epochs);
  spec.mutable_training()->set_batch_size(batch);
  spec.mutable_training()->set_shuffle(true);
  spec.mutable_training()->set_precision(precision);
  spec.mutable_metrics()->add_train(traind::v1::LOSS);
  spec.mutable_resources()->set_device(traind::v1::CPU);
  return spec;
}

int Fit(int argc, char** argv) {
  const std::string data_path = Arg(argc, argv, "--data", "");
  const std::vector<int> hidden = IntList(Arg(argc, argv, "--hidden", "512,256"));
  const int batch = static_cast<int>(IntArg(argc, argv, "--batch", 128));
  const int epochs = static_cast<int>(IntArg(argc, argv, "--epochs", 3));
  const int64_t max_rows = IntArg(argc, argv, "--rows", 0);
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
  const traind::v1::JobSpec spec = MlpSpec(
      data_path, hidden, static_cast<int64_t>(data.classes.size()), batch, epochs, precision);

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
      absl::StrJoin(observer.loss, ", ", [](std::string* o, double v) {
        o->append(std::to_string(v));
      }).c_str());
  return 0;
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

// Buffers of floats filled with a fixed pattern in [-0.5, 0.5), each
// starting `extra_bytes` past the CPU backend's tensor alignment
// (cpu_parallel.h kAlignment), freed with the set.
class AlignedBuffers {
 public:
  float* New(int64_t n, int64_t extra_bytes = 0) {
    buffers_.emplace_back(
        static_cast<float*>(::operator new(
            static_cast<size_t>(n) * sizeof(float) + static_cast<size_t>(extra_bytes),
            traind::engine::cpu::kAlignment)),
        &traind::engine::cpu::FreeAligned);
    float* p =
        reinterpret_cast<float*>(reinterpret_cast<char*>(buffers_.back().get()) + extra_bytes);
    for (int64_t i = 0; i < n; ++i) {
      p[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.f - 0.5f;
    }
    return p;
  }

 private:
  std::vector<std::unique_ptr<float, void (*)(void*)>> buffers_;
};

int GemmSet(int argc, char** argv) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  using dims = dnnl::memory::dims;
  const int64_t features = IntArg(argc, argv, "--features", 784);
  const int64_t classes = IntArg(argc, argv, "--classes", 10);
  const int64_t batch = IntArg(argc, argv, "--batch", 128);
  const int reps = static_cast<int>(IntArg(argc, argv, "--reps", 200));
  std::vector<int64_t> widths = {features};
  for (int h : IntList(Arg(argc, argv, "--hidden", "512,256"))) widths.push_back(h);
  widths.push_back(classes);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  struct Gemm {
    dnnl::matmul primitive;
    dnnl::memory a, b, c;
    double flops;
    std::function<void()> openblas;  // instead of the primitive, when set
  };
  std::vector<Gemm> gemms;
  // As the CPU backend chooses (CreateCpuDenseKernel).
  const int threads = omp_get_max_threads();
  const absl::StatusOr<traind::engine::cpu::CpuGemmConfig> gemm =
      traind::engine::cpu::CpuGemmConfigOfProcess();
  if (!gemm.ok()) {
    std::fprintf(stderr, "cpu_bench: %s\n", std::string(gemm.status().message()).c_str());
    return 2;
  }
  const traind::engine::cpu::OpenBlas* blas = nullptr;
  if (absl::StatusOr<const traind::engine::cpu::OpenBlas*> loaded =
          traind::engine::cpu::LoadOpenBlas();
      loaded.ok()) {
    blas = *loaded;
  }
  int openblas_gemms = 0;
  // Aligned as the CPU backend's tensors: on AVX2, oneDNN's sgemm takes
  // another path for 32-byte aligned operands.
  AlignedBuffers buffers;
  auto buffer = [&](int64_t n) { return buffers.New(n); };
  auto add = [&](const dnnl::memory::desc& a, float* pa, const dnnl::memory::desc& b, float* pb,
                 const dnnl::memory::desc& c, double flops) {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng);
    gemms.push_back({dnnl::matmul(pd),
                     dnnl::memory(a, eng, pa),
                     dnnl::memory(b, eng, pb),
                     dnnl::memory(c, eng, buffer(c.get_size() / 4)),
                     flops,
                     {}});
  };
  double set_flops = 0;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    const int64_t in = widths[l], out = widths[l + 1];
    float* x = buffer(batch * in);
    float* w = buffer(in * out);
    float* dz = buffer(batch * out);
    const double f = 2.0 * static_cast<double>(batch * in * out);
    const traind::engine::cpu::DenseLayout layout =
        traind::engine::cpu::ChooseDenseLayout(*gemm, blas != nullptr, batch, in, out, threads);
    const int parts = layout.parts;
    const traind::engine::cpu::GemmLibraries libraries = layout.libraries;
    // As the CPU backend's DenseMatmuls (backend/cpu/cpu_backend.cc).
    add(dnnl::memory::desc({batch, in}, dt::f32, tag::ab), x,
        dnnl::memory::desc({in, out}, dt::f32, tag::ab), w,
        dnnl::memory::desc({batch, out}, dt::f32, tag::ab), f);
    if (libraries.forward_openblas) {
      // Thread t's term x[:, slab] · w[slab, :], into y or its own buffer.
      float* y = buffer(batch * out * parts);
      gemms.back().openblas = [=] {
#pragma omp parallel for num_threads(parts) if (parts > 1)
        for (int t = 0; t < parts; ++t) {
          const int64_t r0 = traind::engine::cpu::SlabBegin(in, parts, t);
          const int64_t r1 = traind::engine::cpu::SlabBegin(in, parts, t + 1);
          blas->Sgemm(false, false, batch, out, r1 - r0, x + r0, in, w + r0 * out, out, 0.0f,
                      y + t * batch * out, out);
        }
      };
      ++openblas_gemms;
    }
    add(dnnl::memory::desc({in, batch}, dt::f32, dims{1, in}), x,
        dnnl::memory::desc({batch, out}, dt::f32, tag::ab), dz,
        dnnl::memory::desc({in, out}, dt::f32, tag::ab), f);
    set_flops += 2 * f;
    if (l > 0) {
      add(dnnl::memory::desc({batch, out}, dt::f32, tag::ab), dz,
          dnnl::memory::desc({out, in}, dt::f32, dims{1, out}), w,
          dnnl::memory::desc({batch, in}, dt::f32, tag::ab), f);
      set_flops += f;
      if (libraries.data_openblas) {
        // Thread t's columns of dx: dz · w[slab, :]ᵀ.
        float* dx = buffer(batch * in);
        gemms.back().openblas = [=] {
#pragma omp parallel for num_threads(parts) if (parts > 1)
          for (int t = 0; t < parts; ++t) {
            const int64_t r0 = traind::engine::cpu::SlabBegin(in, parts, t);
            const int64_t r1 = traind::engine::cpu::SlabBegin(in, parts, t + 1);
            blas->Sgemm(false, true, batch, r1 - r0, out, dz, out, w + r0 * out, out, 0.0f, dx + r0,
                        in);
          }
        };
        ++openblas_gemms;
      }
    }
  }
  auto run_set = [&] {
    for (Gemm& g : gemms) {
      if (g.openblas) {
        g.openblas();
        continue;
      }
      g.primitive.execute(stream,
                          {{DNNL_ARG_SRC, g.a}, {DNNL_ARG_WEIGHTS, g.b}, {DNNL_ARG_DST, g.c}});
      stream.wait();
    }
  };
  for (int i = 0; i < 10; ++i) run_set();
  std::vector<double> gflops;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run_set();
    gflops.push_back(set_flops / Seconds(t0) / 1e9);
  }
  std::sort(gflops.begin(), gflops.end());
  std::printf(
      "{\"batch\": %lld, \"gemms\": %zu, \"openblas_gemms\": %d, \"set_mflop\": %.3f, "
      "\"threads\": %d, \"best_gflops\": %.2f, \"median_gflops\": %.2f}\n",
      static_cast<long long>(batch), gemms.size(), openblas_gemms, set_flops / 1e6,
      omp_get_max_threads(), gflops.back(), gflops[gflops.size() / 2]);
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
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
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
  AlignedBuffers buffers;
  auto buffer = [&](int64_t n, int64_t extra_bytes) { return buffers.New(n, extra_bytes); };
  float* x = buffer(batch * in, 0);
  float* w = buffer(in * out, offset);
  float* dz = buffer(batch * out, 0);
  float* y = buffer(batch * out * parts, 0);
  float* dw = buffer(in * out, 0);
  float* dx = buffer(batch * in, 0);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  struct Slab {
    int64_t r0, r1;
    dnnl::matmul forward, weights, data;
    dnnl::memory fx, fw, fy, wx, wdz, wdw, ddz, dww, ddx;
    dnnl::stream stream;
  };
  std::vector<Slab> slabs(static_cast<size_t>(parts));
  // Planned on one thread each, as the backend's kernel plans them.
#pragma omp parallel for num_threads(parts)
  for (int t = 0; t < parts; ++t) {
    omp_set_num_threads(1);
    Slab& s = slabs[static_cast<size_t>(t)];
    s.r0 = cpu::SlabBegin(in, parts, t);
    s.r1 = cpu::SlabBegin(in, parts, t + 1);
    const int64_t rows = s.r1 - s.r0;
    auto mm = [&](const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                  const dnnl::memory::desc& c) {
      return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), eng));
    };
    const dnnl::memory::desc xs({batch, rows}, dt::f32, dims{in, 1});
    const dnnl::memory::desc xt({rows, batch}, dt::f32, dims{1, in});
    const dnnl::memory::desc ws({rows, out}, dt::f32, dims{out, 1});
    const dnnl::memory::desc wt({out, rows}, dt::f32, dims{1, out});
    const dnnl::memory::desc full({batch, out}, dt::f32, dims{out, 1});
    const dnnl::memory::desc dxs({batch, rows}, dt::f32, dims{in, 1});
    s.forward = mm(xs, ws, full);
    s.weights = mm(xt, full, ws);
    s.data = mm(full, wt, dxs);
    s.fx = dnnl::memory(xs, eng, x + s.r0);
    s.fw = dnnl::memory(ws, eng, w + s.r0 * out);
    s.fy = dnnl::memory(full, eng, y + t * batch * out);
    s.wx = dnnl::memory(xt, eng, x + s.r0);
    s.wdz = dnnl::memory(full, eng, dz);
    s.wdw = dnnl::memory(ws, eng, dw + s.r0 * out);
    s.ddz = dnnl::memory(full, eng, dz);
    s.dww = dnnl::memory(wt, eng, w + s.r0 * out);
    s.ddx = dnnl::memory(dxs, eng, dx + s.r0);
    s.stream = dnnl::stream(eng);
  }
  const char* names[] = {"forward x·w", "weight gradient xᵀ·dz", "input gradient dz·wᵀ"};
  for (int op = 0; op < 3; ++op) {
    auto run = [&](bool openblas) {
#pragma omp parallel for num_threads(parts)
      for (int t = 0; t < parts; ++t) {
        Slab& s = slabs[static_cast<size_t>(t)];
        const int64_t rows = s.r1 - s.r0;
        if (op == 0 && openblas) {
          (*blas)->Sgemm(false, false, batch, out, rows, x + s.r0, in, w + s.r0 * out, out, 0.0f,
                         y + t * batch * out, out);
        } else if (op == 1 && openblas) {
          (*blas)->Sgemm(true, false, rows, out, batch, x + s.r0, in, dz, out, 0.0f,
                         dw + s.r0 * out, out);
        } else if (op == 2 && openblas) {
          (*blas)->Sgemm(false, true, batch, rows, out, dz, out, w + s.r0 * out, out, 0.0f,
                         dx + s.r0, in);
        } else if (op == 0) {
          s.forward.execute(s.stream,
                            {{DNNL_ARG_SRC, s.fx}, {DNNL_ARG_WEIGHTS, s.fw}, {DNNL_ARG_DST, s.fy}});
        } else if (op == 1) {
          s.weights.execute(
              s.stream, {{DNNL_ARG_SRC, s.wx}, {DNNL_ARG_WEIGHTS, s.wdz}, {DNNL_ARG_DST, s.wdw}});
        } else {
          s.data.execute(s.stream,
                         {{DNNL_ARG_SRC, s.ddz}, {DNNL_ARG_WEIGHTS, s.dww}, {DNNL_ARG_DST, s.ddx}});
        }
        if (!openblas) s.stream.wait();
      }
    };
    std::vector<double> times[2];
    for (int i = 0; i < 3; ++i) {
      run(false);
      run(true);
    }
    for (int i = 0; i < reps; ++i) {
      for (int lib = 0; lib < 2; ++lib) {
        const auto t0 = std::chrono::steady_clock::now();
        run(lib == 1);
        times[lib].push_back(Seconds(t0));
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
  Dataset data;
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
  traind::engine::Rng rng(42);
  Check(network.Initialize(rng), "initialize");
  std::unique_ptr<traind::engine::Optimizer> optimizer =
      Check(traind::engine::CreateOptimizer(spec.optimizer(), backend.get(), network.parameters()),
            "optimizer");
  std::unique_ptr<traind::engine::Loss> loss = Check(
      traind::engine::Loss::Create(spec.loss(), traind::engine::TargetKind::kClasses, classes),
      "loss");
  std::unique_ptr<traind::engine::LossKernel> loss_kernel =
      Check(backend->CreateLossKernel(loss->KernelOptions(batch, 1)), "loss kernel");
  Tensor x = Check(backend->Allocate2d(DType::kF32, batch, data.features), "x");
  Tensor y = Check(backend->Allocate1d(DType::kS32, batch), "y");
  Tensor dout = Check(backend->Allocate2d(DType::kF32, batch, classes), "doutputs");
  std::vector<int64_t> order(static_cast<size_t>(data.rows));
  std::iota(order.begin(), order.end(), 0);
  // Shuffled, as fit's epochs are: a batch's rows are scattered over the data.
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));
  const int64_t batches = data.rows / batch;
  const size_t layers = static_cast<size_t>(spec.model().layers_size());
  std::vector<double> gather, forward, loss_ms, update, step;
  std::vector<std::vector<double>> backward(layers);
  const int warmup = 20;
  for (int i = 0; i < warmup + steps; ++i) {
    const absl::Span<const int64_t> rows = absl::MakeConstSpan(order).subspan(
        static_cast<size_t>((i % batches) * batch), static_cast<size_t>(batch));
    const bool timed = i >= warmup;
    const auto t_step = std::chrono::steady_clock::now();
    auto t0 = t_step;
    Check(backend->GatherRows(data.x.data(), data.features, rows, &x), "gather");
    Check(backend->GatherLabels(data.y.data(), rows, &y), "gather");
    if (timed) gather.push_back(1e3 * Seconds(t0));
    t0 = std::chrono::steady_clock::now();
    Tensor* outputs = Check(network.Forward(x, traind::engine::ForwardMode()), "forward");
    if (timed) forward.push_back(1e3 * Seconds(t0));
    t0 = std::chrono::steady_clock::now();
    Check(loss_kernel->Compute(*outputs, y, 1.0 / static_cast<double>(batch), &dout, nullptr, 0),
          "loss");
    if (timed) loss_ms.push_back(1e3 * Seconds(t0));
    t0 = std::chrono::steady_clock::now();
    Check(network.Backward(x, &dout,
                           [&](size_t layer) -> absl::Status {
                             if (timed) backward[layer].push_back(1e3 * Seconds(t0));
                             t0 = std::chrono::steady_clock::now();
                             return absl::OkStatus();
                           }),
          "backward");
    t0 = std::chrono::steady_clock::now();
    Check(optimizer->Step(0.01), "optimizer");
    if (timed) {
      update.push_back(1e3 * Seconds(t0));
      step.push_back(1e3 * Seconds(t_step));
    }
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
      "\"backward_ms_by_layer\": [%s], \"optimizer_ms\": %.4f}\n",
      static_cast<long long>(batch), steps, omp_get_max_threads(), Median(step), step_mean,
      Median(gather), Median(forward), Median(loss_ms), per_layer.c_str(), Median(update));
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
  std::fprintf(
      stderr,
      "usage: cpu_bench fit --data FILE --hidden 512,256 --batch 128 --epochs 3 "
      "[--rows N] [--precision fp32|bf16]\n"
      "       cpu_bench sgemm --m M --n N --k K [--reps R]\n"
      "       cpu_bench gemmset --features F --hidden 512,256 --classes C --batch B [--reps R]\n"
      "       cpu_bench gemmlibs --batch B --in I --out O [--reps R] [--w-offset BYTES]\n"
      "       cpu_bench profile --data FILE --hidden 512,256 --batch B [--steps S]\n");
  return 2;
}
