// Recovery: what becomes of the store's unfinished jobs when traind starts
// again. Attempts that ran when the daemon stopped end as LOST and their
// tasks are queued again (the retry resumes from the last checkpoint) —
// unless a remote launcher (Slurm) ran them: those are adopted, their
// Slurm jobs tracked again and their workers let back in;
// finished tasks are kept; a job being cancelled finishes cancelling.
// Scheduler::Recover (recovery.cc) applies it.
//
// Thread-safety: pure functions.
#ifndef TRAIND_SERVER_SCHEDULER_RECOVERY_H_
#define TRAIND_SERVER_SCHEDULER_RECOVERY_H_

#include <functional>

#include "google/protobuf/timestamp.pb.h"
#include "server/scheduler/state_transitions.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

// Ends the last attempt of every STARTING or RUNNING task of the change's
// job as LOST at `now` and queues the task again (with its event), but for
// the tasks `adopted` says run on (a remote launcher's workers outlive
// traind). Returns how many tasks were queued again.
int RequeueLostAttempts(traind::v1::Job* job, const google::protobuf::Timestamp& now,
                        JobChange* change, const std::function<bool(int)>& adopted = nullptr);

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_RECOVERY_H_
