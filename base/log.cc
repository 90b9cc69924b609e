#include "base/log.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace traind {
namespace {

void Write(const std::string& line) { std::fwrite(line.data(), 1, line.size(), stderr); }

std::string Now() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
}

}  // namespace

void LogLine(absl::string_view text) { Write(absl::StrCat(Now(), " ", text, "\n")); }

void Log(absl::string_view level, absl::string_view message) {
  Write(absl::StrCat(Now(), " ", level, " ", message, "\n"));
}

}  // namespace traind
