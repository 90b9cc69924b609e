#include "worker/engine/data/image_batches.h"

#include <algorithm>

#include "base/random.h"

namespace traind::engine {

ImageBatches::ImageBatches(const traind::v1::DataSpec& spec, const data::Dataset& data,
                           const FeaturePipeline& pipeline, const FeatureMatrix* features,
                           uint64_t seed)
    : channels_(data.image_shape[0]),
      height_(data.image_shape[1]),
      width_(data.image_shape[2]),
      plane_(height_ * width_),
      padding_(spec.augment().crop_padding()),
      flip_(spec.augment().horizontal_flip()),
      seed_(seed) {
  zero_.resize(static_cast<size_t>(channels_));
  for (int64_t c = 0; c < channels_; ++c) {
    // The pipeline's offset and scale are per pixel, equal within a channel.
    const size_t j = static_cast<size_t>(c * plane_);
    zero_[c] = static_cast<float>((0.0 - pipeline.offset[j]) / pipeline.scale[j]);
  }
  if (!data.pixels.empty()) {
    bytes_ = data.pixels.data();
    table_.resize(static_cast<size_t>(channels_ * 256));
    for (int64_t c = 0; c < channels_; ++c) {
      const size_t j = static_cast<size_t>(c * plane_);
      for (int v = 0; v < 256; ++v) {
        table_[c * 256 + v] = static_cast<float>((v - pipeline.offset[j]) / pipeline.scale[j]);
      }
    }
  } else {
    values_ = features->data();
  }
}

ImageDraw ImageBatches::Draw(int64_t epoch, int64_t row) const {
  Rng rng(DeriveSeed(seed_, static_cast<uint64_t>(epoch), static_cast<uint64_t>(row)));
  ImageDraw d;
  if (padding_ > 0) {
    d.dy = static_cast<int32_t>(rng.UniformInt(static_cast<uint64_t>(2 * padding_ + 1)));
    d.dx = static_cast<int32_t>(rng.UniformInt(static_cast<uint64_t>(2 * padding_ + 1)));
  }
  if (flip_) d.flip = (rng.Next() >> 63) != 0;
  return d;
}

void ImageBatches::FillOne(int64_t row, const ImageDraw* draw, float* out) const {
  const int64_t f = channels_ * plane_;
  if (draw == nullptr) {
    if (bytes_ != nullptr) {
      const uint8_t* in = bytes_ + row * f;
      for (int64_t c = 0; c < channels_; ++c) {
        const float* t = table_.data() + c * 256;
        for (int64_t p = 0; p < plane_; ++p) out[c * plane_ + p] = t[in[c * plane_ + p]];
      }
    } else {
      std::copy_n(values_ + row * f, f, out);
    }
    return;
  }
  // out(y, x) = image(y + dy - padding, x' + dx - padding), x' = x or
  // width - 1 - x (flipped); a zero pixel outside the image.
  for (int64_t c = 0; c < channels_; ++c) {
    float* o = out + c * plane_;
    const float* t = bytes_ != nullptr ? table_.data() + c * 256 : nullptr;
    const uint8_t* bin = bytes_ != nullptr ? bytes_ + row * f + c * plane_ : nullptr;
    const float* vin = values_ != nullptr ? values_ + row * f + c * plane_ : nullptr;
    for (int64_t y = 0; y < height_; ++y) {
      const int64_t sy = y + draw->dy - padding_;
      float* oy = o + y * width_;
      if (sy < 0 || sy >= height_) {
        std::fill_n(oy, width_, zero_[c]);
        continue;
      }
      for (int64_t x = 0; x < width_; ++x) {
        const int64_t sx = (draw->flip ? width_ - 1 - x : x) + draw->dx - padding_;
        if (sx < 0 || sx >= width_) {
          oy[x] = zero_[c];
        } else if (t != nullptr) {
          oy[x] = t[bin[sy * width_ + sx]];
        } else {
          oy[x] = vin[sy * width_ + sx];
        }
      }
    }
  }
}

void ImageBatches::Fill(absl::Span<const int64_t> rows, int64_t epoch, float* out) const {
  const int64_t f = channels_ * plane_;
  const bool augment = epoch >= 1 && augments();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (augment) {
      const ImageDraw d = Draw(epoch, rows[i]);
      FillOne(rows[i], &d, out + static_cast<int64_t>(i) * f);
    } else {
      FillOne(rows[i], nullptr, out + static_cast<int64_t>(i) * f);
    }
  }
}

}  // namespace traind::engine
