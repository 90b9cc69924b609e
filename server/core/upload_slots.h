// Uploads in flight over the public API (Predict's CSV, UploadDataset's
// file): capped per caller and in all, and ended when idle. Each holds a
// gRPC stream, a file descriptor and buffers; without caps a client that
// opened uploads and sent nothing could take every descriptor traind has.
//
// An upload takes a Slot before it opens anything (RESOURCE_EXHAUSTED
// naming the limit when none is left), marks each read it waits for
// (WaitingForMessage / MessageArrived), and gives the slot back when the
// call ends. A sweeper thread ends an upload whose read has waited longer
// than `idle_timeout`: it calls the upload's `on_idle` (which finishes the
// call) and frees its slot at once, and from then on MessageArrived says
// false: the upload does nothing more but end.
//
// Thread-safety: thread-safe. on_idle runs on the sweeper thread with the
// slots' (recursive) lock held, so a call that ends inline (its OnDone
// destroying the Slot) is safe.
#ifndef TRAIND_SERVER_CORE_UPLOAD_SLOTS_H_
#define TRAIND_SERVER_CORE_UPLOAD_SLOTS_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace traind::server {

struct UploadLimits {
  int max_total = 32;
  int max_per_caller = 4;
  absl::Duration idle_timeout = absl::Minutes(1);
};

class UploadSlots final {
 public:
  explicit UploadSlots(UploadLimits limits);
  ~UploadSlots();
  UploadSlots(const UploadSlots&) = delete;
  UploadSlots& operator=(const UploadSlots&) = delete;

  class Slot {
   public:
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    // Before each StartRead: the idle clock starts.
    void WaitingForMessage();
    // First thing in OnReadDone. False: the upload was ended as idle (its
    // on_idle ran); do nothing more.
    bool MessageArrived();

   private:
    friend class UploadSlots;
    Slot(UploadSlots* owner, uint64_t id) : owner_(owner), id_(id) {}
    UploadSlots* const owner_;
    const uint64_t id_;
  };

  // A slot for an upload by `caller` (`what` names it in the error:
  // "Predict upload"), or RESOURCE_EXHAUSTED naming the limit and the
  // caller's uploads in flight.
  absl::StatusOr<std::unique_ptr<Slot>> Acquire(const std::string& caller, const char* what,
                                                std::function<void()> on_idle);

  int InFlight();

 private:
  struct Entry {
    std::string caller;
    std::function<void()> on_idle;
    bool waiting = false;
    std::chrono::steady_clock::time_point since;
  };
  void Sweep();

  const UploadLimits limits_;
  std::recursive_mutex mu_;
  std::condition_variable_any cv_;
  std::map<uint64_t, Entry> entries_;
  std::map<std::string, int> per_caller_;
  uint64_t next_id_ = 1;
  bool stop_ = false;
  std::thread sweeper_;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_CORE_UPLOAD_SLOTS_H_
