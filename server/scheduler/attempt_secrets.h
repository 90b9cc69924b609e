// The secret each task attempt's workers present on every WorkerService
// call.
//
// Thread-safety: thread-safe.
#ifndef TRAIND_SERVER_SCHEDULER_ATTEMPT_SECRETS_H_
#define TRAIND_SERVER_SCHEDULER_ATTEMPT_SECRETS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace traind::server {

// 32 random hex digits (128 bits from getrandom).
std::string NewAttemptSecret();
// The secret of an attempt: 32 hex digits of HMAC-SHA256(key, job, task,
// attempt). Whoever holds `key` (the daemon, across restarts) knows every
// attempt's secret; a worker knows only its own.
std::string AttemptSecret(absl::string_view key, absl::string_view job_id, int task, int attempt);
// Whether a worker's `presented` secret is the attempt's `expected` one,
// compared in constant time (secrets.h's ConstantTimeEquals).
bool SecretMatches(absl::string_view expected, absl::string_view presented);

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_ATTEMPT_SECRETS_H_
