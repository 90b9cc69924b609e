// Image datasets: IDX files (the MNIST family), NumPy arrays and folders of
// PNG and JPEG files (data.format), read as a Dataset whose rows are images.
//
// An image is C·H·W features in C, H, W order (data.shape is set to
// [C, H, W]). A source that holds bytes (IDX and NPY uint8, PNG, JPEG) stays
// bytes in memory (Dataset::pixels): the model's input is the byte value,
// and the feature pipeline's per-channel scale includes the 1/255 of
// torchvision's ToTensor. Other sources are floats in Dataset::x.
#ifndef TRAIND_DATA_IMAGES_H_
#define TRAIND_DATA_IMAGES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "traind/v1/job.pb.h"

namespace traind::data {

// data.format, or for FORMAT_AUTO what `path` is: a directory is an
// IMAGE_FOLDER; a file (gzipped or not) that starts with NPY's magic is NPY,
// one that starts with IDX's two zero bytes IDX; else a name ending in ".npy"
// is NPY, a name containing "idx" (train-images-idx3-ubyte.gz) IDX, anything
// else CSV.
traind::v1::DataFormat FormatOf(const traind::v1::DataSpec& data, const std::string& path);

// Whether data.path holds images (IDX, NPY or IMAGE_FOLDER).
bool IsImageFormat(const traind::v1::DataSpec& data);

// The images of one file or folder, as read.
struct ImageSet {
  int64_t count = 0;
  int32_t channels = 0, height = 0, width = 0;
  std::vector<uint8_t> bytes;       // [count, C, H, W] when the source holds bytes
  std::vector<std::string> groups;  // [count] when ImageFiles::group_column is set
  std::vector<float> values;        // [count, C, H, W] otherwise
  // [count] each image's label as text: an integer of an IDX or NPY labels
  // file, a cell of a CSV labels file, a folder's class; empty when no
  // labels were read.
  std::vector<std::string> labels;
  std::vector<std::string> classes;  // image folders: the class folders, sorted
  std::vector<std::string> names;    // image folders: "<class>/<file>"

  int64_t features() const { return int64_t{channels} * height * width; }
};

// Where ReadImages reads from; `field` and `labels_field` name the spec
// fields in errors ("data.path").
struct ImageFiles {
  std::string field, path;
  std::string labels_field, labels_path;  // empty: no labels (folders: their classes)
  // A column of a CSV labels file holding each image's group (group k-fold),
  // read into ImageSet::groups; empty: none.
  std::string group_column;
};

// Reads `files` as data's format, layout, image_size and channels say.
// `header_only`: the count and shape, the labels, a folder's classes and
// names, no pixels (an IDX or NPY file's header; a folder's first image).
// `threads` decode a folder's files in parallel. Errors (DataError,
// InvalidSpecError for what the spec says) name the file and, where one is
// at fault, the image.
absl::StatusOr<ImageSet> ReadImages(const traind::v1::DataSpec& data, const ImageFiles& files,
                                    bool header_only, int threads = 1);

// LoadDataset for image formats: data.path (with data.labels_path) and
// cross_validation.validation_path (with validation_labels_path).
absl::StatusOr<Dataset> LoadImageDataset(const traind::v1::JobSpec& spec, int threads = 1);

// SummarizeDataset for image formats, from headers and labels: no pixels
// are decoded (a folder's first image is, for its size). image_shape holds
// [C, H, W].
absl::StatusOr<DatasetSummary> SummarizeImageDataset(const traind::v1::JobSpec& spec);

}  // namespace traind::data

#endif  // TRAIND_DATA_IMAGES_H_
