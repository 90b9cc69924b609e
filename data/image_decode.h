// PNG and JPEG files decoded to 8-bit grayscale or RGB pixels, and resized,
// so that traind sees the bytes a PyTorch job reading the same files through
// Pillow would (torchvision's ImageFolder: Image.open(path).convert("RGB"),
// then transforms.Resize).
//
// Decoding: libpng (any bit depth, palette, alpha, Adam7) and libjpeg-turbo
// (grayscale, YCbCr, RGB, Adobe CMYK/YCCK, baseline or progressive). Like
// Pillow, traind applies no gamma (gAMA), color profile (iCCP) or EXIF
// orientation; 16-bit samples keep their high byte; alpha is dropped, not
// composited; CMYK becomes RGB with Pillow's formula. Grayscale is Pillow's
// convert("L"): L = (R·19595 + G·38470 + B·7471 + 0x8000) >> 16, i.e.
// R·299/1000 + G·587/1000 + B·114/1000 rounded. One difference: Pillow 9.4
// turns a 16-bit grayscale PNG white (its mode "I" clips to 255); traind
// keeps the high byte, as for 16-bit color.
//
// Thread-safety: pure functions; files may be decoded on many threads.
#ifndef TRAIND_DATA_IMAGE_DECODE_H_
#define TRAIND_DATA_IMAGE_DECODE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace traind::data {

struct Image {
  int height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // [height, width, channels], interleaved
};

// Decodes the PNG or JPEG file `path` (recognized by its magic bytes, not its
// name) to `channels` (1: grayscale, 3: RGB). An image of more than
// `max_pixels` pixels is refused from its header, before anything is
// decoded. Errors (DataError) name the file and the problem: cannot open,
// not a PNG or JPEG file, too many pixels (width×height), truncated PNG or
// JPEG data, corrupt PNG or JPEG data (with the library's message), a JPEG
// color space without an RGB conversion. `channels` other than 1 or 3 is
// an InvalidArgument error.
absl::StatusOr<Image> DecodeImageFile(const std::string& path, int channels,
                                      int64_t max_pixels = int64_t{1} << 26);

// `in` resized to height × width as Pillow's
// Image.resize((width, height), Image.BILINEAR) does: separable, the
// horizontal pass first, a triangle filter widened by the shrink factor
// (antialiased when shrinking), Pillow's 22-bit fixed-point coefficients
// and rounding. A pass whose size does not change is skipped; an image of
// the same size is returned as it is. An empty image, or a height or width
// below 1, gives an empty image.
Image ResizeBilinear(const Image& in, int height, int width);

}  // namespace traind::data

#endif  // TRAIND_DATA_IMAGE_DECODE_H_
