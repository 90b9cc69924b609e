// The CPU-backed CUDA stand-in's "NCCL" (worker/testdata/cpu_backed_cuda_plugin.cc):
// a Communicator across processes over unix stream sockets, so a multi-GPU
// task's ranks train data-parallel through traind on a machine without a GPU.
//
// The unique id (128 bytes, as NCCL's) names an abstract unix socket (no
// file to clean up) from random bytes. Rank 0 listens on it; the other ranks
// connect, retrying until rank 0 listens or the timeout passes; Create
// returns on every rank once all of them have joined.
//
// Collectives go through rank 0 (a star): every other rank sends its values,
// rank 0 sums them in rank order and sends the sums back, so every rank gets
// the same bits. Each socket operation waits (poll) at most the timeout.
// A peer's EOF is Unavailable naming the rank; Abort() sends its reason to
// the peers (rank 0 passes it on) and shuts the sockets down, so they fail
// fast (Aborted, with the reason). A failed collective aborts the group.
//
// Thread safety: collectives from one thread at a time; Abort() from any.
#ifndef TRAIND_WORKER_TESTDATA_UNIX_SOCKET_COMMUNICATOR_H_
#define TRAIND_WORKER_TESTDATA_UNIX_SOCKET_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/engine/parallel/communicator.h"

namespace traind::engine::testdata {

inline constexpr size_t kUnixSocketUniqueIdBytes = 128;

// A fresh id naming a new rendezvous point.
absl::StatusOr<std::string> NewUnixSocketUniqueId();

// Joins the group named by `unique_id` as `rank` of `size`, waiting at most
// `timeout` for the others (and then for each collective).
absl::StatusOr<std::unique_ptr<Communicator>> CreateUnixSocketCommunicator(
    const std::string& unique_id, int rank, int size, absl::Duration timeout);

}  // namespace traind::engine::testdata

#endif  // TRAIND_WORKER_TESTDATA_UNIX_SOCKET_COMMUNICATOR_H_
