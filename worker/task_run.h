// Running one task attempt under traind: fetch the assignment, load and
// split the data, open the GPU (and NCCL) when the spec asks for it, train,
// report every epoch and the outcome.
#ifndef TRAIND_WORKER_TASK_RUN_H_
#define TRAIND_WORKER_TASK_RUN_H_

#include <string>

namespace traind::worker {

// Who this process is: the flags traind started it with.
struct TaskRunOptions {
  std::string server;  // traind's WorkerService address
  std::string job;     // job id
  int task = -1;       // task index
  int attempt = 0;     // attempt number, from 1
  int rank = 0;        // multi-GPU task: this process's rank in [0, world_size)
  int world_size = 1;  // multi-GPU task: its number of ranks (one per GPU)
};

// Runs the attempt and returns the worker's exit status (exit_code.h). The
// attempt's secret is read from TRAIND_WORKER_SECRET (and removed from the
// environment). What the task held (backend, communicator, data) is
// released before it returns; the daemon connection and its reporter thread
// are not (the process is meant to _exit right after: closing them cost
// milliseconds per fold for nothing). Every report has been acknowledged
// when it returns. REQUIRES: called once per process.
int RunTaskUnderDaemon(const TaskRunOptions& options);

}  // namespace traind::worker

#endif  // TRAIND_WORKER_TASK_RUN_H_
