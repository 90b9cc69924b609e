// traind-worker's exit status: how traind tells the outcome of an attempt
// whose report did not arrive.
#ifndef TRAIND_WORKER_EXIT_CODE_H_
#define TRAIND_WORKER_EXIT_CODE_H_

namespace traind::worker {

enum ExitCode {
  kSucceeded = 0,
  kFailed = 1,  // the failure was reported
  kUsage = 2,   // bad flags, a missing secret, an unreadable --spec file
  kCancelled = 3,
  kUnreachable = 4,  // the daemon could not be reached (or was gone at start)
};

}  // namespace traind::worker

#endif  // TRAIND_WORKER_EXIT_CODE_H_
