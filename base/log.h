// Logs for operators, on stderr, one line per event in one write (so lines
// of concurrent threads and processes never interleave), with a UTC time:
//   2026-12-02T09:51:02.120Z INFO task started job=3f9a1c0b2d4e task=2 attempt=1 pid=4242
// traind writes leveled lines with the job and task ids in key=value form
// (LogInfo, LogWarning, LogError); a worker writes plain lines (LogLine),
// which traind keeps in the attempt's log file.
//
// Thread-safety: thread-safe; not async-signal-safe.
#ifndef TRAIND_BASE_LOG_H_
#define TRAIND_BASE_LOG_H_

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace traind {

// "<UTC time, ms> <text>\n".
void LogLine(absl::string_view text);
// "<UTC time, ms> <level> <message>\n".
void Log(absl::string_view level, absl::string_view message);

template <typename... Args>
void LogInfo(const absl::FormatSpec<Args...>& format, const Args&... args) {
  Log("INFO", absl::StrFormat(format, args...));
}
template <typename... Args>
void LogWarning(const absl::FormatSpec<Args...>& format, const Args&... args) {
  Log("WARN", absl::StrFormat(format, args...));
}
template <typename... Args>
void LogError(const absl::FormatSpec<Args...>& format, const Args&... args) {
  Log("ERROR", absl::StrFormat(format, args...));
}

}  // namespace traind

#endif  // TRAIND_BASE_LOG_H_
