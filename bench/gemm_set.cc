#include "bench/gemm_set.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/engine/backend/cpu/cpu_parallel.h"

namespace traind::bench {

namespace cpu = engine::cpu;

namespace {

// A product that fails has no rate to give: the benchmark stops.
void Must(const absl::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "cpu_bench: %s\n", std::string(status.message()).c_str());
  std::exit(1);
}

}  // namespace

float* AlignedBuffers::New(int64_t n, int64_t extra_bytes) {
  buffers_.emplace_back(static_cast<float*>(::operator new(static_cast<size_t>(n) * sizeof(float) +
                                                               static_cast<size_t>(extra_bytes),
                                                           cpu::kAlignment)),
                        &cpu::FreeAligned);
  float* p = reinterpret_cast<float*>(reinterpret_cast<char*>(buffers_.back().get()) + extra_bytes);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.f - 0.5f;
  }
  return p;
}

SlabProducts::SlabProducts(const dnnl::engine& eng, const cpu::OpenBlas* blas, int parts,
                           int64_t batch, int64_t in, int64_t out, AlignedBuffers* buffers,
                           int64_t w_offset, float momentum)
    : blas_(blas),
      batch_(batch),
      in_(in),
      out_(out),
      momentum_(momentum),
      slabs_(static_cast<size_t>(parts)) {
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

void SlabProducts::Run(Op op, bool openblas) {
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

// The kernel's own slab products (onednn_plans.h CreateSlabMatmul).
void SlabProducts::Plan(const dnnl::engine& eng, int t) {
  const int parts = static_cast<int>(slabs_.size());
  Slab& s = slabs_[static_cast<size_t>(t)];
  s.r0 = cpu::SlabBegin(in_, parts, t);
  s.r1 = cpu::SlabBegin(in_, parts, t + 1);
  const int64_t rows = s.r1 - s.r0;
  using cpu::SlabProduct;
  s.forward = cpu::CreateSlabMatmul(eng, SlabProduct::kForward, batch_, in_, out_, rows);
  s.weights = cpu::CreateSlabMatmul(eng, SlabProduct::kWeights, batch_, in_, out_, rows, momentum_);
  s.data = cpu::CreateSlabMatmul(eng, SlabProduct::kData, batch_, in_, out_, rows);
  s.stream = dnnl::stream(eng);
}

void SlabProducts::RunSlab(Op op, bool openblas, int t) {
  Slab& s = slabs_[static_cast<size_t>(t)];
  const int64_t rows = s.r1 - s.r0;
  if (openblas) {
    if (op == kForward) {
      blas_->Sgemm(false, false, batch_, out_, rows, x_ + s.r0, in_, w_ + s.r0 * out_, out_, 0.0f,
                   y_ + t * batch_ * out_, out_);
    } else if (op == kWeights) {
      blas_->Sgemm(true, false, rows, out_, batch_, x_ + s.r0, in_, dz_, out_, momentum_,
                   dw_ + s.r0 * out_, out_);
    } else {
      blas_->Sgemm(false, true, batch_, rows, out_, dz_, out_, w_ + s.r0 * out_, out_, 0.0f,
                   dx_ + s.r0, in_);
    }
    return;
  }
  if (op == kForward) {
    Must(s.forward.Run(s.stream, x_ + s.r0, w_ + s.r0 * out_, nullptr, y_ + t * batch_ * out_));
  } else if (op == kWeights) {
    Must(s.weights.Run(s.stream, x_ + s.r0, dz_, nullptr, dw_ + s.r0 * out_));
  } else {
    Must(s.data.Run(s.stream, dz_, w_ + s.r0 * out_, nullptr, dx_ + s.r0));
  }
}

absl::StatusOr<std::unique_ptr<GemmSetRunner>> GemmSetRunner::Create(int64_t features,
                                                                     const std::vector<int>& hidden,
                                                                     int64_t classes, int64_t batch,
                                                                     float momentum) {
  absl::StatusOr<cpu::CpuGemmConfig> gemm = cpu::CpuGemmConfigOfProcess();
  if (!gemm.ok()) return gemm.status();
  std::vector<int64_t> widths = {features};
  for (int h : hidden) widths.push_back(h);
  widths.push_back(classes);
  std::unique_ptr<GemmSetRunner> set(new GemmSetRunner());
  set->Plan(*gemm, widths, batch, momentum);
  return set;
}

double GemmSetRunner::Run(int n, int warmup, std::vector<double>* set_seconds) {
  for (int i = 0; i < warmup; ++i) RunSet(false);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    RunSet(true);
    if (set_seconds != nullptr) set_seconds->push_back(SecondsSince(t0));
  }
  timed_sets_ += n;
  return SecondsSince(start);
}

std::string GemmSetRunner::ProductsJson() const {
  std::string out;
  for (const Gemm& g : gemms_) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", "\"", g.name,
                    "\": ", absl::StrFormat("%.4f", 1e3 * g.seconds / std::max(1, timed_sets_)));
  }
  return out;
}

void GemmSetRunner::Plan(const cpu::CpuGemmConfig& gemm, const std::vector<int64_t>& widths,
                         int64_t batch, float momentum) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  using dims = dnnl::memory::dims;
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
    auto mm = std::make_shared<cpu::MatmulPlan>(
        cpu::MatmulPlan::Create(eng_, a, b, nullptr, c, dnnl::primitive_attr()));
    float* pc = buffers_.New(static_cast<int64_t>(c.get_size() / sizeof(float)));
    dnnl::stream* stream = &stream_;
    gemms_.push_back({std::move(name), [=] { Must(mm->Run(*stream, pa, pb, nullptr, pc)); }});
  };
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    const int64_t in = widths[l], out = widths[l + 1];
    // Forward, weight gradient and, but for the first layer, input gradient.
    flops_ += (l > 0 ? 3 : 2) * 2.0 * static_cast<double>(batch * in * out);
    const std::string layer = std::to_string(l);
    const cpu::DenseLayout layout =
        cpu::ChooseDenseLayout(gemm, blas != nullptr, batch, in, out, threads);
    if (layout.parts > 1 || layout.libraries.any()) {
      // The row-slab kernel's calls; split in slabs, it takes SGD's update
      // into its backward pass (DenseKernel::UpdatesInBackward).
      slab_layers_.push_back(std::make_unique<SlabProducts>(
          eng_, blas, layout.parts, batch, in, out, &buffers_, 0, layout.parts > 1 ? momentum : 0));
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
void GemmSetRunner::RunSet(bool timed) {
  for (Gemm& g : gemms_) {
    const auto t0 = std::chrono::steady_clock::now();
    g.run();
    if (timed) g.seconds += SecondsSince(t0);
  }
}

}  // namespace traind::bench
