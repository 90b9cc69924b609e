#include "worker/predict_main.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/engine/fit/artifacts.h"
#include "worker/engine/predict.h"
#include "worker/exit_code.h"

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
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<engine::Predictions> predictions = engine::Predict(command.models, command.data);
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
