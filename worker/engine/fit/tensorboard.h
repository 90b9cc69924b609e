// TensorBoard scalars of a task: one event file per run directory
// ("events.out.tfevents.<seconds>.<host>"), in TensorBoard's own format,
// written without TensorFlow:
//
// - The file is TFRecord framing of serialized `Event` protos: per record a
//   uint64 little-endian length, the masked CRC-32C of those 8 bytes (uint32
//   LE), the data, the masked CRC-32C of the data. Masked: ((crc >> 15) |
//   (crc << 17)) + 0xa282ead8.
// - The first record is Event{wall_time, file_version: "brain.Event:2"};
//   every scalar is Event{wall_time, step, summary{value{tag,
//   simple_value}}}. Only these fields are encoded, with tensorflow's field
//   numbers (core/util/event.proto, core/framework/summary.proto): Event
//   wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
//   summary = 5; Summary value = 1 (repeated); Summary.Value tag = 1
//   (string), simple_value = 2 (float).
//
// One writer per directory, and one file: TensorBoard stops reading a file
// once a newer one appears in the same run directory, so a retried or
// resumed attempt continues the file it finds there instead of starting
// another (see EventFileWriter::Open).
//
// Thread safety: an EventFileWriter or TensorBoardScalars is used by one
// thread at a time.
#ifndef TRAIND_WORKER_ENGINE_FIT_TENSORBOARD_H_
#define TRAIND_WORKER_ENGINE_FIT_TENSORBOARD_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/engine/fit/callbacks.h"

namespace traind::engine {

// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78) of `data`,
// continuing from `crc` (the CRC of what came before; 0 to start).
// Crc32c("123456789") == 0xe3069283.
uint32_t Crc32c(absl::string_view data, uint32_t crc = 0);
// TFRecord's masked CRC-32C of `data`.
uint32_t MaskedCrc32c(absl::string_view data);

// "events.out.tfevents."; every event file's name starts with it.
inline constexpr absl::string_view kEventFilePrefix = "events.out.tfevents.";

// One scalar of an epoch.
struct Scalar {
  std::string tag;
  float value = 0;
};

class EventFileWriter final {
 public:
  // Opens the event file of run directory `dir` (created with its parents
  // if missing) for an attempt that resumes after `resume_epoch` epochs (0:
  // a fresh start), at `wall_time` (seconds since the Unix epoch):
  // - the existing event file there (the last by name, the one TensorBoard
  //   reads) keeps its valid records up to the first that is torn, corrupt
  //   (either CRC) or not an Event, or whose step is above `resume_epoch`:
  //   the file is truncated after them and appended to. Without a valid
  //   file_version record first, the file starts over.
  // - no event file: a new one, with its file_version record.
  // So a fresh start keeps only the file_version record, and a resumed
  // attempt continues the steps it resumes after without repeating any.
  // Errors (InternalError naming the path): the directory or file cannot be
  // made, read, truncated or written, or another writer holds the file (an
  // advisory lock).
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Open(const std::string& dir,
                                                               int64_t resume_epoch,
                                                               double wall_time);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  const std::string& path() const { return path_; }

  // Appends one Event per scalar (step `step`), in one write: TensorBoard
  // sees an epoch's scalars together. Errors: InternalError naming the path.
  absl::Status WriteScalars(int64_t step, double wall_time, absl::Span<const Scalar> scalars);

 private:
  EventFileWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  absl::Status Append(absl::string_view records);

  const std::string path_;
  const int fd_;
};

// The TensorBoard callback ("tensorboard"): after every epoch, the epoch's
// training metrics as train/<name>, its validation metrics as val/<name>
// (when validated) and the epoch's learning rate as learning_rate, at step
// = epoch. The event file is opened at the attempt's first epoch, resuming
// after the epoch before it. No checkpointed state: the file is its own
// record. Only rank 0 should have one (the fit loop adds it there).
//
// A file that cannot be written is a warning, given once to `warn`; the
// callback then writes nothing more and never fails the task (see the .cc).
class TensorBoardScalars final : public FitCallback {
 public:
  using Warn = std::function<void(const absl::Status&)>;
  TensorBoardScalars(std::string dir, Warn warn) : dir_(std::move(dir)), warn_(std::move(warn)) {}

  absl::string_view name() const override { return "tensorboard"; }
  absl::Status OnEpochEnd(const EpochEnd& end) override;

  // The scalars of an epoch, in the order they are written (train/* and
  // val/* by name, then learning_rate).
  static std::vector<Scalar> ScalarsOf(const EpochEnd& end);

 private:
  void Fail(const absl::Status& s);

  const std::string dir_;
  const Warn warn_;
  std::unique_ptr<EventFileWriter> writer_;
  bool failed_ = false;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_FIT_TENSORBOARD_H_
