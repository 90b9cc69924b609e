// Checkpoint files: named arrays and strings behind a checksummed header.
//
// Layout: "TRAINDCK" (8 bytes), format version (u32), payload size (u64),
// CRC-32 (IEEE) of the payload (u32), then the payload: records of
// [name length u32][name][type u8][byte count u64][bytes], little-endian.
// A file whose size, magic, version or checksum disagrees is rejected
// (DataError naming the file and what is wrong), never half-loaded.
#ifndef TRAIND_WORKER_ENGINE_CHECKPOINT_H_
#define TRAIND_WORKER_ENGINE_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

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

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_CHECKPOINT_H_
