#include "worker/predict_main.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "worker/engine/fit/artifacts.h"
#include "worker/engine/model_file.h"
#include "worker/engine/predict.h"
#include "worker/exit_code.h"
#include "worker/gpu_context.h"
#include "worker/process_setup.h"

namespace traind::worker {
namespace {

absl::Status WriteStdout(const std::string& text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    return absl::InternalError(absl::StrCat("stdout: cannot write: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string OneLineError(const std::string& message) {
  std::string line = absl::StrCat("traind-worker: error: ", message);
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return line;
}

int RunPredict(const PredictCommand& command) {
  GpuContext gpu;
  absl::Status status = [&]() -> absl::Status {
    engine::PredictOptions options;
    options.decode_threads = DecodeThreads();
    if (command.gpu) {
      // The backend in the precision the first model trained in.
      absl::StatusOr<engine::TrainedModel> first = engine::ReadModelFile(command.models[0]);
      if (!first.ok()) return first.status();
      absl::Status opened = OpenGpu(first->spec, 0, &gpu);
      if (!opened.ok()) return opened;
      options.backend = gpu.backend.get();
      LogLine(absl::StrCat("predict on ", gpu.backend->name()));
    }
    absl::StatusOr<engine::Predictions> predictions =
        engine::Predict(command.models, command.data, options);
    if (!predictions.ok()) return predictions.status();
    const std::string csv = predictions->Csv();
    if (command.out.empty() || command.out == "-") return WriteStdout(csv);
    return engine::WriteTextFile(command.out, csv);
  }();
  if (status.ok()) return kSucceeded;
  const std::string line = OneLineError(std::string(status.message())) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  return kFailed;
}

}  // namespace traind::worker
