// Move-only owners of CUDA, cuBLAS and cuBLASLt resources.
//
// Each object owns one handle and releases it in its destructor; copying is
// impossible (std::unique_ptr inside), so a device buffer or a handle is never
// shared by accident. Factories return absl::StatusOr and never throw.
// Destructors ignore errors: they run on teardown paths where the context
// may already be failing, and the process exit releases the rest.
//
// Thread safety: none; each object is used by one thread at a time.
#ifndef TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_RAII_H_
#define TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_RAII_H_

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/engine/backend/cuda/cuda_status.h"

namespace traind::engine::cuda {

namespace internal {
struct CudaFree {
  void operator()(void* p) const { (void)cudaFree(p); }
};
struct CudaFreeHost {
  void operator()(void* p) const { (void)cudaFreeHost(p); }
};
struct StreamDestroy {
  void operator()(CUstream_st* s) const { (void)cudaStreamDestroy(s); }
};
struct EventDestroy {
  void operator()(CUevent_st* e) const { (void)cudaEventDestroy(e); }
};
struct GraphDestroy {
  void operator()(CUgraph_st* g) const { (void)cudaGraphDestroy(g); }
};
struct GraphExecDestroy {
  void operator()(CUgraphExec_st* g) const { (void)cudaGraphExecDestroy(g); }
};
struct CublasDestroy {
  void operator()(cublasContext* h) const { (void)cublasDestroy(h); }
};
struct CublasLtDestroy {
  void operator()(cublasLtContext* h) const { (void)cublasLtDestroy(h); }
};
struct LtMatmulDescDestroy {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { (void)cublasLtMatmulDescDestroy(d); }
};
struct LtMatrixLayoutDestroy {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { (void)cublasLtMatrixLayoutDestroy(l); }
};
struct LtPreferenceDestroy {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const {
    (void)cublasLtMatmulPreferenceDestroy(p);
  }
};
}  // namespace internal

// Device memory of a fixed size (cudaMalloc / cudaFree).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // OutOfMemoryError (with needed and free bytes) when the device is full.
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) {
    DeviceBuffer buffer;
    if (bytes == 0) return buffer;
    void* p = nullptr;
    TRAIND_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, bytes), "cudaMalloc", bytes));
    buffer.data_.reset(p);
    buffer.bytes_ = bytes;
    return buffer;
  }
  void* get() const { return data_.get(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_.get());
  }
  size_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<void, internal::CudaFree> data_;
  size_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost / cudaFreeHost): the staging area
// of asynchronous copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static absl::StatusOr<PinnedBuffer> Allocate(size_t bytes) {
    PinnedBuffer buffer;
    if (bytes == 0) return buffer;
    void* p = nullptr;
    const cudaError_t error = cudaMallocHost(&p, bytes);
    if (error == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return OutOfMemoryError(
          absl::StrCat("cudaMallocHost: cannot pin ", bytes, " bytes of host memory"));
    }
    TRAIND_RETURN_IF_ERROR(CudaStatus(error, "cudaMallocHost", bytes));
    buffer.data_.reset(p);
    buffer.bytes_ = bytes;
    return buffer;
  }
  void* get() const { return data_.get(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_.get());
  }
  size_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<void, internal::CudaFreeHost> data_;
  size_t bytes_ = 0;
};

// A non-blocking stream (does not synchronize with the legacy default stream).
class Stream {
 public:
  Stream() = default;
  static absl::StatusOr<Stream> Create() {
    cudaStream_t s = nullptr;
    TRAIND_RETURN_IF_ERROR(
        CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
    Stream stream;
    stream.stream_.reset(s);
    return stream;
  }
  cudaStream_t get() const { return stream_.get(); }

 private:
  std::unique_ptr<CUstream_st, internal::StreamDestroy> stream_;
};

// A CUDA graph (cudaGraph_t) taken over from stream capture.
class Graph {
 public:
  Graph() = default;
  explicit Graph(cudaGraph_t g) : graph_(g) {}
  cudaGraph_t get() const { return graph_.get(); }

 private:
  std::unique_ptr<CUgraph_st, internal::GraphDestroy> graph_;
};

// An instantiated graph, ready to launch.
class GraphExec {
 public:
  GraphExec() = default;
  static absl::StatusOr<GraphExec> Instantiate(const Graph& graph) {
    cudaGraphExec_t e = nullptr;
    TRAIND_RETURN_IF_ERROR(
        CudaStatus(cudaGraphInstantiate(&e, graph.get(), 0), "cudaGraphInstantiate"));
    GraphExec exec;
    exec.exec_.reset(e);
    return exec;
  }
  cudaGraphExec_t get() const { return exec_.get(); }

 private:
  std::unique_ptr<CUgraphExec_st, internal::GraphExecDestroy> exec_;
};

// An event without timing (the cheapest kind), for ordering and polling.
class Event {
 public:
  Event() = default;
  static absl::StatusOr<Event> Create() {
    cudaEvent_t e = nullptr;
    TRAIND_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
    Event event;
    event.event_.reset(e);
    return event;
  }
  cudaEvent_t get() const { return event_.get(); }

 private:
  std::unique_ptr<CUevent_st, internal::EventDestroy> event_;
};

// A cuBLAS handle bound to one stream.
class CublasHandle {
 public:
  CublasHandle() = default;
  static absl::StatusOr<CublasHandle> Create(cudaStream_t stream) {
    cublasHandle_t h = nullptr;
    TRAIND_RETURN_IF_ERROR(CublasStatus(cublasCreate(&h), "cublasCreate"));
    CublasHandle handle;
    handle.handle_.reset(h);
    TRAIND_RETURN_IF_ERROR(CublasStatus(cublasSetStream(h, stream), "cublasSetStream"));
    return handle;
  }
  cublasHandle_t get() const { return handle_.get(); }

 private:
  std::unique_ptr<cublasContext, internal::CublasDestroy> handle_;
};

// A cuBLASLt handle (cuBLASLt takes the stream per call).
class CublasLtHandle {
 public:
  CublasLtHandle() = default;
  static absl::StatusOr<CublasLtHandle> Create() {
    cublasLtHandle_t h = nullptr;
    TRAIND_RETURN_IF_ERROR(CublasStatus(cublasLtCreate(&h), "cublasLtCreate"));
    CublasLtHandle handle;
    handle.handle_.reset(h);
    return handle;
  }
  cublasLtHandle_t get() const { return handle_.get(); }

 private:
  std::unique_ptr<cublasLtContext, internal::CublasLtDestroy> handle_;
};

// A cuBLASLt matmul descriptor (compute type, transposes, epilogue).
class LtMatmulDesc {
 public:
  LtMatmulDesc() = default;
  static absl::StatusOr<LtMatmulDesc> Create(cublasComputeType_t compute, cudaDataType_t scale) {
    cublasLtMatmulDesc_t d = nullptr;
    TRAIND_RETURN_IF_ERROR(
        CublasStatus(cublasLtMatmulDescCreate(&d, compute, scale), "cublasLtMatmulDescCreate"));
    LtMatmulDesc desc;
    desc.desc_.reset(d);
    return desc;
  }
  template <typename T>
  absl::Status Set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    return CublasStatus(cublasLtMatmulDescSetAttribute(desc_.get(), attribute, &value, sizeof(T)),
                        "cublasLtMatmulDescSetAttribute");
  }
  cublasLtMatmulDesc_t get() const { return desc_.get(); }

 private:
  std::unique_ptr<cublasLtMatmulDescOpaque_t, internal::LtMatmulDescDestroy> desc_;
};

// A cuBLASLt matrix layout: column-major rows x cols with leading dimension ld.
class LtMatrixLayout {
 public:
  LtMatrixLayout() = default;
  static absl::StatusOr<LtMatrixLayout> Create(cudaDataType_t type, uint64_t rows, uint64_t cols,
                                               int64_t ld) {
    cublasLtMatrixLayout_t l = nullptr;
    TRAIND_RETURN_IF_ERROR(CublasStatus(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld),
                                        "cublasLtMatrixLayoutCreate"));
    LtMatrixLayout layout;
    layout.layout_.reset(l);
    return layout;
  }
  cublasLtMatrixLayout_t get() const { return layout_.get(); }

 private:
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t, internal::LtMatrixLayoutDestroy> layout_;
};

// A cuBLASLt heuristic preference (workspace limit).
class LtPreference {
 public:
  LtPreference() = default;
  static absl::StatusOr<LtPreference> Create(size_t max_workspace_bytes) {
    cublasLtMatmulPreference_t p = nullptr;
    TRAIND_RETURN_IF_ERROR(
        CublasStatus(cublasLtMatmulPreferenceCreate(&p), "cublasLtMatmulPreferenceCreate"));
    LtPreference preference;
    preference.preference_.reset(p);
    const uint64_t bytes = max_workspace_bytes;
    TRAIND_RETURN_IF_ERROR(
        CublasStatus(cublasLtMatmulPreferenceSetAttribute(
                         p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)),
                     "cublasLtMatmulPreferenceSetAttribute"));
    return preference;
  }
  cublasLtMatmulPreference_t get() const { return preference_.get(); }

 private:
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, internal::LtPreferenceDestroy> preference_;
};

static_assert(!std::is_copy_constructible_v<DeviceBuffer> &&
              !std::is_copy_constructible_v<Stream> && !std::is_copy_constructible_v<Event> &&
              !std::is_copy_constructible_v<CublasHandle> &&
              !std::is_copy_constructible_v<CublasLtHandle> &&
              !std::is_copy_constructible_v<LtMatmulDesc> &&
              std::is_nothrow_move_constructible_v<DeviceBuffer>);

}  // namespace traind::engine::cuda

#endif  // TRAIND_WORKER_ENGINE_BACKEND_CUDA_CUDA_RAII_H_
