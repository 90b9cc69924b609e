// SIGTERM and SIGINT ask a worker to stop: Fit notices at the next batch,
// checkpoints the last completed epoch and the task ends CANCELLED.
// SIGUSR2 (Slurm sends it ahead of a time limit or a preemption:
// sbatch --signal=B:USR2@...) stops it the same way, and the attempt ends
// PREEMPTED: its task goes on in a new attempt from that checkpoint. (USR2,
// not USR1: NCCL has used SIGUSR1.)
//
// The one piece of mutable process state the worker keeps: lock-free flags
// that the signal handlers set (the only thing they do) and the training
// thread polls.
#ifndef TRAIND_WORKER_STOP_SIGNAL_H_
#define TRAIND_WORKER_STOP_SIGNAL_H_

namespace traind::worker {

// Installs the SIGTERM/SIGINT/SIGUSR2 handler and ignores SIGPIPE (a daemon
// that went away is seen as a failed call, not a signal), then takes the
// signals listed (one name a line: USR2, TERM, INT) in the file
// $TRAIND_STOP_SIGNALS_FILE, if set, as received: the ones a launcher got
// for this worker before its handlers were in place. Call once, early, from
// the main thread.
void InstallStopSignalHandlers();

// True once SIGTERM, SIGINT or SIGUSR2 has been received. Any thread.
bool StopSignalReceived();
// True once SIGUSR2 has been received. Any thread.
bool PreemptSignalReceived();

}  // namespace traind::worker

#endif  // TRAIND_WORKER_STOP_SIGNAL_H_
