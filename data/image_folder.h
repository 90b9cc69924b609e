// A folder of images, one subfolder per class, read as torchvision's
// ImageFolder reads it:
//
//   root/cat/001.png
//   root/cat/more/002.jpg
//   root/dog/003.JPEG
//
// The classes are the subfolders of root (symlinks followed), sorted by
// bytes; a class's images are the files ending in .png, .jpg or .jpeg (any
// case) in its folder and the folders below it, in torchvision's order: the
// folders sorted by path, the files of each sorted by name. Other files are
// ignored, and so is every entry whose name starts with "." (.DS_Store,
// ._001.png, .git). A folder that is its own ancestor through a symlink is
// walked once.
//
// Thread-safety: pure functions (LoadImageFolder starts threads of its own).
#ifndef TRAIND_DATA_IMAGE_FOLDER_H_
#define TRAIND_DATA_IMAGE_FOLDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace traind::data {

struct ImageFolder {
  std::vector<std::string> classes;  // the class folders' names, sorted
  std::vector<std::string> files;    // relative to root: "<class>/<file>", in load order
  std::vector<int32_t> labels;       // [n] index into classes
  int channels = 0, height = 0, width = 0;
  std::vector<uint8_t> pixels;  // [n, channels, height, width] (planar, NCHW)
};

// The classes, files and labels of `root`, nothing decoded (channels,
// height, width 0, pixels empty). Errors (DataError): root is not a
// directory, it has no class folders, a class folder holds no image file
// (named), a class folder's name is not UTF-8, more than `max_images` image
// files, a folder that cannot be listed.
absl::StatusOr<ImageFolder> ListImageFolder(const std::string& root,
                                            int64_t max_images = int64_t{1} << 24);

// ListImageFolder, then every file decoded (DecodeImageFile) to `channels`
// (1 or 3). height × width (both ≥ 1) resizes every image to that size
// (ResizeBilinear, Pillow's BILINEAR); 0 × 0 keeps the images' own size,
// which must then be the first image's for all of them (else an error
// naming the file and both sizes). Any decoding error names the file; the
// first error in load order is the one returned, whatever `threads`.
// `threads` > 1 decodes that many files at a time; the result is the same.
absl::StatusOr<ImageFolder> LoadImageFolder(const std::string& root, int channels, int height,
                                            int width, int threads = 1,
                                            int64_t max_images = int64_t{1} << 24);

}  // namespace traind::data

#endif  // TRAIND_DATA_IMAGE_FOLDER_H_
