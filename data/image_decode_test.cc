// The fixtures of data/testdata/images decoded and resized, against what
// Pillow made of them (expected.txt, written by make_fixtures.py); malformed
// files written here byte by byte, each refused naming it and the problem.
#include "data/image_decode.h"

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "base/status.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace traind::data {
namespace {

using traind::testing::TempDir;

std::string Fixture(const std::string& name) {
  return std::string(TRAIND_SOURCE_DIR) + "/data/testdata/images/" + name;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// One line of expected.txt.
struct Expected {
  std::string kind, file;
  int channels = 0, height = 0, width = 0;
  std::vector<uint8_t> pixels;  // HWC
};

std::vector<Expected> ReadExpected(const std::string& kind) {
  std::ifstream in(Fixture("expected.txt"));
  std::vector<Expected> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    Expected e;
    std::string hex;
    fields >> e.kind >> e.file >> e.channels >> e.height >> e.width >> hex;
    if (e.kind != kind) continue;
    const std::string bytes = absl::HexStringToBytes(hex);
    e.pixels.assign(bytes.begin(), bytes.end());
    EXPECT_EQ(e.pixels.size(), static_cast<size_t>(e.channels) * e.height * e.width) << line;
    out.push_back(std::move(e));
  }
  return out;
}

// The largest difference between two images of the same size; adds the
// values that differ to *differing.
int MaxDifference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                  size_t* differing = nullptr) {
  EXPECT_EQ(a.size(), b.size());
  int most = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    most = std::max(most, std::abs(a[i] - b[i]));
    if (differing != nullptr && a[i] != b[i]) ++*differing;
  }
  return most;
}

// PNG: every color type (RGB, gray, palette with tRNS, RGBA, gray+alpha),
// 16-bit with a gAMA chunk, 2-bit gray, Adam7: Pillow's bytes exactly in
// RGB, its convert("L") within 1.
TEST(ImageDecodeTest, PngIsDecodedAsPillowDecodesIt) {
  int checked = 0;
  size_t differing = 0, total = 0;
  for (const Expected& e : ReadExpected("decode")) {
    if (!absl::EndsWith(e.file, ".png")) continue;
    SCOPED_TRACE(e.file + " channels " + std::to_string(e.channels));
    absl::StatusOr<Image> image = DecodeImageFile(Fixture(e.file), e.channels);
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->height, e.height);
    EXPECT_EQ(image->width, e.width);
    EXPECT_EQ(image->channels, e.channels);
    if (e.channels == 3) {
      EXPECT_EQ(image->pixels, e.pixels);
    } else {
      EXPECT_LE(MaxDifference(image->pixels, e.pixels, &differing), 1);
      total += e.pixels.size();
    }
    ++checked;
  }
  EXPECT_EQ(checked, 18);  // 9 files × 2 channel counts
  // Off by one now and then, not as a rule (a truncating conversion would be).
  EXPECT_LE(differing * 100, total) << differing << " of " << total;
}

// JPEG: 4:2:0 color, gray, progressive, Adobe CMYK; Pillow decodes with the
// same libjpeg-turbo, so within 1 (in practice equal).
TEST(ImageDecodeTest, JpegIsDecodedAsPillowDecodesItWithinOne) {
  int checked = 0;
  size_t differing = 0, total = 0;
  for (const Expected& e : ReadExpected("decode")) {
    if (absl::EndsWith(e.file, ".png")) continue;
    SCOPED_TRACE(e.file + " channels " + std::to_string(e.channels));
    absl::StatusOr<Image> image = DecodeImageFile(Fixture(e.file), e.channels);
    ASSERT_TRUE(image.ok()) << image.status();
    EXPECT_EQ(image->height, e.height);
    EXPECT_EQ(image->width, e.width);
    EXPECT_LE(MaxDifference(image->pixels, e.pixels, &differing), 1);
    total += e.pixels.size();
    ++checked;
  }
  EXPECT_EQ(checked, 8);
  EXPECT_LE(differing * 100, total) << differing << " of " << total;
}

// Grayscale is Pillow's convert("L") of the RGB pixels:
// R·299/1000 + G·587/1000 + B·114/1000, rounded.
TEST(ImageDecodeTest, GrayscaleIsTheLumaOfTheRgbPixels) {
  for (const char* name : {"rgb.png", "rgba.png", "palette.png", "rgb.jpg", "cmyk.jpg"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<Image> rgb = DecodeImageFile(Fixture(name), 3);
    absl::StatusOr<Image> gray = DecodeImageFile(Fixture(name), 1);
    ASSERT_TRUE(rgb.ok() && gray.ok());
    ASSERT_EQ(gray->pixels.size() * 3, rgb->pixels.size());
    for (size_t i = 0; i < gray->pixels.size(); ++i) {
      const uint8_t* p = &rgb->pixels[3 * i];
      const double luma = p[0] * 0.299 + p[1] * 0.587 + p[2] * 0.114;
      EXPECT_NEAR(gray->pixels[i], luma, 1.0) << i;
    }
  }
  // A gray file in RGB: the gray value three times.
  absl::StatusOr<Image> gray = DecodeImageFile(Fixture("gray.png"), 1);
  absl::StatusOr<Image> rgb = DecodeImageFile(Fixture("gray.png"), 3);
  ASSERT_TRUE(gray.ok() && rgb.ok());
  for (size_t i = 0; i < gray->pixels.size(); ++i) {
    EXPECT_EQ(rgb->pixels[3 * i], gray->pixels[i]);
    EXPECT_EQ(rgb->pixels[3 * i + 1], gray->pixels[i]);
    EXPECT_EQ(rgb->pixels[3 * i + 2], gray->pixels[i]);
  }
}

// Pillow's Image.resize(size, BILINEAR): down by up to 4.8×, up, one axis
// only, non-integer ratios, to 1×1; RGB and gray.
TEST(ImageDecodeTest, ResizeIsPillowBilinearWithinOne) {
  int checked = 0;
  size_t differing = 0, total = 0;
  for (const Expected& e : ReadExpected("resize")) {
    SCOPED_TRACE(e.file + " to " + std::to_string(e.height) + "×" + std::to_string(e.width));
    absl::StatusOr<Image> image = DecodeImageFile(Fixture(e.file), e.channels);
    ASSERT_TRUE(image.ok()) << image.status();
    const Image resized = ResizeBilinear(*image, e.height, e.width);
    EXPECT_EQ(resized.height, e.height);
    EXPECT_EQ(resized.width, e.width);
    EXPECT_EQ(resized.channels, e.channels);
    EXPECT_LE(MaxDifference(resized.pixels, e.pixels, &differing), 1);
    total += e.pixels.size();
    ++checked;
  }
  EXPECT_EQ(checked, 14);
  // Within one, and rounded as Pillow rounds: a sum truncated instead of
  // rounded would be off by one for many values.
  EXPECT_LE(differing * 100, total) << differing << " of " << total;
}

TEST(ImageDecodeTest, ResizeKeepsSizeAndConstants) {
  absl::StatusOr<Image> image = DecodeImageFile(Fixture("rgb.png"), 3);
  ASSERT_TRUE(image.ok());
  const Image same = ResizeBilinear(*image, image->height, image->width);
  EXPECT_EQ(same.pixels, image->pixels);
  EXPECT_TRUE(ResizeBilinear(*image, 0, 4).pixels.empty());
  EXPECT_TRUE(ResizeBilinear(Image{}, 4, 4).pixels.empty());
  // Weights that sum to one: a flat image stays flat, up or down.
  Image flat{5, 6, 3, std::vector<uint8_t>(5 * 6 * 3, 0)};
  for (size_t i = 0; i < flat.pixels.size(); ++i) flat.pixels[i] = i % 3 == 0 ? 255 : 17 * (i % 3);
  for (const auto& [h, w] : std::vector<std::pair<int, int>>{{1, 1}, {2, 9}, {13, 4}, {40, 41}}) {
    const Image out = ResizeBilinear(flat, h, w);
    ASSERT_EQ(out.pixels.size(), static_cast<size_t>(h) * w * 3);
    for (size_t i = 0; i < out.pixels.size(); ++i) {
      ASSERT_EQ(out.pixels[i], i % 3 == 0 ? 255 : 17 * (i % 3)) << h << "×" << w << " " << i;
    }
  }
}

std::string Chunk(const std::string& type, const std::string& data) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  const std::string body = type + data;
  return be32(static_cast<uint32_t>(data.size())) + body +
         be32(static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()),
                                          static_cast<uInt>(body.size()))));
}

std::string MessageOf(const std::string& path, int64_t max_pixels = int64_t{1} << 26) {
  absl::StatusOr<Image> image = DecodeImageFile(path, 3, max_pixels);
  EXPECT_FALSE(image.ok());
  EXPECT_EQ(FailureKindOf(image.status()), FailureKind::kDataError) << image.status();
  return std::string(image.status().message());
}

TEST(ImageDecodeTest, MalformedFilesAreRefusedNamingTheFileAndTheProblem) {
  TempDir dir;
  const std::string png = ReadBytes(Fixture("rgb.png"));
  const std::string jpeg = ReadBytes(Fixture("rgb.jpg"));
  ASSERT_GT(png.size(), 100u);
  ASSERT_GT(jpeg.size(), 100u);

  std::string p = dir.Write("cut.png", png.substr(0, png.size() / 2));
  EXPECT_EQ(MessageOf(p), p + ": truncated PNG (the file ends after " +
                              std::to_string(png.size() / 2) + " bytes)");
  // The IDAT chunk's data (zlib's complaint), then its CRC.
  const size_t idat = png.find("IDAT");
  const size_t idat_size = static_cast<uint8_t>(png[idat - 2]) * 256u +
                           static_cast<uint8_t>(png[idat - 1]);  // under 64 KiB
  std::string bad = png;
  bad[idat + 6] ^= 0x55;
  p = dir.Write("zlib.png", bad);
  std::string m = MessageOf(p);
  EXPECT_TRUE(absl::StartsWith(m, p + ": corrupt PNG data: IDAT: ")) << m;
  bad = png;
  bad[idat + 4 + idat_size] ^= 0x55;
  p = dir.Write("crc.png", bad);
  EXPECT_EQ(MessageOf(p), p + ": corrupt PNG data: IDAT: CRC error");

  p = dir.Write("garbage.jpg", "\xff\xd8\xff" + std::string(200, 'g'));
  m = MessageOf(p);
  EXPECT_TRUE(absl::StartsWith(m, p + ": corrupt JPEG data: ")) << m;
  EXPECT_GT(m.size(), p.size() + 22) << m;                    // libjpeg's words follow
  p = dir.Write("cut.jpg", jpeg.substr(0, jpeg.size() - 2));  // no end marker
  EXPECT_EQ(MessageOf(p), p + ": truncated JPEG data (the file ends after " +
                              std::to_string(jpeg.size() - 2) + " bytes)");
  p = dir.Write("half.jpg", jpeg.substr(0, jpeg.size() / 2));
  EXPECT_TRUE(absl::StrContains(MessageOf(p), p + ": truncated JPEG data")) << MessageOf(p);

  p = dir.Write("notes.png", "width,height\n3,4\n");
  EXPECT_EQ(MessageOf(p), p + ": not a PNG or JPEG file (it starts 0x77 0x69 0x64 0x74; a PNG "
                              "starts 0x89 0x50 0x4e 0x47, a JPEG 0xff 0xd8 0xff)");
  p = dir.Write("empty.jpg", "");
  EXPECT_TRUE(absl::StartsWith(MessageOf(p), p + ": not a PNG or JPEG file (it starts empty;"));

  // A header that claims 100000×100000 pixels over a few bytes of data is
  // refused from its header: the data (not zlib) is never read.
  std::string ihdr = {0,
                      1,
                      static_cast<char>(0x86),
                      static_cast<char>(0xa0),  // 100000
                      0,
                      1,
                      static_cast<char>(0x86),
                      static_cast<char>(0xa0),  // 100000
                      8,
                      2,
                      0,
                      0,
                      0};
  p = dir.Write("bomb.png", png.substr(0, 8) + Chunk("IHDR", ihdr) + Chunk("IDAT", "not zlib") +
                                Chunk("IEND", ""));
  EXPECT_EQ(MessageOf(p), p + ": an image of 100000×100000 pixels (width×height), more than the "
                              "67108864 decoded at most (a decompression bomb?)");
  // Width first: 13×9 is the JPEG's width × height.
  p = Fixture("rgb.jpg");
  EXPECT_EQ(MessageOf(p, 100), p + ": an image of 13×9 pixels (width×height), more than the 100 "
                                   "decoded at most (a decompression bomb?)");
  ASSERT_TRUE(DecodeImageFile(p, 3, 13 * 9).ok());

  p = dir.Path("missing.png");
  EXPECT_EQ(MessageOf(p), p + ": cannot open: No such file or directory");
  EXPECT_EQ(MessageOf(dir.path()), dir.path() + ": cannot read: Is a directory");
  absl::StatusOr<Image> two = DecodeImageFile(Fixture("rgb.png"), 2);
  EXPECT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::data
