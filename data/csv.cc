#include "data/csv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <tuple>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/status.h"
#include "data/text.h"

namespace traind::data {
namespace {

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

// Three bytes to look for (and, where SSE2 is, each in every lane of a
// vector).
struct ByteSet {
  ByteSet(char a, char b, char c)
      : a(a),
        b(b),
        c(c)
#if defined(__SSE2__)
        ,
        va(_mm_set1_epi8(a)),
        vb(_mm_set1_epi8(b)),
        vc(_mm_set1_epi8(c))
#endif
  {
  }
  char a, b, c;
#if defined(__SSE2__)
  __m128i va, vb, vc;
#endif
};

// The offset from `p` of the first byte of [p, end) in `set` (end - p when
// there is none); sets `*high` when a byte before it is >= 0x80 (leaves it as
// it was otherwise).
inline size_t FindAny(const char* p, const char* end, const ByteSet& set, bool* high) {
  const size_t n = static_cast<size_t>(end - p);
  size_t i = 0;
  unsigned high_bits = 0;
#if defined(__SSE2__)
  for (; i + 16 <= n; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m128i hit =
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, set.va), _mm_cmpeq_epi8(v, set.vb)),
                     _mm_cmpeq_epi8(v, set.vc));
    const unsigned hits = static_cast<unsigned>(_mm_movemask_epi8(hit));
    const unsigned highs = static_cast<unsigned>(_mm_movemask_epi8(v));
    if (hits != 0) {
      const int k = __builtin_ctz(hits);
      if ((highs & ((1u << k) - 1)) != 0 || high_bits != 0) *high = true;
      return i + static_cast<size_t>(k);
    }
    high_bits |= highs;
  }
#endif
  for (; i < n; ++i) {
    const char x = p[i];
    if (x == set.a || x == set.b || x == set.c) break;
    high_bits |= static_cast<unsigned char>(x) & 0x80u;
  }
  if (high_bits != 0) *high = true;
  return i;
}

}  // namespace

// Splits text into records of fields: one state machine over a buffer that a
// file refills as it is consumed. Whenever a record's parse looks past the
// end of the buffer before the end of the file, the parse is thrown away, the
// buffer grows and the record is parsed again (so a record never has to fit
// a fixed window, and only the record being parsed is held).
class CsvReader::Parser {
 public:
  Parser(std::string path, char delimiter)
      : path_(std::move(path)), delimiter_(delimiter), field_ends_(delimiter, '\n', '\r') {}
  ~Parser() {
    if (fd_ >= 0) close(fd_);
  }

  // Opens `file`, which messages name path_ (the same, or a name shown in its
  // place).
  absl::Status OpenFile(const std::string& file) {
    absl::StatusOr<int> fd = OpenRegularFile(file);
    if (!fd.ok()) {
      if (file == path_) return fd.status();
      // OpenRegularFile's messages are "<file>: ...".
      return DataError(absl::StrCat(path_, absl::StripPrefix(fd.status().message(), file)));
    }
    fd_ = *fd;
    eof_ = false;
    return Fill(kReadBytes);
  }
  void SetText(std::string text) {
    text_ = std::move(text);
    size_ = text_.size();
    eof_ = true;
  }
  absl::Status SetSource(CsvByteSource source) {
    source_ = std::move(source);
    eof_ = false;
    return Fill(kReadBytes);
  }

  // The next non-blank record, false at the end of the text.
  // Field is std::string (the fields copied) or absl::string_view (views
  // into the buffer and quoted_, valid until the next call).
  template <typename Field>
  ABSL_ATTRIBUTE_ALWAYS_INLINE absl::StatusOr<bool> Next(std::vector<Field>* record,
                                                         int64_t* line) {
    if (!bom_checked_) {
      while (!eof_ && size_ < 3) TRAIND_RETURN_IF_ERROR(Fill(kReadBytes));
      if (size_ >= 3 && std::memcmp(text_.data(), "\xEF\xBB\xBF", 3) == 0) pos_ = 3;  // UTF-8 BOM
      bom_checked_ = true;
    }
    while (true) {
      if (pos_ >= size_) {
        if (eof_) return false;
        TRAIND_RETURN_IF_ERROR(Fill(kReadBytes));
        continue;
      }
      const size_t record_pos = pos_;
      const int64_t record_line = line_;
      hit_end_ = false;
      absl::Status parsed = ParseRecord(&pos_, record);
      if (hit_end_ && !eof_) {
        // The record may go on past the buffer: read more and parse it again.
        Drop(record_pos);
        pos_ = 0;
        line_ = record_line;
        if (size_ > kMaxRecordBytes) {
          return DataError(absl::StrFormat("%s:%d: a record longer than %d bytes", path_,
                                           record_line, kMaxRecordBytes));
        }
        TRAIND_RETURN_IF_ERROR(Fill(std::max(kReadBytes, size_)));
        continue;
      }
      TRAIND_RETURN_IF_ERROR(parsed);
      if (record->size() == 1 && (*record)[0].empty() && !last_field_quoted_) {
        continue;  // blank line
      }
      *line = record_line;
      return true;
    }
  }

  const std::string& path() const { return path_; }

 private:
  static constexpr size_t kReadBytes = kCsvReadBytes;
  static constexpr size_t kMaxRecordBytes = size_t{256} << 20;

  // Appends up to `bytes` more of the file to the buffer (consumed text is
  // dropped first); sets eof_ at the end of the file.
  absl::Status Fill(size_t bytes) {
    if (pos_ > 0) {
      Drop(pos_);
      pos_ = 0;
    }
    const size_t old = size_;
    if (text_.size() < old + bytes) text_.resize(old + bytes);
    size_t got = 0;
    while (got < bytes && source_) {
      absl::StatusOr<size_t> n = source_(text_.data() + old + got, bytes - got);
      if (!n.ok()) {
        size_ = old + got;
        return DataError(absl::StrCat(path_, ": cannot read: ", n.status().message()));
      }
      if (*n == 0) {
        eof_ = true;
        break;
      }
      got += *n;
    }
    while (got < bytes && !source_) {
      const ssize_t n = read(fd_, text_.data() + old + got, bytes - got);
      if (n > 0) {
        got += static_cast<size_t>(n);
      } else if (n == 0) {
        eof_ = true;
        break;
      } else if (errno != EINTR) {
        const int error = errno;
        size_ = old + got;
        return DataError(absl::StrCat(path_, ": cannot read: ", std::strerror(error)));
      }
    }
    size_ = old + got;
    if (eof_ && fd_ >= 0) {
      close(fd_);
      fd_ = -1;
    }
    return absl::OkStatus();
  }

  // Drops the first `n` bytes of the text.
  void Drop(size_t n) {
    std::memmove(text_.data(), text_.data() + n, size_ - n);
    size_ -= n;
  }

  // Whether `p` is past the buffer (noted: the record may need more).
  bool End(size_t p) {
    if (p < size_) return false;
    hit_end_ = true;
    return true;
  }

  // A field past kMaxCsvFieldBytes, found as soon as it passes the limit
  // (the rest of it is never read).
  ABSL_ATTRIBUTE_NOINLINE absl::Status TooLong(size_t column) const {
    return DataError(
        absl::StrFormat("%s:%d: column %d holds more than %d bytes; a field may hold at most %d",
                        path_, line_, column, kMaxCsvFieldBytes, kMaxCsvFieldBytes));
  }

  // The end of the unquoted field at `p`: the first delimiter, CR or LF at or
  // after it, or `size` (size_) when none comes before; sets `*high` when a
  // byte before that is >= 0x80.
  size_t ScanUnquoted(size_t p, size_t size, bool* high) const {
    const char* const text = text_.data();
    return p + FindAny(text + p, text + size, field_ends_, high);
  }

  // A field is UTF-8 (its record's line).
  ABSL_ATTRIBUTE_NOINLINE absl::Status CheckField(absl::string_view field, size_t column) const {
    const size_t bad = FirstInvalidUtf8(field);
    if (bad != absl::string_view::npos) {
      return DataError(absl::StrFormat(
          "%s:%d: column %d is not valid UTF-8 (byte 0x%02x at offset %d of the field); save "
          "the file as UTF-8",
          path_, line_, column, static_cast<unsigned char>(field[bad]), bad));
    }
    return absl::OkStatus();
  }

  // Sets `*field` to `bytes` (a string reused: no allocation while it fits).
  static void Assign(std::string* field, absl::string_view bytes) {
    field->assign(bytes.data(), bytes.size());
  }
  static void Assign(absl::string_view* field, absl::string_view bytes) { *field = bytes; }

  // Appends `bytes` to `record`; returns its data and size after.
  template <typename Field>
  ABSL_ATTRIBUTE_NOINLINE static std::pair<Field*, size_t> Append(std::vector<Field>* record,
                                                                  absl::string_view bytes) {
    record->emplace_back(bytes.data(), bytes.size());
    return {record->data(), record->size()};
  }

  // Parses one record starting at `*pos`, through its line ending, into the
  // first fields of `*record` (which is left holding exactly those). On an
  // error `*pos` is where the parse stopped.
  template <typename Field>
  absl::Status ParseRecord(size_t* pos, std::vector<Field>* record) {
    const char* const text = text_.data();
    const size_t size = size_;
    size_t p = *pos;
    // The fields set so far, over those of the record read before (kept
    // here, out of memory, while fields are copied).
    size_t fields = 0;
    Field* out = record->data();
    size_t have = record->size();
    const auto set = [&](absl::string_view bytes) {
      if (fields < have) {
        Assign(&out[fields], bytes);
      } else {
        std::tie(out, have) = Append(record, bytes);
      }
      ++fields;
    };
    bool quoted = false;  // the last field was quoted
    bool at_end = false;  // the parse looked at the end of the buffer
    absl::Status status;
    while (true) {
      if (p >= size || text[p] != '"') {
        quoted = false;
        bool high = false;  // the field holds a byte >= 0x80
        const size_t start = p;
        p = ScanUnquoted(p, size, &high);
        // Past the limit before the end of the buffer, whatever follows.
        if (p - start > kMaxCsvFieldBytes) {
          status = TooLong(fields + 1);
          break;
        }
        // Cut by the end of the buffer, the field may go on (and a character
        // cut in two is no error yet).
        if (p >= size) at_end = true;
        const absl::string_view field(text + start, p - start);
        if (high) {
          status = CheckField(field, fields + 1);
          if (!status.ok()) break;
        }
        set(field);
      } else {
        quoted = true;
        while (quoted_.size() <= fields) quoted_.emplace_back();
        std::string& unquoted = quoted_[fields];
        status = ParseQuoted(&p, fields + 1, &unquoted);
        if (!status.ok()) break;
        set(unquoted);
      }
      if (p >= size) {
        at_end = true;
        break;
      }
      const char c = text[p];
      if (c == delimiter_) {
        ++p;
        continue;
      }
      // A line ending (what ends a field but the delimiter).
      ++p;
      if (c == '\r') {
        if (p >= size) {
          at_end = true;
        } else if (text[p] == '\n') {
          ++p;
        }
      }
      ++line_;
      break;
    }
    *pos = p;
    last_field_quoted_ = quoted;
    if (at_end) hit_end_ = true;
    if (have != fields) record->resize(fields);
    return status;
  }

  // Parses the quoted field at `*pos` (its opening quote), column `column`,
  // into `*out` (unquoted), leaving `*pos` after its closing quote (or where
  // an error stopped it).
  ABSL_ATTRIBUTE_NOINLINE absl::Status ParseQuoted(size_t* pos, size_t column, std::string* out) {
    const char* const text = text_.data();
    const size_t size = size_;
    size_t& p = *pos;
    bool high = false;  // the field holds a byte >= 0x80
    const int64_t open_line = line_;
    static const ByteSet quoted_ends('"', '\n', '\r');
    std::string& field = *out;
    field.clear();
    ++p;
    while (true) {
      // A run of plain bytes, up to the byte that passes the limit.
      const size_t cap =
          field.size() <= kMaxCsvFieldBytes ? kMaxCsvFieldBytes + 1 - field.size() : size_t{1};
      const size_t run = FindAny(text + p, text + std::min(size, p + cap), quoted_ends, &high);
      if (run > 0) {
        field.append(text + p, run);
        p += run;
        if (field.size() > kMaxCsvFieldBytes) return TooLong(column);
      }
      if (End(p)) {
        return DataError(absl::StrFormat(
            "%s:%d: unterminated quoted field (the quote opened on line %d is never "
            "closed)",
            path_, open_line, open_line));
      }
      const char c = text[p];
      if (c == '"') {
        if (!End(p + 1) && text[p + 1] == '"') {
          field.push_back('"');
          p += 2;
          continue;
        }
        ++p;
        break;
      }
      // c is CR or LF.
      if (c == '\n' || !(!End(p + 1) && text[p + 1] == '\n')) ++line_;
      field.push_back(c);
      ++p;
      if (field.size() > kMaxCsvFieldBytes) return TooLong(column);
    }
    if (!End(p) && text[p] != delimiter_ && text[p] != '\n' && text[p] != '\r') {
      return DataError(
          absl::StrFormat("%s:%d: unexpected character '%c' after a closing quote (expected the "
                          "delimiter or the end of the line)",
                          path_, line_, text[p]));
    }
    if (high) TRAIND_RETURN_IF_ERROR(CheckField(field, column));
    return absl::OkStatus();
  }

  const std::string path_;  // the file as messages name it
  const char delimiter_;
  const ByteSet field_ends_;  // what ends an unquoted field
  int fd_ = -1;
  CsvByteSource source_;  // in place of fd_ when set
  bool eof_ = true;
  bool bom_checked_ = false;
  std::string text_;  // the text read, its first size_ bytes (the rest: room to read into)
  size_t size_ = 0;
  size_t pos_ = 0;
  int64_t line_ = 1;
  bool hit_end_ = false;
  bool last_field_quoted_ = false;
  // The record's quoted fields, unquoted, by field (a deque: a view of one
  // stays valid while more are added).
  std::deque<std::string> quoted_;
};

absl::StatusOr<int> OpenRegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return DataError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int error = errno;
    close(fd);
    return DataError(absl::StrCat(path, ": cannot open: ", std::strerror(error)));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return DataError(absl::StrCat(path, ": is ", FileKind(st.st_mode),
                                  ", not a regular file (data must be a regular file)"));
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

CsvReader::CsvReader(std::unique_ptr<Parser> parser) : parser_(std::move(parser)) {}
CsvReader::CsvReader(CsvReader&&) noexcept = default;
CsvReader& CsvReader::operator=(CsvReader&&) noexcept = default;
CsvReader::~CsvReader() = default;

const std::string& CsvReader::path() const { return parser_->path(); }

absl::StatusOr<CsvReader> CsvReader::Start(std::unique_ptr<Parser> parser) {
  CsvReader reader(std::move(parser));
  int64_t line = 0;
  TRAIND_ASSIGN_OR_RETURN(bool found, reader.parser_->Next(&reader.header_, &line));
  if (!found) {
    return DataError(absl::StrCat(reader.path(), ": the file is empty (no header row)"));
  }
  return reader;
}

absl::StatusOr<CsvReader> CsvReader::Open(const std::string& path, char delimiter,
                                          const std::string& shown_name) {
  auto parser = std::make_unique<Parser>(shown_name.empty() ? path : shown_name, delimiter);
  TRAIND_RETURN_IF_ERROR(parser->OpenFile(path));
  return Start(std::move(parser));
}

absl::StatusOr<CsvReader> CsvReader::FromSource(CsvByteSource source, const std::string& path,
                                                char delimiter) {
  auto parser = std::make_unique<Parser>(path, delimiter);
  TRAIND_RETURN_IF_ERROR(parser->SetSource(std::move(source)));
  return Start(std::move(parser));
}

absl::StatusOr<CsvReader> CsvReader::FromText(std::string text, const std::string& path,
                                              char delimiter) {
  auto parser = std::make_unique<Parser>(path, delimiter);
  parser->SetText(std::move(text));
  return Start(std::move(parser));
}

absl::Status CsvReader::RaggedRow(size_t fields, int64_t line) const {
  return DataError(absl::StrFormat("%s:%d: row has %d fields, the header has %d", path(), line,
                                   fields, header_.size()));
}

absl::StatusOr<bool> CsvReader::Next(std::vector<std::string>* row, int64_t* line) {
  TRAIND_ASSIGN_OR_RETURN(bool found, parser_->Next(row, line));
  if (found && row->size() != header_.size()) return RaggedRow(row->size(), *line);
  return found;
}

absl::StatusOr<bool> CsvReader::NextFields(std::vector<absl::string_view>* row, int64_t* line) {
  TRAIND_ASSIGN_OR_RETURN(bool found, parser_->Next(row, line));
  if (found && row->size() != header_.size()) return RaggedRow(row->size(), *line);
  return found;
}

namespace {

absl::StatusOr<CsvTable> ReadAll(CsvReader reader) {
  CsvTable table;
  table.path = reader.path();
  table.header = reader.header();
  const size_t columns = table.header.size();
  std::vector<std::string> row;
  row.reserve(columns);
  int64_t line = 0;
  while (true) {
    TRAIND_ASSIGN_OR_RETURN(bool found, reader.Next(&row, &line));
    if (!found) break;
    table.rows.push_back(std::move(row));
    row = {};
    row.reserve(columns);  // the row's fields, allocated once
    table.lines.push_back(line);
  }
  return table;
}

}  // namespace

absl::StatusOr<CsvTable> ParseCsv(const std::string& text, const std::string& path,
                                  char delimiter) {
  TRAIND_ASSIGN_OR_RETURN(CsvReader reader, CsvReader::FromText(text, path, delimiter));
  return ReadAll(std::move(reader));
}

absl::StatusOr<CsvTable> ReadCsv(const std::string& path, char delimiter) {
  TRAIND_ASSIGN_OR_RETURN(CsvReader reader, CsvReader::Open(path, delimiter));
  return ReadAll(std::move(reader));
}

}  // namespace traind::data
