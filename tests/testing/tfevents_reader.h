// A reader of TensorBoard event files for tests, written from the published
// formats alone (TFRecord framing; tensorflow's Event and Summary protos in
// protobuf's wire format), sharing nothing with traind's writer: so a test
// that reads what traind wrote checks the file against the format, not the
// writer against itself.
//
//   record: uint64 LE length | uint32 LE masked crc32c(length bytes) |
//           data | uint32 LE masked crc32c(data)
//   masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8
//   Event:   wall_time = 1 (double), step = 2 (int64), file_version = 3
//            (string), summary = 5 (Summary)
//   Summary: value = 1 (repeated Value); Value: tag = 1 (string),
//            simple_value = 2 (float)
#ifndef TRAIND_TESTS_TESTING_TFEVENTS_READER_H_
#define TRAIND_TESTS_TESTING_TFEVENTS_READER_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace traind::testing {

// CRC-32C, bit by bit (reflected polynomial 0x82f63b78).
inline uint32_t BitwiseCrc32c(const std::string& data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return crc ^ 0xffffffffu;
}

inline uint32_t MaskedBitwiseCrc32c(const std::string& data) {
  const uint32_t crc = BitwiseCrc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

struct TfEvent {
  double wall_time = 0;
  bool has_step = false;
  int64_t step = 0;
  bool has_file_version = false;
  std::string file_version;
  // The summary's values: (tag, simple_value).
  std::vector<std::pair<std::string, float>> values;
};

struct TfEventFile {
  std::vector<TfEvent> events;
  // Bytes of whole, valid records from the start.
  size_t valid_bytes = 0;
  // Why reading stopped before the end ("" when every byte was a valid record).
  std::string error;
};

namespace tfevents_internal {

class Cursor {
 public:
  explicit Cursor(std::string bytes) : bytes_(std::move(bytes)) {}
  bool done() const { return at_ == bytes_.size(); }
  size_t left() const { return bytes_.size() - at_; }
  bool Fixed(int n, uint64_t* v) {
    if (left() < static_cast<size_t>(n)) return false;
    *v = 0;
    for (int i = 0; i < n; ++i) {
      *v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[at_ + i])) << (8 * i);
    }
    at_ += static_cast<size_t>(n);
    return true;
  }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (done()) return false;
      const auto b = static_cast<unsigned char>(bytes_[at_++]);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool Bytes(size_t n, std::string* out) {
    if (left() < n) return false;
    *out = bytes_.substr(at_, n);
    at_ += n;
    return true;
  }

 private:
  std::string bytes_;
  size_t at_ = 0;
};

// Reads one field's key and, for length-delimited fields, its bytes.
inline bool Field(Cursor* c, uint64_t* number, uint64_t* wire, uint64_t* scalar,
                  std::string* bytes) {
  uint64_t key;
  if (!c->Varint(&key)) return false;
  *number = key >> 3;
  *wire = key & 7;
  switch (*wire) {
    case 0:
      return c->Varint(scalar);
    case 1:
      return c->Fixed(8, scalar);
    case 5:
      return c->Fixed(4, scalar);
    case 2: {
      uint64_t n;
      return c->Varint(&n) && c->Bytes(static_cast<size_t>(n), bytes);
    }
    default:
      return false;
  }
}

inline bool ParseValue(const std::string& data, std::pair<std::string, float>* value) {
  Cursor c(data);
  bool has_tag = false, has_value = false;
  while (!c.done()) {
    uint64_t number, wire, scalar = 0;
    std::string bytes;
    if (!Field(&c, &number, &wire, &scalar, &bytes)) return false;
    if (number == 1 && wire == 2) {
      value->first = bytes;
      has_tag = true;
    } else if (number == 2 && wire == 5) {
      const auto bits = static_cast<uint32_t>(scalar);
      std::memcpy(&value->second, &bits, sizeof(float));
      has_value = true;
    } else {
      return false;  // traind writes no other field
    }
  }
  return has_tag && has_value;
}

inline bool ParseEvent(const std::string& data, TfEvent* e) {
  Cursor c(data);
  while (!c.done()) {
    uint64_t number, wire, scalar = 0;
    std::string bytes;
    if (!Field(&c, &number, &wire, &scalar, &bytes)) return false;
    if (number == 1 && wire == 1) {
      std::memcpy(&e->wall_time, &scalar, sizeof(double));
    } else if (number == 2 && wire == 0) {
      e->has_step = true;
      e->step = static_cast<int64_t>(scalar);
    } else if (number == 3 && wire == 2) {
      e->has_file_version = true;
      e->file_version = bytes;
    } else if (number == 5 && wire == 2) {
      Cursor summary(bytes);
      while (!summary.done()) {
        uint64_t n, w, s = 0;
        std::string value_bytes;
        if (!Field(&summary, &n, &w, &s, &value_bytes) || n != 1 || w != 2) return false;
        std::pair<std::string, float> value;
        if (!ParseValue(value_bytes, &value)) return false;
        e->values.push_back(value);
      }
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace tfevents_internal

// Every valid record of `bytes`, up to the first that is not.
inline TfEventFile ParseTfEvents(const std::string& bytes) {
  TfEventFile out;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) {
      out.error = "torn header at byte " + std::to_string(at);
      return out;
    }
    const std::string length_bytes = bytes.substr(at, 8);
    tfevents_internal::Cursor header(bytes.substr(at, 12));
    uint64_t length = 0, length_crc = 0;
    header.Fixed(8, &length);
    header.Fixed(4, &length_crc);
    if (length_crc != MaskedBitwiseCrc32c(length_bytes)) {
      out.error = "bad length crc at byte " + std::to_string(at);
      return out;
    }
    if (bytes.size() - at - 12 < length || bytes.size() - at - 12 - length < 4) {
      out.error = "torn record at byte " + std::to_string(at);
      return out;
    }
    const std::string data = bytes.substr(at + 12, static_cast<size_t>(length));
    tfevents_internal::Cursor footer(bytes.substr(at + 12 + length, 4));
    uint64_t data_crc = 0;
    footer.Fixed(4, &data_crc);
    if (data_crc != MaskedBitwiseCrc32c(data)) {
      out.error = "bad data crc at byte " + std::to_string(at);
      return out;
    }
    TfEvent e;
    if (!tfevents_internal::ParseEvent(data, &e)) {
      out.error = "not an Event at byte " + std::to_string(at);
      return out;
    }
    out.events.push_back(std::move(e));
    at += 12 + static_cast<size_t>(length) + 4;
    out.valid_bytes = at;
  }
  return out;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The event files ("events.out.tfevents.*") directly in `dir`, by name.
inline std::vector<std::string> EventFilesIn(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& e : std::filesystem::directory_iterator(dir, error)) {
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace traind::testing

#endif  // TRAIND_TESTS_TESTING_TFEVENTS_READER_H_
