#include "worker/stop_signal.h"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>

namespace traind::worker {
namespace {

// Set by the handler, read by the training thread; nothing else is shared
// with a signal handler.
std::atomic<bool> stop_signal_received{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the stop flag must be async-signal-safe");

std::atomic<bool> preempt_signal_received{false};

extern "C" void OnStopSignal(int sig) {
  if (sig == SIGUSR2) preempt_signal_received.store(true, std::memory_order_relaxed);
  stop_signal_received.store(true, std::memory_order_relaxed);
}

}  // namespace

void InstallStopSignalHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGUSR2, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // A launcher that starts the worker with these signals ignored until
  // now (Slurm's batch script) wrote down any that came in the meantime.
  const char* path = std::getenv("TRAIND_STOP_SIGNALS_FILE");
  if (path != nullptr && *path != '\0') {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      if (line == "USR2") OnStopSignal(SIGUSR2);
      if (line == "TERM" || line == "INT") OnStopSignal(SIGTERM);
    }
  }
}

bool StopSignalReceived() { return stop_signal_received.load(std::memory_order_relaxed); }

bool PreemptSignalReceived() { return preempt_signal_received.load(std::memory_order_relaxed); }

}  // namespace traind::worker
