// SIGTERM and SIGINT ask a worker to stop: Fit notices at the next batch,
// checkpoints the last completed epoch and the task ends CANCELLED.
//
// The one piece of mutable process state the worker keeps: a lock-free flag
// that the signal handler sets (the only thing it does) and the training
// thread polls.
#ifndef TRAIND_WORKER_STOP_SIGNAL_H_
#define TRAIND_WORKER_STOP_SIGNAL_H_

namespace traind::worker {

// Installs the SIGTERM/SIGINT handler and ignores SIGPIPE (a daemon that
// went away is seen as a failed call, not a signal). Call once, early, from
// the main thread.
void InstallStopSignalHandlers();

// True once SIGTERM or SIGINT has been received. Any thread.
bool StopSignalReceived();

}  // namespace traind::worker

#endif  // TRAIND_WORKER_STOP_SIGNAL_H_
