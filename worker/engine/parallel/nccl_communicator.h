// NcclCommunicator: the Communicator of data-parallel training across GPUs,
// one process (rank) per GPU, over NCCL.
//
// Collectives run on the communicator's own stream, after the work the
// backend's stream had enqueued when they were started (an event orders
// them), so a started all-reduce of gradients overlaps the rest of the
// backward pass; WaitAll() polls for them and orders the backend's stream
// after them.
//
// Setup: rank 0 calls NewNcclUniqueId() and the ranks exchange the bytes
// through traind's WorkerService.Rendezvous; every rank then calls Create
// with the same id. The communicator is non-blocking (NCCL config
// blocking = 0): initialization and every collective are polled with
// ncclCommGetAsyncError against a deadline, so a dead or missing rank makes
// the others fail with a clear reason instead of hanging. On abort or
// timeout the communicator is aborted (ncclCommAbort); otherwise the
// destructor finalizes (ncclCommFinalize) and destroys it.
//
// Thread safety: collectives from one thread at a time; Abort() may be
// called from any thread (for example when the daemon reports a dead peer).
#ifndef TRAIND_WORKER_ENGINE_PARALLEL_NCCL_COMMUNICATOR_H_
#define TRAIND_WORKER_ENGINE_PARALLEL_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/engine/backend/cuda/cuda_raii.h"
#include "worker/engine/parallel/communicator.h"

namespace traind::engine {

// NCCL's status as an engine status naming `call`: OutOfMemoryError when
// NCCL could not allocate device memory; Unavailable with no failure kind for
// ncclRemoteError (a peer failed: not this rank's fault, and retried like a
// crash); DeviceError otherwise.
absl::Status NcclStatus(ncclResult_t result, absl::string_view call);

// A fresh NCCL unique id (rank 0), as the bytes Rendezvous carries
// (NCCL_UNIQUE_ID_BYTES = 128).
absl::StatusOr<std::string> NewNcclUniqueId();

struct NcclCommunicatorOptions {
  // How long initialization, one collective or finalization may take before
  // the communicator is aborted and the call fails.
  absl::Duration timeout = absl::Minutes(2);
};

class NcclCommunicator final : public Communicator {
 public:
  // Joins the group of `size` ranks named by `unique_id` as `rank`, on the
  // current CUDA device; collectives are enqueued on `stream` (the
  // backend's: CudaStreamOf). Fails (DeviceError / Unavailable /
  // DeadlineExceeded) when the other ranks do not join within the timeout.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      absl::string_view unique_id, int rank, int size, cudaStream_t stream,
      const NcclCommunicatorOptions& options = {});

  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // `data`: device memory of the stream's device. Waits (polling, with the
  // deadline) for this and every started reduction.
  absl::Status AllReduceSum(float* data, int64_t count) override;
  // `data`: host memory; staged through pinned host and device buffers
  // (kept for the next call), waited for with the deadline.
  absl::Status AllReduceSum(double* data, int64_t count) override;
  // `data`: device memory; enqueued on the communicator's stream after the
  // backend stream's work so far.
  absl::Status StartAllReduceSum(float* data, int64_t count) override;
  absl::Status WaitAll() override;
  void Abort(absl::string_view reason) override;

 private:
  NcclCommunicator(ncclComm_t comm, int rank, int size, cudaStream_t stream,
                   const NcclCommunicatorOptions& options);

  // The communicator's stream waits for the backend stream's work so far.
  absl::Status AfterBackendStream();
  // Enqueues a float all-reduce of `data` on the communicator's stream.
  absl::Status EnqueueAllReduce(float* data, int64_t count, absl::Time deadline);

  // Polls until NCCL's pending operation on the communicator has been
  // issued (ncclInProgress resolved), failing on error, abort or deadline.
  absl::Status WaitIssued(absl::string_view what, absl::Time deadline);
  // Polls until the communicator's stream has finished, watching NCCL's
  // async error.
  absl::Status WaitStream(absl::string_view what, absl::Time deadline);
  absl::Status AbortedStatus();
  // Aborts with `reason` unless already aborted; returns the failure to report.
  absl::Status Fail(absl::string_view reason, absl::Status cause);
  void AbortLocked(absl::string_view reason);

  const int rank_, size_;
  const cudaStream_t stream_;  // the backend's
  const NcclCommunicatorOptions options_;
  cuda::Stream comm_stream_;      // every collective runs here
  cuda::Event backend_ready_;     // recorded on stream_ before a collective
  cuda::Event collectives_done_;  // recorded on comm_stream_ by WaitAll
  bool started_ = false;          // reductions started since the last wait
  cuda::DeviceBuffer double_scratch_;
  cuda::PinnedBuffer double_host_;

  std::mutex mu_;
  ncclComm_t comm_;           // guarded by mu_; null once aborted
  std::string abort_reason_;  // guarded by mu_
  std::atomic<bool> aborted_{false};
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_PARALLEL_NCCL_COMMUNICATOR_H_
