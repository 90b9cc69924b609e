#include "worker/engine/parallel/nccl_communicator.h"

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status.h"
#include "worker/engine/backend/cuda/cuda_status.h"

namespace traind::engine {
namespace {

// Polling interval: short enough not to add latency to a collective, long
// enough not to burn a core while a peer is slow.
constexpr absl::Duration kPoll = absl::Microseconds(20);

void PollSleep() { std::this_thread::sleep_for(absl::ToChronoMicroseconds(kPoll)); }

}  // namespace

absl::Status NcclStatus(ncclResult_t result, absl::string_view call) {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  const char* last = ncclGetLastError(nullptr);
  const std::string detail = last != nullptr ? last : "";
  const std::string message =
      absl::StrCat("NCCL: ", call, ": ", ncclGetErrorString(result), " (", detail, ")");
  if (result == ncclRemoteError) {
    // A peer failed or went away: not this rank's device. No failure kind
    // (the worker reports it as a crash, which traind retries); the dead
    // peer's own exit is what traind records for the attempt.
    return absl::UnavailableError(absl::StrCat(message, "; a peer rank failed"));
  }
  if (result == ncclUnhandledCudaError || result == ncclSystemError ||
      result == ncclInternalError) {
    // NCCL reports a failed device allocation as a CUDA failure ("Cuda
    // failure 'out of memory'", cudaErrorMemoryAllocation) or, for its
    // buffers, as a system error naming the allocation.
    std::string lower = absl::AsciiStrToLower(detail);
    if (lower.find("out of memory") != std::string::npos ||
        lower.find("cudaerrormemoryallocation") != std::string::npos ||
        cudaPeekAtLastError() == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return OutOfMemoryError(absl::StrCat(message, "; the GPU is out of memory"));
    }
  }
  return DeviceError(message);
}

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  TRAIND_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    absl::string_view unique_id, int rank, int size, cudaStream_t stream,
    const NcclCommunicatorOptions& options) {
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL unique id: expected ", sizeof(id.internal),
                                                   " bytes, got ", unique_id.size()));
  }
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL: rank ", rank, " of ", size));
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  // The collectives' stream and events first: nothing to undo if they fail.
  TRAIND_ASSIGN_OR_RETURN(cuda::Stream comm_stream, cuda::Stream::Create());
  TRAIND_ASSIGN_OR_RETURN(cuda::Event backend_ready, cuda::Event::Create());
  TRAIND_ASSIGN_OR_RETURN(cuda::Event collectives_done, cuda::Event::Create());
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (init != ncclSuccess && init != ncclInProgress) {
    if (comm != nullptr) (void)ncclCommAbort(comm);
    return NcclStatus(init, "ncclCommInitRankConfig");
  }
  std::unique_ptr<NcclCommunicator> self(new NcclCommunicator(comm, rank, size, stream, options));
  self->comm_stream_ = std::move(comm_stream);
  self->backend_ready_ = std::move(backend_ready);
  self->collectives_done_ = std::move(collectives_done);
  TRAIND_RETURN_IF_ERROR(self->WaitIssued(
      absl::StrCat("initialization of rank ", rank, " of ", size, " (waiting for the other ranks)"),
      absl::Now() + options.timeout));
  return self;
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int rank, int size, cudaStream_t stream,
                                   const NcclCommunicatorOptions& options)
    : rank_(rank), size_(size), stream_(stream), options_(options), comm_(comm) {}

NcclCommunicator::~NcclCommunicator() {
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_ == nullptr) return;  // aborted: ncclCommAbort freed it
  // Flush and finalize, then destroy; a finalize that fails or does not end
  // in time aborts instead (a dead peer must not hang the worker's exit).
  ncclResult_t r = ncclCommFinalize(comm_);
  const absl::Time deadline = absl::Now() + options_.timeout;
  while (r == ncclInProgress && absl::Now() < deadline) {
    PollSleep();
    if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclInternalError;
  }
  if (r == ncclSuccess) {
    (void)ncclCommDestroy(comm_);
  } else {
    (void)ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

void NcclCommunicator::AbortLocked(absl::string_view reason) {
  if (abort_reason_.empty()) abort_reason_ = std::string(reason);
  aborted_.store(true);
  if (comm_ != nullptr) {
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
}

void NcclCommunicator::Abort(absl::string_view reason) {
  // ncclCommAbort may be called while another thread polls a collective of
  // the same communicator: it is NCCL's way to unblock it. The polling thread
  // sees aborted_ and stops touching the handle.
  std::lock_guard<std::mutex> lock(mu_);
  AbortLocked(reason);
}

absl::Status NcclCommunicator::AbortedStatus() {
  std::lock_guard<std::mutex> lock(mu_);
  return absl::AbortedError(
      absl::StrCat("NCCL communicator (rank ", rank_, " of ", size_, ") aborted: ", abort_reason_));
}

absl::Status NcclCommunicator::Fail(absl::string_view reason, absl::Status cause) {
  std::lock_guard<std::mutex> lock(mu_);
  AbortLocked(reason);
  return cause;
}

absl::Status NcclCommunicator::WaitIssued(absl::string_view what, absl::Time deadline) {
  for (;;) {
    if (aborted_.load()) return AbortedStatus();
    ncclResult_t state = ncclSuccess;
    ncclResult_t r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (comm_ == nullptr) return AbortedStatus();
      r = ncclCommGetAsyncError(comm_, &state);
    }
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      absl::Status s = NcclStatus(state, what);
      return Fail(s.message(), s);
    }
    if (absl::Now() >= deadline) {
      const std::string reason =
          absl::StrCat("NCCL: ", what, ": no progress within ",
                       absl::FormatDuration(options_.timeout), " (a rank is missing or dead)");
      return Fail(reason, absl::DeadlineExceededError(reason));
    }
    PollSleep();
  }
}

absl::Status NcclCommunicator::WaitStream(absl::string_view what, absl::Time deadline) {
  for (;;) {
    if (aborted_.load()) return AbortedStatus();
    const cudaError_t q = cudaStreamQuery(comm_stream_.get());
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) {
      absl::Status s = cuda::CudaStatus(q, absl::StrCat("cudaStreamQuery after ", what));
      return Fail(s.message(), s);
    }
    // cudaStreamQuery's "not ready" also becomes the runtime's last error
    // (kept until read): clear it, or the next kernel launch's
    // cudaGetLastError() check would fail with cudaErrorNotReady. Only that
    // error: anything else pending is left for its owner to see.
    if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
    TRAIND_RETURN_IF_ERROR(WaitIssued(what, deadline));  // also surfaces peer failures
    if (absl::Now() >= deadline) {
      const std::string reason =
          absl::StrCat("NCCL: ", what, ": not complete within ",
                       absl::FormatDuration(options_.timeout), " (a rank is missing or dead)");
      return Fail(reason, absl::DeadlineExceededError(reason));
    }
    PollSleep();
  }
  return WaitIssued(what, deadline);
}

absl::Status NcclCommunicator::AfterBackendStream() {
  TRAIND_CUDA_RETURN_IF_ERROR(cudaEventRecord(backend_ready_.get(), stream_));
  TRAIND_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(comm_stream_.get(), backend_ready_.get(), 0));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::EnqueueAllReduce(float* data, int64_t count, absl::Time deadline) {
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_ == nullptr) return AbortedStatus();
    r = ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclSum, comm_,
                      comm_stream_.get());
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    absl::Status s = NcclStatus(r, "ncclAllReduce (float)");
    return Fail(s.message(), s);
  }
  started_ = true;
  return WaitIssued("ncclAllReduce (float)", deadline);
}

absl::Status NcclCommunicator::StartAllReduceSum(float* data, int64_t count) {
  if (aborted_.load()) return AbortedStatus();
  if (count <= 0) return absl::OkStatus();
  TRAIND_RETURN_IF_ERROR(AfterBackendStream());
  return EnqueueAllReduce(data, count, absl::Now() + options_.timeout);
}

absl::Status NcclCommunicator::WaitAll() {
  if (aborted_.load()) return AbortedStatus();
  if (!started_) return absl::OkStatus();
  TRAIND_RETURN_IF_ERROR(WaitStream("ncclAllReduce (float)", absl::Now() + options_.timeout));
  // The backend's later work (the optimizer step) comes after the sums.
  TRAIND_CUDA_RETURN_IF_ERROR(cudaEventRecord(collectives_done_.get(), comm_stream_.get()));
  TRAIND_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, collectives_done_.get(), 0));
  started_ = false;
  return absl::OkStatus();
}

absl::Status NcclCommunicator::AllReduceSum(float* data, int64_t count) {
  if (aborted_.load()) return AbortedStatus();
  if (count <= 0) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + options_.timeout;
  TRAIND_RETURN_IF_ERROR(AfterBackendStream());
  TRAIND_RETURN_IF_ERROR(EnqueueAllReduce(data, count, deadline));
  return WaitAll();
}

absl::Status NcclCommunicator::AllReduceSum(double* data, int64_t count) {
  if (aborted_.load()) return AbortedStatus();
  if (count <= 0) return absl::OkStatus();
  const size_t bytes = static_cast<size_t>(count) * sizeof(double);
  if (double_scratch_.bytes() < bytes) {
    double_scratch_ = cuda::DeviceBuffer();
    TRAIND_ASSIGN_OR_RETURN(double_scratch_, cuda::DeviceBuffer::Allocate(bytes));
  }
  // Staged through pinned host memory: copies from and to pageable memory
  // would block this thread inside CUDA until the stream gets there (behind
  // the reduction, which never ends if a peer died), out of reach of the
  // deadline. With pinned memory both copies are asynchronous and the wait
  // is WaitStream's poll. The buffer is only touched here, after the stream
  // has finished with it (every call waits for the stream before returning).
  if (double_host_.bytes() < bytes) {
    double_host_ = cuda::PinnedBuffer();
    TRAIND_ASSIGN_OR_RETURN(double_host_, cuda::PinnedBuffer::Allocate(bytes));
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
  std::memcpy(double_host_.get(), data, bytes);
  TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(double_scratch_.get(), double_host_.get(), bytes,
                                              cudaMemcpyHostToDevice, comm_stream_.get()));
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_ == nullptr) return AbortedStatus();
    r = ncclAllReduce(double_scratch_.get(), double_scratch_.get(), static_cast<size_t>(count),
                      ncclFloat64, ncclSum, comm_, comm_stream_.get());
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    absl::Status s = NcclStatus(r, "ncclAllReduce (double)");
    return Fail(s.message(), s);
  }
  TRAIND_RETURN_IF_ERROR(WaitIssued("ncclAllReduce (double)", deadline));
  TRAIND_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(double_host_.get(), double_scratch_.get(), bytes,
                                              cudaMemcpyDeviceToHost, comm_stream_.get()));
  TRAIND_RETURN_IF_ERROR(WaitStream("ncclAllReduce (double)", deadline));
  std::memcpy(data, double_host_.get(), bytes);
  return absl::OkStatus();
}

}  // namespace traind::engine
