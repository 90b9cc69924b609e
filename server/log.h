// Operator log: one line per lifecycle event on stderr, with the job and
// task ids in key=value form, e.g.
//   2026-12-02T09:51:02.120Z INFO task started job=3f9a1c0b2d4e task=2 attempt=1 pid=4242
#ifndef TRAIND_SERVER_LOG_H_
#define TRAIND_SERVER_LOG_H_

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace traind::server {

inline void Log(absl::string_view level, absl::string_view message) {
  std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
                   level, " ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

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

}  // namespace traind::server

#endif  // TRAIND_SERVER_LOG_H_
