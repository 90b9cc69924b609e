#include "worker/engine/fit/tensorboard.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "worker/engine/fit/artifacts.h"

namespace traind::engine {
namespace {

namespace fs = std::filesystem;

// ------------------------------------------------------------- CRC-32C

constexpr std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = MakeCrc32cTable();

// --------------------------------------------------- protobuf wire format

// Wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutKey(uint32_t field, uint32_t wire_type, std::string* out) {
  PutVarint((uint64_t{field} << 3) | wire_type, out);
}
// Little-endian, as protobuf's fixed fields and TFRecord's framing are.
void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutDouble(uint32_t field, double v, std::string* out) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  PutKey(field, kFixed64, out);
  PutLittleEndian(bits, 8, out);
}
void PutFloat(uint32_t field, float v, std::string* out) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  PutKey(field, kFixed32, out);
  PutLittleEndian(bits, 4, out);
}
void PutBytes(uint32_t field, absl::string_view v, std::string* out) {
  PutKey(field, kLengthDelimited, out);
  PutVarint(v.size(), out);
  out->append(v.data(), v.size());
}

// Event and Summary field numbers (tensorflow's event.proto, summary.proto).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2;

constexpr absl::string_view kFileVersion = "brain.Event:2";

std::string FileVersionEvent(double wall_time) {
  std::string e;
  PutDouble(kEventWallTime, wall_time, &e);
  PutBytes(kEventFileVersion, kFileVersion, &e);
  return e;
}

std::string ScalarEvent(double wall_time, int64_t step, const Scalar& s) {
  std::string value;
  PutBytes(kValueTag, s.tag, &value);
  PutFloat(kValueSimpleValue, s.value, &value);
  std::string summary;
  PutBytes(kSummaryValue, value, &summary);
  std::string e;
  PutDouble(kEventWallTime, wall_time, &e);
  PutKey(kEventStep, kVarint, &e);
  PutVarint(static_cast<uint64_t>(step), &e);
  PutBytes(kEventSummary, summary, &e);
  return e;
}

// One TFRecord around `data`, appended to *out.
void AppendRecord(absl::string_view data, std::string* out) {
  std::string length;
  PutLittleEndian(data.size(), 8, &length);
  out->append(length);
  PutLittleEndian(MaskedCrc32c(length), 4, out);
  out->append(data.data(), data.size());
  PutLittleEndian(MaskedCrc32c(data), 4, out);
}

uint64_t ReadLittleEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

bool ReadVarint(absl::string_view* in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    const auto byte = static_cast<unsigned char>(in->front());
    in->remove_prefix(1);
    *v |= uint64_t{byte & 0x7fu} << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// What the writer needs to know of an Event it finds: its step and whether
// it is the file_version record. False: not a well-formed message.
struct EventInfo {
  bool has_step = false;
  int64_t step = 0;
  bool is_file_version = false;
};
bool ParseEvent(absl::string_view in, EventInfo* info) {
  while (!in.empty()) {
    uint64_t key;
    if (!ReadVarint(&in, &key)) return false;
    const uint64_t field = key >> 3;
    switch (key & 7) {
      case kVarint: {
        uint64_t v;
        if (!ReadVarint(&in, &v)) return false;
        if (field == kEventStep) {
          info->has_step = true;
          info->step = static_cast<int64_t>(v);
        }
        break;
      }
      case kFixed64:
        if (in.size() < 8) return false;
        in.remove_prefix(8);
        break;
      case kFixed32:
        if (in.size() < 4) return false;
        in.remove_prefix(4);
        break;
      case kLengthDelimited: {
        uint64_t n;
        if (!ReadVarint(&in, &n) || n > in.size()) return false;
        if (field == kEventFileVersion) {
          info->is_file_version = absl::StartsWith(in.substr(0, n), "brain.Event:");
        }
        in.remove_prefix(n);
        break;
      }
      default:
        return false;
    }
  }
  return true;
}

// The length of the prefix of `file` to keep (see EventFileWriter::Open):
// 0 when it has no valid file_version record first.
size_t KeptPrefix(absl::string_view file, int64_t resume_epoch) {
  size_t kept = 0;
  size_t at = 0;
  bool first = true;
  while (file.size() - at >= 12) {
    const absl::string_view length = file.substr(at, 8);
    if (ReadLittleEndian(file.data() + at + 8, 4) != MaskedCrc32c(length)) break;
    const uint64_t n = ReadLittleEndian(length.data(), 8);
    if (n > file.size() - at - 12 || file.size() - at - 12 - n < 4) break;  // torn
    const absl::string_view data = file.substr(at + 12, n);
    if (ReadLittleEndian(data.data() + n, 4) != MaskedCrc32c(data)) break;
    EventInfo info;
    if (!ParseEvent(data, &info)) break;
    if (first ? !info.is_file_version : (!info.has_step || info.step > resume_epoch)) break;
    first = false;
    at += 12 + n + 4;
    kept = at;
  }
  return kept;
}

absl::Status ErrnoError(const std::string& path, absl::string_view what) {
  return absl::InternalError(absl::StrCat(path, ": cannot ", what, ": ", std::strerror(errno)));
}

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  std::string name = host;
  // A file name of one path component.
  std::replace(name.begin(), name.end(), '/', '_');
  return name;
}

}  // namespace

uint32_t Crc32c(absl::string_view data, uint32_t crc) {
  crc = ~crc;
  for (char c : data) {
    crc = kCrc32cTable[(crc ^ static_cast<unsigned char>(c)) & 0xff] ^ (crc >> 8);
  }
  return ~crc;
}

uint32_t MaskedCrc32c(absl::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// ------------------------------------------------------------- the file

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Open(const std::string& dir,
                                                                       int64_t resume_epoch,
                                                                       double wall_time) {
  TRAIND_RETURN_IF_ERROR(MakeDirs(dir));
  // The file TensorBoard reads is the last by name; any other would be
  // one it no longer reads, so that is the one continued.
  std::string name;
  std::error_code error;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, error)) {
    const std::string n = e.path().filename().string();
    if (absl::StartsWith(n, kEventFilePrefix) && e.is_regular_file(error) && n > name) name = n;
  }
  if (error) return absl::InternalError(absl::StrCat(dir, ": cannot list: ", error.message()));
  if (name.empty()) {
    name = absl::StrCat(kEventFilePrefix, static_cast<int64_t>(wall_time), ".", HostName());
  }
  const std::string path = absl::StrCat(dir, "/", name);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(path, "open");
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(path, fd));
  // Two writers of one file would interleave their records.
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) return ErrnoError(path, "lock (another writer has it)");

  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoError(path, "stat");
  std::string file(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < file.size()) {
    const ssize_t n = pread(fd, file.data() + got, file.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(path, "read");
    if (n == 0) break;  // shorter than it was: keep what was read
    got += static_cast<size_t>(n);
  }
  file.resize(got);
  const size_t kept = KeptPrefix(file, resume_epoch);
  if (ftruncate(fd, static_cast<off_t>(kept)) != 0) return ErrnoError(path, "truncate");
  if (lseek(fd, static_cast<off_t>(kept), SEEK_SET) < 0) return ErrnoError(path, "seek");
  if (kept == 0) {
    std::string record;
    AppendRecord(FileVersionEvent(wall_time), &record);
    TRAIND_RETURN_IF_ERROR(writer->Append(record));
  }
  return writer;
}

EventFileWriter::~EventFileWriter() { close(fd_); }

absl::Status EventFileWriter::Append(absl::string_view records) {
  while (!records.empty()) {
    const ssize_t n = write(fd_, records.data(), records.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoError(path_, "write");
    records.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status EventFileWriter::WriteScalars(int64_t step, double wall_time,
                                           absl::Span<const Scalar> scalars) {
  std::string records;
  for (const Scalar& s : scalars) AppendRecord(ScalarEvent(wall_time, step, s), &records);
  return Append(records);
}

// ------------------------------------------------------------ the callback

std::vector<Scalar> TensorBoardScalars::ScalarsOf(const EpochEnd& end) {
  std::vector<Scalar> scalars;
  // Protobuf maps have no order: by name, for a stable file.
  auto add = [&scalars](absl::string_view prefix,
                        const google::protobuf::Map<std::string, double>& values) {
    const size_t first = scalars.size();
    for (const auto& [name, value] : values) {
      scalars.push_back({absl::StrCat(prefix, name), static_cast<float>(value)});
    }
    std::sort(scalars.begin() + static_cast<std::ptrdiff_t>(first), scalars.end(),
              [](const Scalar& a, const Scalar& b) { return a.tag < b.tag; });
  };
  if (end.metrics != nullptr) {
    add("train/", end.metrics->train());
    add("val/", end.metrics->val());
  }
  scalars.push_back({"learning_rate", static_cast<float>(end.learning_rate)});
  return scalars;
}

absl::Status TensorBoardScalars::OnEpochEnd(const EpochEnd& end) {
  if (failed_) return absl::OkStatus();
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (writer_ == nullptr) {
    // The attempt's first epoch: what came before it was trained by an
    // earlier attempt whose checkpoint this one resumed from (or by nobody).
    absl::StatusOr<std::unique_ptr<EventFileWriter>> opened =
        EventFileWriter::Open(dir_, end.epoch - 1, now);
    if (!opened.ok()) {
      Fail(opened.status());
      return absl::OkStatus();
    }
    writer_ = *std::move(opened);
  }
  Fail(writer_->WriteScalars(end.epoch, now, ScalarsOf(end)));
  return absl::OkStatus();
}

// A warning, not a failed task: the scalars are a view of metrics the
// daemon already stores (and streams) per epoch, so a full disk or an
// unwritable directory should cost an operator the curves, not the
// training. The warning reaches the worker's log and the job's events once;
// writing then stops, so a broken file does not grow a tail of half
// records (and the next attempt drops whatever tail is torn).
void TensorBoardScalars::Fail(const absl::Status& s) {
  if (s.ok() || failed_) return;
  failed_ = true;
  writer_.reset();
  if (warn_) {
    warn_(absl::Status(s.code(), absl::StrCat("tensorboard: ", s.message(),
                                              "; no more scalars from this attempt")));
  }
}

}  // namespace traind::engine
