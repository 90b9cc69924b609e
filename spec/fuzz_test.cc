// Fuzz tests of what reads untrusted text: the spec loader (YAML/JSON and
// --set overrides), the CSV reader, and submit's validation of a spec
// against its data file. Inputs are random bytes and mutations of valid
// files (the examples), from a fixed seed, for a bounded time (a few
// seconds each; TRAIND_FUZZ_SECONDS sets it, TRAIND_FUZZ_SEED the seed;
// TRAIND_FUZZ_DUMP=FILE keeps the spec text being parsed, to reproduce a
// hang or crash).
// Every input must end in success or in an error that names its source —
// no crash, no hang, no empty message — and memory must stay bounded.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "data/csv.h"
#include "data/dataset.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "spec/validation.h"

namespace traind::spec {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double Seconds() {
  const char* s = std::getenv("TRAIND_FUZZ_SECONDS");
  return s != nullptr ? std::atof(s) : 3.0;
}

uint64_t Seed() {
  const char* s = std::getenv("TRAIND_FUZZ_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : 20261203;
}

// Resident memory of this process, in bytes.
int64_t Rss() {
  std::ifstream in("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Pieces that break parsers: quoting, delimiters, line ends, YAML anchors,
// aliases and merge keys, flow collections, numbers at and past the limits
// of a double, invalid UTF-8, NUL.
const std::vector<std::string>& Tokens() {
  static const std::vector<std::string> t = {"\"",
                                             "\"\"",
                                             ",",
                                             ";",
                                             "\n",
                                             "\r\n",
                                             "\r",
                                             "\t",
                                             " ",
                                             "",
                                             "\xff",
                                             "\xc3\x28",
                                             std::string(1, '\0'),
                                             "\xef\xbb\xbf",
                                             "1e999",
                                             "-1e999",
                                             "1e-400",
                                             "nan",
                                             "inf",
                                             "-0",
                                             "1.7976931348623157e308",
                                             "9223372036854775808",
                                             "0x1p3",
                                             "&a",
                                             "*a",
                                             "<<: *a",
                                             "{",
                                             "}",
                                             "[",
                                             "]",
                                             ": ",
                                             "- ",
                                             "#",
                                             "!!binary",
                                             "!!python/object",
                                             "%YAML 1.2\n",
                                             "---\n",
                                             "...\n",
                                             "'",
                                             "\\",
                                             "{units: 4}",
                                             "[1, 2, [3]]",
                                             "model.layers[999999999]",
                                             "training.epochs",
                                             "null",
                                             "~",
                                             "true",
                                             "\xf0\x9f\x98\x80",
                                             std::string(70000, 'x'),
                                             std::string(300, '['),
                                             std::string(300, '{'),
                                             std::string(300, '-')};
  return t;
}

// One mutation of `text`: flips, insertions of a token, deletions, copies
// of a range, truncation; or (1 in 16) random bytes.
std::string Mutate(const std::string& text, std::mt19937_64& rng) {
  auto pick = [&rng](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  if (pick(16) == 0) {
    std::string out(pick(4096), '\0');
    for (char& c : out) c = static_cast<char>(rng());
    return out;
  }
  std::string out = text;
  const int edits = 1 + static_cast<int>(pick(8));
  for (int i = 0; i < edits; ++i) {
    const size_t at = pick(out.size() + 1);
    switch (pick(6)) {
      case 0:
        if (!out.empty()) out[pick(out.size())] ^= static_cast<char>(1 << pick(8));
        break;
      case 1:
      case 2:
        out.insert(at, Tokens()[pick(Tokens().size())]);
        break;
      case 3:
        out.erase(at, pick(64));
        break;
      case 4: {
        const size_t from = pick(out.size() + 1);
        const std::string piece = out.substr(from, pick(256));
        out.insert(at, piece);
        break;
      }
      default:
        out.resize(at);
        break;
    }
    if (out.size() > (1 << 20)) out.resize(1 << 20);
  }
  return out;
}

class Deadline {
 public:
  explicit Deadline(double seconds)
      : end_(std::chrono::steady_clock::now() +
             std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                 std::chrono::duration<double>(seconds))) {}
  bool Passed() const { return std::chrono::steady_clock::now() >= end_; }

 private:
  std::chrono::steady_clock::time_point end_;
};

std::vector<std::string> ExampleSpecs() {
  std::vector<std::string> out;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(TRAIND_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() == ".yaml" || e.path().extension() == ".json")
      out.push_back(Read(e.path()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(FuzzTest, SpecLoaderAndOverridesNameTheSourceOrSucceed) {
  const std::vector<std::string> seeds = ExampleSpecs();
  ASSERT_GE(seeds.size(), 5u);
  std::mt19937_64 rng(Seed());
  const int64_t rss_before = Rss();
  Deadline deadline(Seconds());
  int runs = 0, parsed = 0;
  while (!deadline.Passed() || runs < 200) {
    const std::string text = Mutate(seeds[runs % seeds.size()], rng);
    if (const char* dump = std::getenv("TRAIND_FUZZ_DUMP")) {
      std::ofstream(dump, std::ios::binary | std::ios::trunc) << text;
    }
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, "fuzz.yaml");
    ++runs;
    if (!spec.ok()) {
      ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
      ASSERT_TRUE(absl::StartsWith(spec.status().message(), "fuzz.yaml")) << spec.status();
      continue;
    }
    ++parsed;
    // Overrides on what parsed: a named error or a change.
    const std::string path = Mutate("model.layers[0].dense.units", rng);
    const std::string value = Mutate("[1, {units: 4}]", rng);
    absl::Status s = SetJobSpecField(&*spec, path.substr(0, 200), value.substr(0, 2000));
    if (!s.ok()) {
      ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      ASSERT_FALSE(s.message().empty());
    }
  }
  EXPECT_GT(parsed, 0) << "no mutation parsed: the mutations are too coarse to test anything";
  EXPECT_LT(Rss() - rss_before, int64_t{256} << 20) << "memory grew by more than 256 MiB";
  std::printf("spec loader: %d inputs, %d parsed (seed %llu)\n", runs, parsed,
              static_cast<unsigned long long>(Seed()));
}

TEST(FuzzTest, CsvReaderNamesTheFileAndLineOrGivesConsistentRows) {
  const std::string iris = Read(std::string(TRAIND_SOURCE_DIR) + "/examples/data/iris.csv");
  ASSERT_FALSE(iris.empty());
  std::mt19937_64 rng(Seed() + 1);
  const int64_t rss_before = Rss();
  Deadline deadline(Seconds());
  int runs = 0, parsed = 0;
  while (!deadline.Passed() || runs < 200) {
    const std::string text = Mutate(iris, rng);
    const char delimiter = runs % 5 == 0 ? ';' : ',';
    absl::StatusOr<data::CsvTable> table = data::ParseCsv(text, "fuzz.csv", delimiter);
    ++runs;
    if (!table.ok()) {
      ASSERT_TRUE(absl::StartsWith(table.status().message(), "fuzz.csv")) << table.status();
      continue;
    }
    ++parsed;
    ASSERT_EQ(table->rows.size(), table->lines.size());
    int64_t last_line = 0;
    for (size_t r = 0; r < table->rows.size(); ++r) {
      ASSERT_EQ(table->rows[r].size(), table->header.size()) << "row " << r;
      ASSERT_GT(table->lines[r], last_line) << "lines ascend";
      last_line = table->lines[r];
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_LT(Rss() - rss_before, int64_t{256} << 20) << "memory grew by more than 256 MiB";
  std::printf("csv reader: %d inputs, %d parsed\n", runs, parsed);
}

// What submit does with a data file: the spec validated against it (the
// header, the label's classes, every value the features need).
TEST(FuzzTest, ValidationAgainstMutatedDataNamesTheFileOrSucceeds) {
  const std::string src = TRAIND_SOURCE_DIR;
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(src + "/examples/iris-cv.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  char dir[] = "/tmp/traind-fuzz-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string data = std::string(dir) + "/data.csv";
  spec->mutable_data()->set_path(data);
  const std::string iris = Read(src + "/examples/data/iris.csv");
  std::mt19937_64 rng(Seed() + 2);
  const int64_t rss_before = Rss();
  Deadline deadline(Seconds());
  int runs = 0, valid = 0;
  while (!deadline.Passed() || runs < 100) {
    {
      std::ofstream out(data, std::ios::binary | std::ios::trunc);
      out << Mutate(iris, rng);
    }
    absl::Status s = spec::ValidateJobSpec(*spec, spec::ValidationContext());
    ++runs;
    // Submit's one pass (SummarizeDataset) agrees with what the worker loads.
    absl::StatusOr<data::Dataset> loaded = data::LoadDataset(*spec);
    absl::StatusOr<data::DatasetSummary> summary = data::SummarizeDataset(*spec);
    if (loaded.ok()) {
      ASSERT_TRUE(summary.ok()) << summary.status();
      ASSERT_EQ(summary->rows, loaded->rows);
      ASSERT_EQ(summary->columns, loaded->columns);
      ASSERT_EQ(summary->features, loaded->features);
      ASSERT_EQ(summary->ModelOutputs(), loaded->ModelOutputs());
    } else if (traind::FailureKindOf(loaded.status()) == traind::FailureKind::kInvalidSpec) {
      ASSERT_FALSE(summary.ok() && summary->classes_known) << loaded.status();
    }
    if (s.ok()) {
      ++valid;
      continue;
    }
    ASSERT_FALSE(s.message().empty());
    // Problems of the data name the file (the label, the rows, a value).
    if (absl::StartsWith(s.message(), "data.path") || absl::StrContains(s.message(), "data.csv")) {
      continue;
    }
    ASSERT_TRUE(absl::StartsWith(s.message(), "data.") ||
                absl::StartsWith(s.message(), "cross_validation.") ||
                absl::StartsWith(s.message(), "model."))
        << "an error without a field path or the file: " << s;
  }
  std::filesystem::remove_all(dir);
  EXPECT_GT(valid, 0);
  EXPECT_LT(Rss() - rss_before, int64_t{256} << 20) << "memory grew by more than 256 MiB";
  std::printf("validation: %d data files, %d valid\n", runs, valid);
}

}  // namespace
}  // namespace traind::spec
