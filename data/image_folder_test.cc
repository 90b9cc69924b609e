// Image folders built here from the fixtures of data/testdata/images: the
// classes, files and labels in torchvision's order, the pixels planar and
// equal to each file decoded on its own, and every malformed folder refused
// naming what is wrong.
#include "data/image_folder.h"

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/status.h"
#include "data/image_decode.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace traind::data {
namespace {

namespace fs = std::filesystem;
using traind::testing::TempDir;

std::string Fixture(const std::string& name) {
  return std::string(TRAIND_SOURCE_DIR) + "/data/testdata/images/" + name;
}

// Copies the fixture `name` to root/relative, making the folders.
void Put(const std::string& root, const std::string& relative, const std::string& name) {
  const fs::path to = fs::path(root) / relative;
  fs::create_directories(to.parent_path());
  fs::copy_file(Fixture(name), to, fs::copy_options::overwrite_existing);
}

void Text(const std::string& root, const std::string& relative, const std::string& text) {
  const fs::path to = fs::path(root) / relative;
  fs::create_directories(to.parent_path());
  std::ofstream(to, std::ios::binary) << text;
}

// A PNG of width × height gray pixels, all 77 (large ones take a while).
std::string GrayPng(uint32_t width, uint32_t height) {
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  auto chunk = [&](const std::string& type, const std::string& data) {
    const std::string body = type + data;
    return be32(static_cast<uint32_t>(data.size())) + body +
           be32(static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()),
                                            static_cast<uInt>(body.size()))));
  };
  std::string rows;
  for (uint32_t y = 0; y < height; ++y) rows += '\0' + std::string(width, 77);
  std::string packed(compressBound(rows.size()), '\0');
  uLongf size = packed.size();
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(packed.data()), &size,
                      reinterpret_cast<const Bytef*>(rows.data()), rows.size(), 1),
            Z_OK);
  packed.resize(size);
  return "\x89PNG\r\n\x1a\n" +
         chunk("IHDR", be32(width) + be32(height) + std::string("\x08\0\0\0\0", 5)) +
         chunk("IDAT", packed) + chunk("IEND", "");
}

// A folder that is not an image folder at all (missing, a file, no class
// folders) is the spec's error; a problem inside one is the data's.
std::string MessageOf(const absl::StatusOr<ImageFolder>& folder) {
  EXPECT_FALSE(folder.ok());
  const std::string m(folder.status().message());
  const bool not_a_folder =
      absl::StrContains(m, ": not a directory (") || absl::StrContains(m, ": no class folders (");
  EXPECT_EQ(FailureKindOf(folder.status()),
            not_a_folder ? FailureKind::kInvalidSpec : FailureKind::kDataError)
      << folder.status();
  return std::string(folder.status().message());
}

// Every image of `folder` is the file decoded (and resized) on its own,
// channel c of pixel (y, x) at [i, c, y, x].
void ExpectPlanarPixels(const std::string& root, const ImageFolder& folder, bool resize) {
  const size_t plane = static_cast<size_t>(folder.height) * folder.width;
  ASSERT_EQ(folder.pixels.size(), folder.files.size() * folder.channels * plane);
  for (size_t i = 0; i < folder.files.size(); ++i) {
    absl::StatusOr<Image> image = DecodeImageFile(root + "/" + folder.files[i], folder.channels);
    ASSERT_TRUE(image.ok()) << image.status();
    const Image expected =
        resize ? ResizeBilinear(*image, folder.height, folder.width) : std::move(*image);
    ASSERT_EQ(expected.height, folder.height);
    ASSERT_EQ(expected.width, folder.width);
    for (int c = 0; c < folder.channels; ++c) {
      for (int y = 0; y < folder.height; ++y) {
        for (int x = 0; x < folder.width; ++x) {
          const size_t at = ((i * folder.channels + c) * folder.height + y) * folder.width + x;
          ASSERT_EQ(
              folder.pixels[at],
              expected.pixels[(static_cast<size_t>(y) * folder.width + x) * folder.channels + c])
              << folder.files[i] << " c " << c << " y " << y << " x " << x;
        }
      }
    }
  }
}

// Classes sorted by bytes ("Apple" before "cat"), files sorted by bytes
// within each folder ("B.png" before "a.png"), a class's subfolders after
// its own files, other and hidden entries ignored.
TEST(ImageFolderTest, ClassesFilesAndLabelsInTorchvisionOrder) {
  TempDir dir;
  const std::string root = dir.path();
  Put(root, "zebra/c.png", "rgb.png");
  Put(root, "cat/y.png", "interlaced.png");
  Put(root, "cat/sub/z.png", "rgb.png");
  Put(root, "cat/sub-2/w.png", "interlaced.png");
  Put(root, "cat/sub/deeper/v.png", "interlaced.png");
  Put(root, "Apple/a.png", "interlaced.png");
  Put(root, "Apple/B.PNG", "rgb.png");
  Text(root, "Apple/notes.txt", "not an image");
  Text(root, "Apple/.hidden.png", "not an image either: never read");
  Text(root, "zebra/picture.bmp", "BM");
  Text(root, ".cache/x/y.png", "a hidden class");
  Text(root, "readme.png", "a file, not a class folder");
  absl::StatusOr<ImageFolder> folder = LoadImageFolder(root, 3, 0, 0);
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(folder->classes, (std::vector<std::string>{"Apple", "cat", "zebra"}));
  // sorted(os.walk("cat")): "cat", "cat/sub", "cat/sub-2", "cat/sub/deeper" ('-' < '/').
  EXPECT_EQ(folder->files,
            (std::vector<std::string>{"Apple/B.PNG", "Apple/a.png", "cat/y.png", "cat/sub/z.png",
                                      "cat/sub-2/w.png", "cat/sub/deeper/v.png", "zebra/c.png"}));
  EXPECT_EQ(folder->labels, (std::vector<int32_t>{0, 0, 1, 1, 1, 1, 2}));
  EXPECT_EQ(folder->channels, 3);
  EXPECT_EQ(folder->height, 7);
  EXPECT_EQ(folder->width, 11);
  ExpectPlanarPixels(root, *folder, false);

  absl::StatusOr<ImageFolder> listed = ListImageFolder(root + "/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->classes, folder->classes);
  EXPECT_EQ(listed->files, folder->files);
  EXPECT_EQ(listed->labels, folder->labels);
  EXPECT_TRUE(listed->pixels.empty());
}

// Images of several sizes, kinds and modes: refused as they are, loaded
// resized to one size, in RGB and in grayscale.
TEST(ImageFolderTest, MixedSizesAreRefusedUnlessASizeIsGiven) {
  TempDir dir;
  const std::string root = dir.path();
  Put(root, "a/1.png", "rgb.png");            // 11×7
  Put(root, "a/2.jpg", "rgb.jpg");            // 13×9
  Put(root, "b/3.png", "palette.png");        // 8×6
  Put(root, "b/4.jpeg", "progressive.jpeg");  // 9×7
  Put(root, "c/5.png", "gray16.png");         // 4×3
  absl::StatusOr<ImageFolder> folder = LoadImageFolder(root, 3, 0, 0);
  EXPECT_EQ(MessageOf(folder), root +
                                   "/a/2.jpg: an image of 13×9 pixels (width×height), but the "
                                   "first image, " +
                                   root +
                                   "/a/1.png, is 11×7: the images of a folder must have one size "
                                   "(set data.image_size to resize them all)");
  for (const int channels : {3, 1}) {
    folder = LoadImageFolder(root, channels, 6, 5);
    ASSERT_TRUE(folder.ok()) << folder.status();
    EXPECT_EQ(folder->files.size(), 5u);
    EXPECT_EQ(folder->height, 6);
    EXPECT_EQ(folder->width, 5);
    EXPECT_EQ(folder->channels, channels);
    ExpectPlanarPixels(root, *folder, true);
  }
  EXPECT_EQ(LoadImageFolder(root, 3, 6, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LoadImageFolder(root, 4, 6, 5).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ImageFolderTest, MalformedFoldersAreRefusedNamingTheProblem) {
  TempDir dir;
  const std::string root = dir.path();
  EXPECT_EQ(MessageOf(LoadImageFolder(root + "/missing", 3, 0, 0)),
            root +
                "/missing: not a directory (an image folder is a directory with one subfolder "
                "of images per class)");
  Text(root, "file.png", "x");
  EXPECT_TRUE(absl::StartsWith(MessageOf(ListImageFolder(root + "/file.png")),
                               root + "/file.png: not a directory"));
  Text(root, ".hidden/x.png", "x");
  EXPECT_EQ(MessageOf(LoadImageFolder(root, 3, 0, 0)),
            root +
                ": no class folders (an image folder holds one subfolder of images per "
                "class: root/<class>/<image>)");
  Put(root, "cat/1.png", "rgb.png");
  Text(root, "dog/notes.txt", "no image here");
  Text(root, "dog/.2.png", "hidden");
  EXPECT_EQ(MessageOf(LoadImageFolder(root, 3, 0, 0)),
            root +
                "/dog: the class folder holds no image file (.png, .jpg or .jpeg; names "
                "starting with \".\" are ignored)");
  Put(root, "dog/2.png", "rgb.png");
  ASSERT_TRUE(LoadImageFolder(root, 3, 0, 0).ok());
  EXPECT_EQ(MessageOf(LoadImageFolder(root, 3, 0, 0, 1, 1)),
            root + ": more than 1 image files, the most loaded");
  ASSERT_TRUE(LoadImageFolder(root, 3, 0, 0, 1, 2).ok());
  // A decoding error names the file.
  Text(root, "dog/3.jpg", "not a jpeg");
  EXPECT_TRUE(absl::StartsWith(MessageOf(LoadImageFolder(root, 3, 0, 0)),
                               root + "/dog/3.jpg: not a PNG or JPEG file"));
  Put(root, "cat/0.png", "la.png");
  EXPECT_TRUE(absl::StrContains(MessageOf(LoadImageFolder(root, 3, 0, 0)),
                                root + "/cat/1.png: an image of 11×7 pixels"));
}

// Symlinked class folders and files are followed; a link back to an
// ancestor is walked once.
TEST(ImageFolderTest, SymlinksAreFollowed) {
  TempDir dir;
  const std::string root = dir.Path("root");
  Put(dir.path(), "elsewhere/1.png", "rgb.png");
  Put(root, "cat/2.png", "interlaced.png");
  fs::create_directory_symlink(dir.Path("elsewhere"), root + "/dog");
  fs::create_symlink(Fixture("rgb.png"), root + "/cat/3.png");
  fs::create_directory_symlink(root + "/cat", root + "/cat/loop");
  absl::StatusOr<ImageFolder> folder = LoadImageFolder(root, 1, 0, 0);
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(folder->classes, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(folder->files, (std::vector<std::string>{"cat/2.png", "cat/3.png", "dog/1.png"}));
  ExpectPlanarPixels(root, *folder, false);
}

// Three threads give what one gives: the same pixels, and for a folder with
// two bad files the same (first) error.
TEST(ImageFolderTest, ThreadsGiveTheSameResultAsOne) {
  TempDir dir;
  const std::string root = dir.path();
  const std::vector<std::string> fixtures = {"rgb.png",  "rgb.jpg", "gray.png",        "rgba.png",
                                             "cmyk.jpg", "la.png",  "progressive.jpeg"};
  for (int i = 0; i < 14; ++i) {
    Put(root, "class" + std::to_string(i % 3) + "/" + std::to_string(i) + ".png",
        fixtures[i % fixtures.size()]);
  }
  absl::StatusOr<ImageFolder> one = LoadImageFolder(root, 3, 8, 10, 1);
  absl::StatusOr<ImageFolder> three = LoadImageFolder(root, 3, 8, 10, 3);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_EQ(one->files.size(), 14u);
  EXPECT_EQ(three->files, one->files);
  EXPECT_EQ(three->labels, one->labels);
  EXPECT_EQ(three->pixels, one->pixels);
  ExpectPlanarPixels(root, *three, true);

  // The second file fails slowly (a large image of another size), the third
  // at once: the second's error is the first in load order, so it wins.
  TempDir other;
  Put(other.path(), "a/0.png", "rgb.png");
  Text(other.path(), "a/1.png", GrayPng(2000, 2000));
  Text(other.path(), "a/2.png", "bad");
  for (int i = 3; i < 12; ++i) Put(other.path(), "a/" + std::to_string(i) + ".png", "rgb.png");
  const std::string first = MessageOf(LoadImageFolder(other.path(), 3, 0, 0, 1));
  EXPECT_TRUE(absl::StartsWith(first, other.path() + "/a/1.png: an image of 2000×2000 pixels"))
      << first;
  for (int run = 0; run < 3; ++run) {
    EXPECT_EQ(MessageOf(LoadImageFolder(other.path(), 3, 0, 0, 3)), first);
  }
}

}  // namespace
}  // namespace traind::data
