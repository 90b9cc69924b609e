// Batches of images built on the host from a fold's data: each pixel
// normalized by the fitted pipeline (bytes through a per-channel table, so
// the data stays bytes in memory), training rows augmented.
//
// Augmentation (data.augment) is torchvision's RandomCrop(size, padding)
// then RandomHorizontalFlip: pad every side with `crop_padding` zero pixels
// (zero before normalization), take a window of the image's size at a
// random offset, mirror it with probability 1/2. The draws of an image are
// a function of (seed, epoch, row) alone: a run is deterministic, and a
// fold resumed from a checkpoint sees the same images as one that never
// stopped.
//
// Thread safety: const methods may be called concurrently.
#ifndef TRAIND_WORKER_ENGINE_DATA_IMAGE_BATCHES_H_
#define TRAIND_WORKER_ENGINE_DATA_IMAGE_BATCHES_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "data/dataset.h"
#include "traind/v1/job.pb.h"
#include "worker/engine/data/features.h"
#include "worker/engine/data/huge_pages.h"

namespace traind::engine {

// An image's augmentation draws.
struct ImageDraw {
  int32_t dy = 0, dx = 0;  // the window's offset in the padded image, 0..2·padding
  bool flip = false;
};

class ImageBatches {
 public:
  // `data`'s images (data.image_shape), normalized by `pipeline` (fitted on
  // data); float images are read from `features` (pipeline.Transform of
  // data), bytes from data.pixels. `seed` seeds the augmentation.
  ImageBatches(const traind::v1::DataSpec& spec, const data::Dataset& data,
               const FeaturePipeline& pipeline, const FeatureMatrix* features, uint64_t seed);

  bool augments() const { return padding_ > 0 || flip_; }

  // The draws of `row` in `epoch`.
  ImageDraw Draw(int64_t epoch, int64_t row) const;

  // out = [rows.size(), C·H·W]: the images of `rows`, augmented with the
  // draws of `epoch` when epoch >= 1 (training), as they are when 0.
  void Fill(absl::Span<const int64_t> rows, int64_t epoch, float* out) const;

 private:
  void FillOne(int64_t row, const ImageDraw* draw, float* out) const;

  int64_t channels_, height_, width_, plane_;
  const uint8_t* bytes_ = nullptr;  // [rows, C·H·W]
  const float* values_ = nullptr;   // [rows, C·H·W], normalized
  std::vector<float> table_;        // [C, 256]: a byte's normalized value
  std::vector<float> zero_;         // [C]: a zero pixel's normalized value
  int32_t padding_ = 0;
  bool flip_ = false;
  uint64_t seed_ = 0;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_DATA_IMAGE_BATCHES_H_
