#include "worker/engine/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"

namespace traind::engine {
namespace {

constexpr char kMagic[8] = {'T', 'R', 'A', 'I', 'N', 'D', 'C', 'K'};
// 2: training state in named records (StateWriter); see checkpoint.h.
constexpr uint32_t kVersion = 2;
constexpr size_t kHeader = 8 + 4 + 8 + 4;
enum : uint8_t { kF32 = 1, kF64 = 2, kI64 = 3, kString = 4 };

std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

template <typename T>
void Append(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
bool Take(const std::string& s, size_t* pos, T* v) {
  if (s.size() - *pos < sizeof(T)) return false;
  std::memcpy(v, s.data() + *pos, sizeof(T));
  *pos += sizeof(T);
  return true;
}

}  // namespace

uint32_t Crc32(const void* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = MakeTable();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

void CheckpointWriter::Put(const std::string& name, uint8_t type, const void* data, size_t bytes) {
  Append<uint32_t>(&payload_, static_cast<uint32_t>(name.size()));
  payload_.append(name);
  Append<uint8_t>(&payload_, type);
  Append<uint64_t>(&payload_, bytes);
  payload_.append(static_cast<const char*>(data), bytes);
}

void CheckpointWriter::PutFloats(const std::string& name, const float* data, size_t n) {
  Put(name, kF32, data, n * sizeof(float));
}
void CheckpointWriter::PutDoubles(const std::string& name, const std::vector<double>& values) {
  Put(name, kF64, values.data(), values.size() * sizeof(double));
}
void CheckpointWriter::PutInt64s(const std::string& name, const std::vector<int64_t>& values) {
  Put(name, kI64, values.data(), values.size() * sizeof(int64_t));
}
void CheckpointWriter::PutString(const std::string& name, const std::string& value) {
  Put(name, kString, value.data(), value.size());
}

std::string CheckpointWriter::Serialize() const {
  std::string out;
  out.reserve(kHeader + payload_.size());
  out.append(kMagic, sizeof(kMagic));
  Append<uint32_t>(&out, kVersion);
  Append<uint64_t>(&out, payload_.size());
  Append<uint32_t>(&out, Crc32(payload_.data(), payload_.size()));
  out.append(payload_);
  return out;
}

absl::Status CheckpointWriter::WriteFile(const std::string& path) const {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  const std::string bytes = Serialize();
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat(tmp, ": cannot create: ", strerror(errno)));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string error = strerror(errno);
      close(fd);
      unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat(tmp, ": write failed: ", error));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat(tmp, ": fsync/close failed: ", strerror(errno)));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": rename failed: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointReader> CheckpointReader::ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return DataError(absl::StrCat(path, ": cannot open: ", strerror(errno)));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return Parse(buffer.str(), path);
}

absl::StatusOr<CheckpointReader> CheckpointReader::Parse(const std::string& bytes,
                                                         const std::string& path) {
  if (bytes.size() < kHeader || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return DataError(absl::StrCat(path, ": not a traind checkpoint (bad header)"));
  }
  size_t pos = sizeof(kMagic);
  uint32_t version = 0, crc = 0;
  uint64_t size = 0;
  Take(bytes, &pos, &version);
  Take(bytes, &pos, &size);
  Take(bytes, &pos, &crc);
  if (version != kVersion) {
    return DataError(
        absl::StrFormat("%s: checkpoint format version %d (expected %d)", path, version, kVersion));
  }
  if (bytes.size() - kHeader != size) {
    return DataError(
        absl::StrFormat("%s: truncated or extended: payload of %d bytes, header says %d", path,
                        bytes.size() - kHeader, size));
  }
  if (Crc32(bytes.data() + kHeader, size) != crc) {
    return DataError(absl::StrCat(path, ": checksum mismatch (file corrupt)"));
  }
  CheckpointReader reader;
  reader.path_ = path;
  while (pos < bytes.size()) {
    uint32_t name_size = 0;
    uint8_t type = 0;
    uint64_t n = 0;
    if (!Take(bytes, &pos, &name_size) || bytes.size() - pos < name_size) {
      return DataError(absl::StrCat(path, ": malformed record"));
    }
    std::string name = bytes.substr(pos, name_size);
    pos += name_size;
    if (!Take(bytes, &pos, &type) || !Take(bytes, &pos, &n) || bytes.size() - pos < n) {
      return DataError(absl::StrCat(path, ": malformed record \"", name, "\""));
    }
    reader.records_[name] = Record{type, bytes.substr(pos, n)};
    pos += n;
  }
  return reader;
}

absl::StatusOr<const CheckpointReader::Record*> CheckpointReader::Find(const std::string& name,
                                                                       uint8_t type) const {
  auto it = records_.find(name);
  if (it == records_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": no record \"", name, "\""));
  }
  if (it->second.type != type) {
    return DataError(absl::StrCat(path_, ": record \"", name, "\" has another type"));
  }
  return &it->second;
}

absl::Status CheckpointReader::GetFloats(const std::string& name, float* out, size_t n) const {
  TRAIND_ASSIGN_OR_RETURN(const Record* r, Find(name, kF32));
  if (r->bytes.size() != n * sizeof(float)) {
    return DataError(absl::StrFormat("%s: record \"%s\" holds %d values, expected %d", path_, name,
                                     r->bytes.size() / sizeof(float), n));
  }
  std::memcpy(out, r->bytes.data(), r->bytes.size());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> CheckpointReader::GetDoubles(const std::string& name) const {
  TRAIND_ASSIGN_OR_RETURN(const Record* r, Find(name, kF64));
  std::vector<double> v(r->bytes.size() / sizeof(double));
  std::memcpy(v.data(), r->bytes.data(), v.size() * sizeof(double));
  return v;
}

absl::StatusOr<std::vector<int64_t>> CheckpointReader::GetInt64s(const std::string& name) const {
  TRAIND_ASSIGN_OR_RETURN(const Record* r, Find(name, kI64));
  std::vector<int64_t> v(r->bytes.size() / sizeof(int64_t));
  std::memcpy(v.data(), r->bytes.data(), v.size() * sizeof(int64_t));
  return v;
}

absl::StatusOr<std::string> CheckpointReader::GetString(const std::string& name) const {
  TRAIND_ASSIGN_OR_RETURN(const Record* r, Find(name, kString));
  return r->bytes;
}

absl::StatusOr<int64_t> StateReader::GetInt(absl::string_view key) const {
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> v, in_.GetInt64s(Name(key)));
  if (v.size() != 1) {
    return DataError(
        absl::StrFormat("record \"%s\" holds %d values, expected 1", Name(key), v.size()));
  }
  return v[0];
}

absl::StatusOr<bool> StateReader::GetBool(absl::string_view key) const {
  TRAIND_ASSIGN_OR_RETURN(int64_t v, GetInt(key));
  if (v != 0 && v != 1) {
    return DataError(absl::StrFormat("record \"%s\" is %d, not a flag", Name(key), v));
  }
  return v != 0;
}

absl::StatusOr<double> StateReader::GetDouble(absl::string_view key) const {
  TRAIND_ASSIGN_OR_RETURN(std::vector<double> v, in_.GetDoubles(Name(key)));
  if (v.size() != 1) {
    return DataError(
        absl::StrFormat("record \"%s\" holds %d values, expected 1", Name(key), v.size()));
  }
  return v[0];
}

}  // namespace traind::engine
