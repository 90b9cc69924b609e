#include "worker/engine/data/csv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/engine/data/text.h"
#include "worker/engine/status.h"

namespace traind::engine {
namespace {

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  TRAIND_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path));
  std::string text;
  struct stat st {};
  if (fstat(fd, &st) == 0 && st.st_size > 0) text.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      text.append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int error = errno;
      close(fd);
      return DataError(absl::StrCat(path, ": cannot read: ", std::strerror(error)));
    }
  }
  close(fd);
  return text;
}

// Splits `text` into records of fields. One pass, one state machine.
class CsvParser {
 public:
  CsvParser(const std::string& text, const std::string& path, char delimiter)
      : text_(text), path_(path), delimiter_(delimiter) {}

  absl::StatusOr<CsvTable> Parse() && {
    CsvTable table;
    table.path = path_;
    size_t pos = 0;
    if (text_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos = 3;  // UTF-8 BOM
    bool have_header = false;
    std::vector<std::string> record;
    while (pos < text_.size()) {
      const int64_t record_line = line_;
      record.clear();
      TRAIND_RETURN_IF_ERROR(ParseRecord(&pos, &record));
      if (record.size() == 1 && record[0].empty() && !last_field_quoted_) {
        continue;  // blank line
      }
      if (!have_header) {
        table.header = std::move(record);
        record = {};
        have_header = true;
        continue;
      }
      if (record.size() != table.header.size()) {
        return DataError(absl::StrFormat("%s:%d: row has %d fields, the header has %d", path_,
                                         record_line, record.size(), table.header.size()));
      }
      table.rows.push_back(std::move(record));
      record = {};
      table.lines.push_back(record_line);
    }
    if (!have_header) {
      return DataError(absl::StrCat(path_, ": the file is empty (no header row)"));
    }
    return table;
  }

 private:
  // Consumes a line ending at `*pos` if there is one.
  bool ConsumeLineEnd(size_t* pos) {
    if (text_[*pos] == '\n') {
      ++*pos;
    } else if (text_[*pos] == '\r') {
      ++*pos;
      if (*pos < text_.size() && text_[*pos] == '\n') ++*pos;
    } else {
      return false;
    }
    ++line_;
    return true;
  }

  // A field is UTF-8 and at most kMaxCsvFieldBytes (its record's line).
  absl::Status CheckField(const std::string& field, size_t column) const {
    if (field.size() > kMaxCsvFieldBytes) {
      return DataError(
          absl::StrFormat("%s:%d: column %d holds %d bytes; a field may hold at most %d", path_,
                          line_, column, field.size(), kMaxCsvFieldBytes));
    }
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
      if (*pos < text_.size() && text_[*pos] == '"') {
        last_field_quoted_ = true;
        const int64_t open_line = line_;
        ++*pos;
        while (true) {
          if (*pos >= text_.size()) {
            return DataError(absl::StrFormat(
                "%s:%d: unterminated quoted field (the quote opened on line %d is never "
                "closed)",
                path_, open_line, open_line));
          }
          const char c = text_[*pos];
          if (c == '"') {
            if (*pos + 1 < text_.size() && text_[*pos + 1] == '"') {
              field.push_back('"');
              *pos += 2;
              continue;
            }
            ++*pos;
            break;
          }
          if (c == '\n' || (c == '\r' && !(*pos + 1 < text_.size() && text_[*pos + 1] == '\n'))) {
            ++line_;
          }
          field.push_back(c);
          ++*pos;
        }
        if (*pos < text_.size() && text_[*pos] != delimiter_ && text_[*pos] != '\n' &&
            text_[*pos] != '\r') {
          return DataError(absl::StrFormat(
              "%s:%d: unexpected character '%c' after a closing quote (expected the "
              "delimiter or the end of the line)",
              path_, line_, text_[*pos]));
        }
      } else {
        const size_t start = *pos;
        while (*pos < text_.size() && text_[*pos] != delimiter_ && text_[*pos] != '\n' &&
               text_[*pos] != '\r') {
          ++*pos;
        }
        field.assign(text_, start, *pos - start);
      }
      TRAIND_RETURN_IF_ERROR(CheckField(field, record->size() + 1));
      record->push_back(field);
      if (*pos >= text_.size()) return absl::OkStatus();
      if (text_[*pos] == delimiter_) {
        ++*pos;
        continue;
      }
      ConsumeLineEnd(pos);
      return absl::OkStatus();
    }
  }

  const std::string& text_;
  const std::string& path_;
  const char delimiter_;
  int64_t line_ = 1;
  bool last_field_quoted_ = false;
};

}  // namespace

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

absl::StatusOr<CsvTable> ParseCsv(const std::string& text, const std::string& path,
                                  char delimiter) {
  return CsvParser(text, path, delimiter).Parse();
}

absl::StatusOr<CsvTable> ReadCsv(const std::string& path, char delimiter) {
  TRAIND_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseCsv(text, path, delimiter);
}

}  // namespace traind::engine
