#include "server/devices/gpu_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace traind::server {

const char* GpuStateName(GpuPool::State s) {
  switch (s) {
    case GpuPool::State::kIdle:
      return "IDLE";
    case GpuPool::State::kBusy:
      return "BUSY";
    case GpuPool::State::kDraining:
      return "DRAINING";
    case GpuPool::State::kUnhealthy:
      return "UNHEALTHY";
  }
  return "?";
}

GpuPool::GpuPool(DeviceProbe* probe, GpuPoolOptions options) : probe_(probe), options_(options) {}

std::string GpuPool::unavailable() const {
  if (probe_ == nullptr) return "no GPU probe configured";
  if (!probe_->Unavailable().empty()) return probe_->Unavailable();
  return probe_error_;
}

absl::Status GpuPool::Init() {
  gpus_.clear();
  if (probe_ == nullptr || !probe_->Unavailable().empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<GpuState>> states = probe_->Probe();
  if (!states.ok()) {
    probe_error_ = std::string(states.status().message());
    return states.status();
  }
  for (size_t i = 0; i < states->size(); ++i) {
    Gpu g;
    g.index = static_cast<int>(i);
    g.last = (*states)[i];
    g.baseline_used_bytes = g.last.used_bytes;
    gpus_.push_back(std::move(g));
  }
  return absl::OkStatus();
}

std::vector<std::string> GpuPool::Refresh(absl::Time now) {
  if (gpus_.empty()) return {};
  return Update(now, probe_->Probe());
}

std::vector<std::string> GpuPool::Update(absl::Time now,
                                         const absl::StatusOr<std::vector<GpuState>>& states) {
  std::vector<std::string> notes;
  if (gpus_.empty()) return notes;
  if (!states.ok()) {
    probe_error_ = std::string(states.status().message());
  } else {
    probe_error_.clear();
    for (Gpu& g : gpus_) {
      for (const GpuState& s : *states) {
        if (s.uuid == g.last.uuid) g.last = s;
      }
    }
  }
  for (Gpu& g : gpus_) {
    if (g.state != State::kDraining) continue;
    const bool process_gone = std::none_of(g.last.processes.begin(), g.last.processes.end(),
                                           [&](const GpuProcess& p) { return p.pid == g.pid; });
    const bool memory_back =
        g.last.used_bytes <= g.baseline_used_bytes + options_.drain_tolerance_bytes;
    if (states.ok() && process_gone && memory_back) {
      notes.push_back(absl::StrFormat("gpu%d drained after %s (used %d bytes, baseline %d)",
                                      g.index, absl::FormatDuration(now - g.draining_since),
                                      g.last.used_bytes, g.baseline_used_bytes));
      g.state = State::kIdle;
      g.pid = 0;
    } else if (now - g.draining_since >= options_.drain_timeout) {
      g.state = State::kUnhealthy;
      g.note = absl::StrFormat(
          "did not drain within %s after worker %d exited: %s; used %d bytes, idle baseline %d",
          absl::FormatDuration(options_.drain_timeout), g.pid,
          process_gone ? "its process is gone" : "its process is still on the GPU",
          g.last.used_bytes, g.baseline_used_bytes);
      notes.push_back(absl::StrCat("gpu", g.index, " UNHEALTHY: ", g.note));
    }
  }
  return notes;
}

std::optional<std::vector<int>> GpuPool::Allocate(int count, int64_t bytes,
                                                  const std::set<int>& avoid) const {
  std::vector<int> picked;
  for (const Gpu& g : gpus_) {
    if (static_cast<int>(picked.size()) == count) break;
    if (g.state == State::kIdle && avoid.count(g.index) == 0 &&
        g.last.total_bytes - g.last.used_bytes >= bytes) {
      picked.push_back(g.index);
    }
  }
  if (static_cast<int>(picked.size()) < count) return std::nullopt;
  return picked;
}

void GpuPool::MarkBusy(const std::vector<int>& gpus, int pid) {
  for (int i : gpus) {
    gpus_[i].state = State::kBusy;
    gpus_[i].pid = pid;
  }
}

void GpuPool::Release(const std::vector<int>& gpus, absl::Time now) {
  for (int i : gpus) {
    if (gpus_[i].state != State::kBusy) continue;
    gpus_[i].state = State::kDraining;
    gpus_[i].draining_since = now;
  }
}

bool GpuPool::AnyDraining() const {
  return std::any_of(gpus_.begin(), gpus_.end(),
                     [](const Gpu& g) { return g.state == State::kDraining; });
}

bool GpuPool::AnyBusyOrDraining() const {
  return std::any_of(gpus_.begin(), gpus_.end(), [](const Gpu& g) {
    return g.state == State::kDraining || g.state == State::kBusy;
  });
}

int GpuPool::Usable() const {
  return static_cast<int>(std::count_if(gpus_.begin(), gpus_.end(),
                                        [](const Gpu& g) { return g.state != State::kUnhealthy; }));
}

int64_t GpuPool::MaxTotalBytes() const {
  int64_t m = 0;
  for (const Gpu& g : gpus_) {
    if (g.state != State::kUnhealthy) m = std::max(m, g.last.total_bytes);
  }
  return m;
}

}  // namespace traind::server
