#include "worker/attempt_timeline.h"

#include <time.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "traind/zygote_protocol.h"

namespace traind::worker {
namespace {

int64_t StampFromEnvironment() {
  const char* v = std::getenv(zygote::kLaunchStampEnv);
  int64_t ns = 0;
  if (v == nullptr || !absl::SimpleAtoi(v, &ns) || ns <= 0 || ns > MonotonicNanos()) return 0;
  return ns;
}

}  // namespace

int64_t MonotonicNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

AttemptTimeline::AttemptTimeline(int64_t start_ns)
    : start_ns_(start_ns > 0 ? start_ns : MonotonicNanos()), from_launch_(start_ns > 0) {}

AttemptTimeline AttemptTimeline::FromEnvironment() {
  return AttemptTimeline(StampFromEnvironment());
}

void AttemptTimeline::Mark(absl::string_view phase) {
  const int64_t now = MonotonicNanos();
  absl::MutexLock lock(&mu_);
  marks_.emplace_back(std::string(phase), now);
}

std::vector<std::pair<std::string, double>> AttemptTimeline::Phases() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, double>> out;
  int64_t previous = start_ns_;
  for (const auto& [phase, at] : marks_) {
    out.emplace_back(phase, static_cast<double>(at - previous) / 1e6);
    previous = at;
  }
  return out;
}

std::string AttemptTimeline::Summary() const {
  const std::vector<std::pair<std::string, double>> phases = Phases();
  std::vector<std::string> parts;
  double total = 0;
  for (size_t i = 0; i < phases.size(); ++i) {
    std::string name = phases[i].first;
    if (i == 0) name = (from_launch_ ? "launch\xE2\x86\x92" : "start\xE2\x86\x92") + name;
    parts.push_back(absl::StrFormat("%s %.2f ms", name, phases[i].second));
    total += phases[i].second;
  }
  return absl::StrFormat("%s (total %.2f ms)", absl::StrJoin(parts, " \xC2\xB7 "), total);
}

}  // namespace traind::worker
