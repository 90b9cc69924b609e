// Images through the per-fold pipeline: per-channel statistics of the
// training rows, bytes normalized as batches are built, and augmentation
// that is a function of (seed, epoch, row) alone.
#include "worker/engine/data/image_batches.h"

#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/engine/data/features.h"

namespace traind::engine {
namespace {

// 6 images of 2 channels × 3 × 4 pixels: byte (n, c, y, x) = 7n + 40c + 5y + x.
data::Dataset Bytes() {
  data::Dataset d;
  d.rows = 6;
  d.features = 24;
  d.image_shape = {2, 3, 4};
  for (int n = 0; n < 6; ++n) {
    for (int c = 0; c < 2; ++c) {
      for (int y = 0; y < 3; ++y) {
        for (int x = 0; x < 4; ++x)
          d.pixels.push_back(static_cast<uint8_t>(7 * n + 40 * c + 5 * y + x));
      }
    }
  }
  return d;
}

TEST(ImagePipelineTest, PerChannelStatisticsOfTheTrainingRowsInByteUnits) {
  const data::Dataset d = Bytes();
  traind::v1::DataSpec spec;
  spec.set_scaling(traind::v1::STANDARD);
  FeaturePipeline p;
  const std::vector<int64_t> train = {0, 2, 5};
  p.Fit(spec, d, train);
  ASSERT_EQ(p.offset.size(), 24u);
  for (int c = 0; c < 2; ++c) {
    double sum = 0, sq = 0;
    int count = 0;
    for (int64_t n : train) {
      for (int q = 0; q < 12; ++q) {
        const double v = d.pixels[n * 24 + c * 12 + q];
        sum += v;
        ++count;
      }
    }
    const double mean = sum / count;
    for (int64_t n : train) {
      for (int q = 0; q < 12; ++q) {
        const double v = d.pixels[n * 24 + c * 12 + q] - mean;
        sq += v * v;
      }
    }
    // Hand-derived for channel 0: 7·(0+2+5)/3 + 5·1 + 1.5 = 22.8333...
    if (c == 0) EXPECT_NEAR(mean, 7.0 * 7 / 3 + 5 + 1.5, 1e-12);
    for (int q = 0; q < 12; ++q) {
      EXPECT_DOUBLE_EQ(p.offset[c * 12 + q], mean);
      EXPECT_DOUBLE_EQ(p.scale[c * 12 + q], std::sqrt(sq / count));
    }
  }
  // Fixed per-channel values count bytes as byte / 255.
  spec.mutable_normalize()->add_mean(0.5);
  spec.mutable_normalize()->add_mean(0.25);
  spec.mutable_normalize()->add_std(0.2);
  p.Fit(spec, d, train);
  EXPECT_DOUBLE_EQ(p.offset[0], 127.5);
  EXPECT_DOUBLE_EQ(p.offset[12], 63.75);
  EXPECT_DOUBLE_EQ(p.scale[23], 51.0);
  // Neither: byte / 255.
  traind::v1::DataSpec plain;
  p.Fit(plain, d, train);
  EXPECT_DOUBLE_EQ(p.offset[5], 0.0);
  EXPECT_DOUBLE_EQ(p.scale[5], 255.0);
  EXPECT_EQ(p.width(), 24);
}

TEST(ImageBatchesTest, BytesAreNormalizedAsTheyAreGathered) {
  const data::Dataset d = Bytes();
  traind::v1::DataSpec spec;
  spec.mutable_normalize()->add_mean(0.1);
  spec.mutable_normalize()->add_mean(0.3);
  spec.mutable_normalize()->add_std(0.5);
  spec.mutable_normalize()->add_std(0.25);
  FeaturePipeline p;
  p.Fit(spec, d, {0, 1, 2, 3, 4, 5});
  ImageBatches batches(spec, d, p, nullptr, 1);
  EXPECT_FALSE(batches.augments());
  std::vector<float> out(2 * 24);
  batches.Fill({4, 1}, /*epoch=*/3, out.data());
  for (int i = 0; i < 2; ++i) {
    const int n = i == 0 ? 4 : 1;
    for (int j = 0; j < 24; ++j) {
      const int c = j / 12;
      const double want =
          (d.pixels[n * 24 + j] / 255.0 - (c == 0 ? 0.1 : 0.3)) / (c == 0 ? 0.5 : 0.25);
      EXPECT_NEAR(out[i * 24 + j], want, 1e-6) << n << " " << j;
    }
  }
}

TEST(ImageBatchesTest, CropAndFlipAreTorchvisionsAndDependOnSeedEpochAndRowOnly) {
  const data::Dataset d = Bytes();
  traind::v1::DataSpec spec;
  spec.mutable_augment()->set_crop_padding(2);
  spec.mutable_augment()->set_horizontal_flip(true);
  FeaturePipeline p;
  p.Fit(spec, d, {0, 1, 2, 3, 4, 5});  // x / 255
  ImageBatches batches(spec, d, p, nullptr, 42);
  ASSERT_TRUE(batches.augments());
  std::vector<float> out(3 * 24), again(24), plain(24);
  batches.Fill({5, 0, 3}, /*epoch=*/2, out.data());
  for (int i = 0; i < 3; ++i) {
    const int n = i == 0 ? 5 : i == 1 ? 0 : 3;
    const ImageDraw draw = batches.Draw(2, n);
    ASSERT_GE(draw.dy, 0);
    ASSERT_LE(draw.dy, 4);
    ASSERT_GE(draw.dx, 0);
    ASSERT_LE(draw.dx, 4);
    for (int c = 0; c < 2; ++c) {
      for (int y = 0; y < 3; ++y) {
        for (int x = 0; x < 4; ++x) {
          // Padded by 2 then cropped at (dy, dx), then mirrored.
          const int xs = draw.flip ? 3 - x : x;
          const int sy = y + draw.dy - 2, sx = xs + draw.dx - 2;
          const bool inside = sy >= 0 && sy < 3 && sx >= 0 && sx < 4;
          const float want =
              inside ? static_cast<float>(d.pixels[n * 24 + c * 12 + sy * 4 + sx] / 255.0) : 0.0f;
          EXPECT_NEAR(out[i * 24 + c * 12 + y * 4 + x], want, 1e-7)
              << "row " << n << " c " << c << " y " << y << " x " << x;
        }
      }
    }
  }
  // The same (epoch, row) in another batch: the same image; epoch 0 (not
  // training): none.
  batches.Fill({0}, 2, again.data());
  EXPECT_TRUE(std::equal(again.begin(), again.end(), out.begin() + 24));
  batches.Fill({0}, 0, plain.data());
  for (int j = 0; j < 24; ++j) EXPECT_NEAR(plain[j], d.pixels[j] / 255.0, 1e-7);
  // Draws cover every offset and both flips, and differ across epochs.
  std::set<int> dys, dxs, flips;
  int differ = 0;
  for (int e = 1; e <= 50; ++e) {
    for (int r = 0; r < 6; ++r) {
      const ImageDraw a = batches.Draw(e, r), b = batches.Draw(e + 1, r);
      dys.insert(a.dy);
      dxs.insert(a.dx);
      flips.insert(a.flip);
      differ += a.dy != b.dy || a.dx != b.dx || a.flip != b.flip;
    }
  }
  EXPECT_EQ(dys.size(), 5u);
  EXPECT_EQ(dxs.size(), 5u);
  EXPECT_EQ(flips.size(), 2u);
  EXPECT_GT(differ, 200);
  // Another seed (another task): other draws.
  ImageBatches other(spec, d, p, nullptr, 43);
  int same = 0;
  for (int r = 0; r < 6; ++r) {
    for (int e = 1; e <= 10; ++e) {
      const ImageDraw a = batches.Draw(e, r), b = other.Draw(e, r);
      same += a.dy == b.dy && a.dx == b.dx && a.flip == b.flip;
    }
  }
  EXPECT_LT(same, 20);
}

TEST(ImageBatchesTest, FloatImagesPadWithANormalizedZero) {
  data::Dataset d;
  d.rows = 1;
  d.features = 4;
  d.image_shape = {1, 2, 2};
  d.x = {1, 2, 3, 4};
  traind::v1::DataSpec spec;
  spec.set_scaling(traind::v1::STANDARD);
  spec.mutable_augment()->set_crop_padding(1);
  FeaturePipeline p;
  p.Fit(spec, d, {0});
  FeatureMatrix features;
  p.Transform(d, &features);
  ImageBatches batches(spec, d, p, &features, 3);
  // Mean 2.5, population std sqrt(1.25): a zero pixel is -2.5 / sqrt(1.25).
  const float zero = static_cast<float>(-2.5 / std::sqrt(1.25));
  for (int e = 1; e <= 30; ++e) {
    const ImageDraw draw = batches.Draw(e, 0);
    std::vector<float> out(4);
    batches.Fill({0}, e, out.data());
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 2; ++x) {
        const int sy = y + draw.dy - 1, sx = x + draw.dx - 1;
        const bool inside = sy >= 0 && sy < 2 && sx >= 0 && sx < 2;
        EXPECT_FLOAT_EQ(out[y * 2 + x], inside ? features[sy * 2 + sx] : zero);
      }
    }
  }
}

}  // namespace
}  // namespace traind::engine
