// IDX files written here byte by byte, plain and gzipped: read back with
// their dimensions and values; every malformed file refused naming it.
#include "data/idx.h"

#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "base/status.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace traind::data {
namespace {

using traind::testing::TempDir;

// The magic and the dimensions, big-endian.
std::string Header(uint8_t type, const std::vector<uint32_t>& dims) {
  std::string h = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (const uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) h.push_back(static_cast<char>(d >> shift));
  }
  return h;
}

std::string WritePlain(const TempDir& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir.Path(name), std::ios::binary) << bytes;
  return dir.Path(name);
}

std::string WriteGzip(const TempDir& dir, const std::string& name, const std::string& bytes) {
  gzFile f = gzopen(dir.Path(name).c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
  return dir.Path(name);
}

std::string MessageOf(const std::string& path) {
  absl::StatusOr<IdxArray> a = ReadIdx(path);
  EXPECT_FALSE(a.ok());
  EXPECT_EQ(FailureKindOf(a.status()), FailureKind::kDataError) << a.status();
  return std::string(a.status().message());
}

// Three 2×3 "images" of bytes, as the MNIST image files are laid out; the
// same bytes gzipped read the same.
TEST(IdxTest, UnsignedBytesPlainAndGzipped) {
  TempDir dir;
  std::string file = Header(0x08, {3, 2, 3});
  for (int i = 0; i < 18; ++i) file.push_back(static_cast<char>(i * 14));  // up to 238
  for (const std::string& path :
       {WritePlain(dir, "images-idx3-ubyte", file), WriteGzip(dir, "images-idx3-ubyte.gz", file)}) {
    absl::StatusOr<IdxArray> a = ReadIdx(path);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->type, 0x08);
    EXPECT_EQ(a->dims, (std::vector<int64_t>{3, 2, 3}));
    EXPECT_EQ(a->elements(), 18);
    ASSERT_EQ(a->bytes.size(), 18u);
    EXPECT_TRUE(a->values.empty());
    EXPECT_EQ(a->bytes[0], 0);
    EXPECT_EQ(a->bytes[17], 238);
  }
}

// Every other type, big-endian, as floats: labels as int32, a float32 and a
// float64 array, signed bytes and int16 with negative values.
TEST(IdxTest, OtherTypesAreBigEndianAndReadAsFloats) {
  TempDir dir;
  std::string i32 = Header(0x0C, {2});
  i32 += std::string("\x00\x00\x01\x02", 4) + std::string("\xff\xff\xff\xfe", 4);  // 258, -2
  absl::StatusOr<IdxArray> a = ReadIdx(WritePlain(dir, "i32", i32));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->values, (std::vector<float>{258.0f, -2.0f}));

  std::string f32 = Header(0x0D, {1});
  f32 += std::string("\x3f\xc0\x00\x00", 4);  // 1.5
  a = ReadIdx(WriteGzip(dir, "f32.gz", f32));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->values, (std::vector<float>{1.5f}));

  std::string f64 = Header(0x0E, {1});
  f64 += std::string("\xc0\x04\x00\x00\x00\x00\x00\x00", 8);  // -2.5
  a = ReadIdx(WritePlain(dir, "f64", f64));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->values, (std::vector<float>{-2.5f}));

  std::string small = Header(0x09, {2}) + std::string("\x80\x7f", 2);  // -128, 127
  a = ReadIdx(WritePlain(dir, "i8", small));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->values, (std::vector<float>{-128.0f, 127.0f}));
  std::string i16 = Header(0x0B, {1}) + std::string("\xfe\x0c", 2);  // -500
  a = ReadIdx(WritePlain(dir, "i16", i16));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->values, (std::vector<float>{-500.0f}));
}

TEST(IdxTest, MalformedFilesAreRefusedNamingTheFileAndTheProblem) {
  TempDir dir;
  std::string p = WritePlain(dir, "a.csv", "x,y\n1,2\n");
  EXPECT_EQ(MessageOf(p), p + ": not an IDX file (it starts 0x78 0x2c 0x79 0x0a, an IDX file "
                              "with 0x00 0x00, the element type and the number of dimensions)");
  p = WritePlain(dir, "empty", "");
  EXPECT_EQ(MessageOf(p), p + ": not an IDX file (it starts empty, an IDX file with 0x00 0x00, "
                              "the element type and the number of dimensions)");
  p = WritePlain(dir, "type", Header(0x07, {1}) + "x");
  EXPECT_EQ(MessageOf(p).substr(0, p.size() + 33), p + ": unknown IDX element type 0x07 (");
  p = WritePlain(dir, "short-header", Header(0x08, {3, 28, 28}).substr(0, 9));
  EXPECT_EQ(MessageOf(p), p + ": the IDX header ends after 9 of its 16 bytes");
  p = WriteGzip(dir, "short.gz", Header(0x08, {60000, 28, 28}) + std::string(1000, '\0'));
  EXPECT_EQ(MessageOf(p), p + ": the IDX header declares 60000×28×28 elements (47040000 bytes), "
                              "but the file ends after 1000 of them");
  p = WritePlain(dir, "long", Header(0x08, {2}) + "abc");
  EXPECT_EQ(MessageOf(p), p + ": bytes follow the 2 elements its IDX header declares (a "
                              "truncated header or another file?)");
  p = WritePlain(dir, "zero", Header(0x08, {4, 0}));
  EXPECT_EQ(MessageOf(p), p + ": dimension 1 of the IDX header is 0");
  p = WritePlain(dir, "huge", Header(0x08, {65536, 65536}));
  EXPECT_EQ(MessageOf(p), p + ": the IDX header declares 65536×65536 elements, more than the "
                              "2147483648 read at most");
  // A gzip stream cut short.
  const std::string gz = dir.Path("cut.gz");
  WriteGzip(dir, "whole.gz", Header(0x08, {4096}) + std::string(4096, 'z'));
  std::ifstream whole(dir.Path("whole.gz"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(whole)), std::istreambuf_iterator<char>());
  WritePlain(dir, "cut.gz", bytes.substr(0, bytes.size() / 2));
  absl::StatusOr<IdxArray> cut = ReadIdx(gz);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().message().substr(0, gz.size() + 1), gz + ":") << cut.status();
  p = dir.Path("missing");
  EXPECT_EQ(MessageOf(p), p + ": cannot open: No such file or directory");
}

}  // namespace
}  // namespace traind::data
