#include "worker/standalone.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status.h"
#include "data/dataset.h"
#include "data/split.h"
#include "google/protobuf/util/json_util.h"
#include "spec/loader.h"
#include "spec/task_plan.h"
#include "spec/task_rows.h"
#include "spec/validation.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/engine/fit.h"
#include "worker/exit_code.h"
#include "worker/gpu_context.h"
#include "worker/process_setup.h"
#include "worker/stop_signal.h"

namespace traind::worker {
namespace {

// One JSON object, with the proto's field names.
std::string ToJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, o);
  return json;
}

class PrintingObserver final : public engine::FitObserver {
 public:
  absl::Status OnEpochEnd(const traind::v1::EpochMetrics& metrics) override {
    std::printf("%s\n", ToJson(metrics).c_str());
    std::fflush(stdout);
    return absl::OkStatus();
  }
  bool StopRequested() override { return StopSignalReceived(); }
};

}  // namespace

int RunStandalone(const StandaloneOptions& so) {
  const std::string& spec_path = so.spec_path;
  absl::StatusOr<traind::v1::JobSpec> spec = spec::LoadJobSpecFile(spec_path);
  if (!spec.ok()) {
    LogLine(absl::StrCat("error: ", spec.status().message()));
    return kUsage;
  }
  spec::ValidationContext vc;
  vc.cpu_bf16 = engine::CpuSupportsBf16();
  // A GPU spec trains on this process's first visible GPU (standalone runs
  // one rank).
  GpuContext gpu;
  if (spec->resources().device() == traind::v1::GPU) {
    if (absl::Status s = OpenGpu(*spec, /*device=*/0, &gpu); !s.ok()) {
      LogLine(absl::StrCat("error: ", s.message()));
      return kFailed;
    }
    vc.gpus = gpu.plugin->DeviceCount(nullptr);
    if (spec->resources().count() > 1) {
      LogLine(absl::StrCat("warning: resources.count is ", spec->resources().count(),
                           "; standalone runs on one GPU"));
      vc.gpus = std::max(vc.gpus, spec->resources().count());
    }
  }
  spec::ValidatedShape shape;
  if (absl::Status s = spec::ValidateJobSpec(*spec, vc, &shape); !s.ok()) {
    LogLine(absl::StrCat("error: ", spec_path, ": ", s.message()));
    return kUsage;
  }
  // Images whose files state their shape (as traind's submit does).
  if (spec->data().shape().empty()) {
    for (int32_t d : shape.image_shape) spec->mutable_data()->add_shape(d);
  }
  absl::StatusOr<data::Dataset> data = data::LoadDataset(*spec, DecodeThreads());
  if (!data.ok()) {
    LogLine(absl::StrCat("error: ", data.status().message()));
    return kFailed;
  }
  const int tasks = spec::TaskCount(*spec);
  PrintingObserver observer;
  for (int task = 0; task < tasks; ++task) {
    if (so.only_task >= 0 && task != so.only_task) continue;
    engine::FitOptions options;
    options.task = task;
    options.backend = gpu.backend.get();  // null: the CPU backend
    if (!so.artifacts_dir.empty()) {
      options.artifacts_dir = absl::StrCat(so.artifacts_dir, "/task-", task);
      options.checkpoint_dir = options.artifacts_dir + "/checkpoints";
    }
    absl::StatusOr<data::FoldRows> rows = spec::RowsForTask(*spec, *data, task);
    if (!rows.ok()) {
      LogLine(absl::StrCat("error: task ", task, ": ", rows.status().message()));
      return kFailed;
    }
    absl::StatusOr<traind::v1::FoldResult> result =
        engine::Fit(*spec, *data, *rows, task, options, &observer);
    if (!result.ok()) {
      LogLine(absl::StrCat("error: fold ", task, ": ", result.status().message()));
      return traind::FailureKindOf(result.status()) == traind::FailureKind::kCancelled ? kCancelled
                                                                                       : kFailed;
    }
    std::printf("{\"fold_result\": %s}\n", ToJson(*result).c_str());
    std::fflush(stdout);
  }
  return kSucceeded;
}

}  // namespace traind::worker
