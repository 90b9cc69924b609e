#include "data/image_decode.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "data/text.h"

namespace traind::data {
namespace {

// The file's path for a message: as it is when it is UTF-8, else quoted.
std::string Named(const std::string& path) {
  return FirstInvalidUtf8(path) == std::string::npos ? path : QuoteForMessage(path);
}

// Pillow's convert("L") of one RGB pixel.
inline uint8_t Luma(const uint8_t* rgb) {
  return static_cast<uint8_t>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
}

// `raw` ([n, from] interleaved: 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA) as
// `to` (1 or 3) channels: gray replicated, alpha dropped, RGB to luma.
std::vector<uint8_t> Convert(std::vector<uint8_t> raw, size_t n, int from, int to) {
  if (from == to) return raw;
  std::vector<uint8_t> out(n * static_cast<size_t>(to));
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = &raw[i * from];
    uint8_t* q = &out[i * to];
    if (from <= 2) {
      for (int c = 0; c < to; ++c) q[c] = p[0];
    } else if (to == 1) {
      q[0] = Luma(p);
    } else {
      q[0] = p[0], q[1] = p[1], q[2] = p[2];
    }
  }
  return out;
}

absl::Status TooLarge(const std::string& path, uint64_t width, uint64_t height,
                      int64_t max_pixels) {
  return DataError(absl::StrFormat(
      "%s: an image of %d×%d pixels (width×height), more than the %d decoded at most (a "
      "decompression bomb?)",
      Named(path), width, height, max_pixels));
}

// ---- PNG ----

struct PngSource {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  bool truncated = false;
  char message[256] = {};
};

void PngErrorFn(png_structp png, png_const_charp message) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", message);
  png_longjmp(png, 1);
}

// Warnings (a bad sRGB profile, an ancillary chunk's CRC) do not stop
// decoding, as they do not in Pillow.
void PngWarningFn(png_structp, png_const_charp) {}

void PngReadFn(png_structp png, png_bytep out, size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) {
    src->truncated = true;
    png_error(png, "truncated");
  }
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

enum class Outcome { kOk, kError, kTooLarge };

// libpng's part: no C++ object lives in a frame a longjmp leaves.
Outcome ReadPng(PngSource* src, int64_t max_pixels, std::vector<uint8_t>* raw,
                std::vector<png_bytep>* rows, uint32_t* width, uint32_t* height, int* channels) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, src, PngErrorFn, PngWarningFn);
  if (png == nullptr) return Outcome::kError;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return Outcome::kError;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Outcome::kError;
  }
  png_set_read_fn(png, src, PngReadFn);
  // max_pixels is traind's limit; libpng's own (1,000,000 a side) would
  // refuse some images it allows.
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
  png_read_info(png, info);
  *width = png_get_image_width(png, info);
  *height = png_get_image_height(png, info);
  if (static_cast<uint64_t>(*width) * *height > static_cast<uint64_t>(max_pixels)) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Outcome::kTooLarge;
  }
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  // Pillow's modes: a palette's colors (its tRNS alpha is dropped below),
  // 1, 2 and 4-bit gray scaled to 0..255, 16-bit samples' high byte. No
  // gamma: png_set_gamma is never called.
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_strip_16(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  *channels = png_get_channels(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  if (png_get_bit_depth(png, info) != 8 || *channels < 1 || *channels > 4 ||
      row_bytes != static_cast<size_t>(*width) * *channels) {
    std::snprintf(src->message, sizeof src->message, "unexpected layout after conversion");
    png_destroy_read_struct(&png, &info, nullptr);
    return Outcome::kError;
  }
  raw->resize(row_bytes * *height);
  rows->resize(*height);
  for (uint32_t y = 0; y < *height; ++y) (*rows)[y] = raw->data() + y * row_bytes;
  png_read_image(png, rows->data());
  // The chunks after the image data are not read: Pillow does not need them.
  png_destroy_read_struct(&png, &info, nullptr);
  return Outcome::kOk;
}

absl::StatusOr<Image> DecodePng(const std::string& path, const std::string& bytes, int channels,
                                int64_t max_pixels) {
  PngSource src;
  src.data = reinterpret_cast<const uint8_t*>(bytes.data());
  src.size = bytes.size();
  std::vector<uint8_t> raw;
  std::vector<png_bytep> rows;
  uint32_t width = 0, height = 0;
  int from = 0;
  switch (ReadPng(&src, max_pixels, &raw, &rows, &width, &height, &from)) {
    case Outcome::kTooLarge:
      return TooLarge(path, width, height, max_pixels);
    case Outcome::kError:
      if (src.truncated) {
        return DataError(absl::StrFormat("%s: truncated PNG (the file ends after %d bytes)",
                                         Named(path), bytes.size()));
      }
      return DataError(absl::StrCat(Named(path), ": corrupt PNG data: ",
                                    src.message[0] != '\0' ? src.message : "out of memory"));
    case Outcome::kOk:
      break;
  }
  Image image;
  image.height = static_cast<int>(height);
  image.width = static_cast<int>(width);
  image.channels = channels;
  image.pixels = Convert(std::move(raw), static_cast<size_t>(width) * height, from, channels);
  return image;
}

// ---- JPEG ----

struct JpegErrors {
  jpeg_error_mgr pub;  // first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  bool truncated = false;
  char message[JMSG_LENGTH_MAX] = {};
};

[[noreturn]] void JpegErrorExit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings ("Corrupt JPEG data: N extraneous bytes before marker") are
// ignored, as Pillow ignores them; the end of the file before the image's
// end is an error, as it is in Pillow.
void JpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
    errors->truncated = true;
    std::longjmp(errors->jump, 1);
  }
}

void JpegOutputMessage(j_common_ptr) {}

Outcome ReadJpeg(const std::string& bytes, int64_t max_pixels, JpegErrors* errors,
                 std::vector<uint8_t>* raw, uint32_t* width, uint32_t* height, int* components,
                 bool* cmyk, bool* unsupported) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&errors->pub);
  errors->pub.error_exit = JpegErrorExit;
  errors->pub.emit_message = JpegEmitMessage;
  errors->pub.output_message = JpegOutputMessage;
  jpeg_create_decompress(&cinfo);
  if (setjmp(errors->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kError;
  }
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  *width = cinfo.image_width;
  *height = cinfo.image_height;
  if (static_cast<uint64_t>(*width) * *height > static_cast<uint64_t>(max_pixels)) {
    jpeg_destroy_decompress(&cinfo);
    return Outcome::kTooLarge;
  }
  // Pillow's modes: L, RGB (from YCbCr or RGB), CMYK (from CMYK or YCCK).
  switch (cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE:
      cinfo.out_color_space = JCS_GRAYSCALE;
      break;
    case JCS_YCbCr:
    case JCS_RGB:
      cinfo.out_color_space = JCS_RGB;
      break;
    case JCS_CMYK:
    case JCS_YCCK:
      cinfo.out_color_space = JCS_CMYK;
      *cmyk = true;
      break;
    default:
      *components = cinfo.num_components;
      *unsupported = true;
      jpeg_destroy_decompress(&cinfo);
      return Outcome::kError;
  }
  jpeg_start_decompress(&cinfo);
  *components = cinfo.output_components;
  const size_t row_bytes = static_cast<size_t>(cinfo.output_width) * cinfo.output_components;
  raw->resize(row_bytes * cinfo.output_height);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = raw->data() + cinfo.output_scanline * row_bytes;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return Outcome::kOk;
}

// Pillow's CMYK to RGB: libjpeg's samples inverted (Adobe's convention,
// which Pillow assumes for every CMYK JPEG), then R = 255-K - C·(255-K)/255.
std::vector<uint8_t> CmykToRgb(const std::vector<uint8_t>& cmyk, size_t n) {
  std::vector<uint8_t> rgb(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const int nk = cmyk[i * 4 + 3];  // 255 - K, K being 255 - the sample
    for (int c = 0; c < 3; ++c) {
      const int tmp = (255 - cmyk[i * 4 + c]) * nk + 128;
      rgb[i * 3 + c] = static_cast<uint8_t>(std::clamp(nk - (((tmp >> 8) + tmp) >> 8), 0, 255));
    }
  }
  return rgb;
}

absl::StatusOr<Image> DecodeJpeg(const std::string& path, const std::string& bytes, int channels,
                                 int64_t max_pixels) {
  JpegErrors errors;
  std::vector<uint8_t> raw;
  uint32_t width = 0, height = 0;
  int components = 0;
  bool cmyk = false, unsupported = false;
  switch (ReadJpeg(bytes, max_pixels, &errors, &raw, &width, &height, &components, &cmyk,
                   &unsupported)) {
    case Outcome::kTooLarge:
      return TooLarge(path, width, height, max_pixels);
    case Outcome::kError:
      if (errors.truncated) {
        return DataError(absl::StrFormat("%s: truncated JPEG data (the file ends after %d bytes)",
                                         Named(path), bytes.size()));
      }
      if (unsupported) {
        return DataError(absl::StrFormat(
            "%s: a JPEG of %d components in a color space without an RGB conversion (grayscale, "
            "YCbCr, RGB, CMYK and YCCK are decoded)",
            Named(path), components));
      }
      return DataError(absl::StrCat(Named(path), ": corrupt JPEG data: ", errors.message));
    case Outcome::kOk:
      break;
  }
  const size_t n = static_cast<size_t>(width) * height;
  if (cmyk) {
    raw = CmykToRgb(raw, n);
    components = 3;
  }
  Image image;
  image.height = static_cast<int>(height);
  image.width = static_cast<int>(width);
  image.channels = channels;
  image.pixels = Convert(std::move(raw), n, components, channels);
  return image;
}

// ---- Resizing ----

constexpr int kPrecisionBits = 32 - 8 - 2;

// One axis of a resize: for each output index, the first input index and
// the fixed-point weights of the inputs from there.
struct Taps {
  std::vector<int> first, count;
  std::vector<int32_t> weights;  // [out, ksize]
  int ksize = 0;
};

Taps ComputeTaps(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;  // the triangle's radius, widened to shrink
  const double inverse = 1.0 / filter_scale;
  Taps taps;
  taps.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.first.resize(out_size);
  taps.count.resize(out_size);
  taps.weights.assign(static_cast<size_t>(out_size) * taps.ksize, 0);
  std::vector<double> w(taps.ksize);
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    double total = 0;
    for (int i = lo; i < hi; ++i) {
      const double x = std::abs((i - center + 0.5) * inverse);
      w[i - lo] = x < 1.0 ? 1.0 - x : 0.0;
      total += w[i - lo];
    }
    taps.first[o] = lo;
    taps.count[o] = hi - lo;
    for (int i = 0; i < hi - lo; ++i) {
      const double k = total != 0.0 ? w[i] / total : w[i];
      // Non-negative for a triangle: rounded half up, as Pillow does.
      taps.weights[static_cast<size_t>(o) * taps.ksize + i] =
          static_cast<int32_t>(0.5 + k * (1 << kPrecisionBits));
    }
  }
  return taps;
}

inline uint8_t Clip8(int32_t sum) {
  return static_cast<uint8_t>(std::clamp(sum >> kPrecisionBits, 0, 255));
}

// The horizontal pass: each row on its own.
Image ResampleWidth(const Image& in, int width) {
  const Taps taps = ComputeTaps(in.width, width);
  const int c = in.channels;
  Image out{in.height, width, c, {}};
  out.pixels.resize(static_cast<size_t>(in.height) * width * c);
  for (int y = 0; y < in.height; ++y) {
    const uint8_t* row = &in.pixels[static_cast<size_t>(y) * in.width * c];
    uint8_t* dst = &out.pixels[static_cast<size_t>(y) * width * c];
    for (int x = 0; x < width; ++x) {
      const int32_t* k = &taps.weights[static_cast<size_t>(x) * taps.ksize];
      const uint8_t* src = row + static_cast<size_t>(taps.first[x]) * c;
      for (int ch = 0; ch < c; ++ch) {
        int32_t sum = 1 << (kPrecisionBits - 1);
        for (int i = 0; i < taps.count[x]; ++i) sum += src[i * c + ch] * k[i];
        dst[x * c + ch] = Clip8(sum);
      }
    }
  }
  return out;
}

// The vertical pass: each column on its own.
Image ResampleHeight(const Image& in, int height) {
  const Taps taps = ComputeTaps(in.height, height);
  const size_t row = static_cast<size_t>(in.width) * in.channels;
  Image out{height, in.width, in.channels, {}};
  out.pixels.resize(height * row);
  std::vector<int32_t> sums(row);
  for (int y = 0; y < height; ++y) {
    const int32_t* k = &taps.weights[static_cast<size_t>(y) * taps.ksize];
    const uint8_t* src = in.pixels.data() + taps.first[y] * row;
    // Row by row into the sums (the same integers as column by column).
    std::fill(sums.begin(), sums.end(), 1 << (kPrecisionBits - 1));
    for (int i = 0; i < taps.count[y]; ++i) {
      const uint8_t* line = src + i * row;
      for (size_t j = 0; j < row; ++j) sums[j] += line[j] * k[i];
    }
    uint8_t* dst = out.pixels.data() + y * row;
    for (size_t j = 0; j < row; ++j) dst[j] = Clip8(sums[j]);
  }
  return out;
}

}  // namespace

absl::StatusOr<Image> DecodeImageFile(const std::string& path, int channels, int64_t max_pixels) {
  if (channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecodeImageFile: channels 1 (grayscale) or 3 (RGB), got ", channels));
  }
  std::unique_ptr<FILE, int (*)(FILE*)> in(std::fopen(path.c_str(), "rb"), std::fclose);
  if (in == nullptr) {
    return DataError(absl::StrCat(Named(path), ": cannot open: ", std::strerror(errno)));
  }
  // The magic bytes first: a large file that is no image is not read.
  std::string bytes(8, '\0');
  bytes.resize(std::fread(bytes.data(), 1, bytes.size(), in.get()));
  static constexpr char kPng[] = "\x89PNG\r\n\x1a\n";
  const bool png = bytes.compare(0, 8, kPng, 8) == 0;
  const bool jpeg = bytes.compare(0, 3, "\xff\xd8\xff", 3) == 0;
  if (!png && !jpeg && !std::ferror(in.get())) {
    std::string start;
    for (size_t i = 0; i < std::min<size_t>(bytes.size(), 4); ++i) {
      absl::StrAppend(&start, i == 0 ? "" : " ",
                      absl::StrFormat("0x%02x", static_cast<uint8_t>(bytes[i])));
    }
    return DataError(absl::StrFormat(
        "%s: not a PNG or JPEG file (it starts %s; a PNG starts 0x89 0x50 0x4e 0x47, a JPEG "
        "0xff 0xd8 0xff)",
        Named(path), bytes.empty() ? "empty" : start));
  }
  char buffer[1 << 16];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof buffer, in.get())) > 0) bytes.append(buffer, got);
  if (std::ferror(in.get())) {
    return DataError(absl::StrCat(Named(path), ": cannot read: ", std::strerror(errno)));
  }
  in.reset();
  return png ? DecodePng(path, bytes, channels, max_pixels)
             : DecodeJpeg(path, bytes, channels, max_pixels);
}

Image ResizeBilinear(const Image& in, int height, int width) {
  if (height < 1 || width < 1 || in.height < 1 || in.width < 1) {
    return Image{0, 0, in.channels, {}};
  }
  Image out = in.width != width ? ResampleWidth(in, width) : in;
  if (in.height != height) out = ResampleHeight(out, height);
  return out;
}

}  // namespace traind::data
