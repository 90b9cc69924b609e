// The worker's log: one timestamped line per message on stderr (traind
// keeps each worker's stderr in the attempt's log).
#ifndef TRAIND_WORKER_LOG_H_
#define TRAIND_WORKER_LOG_H_

#include "absl/strings/string_view.h"

namespace traind::worker {

// Writes "<UTC time, ms> <message>\n" to stderr in one write. Thread-safe
// (one fwrite per line); not async-signal-safe.
void Log(absl::string_view message);

}  // namespace traind::worker

#endif  // TRAIND_WORKER_LOG_H_
