// Helpers for the scheduler's tests: the options of a scheduler on a test's
// directory, and the credentials a fake-launched worker presents.
#ifndef TRAIND_SERVER_TESTING_TEST_SCHEDULER_H_
#define TRAIND_SERVER_TESTING_TEST_SCHEDULER_H_

#include <string>

#include "absl/time/time.h"
#include "server/scheduler/scheduler.h"
#include "server/testing/fake_launcher.h"
#include "traind/v1/worker_service.pb.h"

namespace traind::server {

// A scheduler's options for tests on `dir` (its store and worker socket
// live there): /bin/true as the worker, one CPU slot, one retry, a 10 ms
// stop grace. Tests change what they test.
inline SchedulerOptions TestSchedulerOptions(const std::string& dir) {
  SchedulerOptions o;
  o.state_dir = dir;
  o.worker_path = "/bin/true";
  o.worker_address = "unix:" + dir + "/worker.sock";
  o.cpu_slots = 1;
  o.max_restarts = 1;
  o.stop_grace = absl::Milliseconds(10);
  return o;
}

// The credentials the worker of launch `l` presents (job, task, attempt and
// secret from its argv and environment).
inline traind::v1::AttemptCredentials CredentialsOf(const FakeLauncher::Launched& l) {
  traind::v1::AttemptCredentials c;
  c.set_job_id(l.Arg("job"));
  c.set_task(std::stoi(l.Arg("task")));
  c.set_attempt(std::stoi(l.Arg("attempt")));
  c.set_secret(l.Secret());
  return c;
}

}  // namespace traind::server

#endif  // TRAIND_SERVER_TESTING_TEST_SCHEDULER_H_
