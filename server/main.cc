// traind: the training daemon.
//
//   traind [--config FILE] [--state-dir DIR] [--listen ADDR]... [--cpu-slots N] ...
//
// Serves the public TrainingService (plus grpc.health.v1 and reflection) on
// every listen address and the internal WorkerService on a unix socket in
// the state directory. Settings come from defaults, then the YAML config
// file, then flags (server/settings.h; `traind --help`, docs/operations.md).
// Under systemd (Type=notify) it reports READY=1 once the store is recovered
// and the servers listen, and pings the watchdog while the scheduler's loop
// is alive. SIGINT/SIGTERM stop it; unfinished tasks resume on the next
// start.
#include <malloc.h>
#include <signal.h>

#include <cstring>
#include <memory>
#include <optional>

#include "base/log.h"
#include "server/command_line.h"
#include "server/config.h"
#include "server/daemon.h"

int main(int argc, char** argv) {
  using traind::server::Daemon;
  // Buffers of a few MiB (gRPC's receive slices, dataset upload messages)
  // come and go many times a second during an upload or a download. With
  // glibc's defaults each is a fresh mmap, faulted in page by page and
  // unmapped when freed, which cost a tenth of traind's CPU receiving a
  // large dataset (docs/benchmarks.md, "Dataset upload"). Served from the
  // heap and kept there, they are reused instead; a burst's memory returns
  // to the system once more than M_TRIM_THRESHOLD of it is free.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
  // Block the stop signals in every thread; main waits for them with sigwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  traind::server::ServerConfig config;
  if (std::optional<int> exit_code = traind::server::ParseCommandLine(argc, argv, &config)) {
    return *exit_code;
  }
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Create(std::move(config));
  if (!daemon.ok()) {
    traind::LogError("%s", daemon.status().message());
    // A bad setting is a usage error, like a bad flag.
    return daemon.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (absl::Status s = (*daemon)->Start(); !s.ok()) {
    traind::LogError("%s", s.message());
    return 1;
  }
  int sig = 0;
  sigwait(&set, &sig);
  traind::LogInfo("traind stopping signal=%s", sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
  (*daemon)->GracefulStop();
  return 0;
}
