// csv_profile_bench: bytes per second of traind's CSV reading on one core.
//
//   build/bin/csv_profile_bench [--mb 256] [--dir /tmp] [--runs 3] [--only MEASURE] [--keep]
//
// Writes a CSV of about --mb megabytes (1 MB = 10^6 bytes) to a temporary
// file: a 1 MiB block of rows (two floats with 6 and 5 decimals, an integer
// up to 10^6, a category of 41 values "c0".."c40", a label of 3 values)
// repeated. Then measures, best of --runs, each of:
//   reader   CsvReader::Open and Next over every record (the reader alone)
//   profile  ProfileCsvFile (what a dataset upload computes)
//   readcsv  ReadCsv, the whole table in memory (how the engine loads data;
//            the table is freed outside the timed part)
// and prints MB/s per measure (by the wall clock, and by the thread's CPU
// time, which time slices given to other processes do not count in), the CPU
// model, and a checksum of the profile (equal checksums: the same profile,
// whatever the reader's speed).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/csv.h"
#include "data/profile.h"

namespace {

using traind::data::CsvReader;
using traind::data::CsvTable;

struct Options {
  double mb = 256;
  std::string dir;
  int runs = 3;
  std::string only;  // one measure, else all
  bool keep = false;
};

[[noreturn]] void Usage() {
  std::fprintf(stderr,
               "usage: csv_profile_bench [--mb 256] [--dir DIR] [--runs 3] "
               "[--only reader|profile|readcsv] [--keep]\n");
  std::exit(2);
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  const char* tmp = std::getenv("TMPDIR");
  o.dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage();
      return argv[++i];
    };
    if (arg == "--mb") {
      o.mb = std::atof(value().c_str());
    } else if (arg == "--dir") {
      o.dir = value();
    } else if (arg == "--runs") {
      o.runs = std::max(1, std::atoi(value().c_str()));
    } else if (arg == "--only") {
      o.only = value();
      if (o.only != "reader" && o.only != "profile" && o.only != "readcsv") Usage();
    } else if (arg == "--keep") {
      o.keep = true;
    } else {
      Usage();
    }
  }
  if (o.mb <= 0) Usage();
  return o;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

// 1 MiB of data rows, whole rows only (the rest of the MiB is not filled).
std::string Block() {
  static const char* const kLabels[] = {"setosa", "versicolor", "virginica"};
  std::mt19937_64 rng(20240611);
  std::string block;
  const size_t kBlock = size_t{1} << 20;
  while (true) {
    const double a = static_cast<double>(rng() % 200000000) / 1e6 - 100;  // 6 decimals
    const double b = static_cast<double>(rng() % 10000000) / 1e5;         // 5 decimals
    const std::string row = absl::StrFormat("%.6f,%.5f,%d,c%d,%s\n", a, b, rng() % 1000001,
                                            rng() % 41, kLabels[rng() % 3]);
    if (block.size() + row.size() > kBlock) break;
    block += row;
  }
  return block;
}

// Writes the file; returns its size in bytes (0 on failure).
size_t WriteFile(const std::string& path, double mb) {
  const std::string block = Block();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::string header = "x1,x2,count,category,label\n";
  out << header;
  size_t bytes = header.size();
  const double target = mb * 1e6;
  while (static_cast<double>(bytes) < target) {
    out.write(block.data(), static_cast<std::streamsize>(block.size()));
    bytes += block.size();
  }
  out.close();
  return out ? bytes : 0;
}

// FNV-1a of `bytes`.
uint64_t Checksum(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Seconds of this thread's CPU time.
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The best wall-clock and CPU seconds (each the least of its runs).
struct Timing {
  double wall = 0;
  double cpu = 0;
};

// Times `runs` runs of `body`, which returns false on failure; `after` runs
// after each, untimed. Zero when `name` is not measured.
Timing Best(
    const Options& o, const std::string& name, const std::function<bool()>& body,
    const std::function<void()>& after = [] {}) {
  Timing best;
  if (!o.only.empty() && o.only != name) return best;
  for (int r = 0; r < o.runs; ++r) {
    const double cpu_start = CpuSeconds();
    const auto start = std::chrono::steady_clock::now();
    if (!body()) std::exit(1);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu = CpuSeconds() - cpu_start;
    after();
    if (r == 0 || wall < best.wall) best.wall = wall;
    if (r == 0 || cpu < best.cpu) best.cpu = cpu;
  }
  return best;
}

void Print(const char* name, double mb, const Timing& t) {
  if (t.wall <= 0) return;
  std::printf("%-8s %10.3f %10.1f %10.3f %10.1f\n", name, t.wall, mb / t.wall, t.cpu,
              t.cpu > 0 ? mb / t.cpu : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = ParseArgs(argc, argv);
  std::string path = o.dir + "/csv_profile_bench.XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) {
    std::fprintf(stderr, "csv_profile_bench: cannot create a file in %s: %s\n", o.dir.c_str(),
                 std::strerror(errno));
    return 1;
  }
  close(fd);
  const size_t bytes = WriteFile(path, o.mb);
  if (bytes == 0) {
    std::fprintf(stderr, "csv_profile_bench: cannot write %s\n", path.c_str());
    unlink(path.c_str());
    return 1;
  }
  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf("cpu: %s\n", CpuModel().c_str());
  std::printf("file: %s, %.1f MB, best of %d runs\n", path.c_str(), mb, o.runs);

  int64_t records = 0;
  const Timing reader_s = Best(o, "reader", [&] {
    absl::StatusOr<CsvReader> reader = CsvReader::Open(path);
    if (!reader.ok()) {
      std::fprintf(stderr, "reader: %s\n", std::string(reader.status().message()).c_str());
      return false;
    }
    std::vector<std::string> row;
    int64_t line = 0;
    records = 0;
    while (true) {
      absl::StatusOr<bool> found = reader->Next(&row, &line);
      if (!found.ok()) {
        std::fprintf(stderr, "reader: %s\n", std::string(found.status().message()).c_str());
        return false;
      }
      if (!*found) break;
      ++records;
    }
    return true;
  });

  uint64_t profile_sum = 0;
  const Timing profile_s = Best(o, "profile", [&] {
    absl::StatusOr<traind::v1::DatasetProfile> profile =
        traind::data::ProfileCsvFile(path, "bench.csv");
    if (!profile.ok()) {
      std::fprintf(stderr, "profile: %s\n", std::string(profile.status().message()).c_str());
      return false;
    }
    profile_sum = Checksum(profile->SerializeAsString());
    return true;
  });

  size_t table_rows = 0;
  absl::StatusOr<CsvTable> table;
  const Timing readcsv_s = Best(
      o, "readcsv",
      [&] {
        table = traind::data::ReadCsv(path);
        if (!table.ok()) {
          std::fprintf(stderr, "readcsv: %s\n", std::string(table.status().message()).c_str());
          return false;
        }
        table_rows = table->rows.size();
        return true;
      },
      [&] { table = CsvTable(); });

  std::printf("records: %lld (ReadCsv rows: %zu), profile checksum: %016llx\n",
              static_cast<long long>(records), table_rows,
              static_cast<unsigned long long>(profile_sum));
  std::printf("%-8s %10s %10s %10s %10s\n", "measure", "seconds", "MB/s", "cpu s", "MB/cpu s");
  Print("reader", mb, reader_s);
  Print("profile", mb, profile_s);
  Print("readcsv", mb, readcsv_s);
  if (o.keep) {
    std::printf("kept %s\n", path.c_str());
  } else {
    unlink(path.c_str());
  }
  return 0;
}
