// Which job and task states are final, for the store (what a restart
// recovers) and the scheduler's transition tables
// (scheduler/state_transitions.h) alike.
//
// Thread-safety: pure functions.
#ifndef TRAIND_SERVER_STORE_JOB_STATES_H_
#define TRAIND_SERVER_STORE_JOB_STATES_H_

#include "traind/v1/job.pb.h"

namespace traind::server {

// SUCCEEDED, FAILED and CANCELLED: nothing follows.
inline bool IsTerminal(traind::v1::Job::State s) {
  using traind::v1::Job;
  return s == Job::SUCCEEDED || s == Job::FAILED || s == Job::CANCELLED;
}
// The same, and PRUNED (a search's trial stopped by ASHA).
inline bool IsTerminal(traind::v1::Task::State s) {
  using traind::v1::Task;
  return s == Task::SUCCEEDED || s == Task::FAILED || s == Task::CANCELLED || s == Task::PRUNED;
}

}  // namespace traind::server

#endif  // TRAIND_SERVER_STORE_JOB_STATES_H_
