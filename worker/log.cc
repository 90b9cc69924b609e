#include "worker/log.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace traind::worker {

void Log(absl::string_view message) {
  std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
                   message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace traind::worker
