// Checkpoint files: named arrays and strings behind a checksummed header.
//
// Layout: "TRAINDCK" (8 bytes), format version (u32), payload size (u64),
// CRC-32 (IEEE) of the payload (u32), then the payload: records of
// [name length u32][name][type u8][byte count u64][bytes], little-endian.
// A file whose size, magic, version or checksum disagrees is rejected
// (DataError naming the file and what is wrong), never half-loaded.
//
// Training state is stored by name: each owner (the fit loop, a callback,
// the model, the optimizer) writes its values as records "<owner>.<key>"
// through a StateWriter and reads them back through a StateReader, e.g.
// "loop.epoch", "early_stopping.wait", "selection.best_epoch". Format
// version 2 is this layout. Version 1 (training counters as one positional
// array, "counters") has no read path: such a file is refused with the
// DataError "<path>: checkpoint format version 1 (expected 2)", so a resume
// skips it (FitObserver::OnWarning) and trains from the first epoch.
#ifndef TRAIND_WORKER_ENGINE_CHECKPOINT_H_
#define TRAIND_WORKER_ENGINE_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace traind::engine {

// CRC-32 (IEEE 802.3, as zlib's crc32).
uint32_t Crc32(const void* data, size_t size, uint32_t crc = 0);

// Builds a checkpoint in memory. Clear() keeps the buffer's capacity, so a
// writer reused every epoch stops allocating once it has grown.
class CheckpointWriter {
 public:
  void Clear() { payload_.clear(); }
  void PutFloats(const std::string& name, const float* data, size_t n);
  void PutDoubles(const std::string& name, const std::vector<double>& values);
  void PutInt64s(const std::string& name, const std::vector<int64_t>& values);
  void PutString(const std::string& name, const std::string& value);

  // Header + payload.
  std::string Serialize() const;
  // Writes atomically: a temporary file in the same directory, fsync,
  // rename.
  absl::Status WriteFile(const std::string& path) const;

 private:
  void Put(const std::string& name, uint8_t type, const void* data, size_t bytes);
  std::string payload_;
};

// A checkpoint read back and verified.
class CheckpointReader {
 public:
  // Errors: DataError ("<path>: checksum mismatch (file corrupt)", "<path>:
  // truncated: ...", "<path>: not a traind checkpoint").
  static absl::StatusOr<CheckpointReader> ReadFile(const std::string& path);
  static absl::StatusOr<CheckpointReader> Parse(const std::string& bytes, const std::string& path);

  bool Has(const std::string& name) const { return records_.count(name) > 0; }
  // Errors: NotFound, or a type/size mismatch (DataError).
  absl::Status GetFloats(const std::string& name, float* out, size_t n) const;
  absl::StatusOr<std::vector<double>> GetDoubles(const std::string& name) const;
  absl::StatusOr<std::vector<int64_t>> GetInt64s(const std::string& name) const;
  absl::StatusOr<std::string> GetString(const std::string& name) const;

 private:
  struct Record {
    uint8_t type;
    std::string bytes;
  };
  absl::StatusOr<const Record*> Find(const std::string& name, uint8_t type) const;
  std::string path_;
  std::map<std::string, Record> records_;
};

// One owner's named values in a checkpoint being written: record
// "<owner>.<key>". Not owned: the writer outlives it.
class StateWriter {
 public:
  StateWriter(CheckpointWriter* out, absl::string_view owner)
      : out_(out), prefix_(std::string(owner) + ".") {}

  void PutInt(absl::string_view key, int64_t value) { out_->PutInt64s(Name(key), {value}); }
  void PutBool(absl::string_view key, bool value) { PutInt(key, value ? 1 : 0); }
  void PutDouble(absl::string_view key, double value) { out_->PutDoubles(Name(key), {value}); }
  void PutInts(absl::string_view key, const std::vector<int64_t>& values) {
    out_->PutInt64s(Name(key), values);
  }
  void PutDoubles(absl::string_view key, const std::vector<double>& values) {
    out_->PutDoubles(Name(key), values);
  }
  void PutFloats(absl::string_view key, const float* data, size_t n) {
    out_->PutFloats(Name(key), data, n);
  }
  void PutString(absl::string_view key, const std::string& value) {
    out_->PutString(Name(key), value);
  }

 private:
  std::string Name(absl::string_view key) const { return prefix_ + std::string(key); }
  CheckpointWriter* out_;
  std::string prefix_;
};

// One owner's named values in a checkpoint read back (see StateWriter).
// Errors: NotFound for a missing record; DataError for a record of another
// type or (scalars) not holding exactly one value.
class StateReader {
 public:
  StateReader(const CheckpointReader& in, absl::string_view owner)
      : in_(in), prefix_(std::string(owner) + ".") {}

  bool Has(absl::string_view key) const { return in_.Has(Name(key)); }
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<double> GetDouble(absl::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetInts(absl::string_view key) const {
    return in_.GetInt64s(Name(key));
  }
  absl::StatusOr<std::vector<double>> GetDoubles(absl::string_view key) const {
    return in_.GetDoubles(Name(key));
  }
  absl::Status GetFloats(absl::string_view key, float* out, size_t n) const {
    return in_.GetFloats(Name(key), out, n);
  }
  absl::StatusOr<std::string> GetString(absl::string_view key) const {
    return in_.GetString(Name(key));
  }

 private:
  std::string Name(absl::string_view key) const { return prefix_ + std::string(key); }
  const CheckpointReader& in_;
  std::string prefix_;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_CHECKPOINT_H_
