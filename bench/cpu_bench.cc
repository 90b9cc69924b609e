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
//       first layer) the input gradient dz·wᵀ, with the library calls the
//       CPU backend makes (backend/cpu/cpu_dense_kernel.h ChooseDenseLayout):
//       a layer the backend cuts in row slabs of w as its row-slab kernel
//       runs it (one single-threaded oneDNN matmul or OpenBLAS sgemm per
//       thread on its slab, cpu_gemm.h's rule and TRAIND_CPU_GEMM), any
//       other as one oneDNN matmul on all threads; the backend's memory
//       descriptors (transposes as strided views) and alignment. Runs R sets
//       back to back after a warm-up and prints the best, median and
//       sustained (total flops ÷ total time) GFLOP/s: the ceiling of an fp32
//       step, every other op taking no time.
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
    // After the epoch's clock stopped, before the next one's starts.
    if (after_epoch) after_epoch();
    return absl::OkStatus();
  }
  bool StopRequested() override { return false; }
  std::vector<double> seconds, loss;
  std::vector<int64_t> batches;
  std::function<void()> after_epoch;
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

// One dense layer's three products as the CPU backend's row-slab kernel
// (backend/cpu/cpu_dense_kernel.cc, CpuSplitDenseKernel) runs them: w cut in
// `parts` slabs of rows, each product one OpenMP region with one
// single-threaded call per slab (oneDNN matmuls planned for one thread, or
// OpenBLAS's sgemm), or, for one part, one call on the calling thread. On
// operands aligned as the backend's tensors, w `w_offset` bytes past that.
class SlabProducts {
 public:
  enum Op { kForward, kWeights, kData };

  // `blas` may be null when no product runs in OpenBLAS.
  SlabProducts(const dnnl::engine& eng, const traind::engine::cpu::OpenBlas* blas, int parts,
               int64_t batch, int64_t in, int64_t out, AlignedBuffers* buffers,
               int64_t w_offset = 0)
      : blas_(blas), batch_(batch), in_(in), out_(out), slabs_(static_cast<size_t>(parts)) {
    x_ = buffers->New(batch * in);
    w_ = buffers->New(in * out, w_offset);
    dz_ = buffers->New(batch * out);
    y_ = buffers->New(batch * out * parts);  // part 0's term in y, the others' in buffers
    dw_ = buffers->New(in * out);
    dx_ = buffers->New(batch * in);
    if (parts == 1) {
      Plan(eng, 0);
      return;
    }
#pragma omp parallel for num_threads(parts)
    for (int t = 0; t < parts; ++t) {
      omp_set_num_threads(1);
      Plan(eng, t);
    }
  }

  // One product of every slab.
  void Run(Op op, bool openblas) {
    const int parts = static_cast<int>(slabs_.size());
    if (parts == 1) {
      // No region, as the kernel: the libraries' own threads (under a
      // one-thread region they would start a nested team on every call).
      RunSlab(op, openblas, 0);
      return;
    }
#pragma omp parallel for num_threads(parts)
    for (int t = 0; t < parts; ++t) RunSlab(op, openblas, t);
  }

 private:
  struct Slab {
    int64_t r0, r1;
    dnnl::matmul forward, weights, data;
    dnnl::memory fx, fw, fy, wx, wdz, wdw, ddz, dww, ddx;
    dnnl::stream stream;
  };

  // As the kernel's MakePlans: x's columns, w's rows and dx's columns
  // [r0, r1) as strided views.
  void Plan(const dnnl::engine& eng, int t) {
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    const int parts = static_cast<int>(slabs_.size());
    Slab& s = slabs_[static_cast<size_t>(t)];
    s.r0 = traind::engine::cpu::SlabBegin(in_, parts, t);
    s.r1 = traind::engine::cpu::SlabBegin(in_, parts, t + 1);
    const int64_t rows = s.r1 - s.r0;
    auto mm = [&](const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                  const dnnl::memory::desc& c) {
      return dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), eng));
    };
    const dnnl::memory::desc xs({batch_, rows}, dt::f32, dims{in_, 1});
    const dnnl::memory::desc xt({rows, batch_}, dt::f32, dims{1, in_});
    const dnnl::memory::desc ws({rows, out_}, dt::f32, dims{out_, 1});
    const dnnl::memory::desc wt({out_, rows}, dt::f32, dims{1, out_});
    const dnnl::memory::desc full({batch_, out_}, dt::f32, dims{out_, 1});
    const dnnl::memory::desc dxs({batch_, rows}, dt::f32, dims{in_, 1});
    s.forward = mm(xs, ws, full);
    s.weights = mm(xt, full, ws);
    s.data = mm(full, wt, dxs);
    s.fx = dnnl::memory(xs, eng, x_ + s.r0);
    s.fw = dnnl::memory(ws, eng, w_ + s.r0 * out_);
    s.fy = dnnl::memory(full, eng, y_ + t * batch_ * out_);
    s.wx = dnnl::memory(xt, eng, x_ + s.r0);
    s.wdz = dnnl::memory(full, eng, dz_);
    s.wdw = dnnl::memory(ws, eng, dw_ + s.r0 * out_);
    s.ddz = dnnl::memory(full, eng, dz_);
    s.dww = dnnl::memory(wt, eng, w_ + s.r0 * out_);
    s.ddx = dnnl::memory(dxs, eng, dx_ + s.r0);
    s.stream = dnnl::stream(eng);
  }

  void RunSlab(Op op, bool openblas, int t) {
    Slab& s = slabs_[static_cast<size_t>(t)];
    const int64_t rows = s.r1 - s.r0;
    if (openblas) {
      if (op == kForward) {
        blas_->Sgemm(false, false, batch_, out_, rows, x_ + s.r0, in_, w_ + s.r0 * out_, out_, 0.0f,
                     y_ + t * batch_ * out_, out_);
      } else if (op == kWeights) {
        blas_->Sgemm(true, false, rows, out_, batch_, x_ + s.r0, in_, dz_, out_, 0.0f,
                     dw_ + s.r0 * out_, out_);
      } else {
        blas_->Sgemm(false, true, batch_, rows, out_, dz_, out_, w_ + s.r0 * out_, out_, 0.0f,
                     dx_ + s.r0, in_);
      }
      return;
    }
    if (op == kForward) {
      s.forward.execute(s.stream,
                        {{DNNL_ARG_SRC, s.fx}, {DNNL_ARG_WEIGHTS, s.fw}, {DNNL_ARG_DST, s.fy}});
    } else if (op == kWeights) {
      s.weights.execute(s.stream,
                        {{DNNL_ARG_SRC, s.wx}, {DNNL_ARG_WEIGHTS, s.wdz}, {DNNL_ARG_DST, s.wdw}});
    } else {
      s.data.execute(s.stream,
                     {{DNNL_ARG_SRC, s.ddz}, {DNNL_ARG_WEIGHTS, s.dww}, {DNNL_ARG_DST, s.ddx}});
    }
    s.stream.wait();
  }

  const traind::engine::cpu::OpenBlas* blas_;
  const int64_t batch_, in_, out_;
  float *x_, *w_, *dz_, *y_, *dw_, *dx_;
  std::vector<Slab> slabs_;
};

// The GEMM set of one fp32 training step of an MLP alone (see gemmset in
// the header), planned once, run as many times as asked.
class GemmSetRunner {
 public:
  // Errors: TRAIND_CPU_GEMM's.
  static absl::StatusOr<std::unique_ptr<GemmSetRunner>> Create(int64_t features,
                                                               const std::vector<int>& hidden,
                                                               int64_t classes, int64_t batch) {
    namespace cpu = traind::engine::cpu;
    absl::StatusOr<cpu::CpuGemmConfig> gemm = cpu::CpuGemmConfigOfProcess();
    if (!gemm.ok()) return gemm.status();
    std::vector<int64_t> widths = {features};
    for (int h : hidden) widths.push_back(h);
    widths.push_back(classes);
    std::unique_ptr<GemmSetRunner> set(new GemmSetRunner());
    set->Plan(*gemm, widths, batch);
    return set;
  }

  // n sets back to back after `warmup` untimed ones: their total seconds.
  // Adds each set's seconds to *set_seconds (unless null) and each
  // product's to its total.
  double Run(int n, int warmup, std::vector<double>* set_seconds) {
    for (int i = 0; i < warmup; ++i) RunSet(false);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      RunSet(true);
      if (set_seconds != nullptr) set_seconds->push_back(Seconds(t0));
    }
    timed_sets_ += n;
    return Seconds(start);
  }

  double flops() const { return flops_; }
  size_t gemms() const { return gemms_.size(); }
  int openblas_gemms() const { return openblas_gemms_; }
  int slab_gemms() const { return slab_gemms_; }
  // "\"<layer>.<product>\": mean ms, ..." over the timed sets.
  std::string ProductsJson() const {
    std::string out;
    for (const Gemm& g : gemms_) {
      absl::StrAppend(&out, out.empty() ? "" : ", ", "\"", g.name,
                      "\": ", absl::StrFormat("%.4f", 1e3 * g.seconds / std::max(1, timed_sets_)));
    }
    return out;
  }

 private:
  struct Gemm {
    std::string name;  // "<layer>.<product>"
    std::function<void()> run;
    double seconds = 0;  // summed over the timed sets
  };

  GemmSetRunner() : eng_(dnnl::engine::kind::cpu, 0), stream_(eng_) {}

  void Plan(const traind::engine::cpu::CpuGemmConfig& gemm, const std::vector<int64_t>& widths,
            int64_t batch) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    using dims = dnnl::memory::dims;
    namespace cpu = traind::engine::cpu;
    // As the CPU backend chooses (CreateCpuDenseKernel).
    const int threads = omp_get_max_threads();
    const cpu::OpenBlas* blas = nullptr;
    if (absl::StatusOr<const cpu::OpenBlas*> loaded = cpu::LoadOpenBlas(); loaded.ok()) {
      blas = *loaded;
    }
    // A whole-layer oneDNN matmul on all threads, as the backend's
    // CpuDenseKernel runs one (backend/cpu/cpu_backend.cc DenseMatmuls).
    auto add_matmul = [&](std::string name, const dnnl::memory::desc& a, float* pa,
                          const dnnl::memory::desc& b, float* pb, const dnnl::memory::desc& c) {
      dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), eng_));
      dnnl::memory ma(a, eng_, pa), mb(b, eng_, pb),
          mc(c, eng_, buffers_.New(static_cast<int64_t>(c.get_size() / sizeof(float))));
      dnnl::stream* stream = &stream_;
      gemms_.push_back(
          {std::move(name), [=]() mutable {
             mm.execute(*stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
             stream->wait();
           }});
    };
    for (size_t l = 0; l + 1 < widths.size(); ++l) {
      const int64_t in = widths[l], out = widths[l + 1];
      flops_ += (l > 0 ? 3 : 2) * 2.0 * static_cast<double>(batch * in * out);
      const std::string layer = std::to_string(l);  // the first has no input gradient
      const cpu::DenseLayout layout =
          cpu::ChooseDenseLayout(gemm, blas != nullptr, batch, in, out, threads);
      if (layout.parts > 1 || layout.libraries.any()) {
        // The row-slab kernel's calls.
        slab_layers_.push_back(
            std::make_unique<SlabProducts>(eng_, blas, layout.parts, batch, in, out, &buffers_));
        SlabProducts* p = slab_layers_.back().get();
        const cpu::GemmLibraries libs = layout.libraries;
        gemms_.push_back({layer + ".forward",
                          [p, libs] { p->Run(SlabProducts::kForward, libs.forward_openblas); }});
        gemms_.push_back({layer + ".weights", [p] { p->Run(SlabProducts::kWeights, false); }});
        if (l > 0) {
          gemms_.push_back(
              {layer + ".data", [p, libs] { p->Run(SlabProducts::kData, libs.data_openblas); }});
        }
        openblas_gemms_ += (libs.forward_openblas ? 1 : 0) + (l > 0 && libs.data_openblas ? 1 : 0);
        slab_gemms_ += l > 0 ? 3 : 2;
        continue;
      }
      float* x = buffers_.New(batch * in);
      float* w = buffers_.New(in * out);
      float* dz = buffers_.New(batch * out);
      add_matmul(layer + ".forward", dnnl::memory::desc({batch, in}, dt::f32, tag::ab), x,
                 dnnl::memory::desc({in, out}, dt::f32, tag::ab), w,
                 dnnl::memory::desc({batch, out}, dt::f32, tag::ab));
      add_matmul(layer + ".weights", dnnl::memory::desc({in, batch}, dt::f32, dims{1, in}), x,
                 dnnl::memory::desc({batch, out}, dt::f32, tag::ab), dz,
                 dnnl::memory::desc({in, out}, dt::f32, tag::ab));
      if (l > 0) {
        add_matmul(layer + ".data", dnnl::memory::desc({batch, out}, dt::f32, tag::ab), dz,
                   dnnl::memory::desc({out, in}, dt::f32, dims{1, out}), w,
                   dnnl::memory::desc({batch, in}, dt::f32, tag::ab));
      }
    }
  }

  // Each product timed too (a clock read costs some 20 ns).
  void RunSet(bool timed) {
    for (Gemm& g : gemms_) {
      const auto t0 = std::chrono::steady_clock::now();
      g.run();
      if (timed) g.seconds += Seconds(t0);
    }
  }

  dnnl::engine eng_;
  dnnl::stream stream_;
  // Aligned as the CPU backend's tensors: on AVX2, oneDNN's sgemm takes
  // another path for 32-byte aligned operands.
  AlignedBuffers buffers_;
  std::vector<std::unique_ptr<SlabProducts>> slab_layers_;
  std::vector<Gemm> gemms_;
  double flops_ = 0;
  int openblas_gemms_ = 0, slab_gemms_ = 0, timed_sets_ = 0;
};

int GemmSet(int argc, char** argv) {
  const int64_t features = IntArg(argc, argv, "--features", 784);
  const int64_t classes = IntArg(argc, argv, "--classes", 10);
  const int64_t batch = IntArg(argc, argv, "--batch", 128);
  const int reps = static_cast<int>(IntArg(argc, argv, "--reps", 200));
  absl::StatusOr<std::unique_ptr<GemmSetRunner>> set = GemmSetRunner::Create(
      features, IntList(Arg(argc, argv, "--hidden", "512,256")), classes, batch);
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
      "\"set_mflop\": %.3f, \"threads\": %d, \"sets\": %d, \"best_gflops\": %.2f, "
      "\"median_gflops\": %.2f, \"sustained_gflops\": %.2f, \"products_ms\": {%s}}\n",
      static_cast<long long>(batch), (*set)->gemms(), (*set)->openblas_gemms(),
      (*set)->slab_gemms(), flops / 1e6, omp_get_max_threads(), reps, flops / seconds.front() / 1e9,
      flops / seconds[seconds.size() / 2] / 1e9, flops * reps / total / 1e9,
      (*set)->ProductsJson().c_str());
  return 0;
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
        data.features, hidden, static_cast<int64_t>(data.classes.size()), batch);
    if (!created.ok()) {
      std::fprintf(stderr, "cpu_bench: %s\n", std::string(created.status().message()).c_str());
      return 2;
    }
    gemm_set = *std::move(created);
    observer.after_epoch = [&] {
      set_gflops.push_back(gemm_set->flops() * sets / gemm_set->Run(sets, 10, nullptr) / 1e9);
    };
  }
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<traind::v1::FoldResult> r =
      traind::engine::Fit(spec, data, rows, 0, traind::engine::FitOptions{}, &observer);
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
