// Runs a command (sbatch, squeue, scancel) and collects what it printed.
//
// Thread-safety: thread-safe. The child is waited for by its pid only: a
// LocalLauncher in the same process must not collect every child
// (LocalLauncher reaps any child only with a zygote).
#ifndef TRAIND_SERVER_LAUNCH_COMMAND_H_
#define TRAIND_SERVER_LAUNCH_COMMAND_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace traind::server {

struct CommandResult {
  int exit_code = 0;  // -1: killed by a signal (after `timeout` among them)
  std::string out;    // stdout (at most 4 MiB kept)
  std::string err;    // stderr (at most 64 KiB kept)
};

// Runs argv (argv[0] found in PATH unless it has a slash) with traind's
// environment, or exactly `env` ("NAME=value") when given, stdin from
// /dev/null; after `timeout` it is killed. An error only when it cannot
// start.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout,
                                         const std::vector<std::string>* env = nullptr);

// "sbatch: error: ..." for messages: the command's stderr (else stdout),
// trimmed, or its exit status.
std::string CommandError(const std::vector<std::string>& argv, const CommandResult& r);

}  // namespace traind::server

#endif  // TRAIND_SERVER_LAUNCH_COMMAND_H_
