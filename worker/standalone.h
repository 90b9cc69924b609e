// traind-worker --spec=FILE: a job spec's tasks trained in this process,
// one after the other, without a daemon. Each epoch's metrics and each
// task's result go to stdout as JSON lines; errors to stderr.
#ifndef TRAIND_WORKER_STANDALONE_H_
#define TRAIND_WORKER_STANDALONE_H_

#include <string>

namespace traind::worker {

struct StandaloneOptions {
  std::string spec_path;  // a job spec file (YAML or JSON)
  int only_task = -1;     // >= 0: train only this task
  // Non-empty: predictions, checkpoints and models go under DIR/task-N.
  std::string artifacts_dir;
};

// Validates the spec (as traind would, for this machine), loads the data
// and trains. A GPU spec trains on this process's first visible GPU (one
// rank). SIGTERM/SIGINT stop the current task (kCancelled). Returns the
// worker's exit status (exit_code.h).
int RunStandalone(const StandaloneOptions& options);

}  // namespace traind::worker

#endif  // TRAIND_WORKER_STANDALONE_H_
