#include "data/csv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

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

}  // namespace

// Splits text into records of fields: one state machine over a buffer that a
// file refills as it is consumed. Whenever a record's parse looks past the
// end of the buffer before the end of the file, the parse is thrown away, the
// buffer grows and the record is parsed again (so a record never has to fit
// a fixed window, and only the record being parsed is held).
class CsvReader::Parser {
 public:
  Parser(std::string path, char delimiter) : path_(std::move(path)), delimiter_(delimiter) {}
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
    eof_ = true;
  }
  absl::Status SetSource(CsvByteSource source) {
    source_ = std::move(source);
    eof_ = false;
    return Fill(kReadBytes);
  }

  // The next non-blank record, false at the end of the text.
  absl::StatusOr<bool> Next(std::vector<std::string>* record, int64_t* line) {
    if (!bom_checked_) {
      while (!eof_ && text_.size() < 3) TRAIND_RETURN_IF_ERROR(Fill(kReadBytes));
      if (text_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;  // UTF-8 BOM
      bom_checked_ = true;
    }
    while (true) {
      if (pos_ >= text_.size()) {
        if (eof_) return false;
        TRAIND_RETURN_IF_ERROR(Fill(kReadBytes));
        continue;
      }
      const size_t record_pos = pos_;
      const int64_t record_line = line_;
      record->clear();
      hit_end_ = false;
      absl::Status parsed = ParseRecord(&pos_, record);
      if (hit_end_ && !eof_) {
        // The record may go on past the buffer: read more and parse it again.
        text_.erase(0, record_pos);
        pos_ = 0;
        line_ = record_line;
        if (text_.size() > kMaxRecordBytes) {
          return DataError(absl::StrFormat("%s:%d: a record longer than %d bytes", path_,
                                           record_line, kMaxRecordBytes));
        }
        TRAIND_RETURN_IF_ERROR(Fill(std::max(kReadBytes, text_.size())));
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
      text_.erase(0, pos_);
      pos_ = 0;
    }
    const size_t old = text_.size();
    text_.resize(old + bytes);
    size_t got = 0;
    while (got < bytes && source_) {
      absl::StatusOr<size_t> n = source_(text_.data() + old + got, bytes - got);
      if (!n.ok()) {
        text_.resize(old + got);
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
        text_.resize(old + got);
        return DataError(absl::StrCat(path_, ": cannot read: ", std::strerror(error)));
      }
    }
    text_.resize(old + got);
    if (eof_ && fd_ >= 0) {
      close(fd_);
      fd_ = -1;
    }
    return absl::OkStatus();
  }

  // Whether `p` is past the buffer (noted: the record may need more).
  bool End(size_t p) {
    if (p < text_.size()) return false;
    hit_end_ = true;
    return true;
  }

  // Consumes a line ending at `*pos` if there is one.
  void ConsumeLineEnd(size_t* pos) {
    if (text_[*pos] == '\n') {
      ++*pos;
    } else if (text_[*pos] == '\r') {
      ++*pos;
      if (!End(*pos) && text_[*pos] == '\n') ++*pos;
    } else {
      return;
    }
    ++line_;
  }

  // A field past kMaxCsvFieldBytes, found as soon as it passes the limit
  // (the rest of it is never read).
  absl::Status TooLong(size_t column) const {
    return DataError(
        absl::StrFormat("%s:%d: column %d holds more than %d bytes; a field may hold at most %d",
                        path_, line_, column, kMaxCsvFieldBytes, kMaxCsvFieldBytes));
  }

  // A field is UTF-8 (its record's line).
  absl::Status CheckField(const std::string& field, size_t column) const {
    const size_t bad = FirstInvalidUtf8(field);
    if (bad != absl::string_view::npos) {
      return DataError(absl::StrFormat(
          "%s:%d: column %d is not valid UTF-8 (byte 0x%02x at offset %d of the field); save "
          "the file as UTF-8",
          path_, line_, column, static_cast<unsigned char>(field[bad]), bad));
    }
    return absl::OkStatus();
  }

  // Parses one record starting at `*pos`, through its line ending.
  absl::Status ParseRecord(size_t* pos, std::vector<std::string>* record) {
    std::string field;
    while (true) {
      field.clear();
      last_field_quoted_ = false;
      const size_t column = record->size() + 1;
      if (!End(*pos) && text_[*pos] == '"') {
        last_field_quoted_ = true;
        const int64_t open_line = line_;
        ++*pos;
        while (true) {
          if (End(*pos)) {
            return DataError(absl::StrFormat(
                "%s:%d: unterminated quoted field (the quote opened on line %d is never "
                "closed)",
                path_, open_line, open_line));
          }
          const char c = text_[*pos];
          if (c == '"') {
            if (!End(*pos + 1) && text_[*pos + 1] == '"') {
              field.push_back('"');
              *pos += 2;
              continue;
            }
            ++*pos;
            break;
          }
          if (c == '\n' || (c == '\r' && !(!End(*pos + 1) && text_[*pos + 1] == '\n'))) {
            ++line_;
          }
          field.push_back(c);
          ++*pos;
          if (field.size() > kMaxCsvFieldBytes) return TooLong(column);
        }
        if (!End(*pos) && text_[*pos] != delimiter_ && text_[*pos] != '\n' && text_[*pos] != '\r') {
          return DataError(absl::StrFormat(
              "%s:%d: unexpected character '%c' after a closing quote (expected the "
              "delimiter or the end of the line)",
              path_, line_, text_[*pos]));
        }
      } else {
        const size_t start = *pos;
        while (!End(*pos) && text_[*pos] != delimiter_ && text_[*pos] != '\n' &&
               text_[*pos] != '\r') {
          ++*pos;
          if (*pos - start > kMaxCsvFieldBytes) return TooLong(column);
        }
        field.assign(text_, start, *pos - start);
      }
      TRAIND_RETURN_IF_ERROR(CheckField(field, column));
      record->push_back(field);
      if (End(*pos)) return absl::OkStatus();
      if (text_[*pos] == delimiter_) {
        ++*pos;
        continue;
      }
      ConsumeLineEnd(pos);
      return absl::OkStatus();
    }
  }

  const std::string path_;  // the file as messages name it
  const char delimiter_;
  int fd_ = -1;
  CsvByteSource source_;  // in place of fd_ when set
  bool eof_ = true;
  bool bom_checked_ = false;
  std::string text_;
  size_t pos_ = 0;
  int64_t line_ = 1;
  bool hit_end_ = false;
  bool last_field_quoted_ = false;
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

absl::StatusOr<bool> CsvReader::Next(std::vector<std::string>* row, int64_t* line) {
  TRAIND_ASSIGN_OR_RETURN(bool found, parser_->Next(row, line));
  if (found && row->size() != header_.size()) {
    return DataError(absl::StrFormat("%s:%d: row has %d fields, the header has %d", path(), *line,
                                     row->size(), header_.size()));
  }
  return found;
}

namespace {

absl::StatusOr<CsvTable> ReadAll(CsvReader reader) {
  CsvTable table;
  table.path = reader.path();
  table.header = reader.header();
  std::vector<std::string> row;
  int64_t line = 0;
  while (true) {
    TRAIND_ASSIGN_OR_RETURN(bool found, reader.Next(&row, &line));
    if (!found) break;
    table.rows.push_back(std::move(row));
    row = {};
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
