// Heap allocations of a steady-state training step, counted.
//
// Its own executable (traind_engine_alloc_test): it replaces the C heap
// (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign; operator
// new and oneDNN's allocator both end there) with counting wrappers around
// glibc's, for the whole process. Each allocation made while counting is
// attributed by its call stack: to the libraries when a frame lies in libdnnl
// or libopenblas (reported as oneDNN's: OpenBLAS multiplies only where
// TRAIND_CPU_GEMM or its rule says), else to the engine.
//
// A "step" is what Fit does between two FitObserver::StopRequested polls of
// one epoch: gather a batch, forward, loss, backward, optimizer update.
#include <dlfcn.h>
#include <execinfo.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "data/split.h"
#include "gtest/gtest.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/backend/cpu/cpu_gemm.h"
#include "worker/engine/fit.h"

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* p);
}

namespace {

// The hooks' state: process-wide by necessity (the heap is).
std::atomic<bool> counting{false};
std::atomic<int64_t> engine_allocations{0};
std::atomic<int64_t> dnnl_allocations{0};
thread_local bool in_hook = false;

bool FrameInALibrary(void* pc) {
  Dl_info info;
  if (dladdr(pc, &info) == 0 || info.dli_fname == nullptr) return false;
  return std::strstr(info.dli_fname, "libdnnl") != nullptr ||
         std::strstr(info.dli_fname, "libopenblas") != nullptr;
}

void Count() {
  if (!counting.load(std::memory_order_relaxed) || in_hook) return;
  in_hook = true;
  void* frames[64];
  const int n = backtrace(frames, 64);
  bool dnnl = false;
  for (int i = 0; i < n && !dnnl; ++i) dnnl = FrameInALibrary(frames[i]);
  (dnnl ? dnnl_allocations : engine_allocations).fetch_add(1, std::memory_order_relaxed);
  // TRAIND_ALLOC_TRACE=engine|dnnl: print where each counted allocation of
  // that kind comes from (backtrace_symbols_fd does not allocate).
  static const char* trace = std::getenv("TRAIND_ALLOC_TRACE");
  if (trace != nullptr && (std::strcmp(trace, dnnl ? "dnnl" : "engine") == 0)) {
    static const char kSeparator[] = "----\n";
    if (write(2, kSeparator, sizeof(kSeparator) - 1) >= 0) backtrace_symbols_fd(frames, n, 2);
  }
  in_hook = false;
}

}  // namespace

extern "C" {
void* malloc(size_t size) {
  Count();
  return __libc_malloc(size);
}
void* calloc(size_t n, size_t size) {
  Count();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t size) {
  Count();
  return __libc_realloc(p, size);
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t alignment, size_t size) {
  Count();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(size_t alignment, size_t size) {
  Count();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, size_t alignment, size_t size) {
  Count();
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}

namespace traind::engine {
namespace {

struct StepCounts {
  int64_t engine = 0;
  int64_t dnnl = 0;
};

// Counts allocations between consecutive StopRequested polls of one epoch,
// from the second epoch on (the first plans kernels and allocates buffers).
class CountingObserver final : public FitObserver {
 public:
  absl::Status OnEpochEnd(const traind::v1::EpochMetrics&) override {
    counting.store(false);
    ++epochs_;
    polled_ = false;
    return absl::OkStatus();
  }
  bool StopRequested() override {
    counting.store(false);
    if (polled_ && epochs_ >= 1) {
      steps.push_back({engine_allocations.load() - engine_at_, dnnl_allocations.load() - dnnl_at_});
    }
    polled_ = true;
    engine_at_ = engine_allocations.load();
    dnnl_at_ = dnnl_allocations.load();
    counting.store(true);
    return false;
  }
  std::vector<StepCounts> steps;

 private:
  int epochs_ = 0;
  bool polled_ = false;
  int64_t engine_at_ = 0, dnnl_at_ = 0;
};

data::Dataset Synthetic(int64_t rows, int64_t features, int64_t classes) {
  data::Dataset d;
  d.rows = rows;
  d.features = features;
  d.x.resize(static_cast<size_t>(rows * features));
  uint32_t s = 12345;
  for (float& v : d.x) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  }
  d.y.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    d.y[static_cast<size_t>(r)] = static_cast<int32_t>(r % classes);
  d.target = data::TargetKind::kClasses;
  for (int64_t f = 0; f < features; ++f) d.feature_names.push_back(absl::StrCat("f", f));
  for (int64_t c = 0; c < classes; ++c) d.classes.push_back(absl::StrCat(c));
  d.lines.resize(static_cast<size_t>(rows));
  std::iota(d.lines.begin(), d.lines.end(), 2);
  d.path = "synthetic";
  return d;
}

traind::v1::JobSpec MlpSpec(const std::vector<int>& hidden, int batch) {
  traind::v1::JobSpec spec;
  spec.set_name("alloc");
  spec.set_seed(7);
  spec.mutable_data()->set_path("synthetic");
  spec.mutable_data()->set_label("label");
  for (int units : hidden) {
    auto* dense = spec.mutable_model()->add_layers()->mutable_dense();
    dense->set_units(units);
    dense->set_activation(traind::v1::RELU);
  }
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(10);
  spec.mutable_loss()->mutable_softmax_cross_entropy();
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.01);
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(0.9);
  spec.mutable_training()->set_epochs(3);
  spec.mutable_training()->set_batch_size(batch);
  spec.mutable_training()->set_shuffle(true);
  spec.mutable_metrics()->add_train(traind::v1::LOSS);
  spec.mutable_metrics()->add_train(traind::v1::ACCURACY);
  spec.mutable_resources()->set_device(traind::v1::CPU);
  return spec;
}

std::vector<StepCounts> CountSteps(const traind::v1::JobSpec& spec, const data::Dataset& data) {
  data::FoldRows rows;
  rows.train.resize(static_cast<size_t>(data.rows));
  std::iota(rows.train.begin(), rows.train.end(), 0);
  CountingObserver observer;
  absl::StatusOr<traind::v1::FoldResult> result = Fit(spec, data, rows, 0, FitOptions{}, &observer);
  counting.store(false);
  EXPECT_TRUE(result.ok()) << result.status();
  return observer.steps;
}

void Report(const char* name, const std::vector<StepCounts>& steps) {
  int64_t engine = 0, dnnl = 0;
  for (const StepCounts& s : steps) {
    engine += s.engine;
    dnnl += s.dnnl;
  }
  const double n = steps.empty() ? 1.0 : static_cast<double>(steps.size());
  std::printf("[alloc] %s: %zu steady-state steps; per step: engine %.2f, oneDNN/OpenBLAS %.2f\n",
              name, steps.size(), static_cast<double>(engine) / n, static_cast<double>(dnnl) / n);
}

TEST(SteadyStateAllocations, HooksSeeAllocations) {
  // Guards against a build where the hooks are not interposed.
  void* frames[4];
  backtrace(frames, 4);  // loads the unwinder outside the counted region
  const int64_t before = engine_allocations.load();
  counting.store(true);
  // Through a volatile pointer: the compiler may not elide the pair.
  void* (*volatile allocate)(size_t) = &malloc;
  void* p = allocate(100);
  counting.store(false);
  free(p);
  EXPECT_EQ(engine_allocations.load() - before, 1);
}

// The engine allocates nothing in a steady-state step: that is what traind
// controls, on every CPU. oneDNN 2.6 does allocate, in dnnl_primitive_execute,
// whatever the caller does (it copies the arguments into a std::unordered_map
// and makes further allocations that depend on the kernel it picked, and so
// on the ISA: an AVX2 machine's kernels make more than an AVX-512 machine's).
// No count of those is asserted; only that it is the same in every steady-state
// step, so nothing grows with the steps or with the data.
void ExpectSteadyState(const char* name, const traind::v1::JobSpec& spec,
                       const data::Dataset& data) {
  void* frames[4];
  backtrace(frames, 4);  // loads the unwinder outside the counted region
  const std::vector<StepCounts> steps = CountSteps(spec, data);
  ASSERT_GE(steps.size(), 4u);
  Report(name, steps);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].engine, 0) << name << ": step " << i << " of the later epochs";
    EXPECT_EQ(steps[i].dnnl, steps[0].dnnl) << name << ": step " << i << " (inside oneDNN)";
  }
}

TEST(SteadyStateAllocations, Mlp784) {
  ExpectSteadyState("MLP 784-512-256-10, batch 128, SGD momentum", MlpSpec({512, 256}, 128),
                    Synthetic(1024, 784, 10));
}

// bf16 matmuls: the bf16 copies of x, w and dz live in buffers planned with
// each kernel, so their reorders allocate nothing of the engine's either.
TEST(SteadyStateAllocations, Mlp784Bf16) {
  if (!CpuSupportsBf16()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX";
  traind::v1::JobSpec spec = MlpSpec({512, 256}, 128);
  spec.mutable_training()->set_precision(traind::v1::BF16);
  ExpectSteadyState("MLP 784-512-256-10, batch 128, SGD momentum, bf16", spec,
                    Synthetic(1024, 784, 10));
}

// The forward and input-gradient products in OpenBLAS (as on a CPU without
// AVX-512 for large layers; forced here for every size): its buffers are its
// own, taken once.
TEST(SteadyStateAllocations, Mlp784OpenBlas) {
  if (absl::StatusOr<const traind::engine::cpu::OpenBlas*> blas =
          traind::engine::cpu::LoadOpenBlas();
      !blas.ok()) {
    if (std::getenv("TRAIND_REQUIRE_OPENBLAS") != nullptr) FAIL() << blas.status();
    GTEST_SKIP() << blas.status();
  }
  setenv("TRAIND_CPU_GEMM", "openblas", 1);
  ExpectSteadyState("MLP 784-512-256-10, batch 128, SGD momentum, OpenBLAS",
                    MlpSpec({512, 256}, 128), Synthetic(1024, 784, 10));
  unsetenv("TRAIND_CPU_GEMM");
}

TEST(SteadyStateAllocations, SmallMlp) {
  ExpectSteadyState("MLP 64-128-10, batch 32, SGD momentum", MlpSpec({128}, 32),
                    Synthetic(320, 64, 10));
}

TEST(SteadyStateAllocations, MixedLayersAdam) {
  traind::v1::JobSpec spec = MlpSpec({}, 32);
  spec.mutable_model()->clear_layers();
  auto* d0 = spec.mutable_model()->add_layers()->mutable_dense();
  d0->set_units(48);
  d0->set_activation(traind::v1::GELU);
  spec.mutable_model()->add_layers()->mutable_batch_norm();
  spec.mutable_model()->add_layers()->mutable_dropout()->set_rate(0.2);
  auto* d1 = spec.mutable_model()->add_layers()->mutable_dense();
  d1->set_units(32);
  d1->set_activation(traind::v1::TANH);
  spec.mutable_model()->add_layers()->mutable_layer_norm();
  spec.mutable_model()->add_layers()->mutable_dense()->set_units(10);
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(0.001);
  spec.mutable_optimizer()->mutable_clipping()->set_max_norm(1.0);
  ExpectSteadyState("gelu, batch norm, dropout, tanh, layer norm, Adam, clipping", spec,
                    Synthetic(320, 20, 10));
}

}  // namespace
}  // namespace traind::engine
