// DatasetUpload's file: staged, direct writes in pieces of any size, the tail
// through the page cache, what an abandoned upload leaves and its resume at
// an offset that is not a whole block.
#include "server/datasets/dataset_files.h"

#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/auth.h"
#include "tests/testing/temp_dir.h"

namespace traind::server {
namespace {

using traind::testing::TempDir;

std::string Bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

// Appends `bytes` in pieces of the given sizes, cycling through them.
void AppendInPieces(DatasetUpload* up, const std::string& bytes, size_t from,
                    const std::vector<size_t>& pieces) {
  size_t at = from;
  for (size_t i = 0; at < bytes.size(); ++i) {
    const size_t n = std::min(pieces[i % pieces.size()], bytes.size() - at);
    ASSERT_TRUE(up->Append(absl::string_view(bytes).substr(at, n)).ok());
    at += n;
    ASSERT_EQ(up->received(), static_cast<int64_t>(at));
  }
}

class DatasetFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<DatasetFiles> files = DatasetFiles::Open(dir_.path());
    ASSERT_TRUE(files.ok()) << files.status();
    files_.emplace(*std::move(files));
  }
  TempDir dir_;
  std::optional<DatasetFiles> files_;
};

// Pieces of every size around the block and the staging buffer; more than
// kFlushEvery bytes, so the flusher runs too. The object is the bytes.
TEST_F(DatasetFilesTest, PiecesOfAnySizeMakeTheFileByteForByte) {
  const std::string bytes = Bytes((37u << 20) + 1234, 1);
  const std::string sha = Sha256Hex(bytes);
  auto up = files_->StartUpload("alice", sha, static_cast<int64_t>(bytes.size()), 0);
  ASSERT_TRUE(up.ok()) << up.status();
  AppendInPieces(up->get(), bytes, 0, {1, 4095, 4097, 1 << 20, 3, (5u << 20) + 7, 4096});
  ASSERT_TRUE((*up)->Verify().ok());
  absl::StatusOr<std::string> path = (*up)->Commit();
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, files_->ObjectPath(sha));
  EXPECT_TRUE(ReadFile(*path) == bytes);
  EXPECT_EQ(files_->PartialBytes("alice", sha), 0);
}

// A file shorter than one block: written whole through the page cache.
TEST_F(DatasetFilesTest, AFileSmallerThanABlock) {
  const std::string bytes = "a,b\n1,2\n";
  const std::string sha = Sha256Hex(bytes);
  auto up = files_->StartUpload("alice", sha, static_cast<int64_t>(bytes.size()), 0);
  ASSERT_TRUE(up.ok()) << up.status();
  ASSERT_TRUE((*up)->Append(bytes).ok());
  ASSERT_TRUE((*up)->Verify().ok());
  absl::StatusOr<std::string> path = (*up)->Commit();
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(ReadFile(*path), bytes);
}

// Abandoned mid-way (staged bytes not yet written), the .part file holds
// every byte received; resumed at that offset (not a whole block) and
// finished, the object is the bytes. Then once more, abandoned twice.
TEST_F(DatasetFilesTest, AnAbandonedUploadKeepsEveryByteAndResumesAtAnyOffset) {
  const std::string bytes = Bytes((9u << 20) + 333, 2);
  const std::string sha = Sha256Hex(bytes);
  const int64_t size = static_cast<int64_t>(bytes.size());
  const size_t first = (5u << 20) + 4097;  // 1 MiB + 4097 still staged
  const size_t second = (7u << 20) + 11;
  {
    auto up = files_->StartUpload("bob", sha, size, 0);
    ASSERT_TRUE(up.ok());
    AppendInPieces(up->get(), bytes.substr(0, first), 0, {1 << 20, 4097});
  }  // abandoned
  ASSERT_EQ(files_->PartialBytes("bob", sha), static_cast<int64_t>(first));
  {
    // Resuming anywhere else is refused, naming what is held.
    auto wrong = files_->StartUpload("bob", sha, size, 4096);
    ASSERT_FALSE(wrong.ok());
    EXPECT_NE(wrong.status().message().find(std::to_string(first)), std::string::npos)
        << wrong.status();
  }
  {
    auto up = files_->StartUpload("bob", sha, size, static_cast<int64_t>(first));
    ASSERT_TRUE(up.ok()) << up.status();
    EXPECT_EQ((*up)->received(), static_cast<int64_t>(first));
    AppendInPieces(up->get(), bytes.substr(0, second), first, {12345});
  }  // abandoned again
  ASSERT_EQ(files_->PartialBytes("bob", sha), static_cast<int64_t>(second));
  auto up = files_->StartUpload("bob", sha, size, static_cast<int64_t>(second));
  ASSERT_TRUE(up.ok()) << up.status();
  AppendInPieces(up->get(), bytes, second, {1 << 20});
  ASSERT_TRUE((*up)->Verify().ok());
  absl::StatusOr<std::string> path = (*up)->Commit();
  ASSERT_TRUE(path.ok());
  EXPECT_TRUE(ReadFile(*path) == bytes);
}

// Verify before the last byte names what arrived; bytes that are not the
// declared ones are refused and their .part file removed.
TEST_F(DatasetFilesTest, ShortOrWrongBytesAreRefused) {
  const std::string bytes = Bytes(100000, 3);
  const std::string sha = Sha256Hex(bytes);
  const int64_t size = static_cast<int64_t>(bytes.size());
  {
    auto up = files_->StartUpload("carol", sha, size, 0);
    ASSERT_TRUE(up.ok());
    ASSERT_TRUE((*up)->Append(bytes.substr(0, 99999)).ok());
    absl::Status s = (*up)->Verify();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("after 99999 of its 100000 bytes"), std::string::npos) << s;
    // One byte too many.
    s = (*up)->Append("xy");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("more bytes than the declared size"), std::string::npos) << s;
  }
  EXPECT_EQ(files_->PartialBytes("carol", sha), 99999);
  auto up = files_->StartUpload("carol", sha, size, 99999);
  ASSERT_TRUE(up.ok());
  // The held bytes are the right ones; the last differs from the file's.
  ASSERT_TRUE((*up)->Append(std::string(1, static_cast<char>(bytes[99999] ^ 1))).ok());
  absl::Status s = (*up)->Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("nothing was stored"), std::string::npos) << s;
  EXPECT_EQ(files_->PartialBytes("carol", sha), 0);
  EXPECT_FALSE(files_->Has(sha));
}

}  // namespace
}  // namespace traind::server
