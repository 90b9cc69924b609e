#include "data/images.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "base/status.h"
#include "data/split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using traind::v1::JobSpec;

class ImagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("traind_images_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::string Write(const std::string& name, const std::string& bytes) {
    std::ofstream(Path(name), std::ios::binary) << bytes;
    return Path(name);
  }

  // An IDX file of bytes with these dimensions; gzipped when `gz`.
  std::string WriteIdx(const std::string& name, const std::vector<uint32_t>& dims,
                       const std::vector<uint8_t>& bytes, bool gz = false) {
    std::string out = {0, 0, 0x08, static_cast<char>(dims.size())};
    for (uint32_t d : dims) {
      for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((d >> s) & 0xFF));
    }
    out.append(bytes.begin(), bytes.end());
    if (!gz) return Write(name, out);
    gzFile f = gzopen(Path(name).c_str(), "wb");
    gzwrite(f, out.data(), static_cast<unsigned>(out.size()));
    gzclose(f);
    return Path(name);
  }

  // A version 1.0 NPY file.
  std::string WriteNpy(const std::string& name, const std::string& descr, const std::string& shape,
                       const std::string& data) {
    std::string header =
        "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
    header.push_back('\n');
    std::string out = "\x93NUMPY";
    out.push_back(1);
    out.push_back(0);
    out.push_back(static_cast<char>(header.size() & 0xFF));
    out.push_back(static_cast<char>(header.size() >> 8));
    return Write(name, out + header + data);
  }

  std::filesystem::path dir_;
};

// 5 images of 1×2×3: pixel (n, y, x) = 10 n + 3 y + x; labels n % 3 (+ 7).
std::vector<uint8_t> Pixels() {
  std::vector<uint8_t> p;
  for (int n = 0; n < 5; ++n) {
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 3; ++x) p.push_back(static_cast<uint8_t>(10 * n + 3 * y + x));
    }
  }
  return p;
}

TEST_F(ImagesTest, FormatFromThePath) {
  traind::v1::DataSpec d;
  EXPECT_EQ(FormatOf(d, dir_.string()), traind::v1::IMAGE_FOLDER);
  EXPECT_EQ(FormatOf(d, "/x/train.NPY"), traind::v1::NPY);
  EXPECT_EQ(FormatOf(d, "/x/train-images-idx3-ubyte.gz"), traind::v1::IDX);
  EXPECT_EQ(FormatOf(d, "/idx/train.csv"), traind::v1::CSV);  // the name, not the folder
  // A table's extension wins over "idx" in the name (a random temporary
  // name once made a CSV an IDX file).
  EXPECT_EQ(FormatOf(d, "/x/run_idx.csv"), traind::v1::CSV);
  EXPECT_EQ(FormatOf(d, "/tmp/traind-test-OZiDxS.csv"), traind::v1::CSV);
  EXPECT_EQ(FormatOf(d, "/x/labels_IDX.tsv.gz"), traind::v1::CSV);
  d.set_format(traind::v1::NPY);
  EXPECT_EQ(FormatOf(d, "/x/train.csv"), traind::v1::NPY);
  // By the bytes, whatever the name (an uploaded Predict input).
  d.clear_format();
  EXPECT_EQ(FormatOf(d, WriteIdx("upload.csv", {2, 1, 1}, {1, 2}, true)), traind::v1::IDX);
  EXPECT_EQ(FormatOf(d, WriteIdx("plain.csv", {2}, {1, 2})), traind::v1::IDX);
  EXPECT_EQ(FormatOf(d, WriteNpy("upload2.csv", "|u1", "(2,)", "ab")), traind::v1::NPY);
  EXPECT_EQ(FormatOf(d, Write("t.npy.csv", "a,b\n1,2\n")), traind::v1::CSV);
}

TEST_F(ImagesTest, IdxImagesAndLabelsLoadAsBytes) {
  JobSpec spec;
  spec.mutable_data()->set_path(WriteIdx("images-idx3-ubyte.gz", {5, 2, 3}, Pixels(), true));
  spec.mutable_data()->set_labels_path(WriteIdx("labels-idx1-ubyte", {5}, {7, 8, 9, 7, 8}));
  absl::StatusOr<Dataset> data = LoadDataset(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->rows, 5);
  EXPECT_EQ(data->features, 6);
  EXPECT_THAT(data->image_shape, ElementsAre(1, 2, 3));
  EXPECT_TRUE(data->x.empty());
  EXPECT_EQ(data->pixels, Pixels());
  EXPECT_THAT(data->classes, ElementsAre("7", "8", "9"));
  EXPECT_THAT(data->y, ElementsAre(0, 1, 2, 0, 1));
  EXPECT_EQ(data->feature_names[4], "c0_y1_x1");
  EXPECT_EQ(data->validation_start, -1);

  absl::StatusOr<DatasetSummary> summary = SummarizeDataset(spec);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->rows, 5);
  EXPECT_EQ(summary->features, 6);
  EXPECT_THAT(summary->image_shape, ElementsAre(1, 2, 3));
  EXPECT_THAT(summary->class_rows, ElementsAre(2, 2, 1));
}

TEST_F(ImagesTest, ClassNamesNameIntegerLabelsAndValidationFilesJoin) {
  JobSpec spec;
  spec.mutable_data()->set_path(WriteIdx("train-idx3", {5, 2, 3}, Pixels()));
  spec.mutable_data()->set_labels_path(WriteIdx("train-labels-idx1", {5}, {0, 1, 2, 0, 1}));
  for (const char* name : {"zero", "one", "two", "three"})
    spec.mutable_data()->add_class_names(name);
  const std::vector<uint8_t> all = Pixels();
  const std::vector<uint8_t> val(all.begin(), all.begin() + 12);
  spec.mutable_cross_validation()->set_validation_path(WriteIdx("t10k-idx3", {2, 2, 3}, val));
  spec.mutable_cross_validation()->set_validation_labels_path(
      WriteIdx("t10k-labels-idx1", {2}, {3, 2}));
  absl::StatusOr<Dataset> data = LoadDataset(spec);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->rows, 7);
  EXPECT_EQ(data->validation_start, 5);
  EXPECT_THAT(data->classes, ElementsAre("zero", "one", "two", "three"));
  EXPECT_THAT(data->y, ElementsAre(0, 1, 2, 0, 1, 3, 2));
  EXPECT_EQ(data->pixels.size(), 42u);
  EXPECT_EQ(data->pixels[36], val[6]);
  EXPECT_EQ(data->lines[6], 1);  // its index in its own file

  // A label past the names.
  spec.mutable_data()->clear_class_names();
  spec.mutable_data()->add_class_names("zero");
  absl::StatusOr<Dataset> bad = LoadDataset(spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(FailureKindOf(bad.status()), FailureKind::kDataError);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("data.labels_path: label 1 is \"1\", but data.class_names names classes "
                        "0 to 0"));
}

TEST_F(ImagesTest, NpyLayoutsBecomePlanarAndCsvLabelsAreRead) {
  // 2 images of 2×2 pixels × 3 channels, NHWC: value = 100 n + 10 (y·2+x) + c.
  std::string data;
  for (int n = 0; n < 2; ++n) {
    for (int p = 0; p < 4; ++p) {
      for (int c = 0; c < 3; ++c) {
        const float v = static_cast<float>(100 * n + 10 * p + c);
        data.append(reinterpret_cast<const char*>(&v), 4);
      }
    }
  }
  JobSpec spec;
  spec.mutable_data()->set_path(WriteNpy("x.npy", "<f4", "(2, 2, 2, 3)", data));
  spec.mutable_data()->set_layout("nhwc");
  spec.mutable_data()->set_labels_path(Write("y.csv", "id,label\na,cat\nb,dog\n"));
  absl::StatusOr<Dataset> loaded = LoadDataset(spec);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(loaded->image_shape, ElementsAre(3, 2, 2));
  ASSERT_EQ(loaded->x.size(), 24u);
  EXPECT_TRUE(loaded->pixels.empty());
  // Row 1, channel 2, pixel (1, 0): 100 + 10·2 + 2.
  EXPECT_EQ(loaded->x[12 + 2 * 4 + 2], 122.0f);
  EXPECT_THAT(loaded->classes, ElementsAre("cat", "dog"));

  // The same array read as NCHW: a shape that does not match the layout.
  spec.mutable_data()->set_layout("NHW");
  absl::StatusOr<Dataset> wrong = LoadDataset(spec);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(),
              HasSubstr("an array of 4 axes (2×2×2×3), but the layout NHW has 3 (data.layout)"));
}

// Group k-fold on images: each image's group is a column of a CSV labels
// file (beside its label), coded by the groups' sorted values as a table's
// group column is; no fold splits a group. IDX labels and image folders have
// no such column: the spec's error, naming the field.
TEST_F(ImagesTest, GroupsComeFromACsvLabelsColumn) {
  std::vector<uint8_t> bytes;
  for (int n = 0; n < 6; ++n) bytes.insert(bytes.end(), 4, static_cast<uint8_t>(10 * n));
  JobSpec spec;
  spec.mutable_data()->set_path(WriteIdx("x-idx3-ubyte", {6, 2, 2}, bytes));
  spec.mutable_data()->set_labels_path(
      Write("y.csv", "label,patient\ncat,p2\ndog,p1\ncat,p2\ndog,p3\ncat,p1\ndog,p3\n"));
  spec.mutable_cross_validation()->set_folds(3);
  spec.mutable_cross_validation()->set_group_column("patient");
  absl::StatusOr<Dataset> loaded = LoadDataset(spec);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(loaded->groups, ElementsAre(1, 0, 1, 2, 0, 2));  // p1 0, p2 1, p3 2
  absl::StatusOr<DatasetSummary> summary = SummarizeDataset(spec);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(summary->groups_known);
  EXPECT_THAT(summary->group_rows, ElementsAre(2, 2, 2));
  const std::vector<std::vector<int64_t>> folds = GroupKFold(loaded->groups, 3, false, 1);
  ASSERT_EQ(folds.size(), 3u);
  for (const std::vector<int64_t>& fold : folds) {
    ASSERT_EQ(fold.size(), 2u);
    EXPECT_EQ(loaded->groups[static_cast<size_t>(fold[0])],
              loaded->groups[static_cast<size_t>(fold[1])]);
  }

  spec.mutable_cross_validation()->set_group_column("visit");
  EXPECT_THAT(LoadDataset(spec).status().message(),
              HasSubstr("cross_validation.group_column: column \"visit\" not found in"));
  spec.mutable_cross_validation()->set_group_column("patient");
  spec.mutable_data()->set_labels_path(Write("y.csv", "label,patient\ncat,p2\ndog,\n"));
  EXPECT_THAT(LoadDataset(spec).status().message(),
              HasSubstr("y.csv:3: column \"patient\" (column 2): empty group"));
  spec.mutable_data()->set_labels_path(WriteIdx("y-idx1-ubyte", {6}, std::vector<uint8_t>(6, 1)));
  const absl::Status idx = LoadDataset(spec).status();
  EXPECT_EQ(FailureKindOf(idx), FailureKind::kInvalidSpec);
  EXPECT_THAT(idx.message(),
              HasSubstr("cross_validation.group_column: images take their groups from a column "
                        "of a CSV labels file, but data.labels_path: "));
}

TEST_F(ImagesTest, ErrorsNameTheFilesAndTheImage) {
  JobSpec spec;
  spec.mutable_data()->set_path(WriteIdx("images-idx3", {5, 2, 3}, Pixels()));
  // No labels file.
  absl::StatusOr<Dataset> data = LoadDataset(spec);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(data.status().message(), HasSubstr("data.labels_path: required"));
  // Fewer labels than images.
  const std::string labels = WriteIdx("labels-idx1", {4}, {0, 1, 0, 1});
  spec.mutable_data()->set_labels_path(labels);
  data = LoadDataset(spec);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(FailureKindOf(data.status()), FailureKind::kDataError);
  EXPECT_THAT(data.status().message(),
              HasSubstr(labels + " has 4 labels, but " + Path("images-idx3") + " has 5 images"));
  // A float image with a NaN: its index.
  std::string values(6 * 3 * 4, '\0');
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&values[(6 * 2 + 4) * 4], &nan, 4);
  spec.mutable_data()->set_path(WriteNpy("x.npy", "<f4", "(3, 2, 3)", values));
  spec.mutable_data()->set_labels_path(WriteNpy("y.npy", "<i8", "(3,)", std::string(24, '\0')));
  data = LoadDataset(spec);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(data.status().message(), HasSubstr("data.path: " + Path("x.npy") +
                                                 ": image 2 has a value that is not finite"));
  // Labels that are not integers.
  const double half = 0.5;
  std::string halves(24, '\0');
  std::memcpy(&halves[8], &half, 8);
  spec.mutable_data()->set_labels_path(WriteNpy("h.npy", "<f8", "(3,)", halves));
  spec.mutable_data()->set_path(WriteNpy("x2.npy", "|u1", "(3, 2, 3)", std::string(18, '\1')));
  data = LoadDataset(spec);
  ASSERT_FALSE(data.ok());
  EXPECT_THAT(data.status().message(),
              HasSubstr("data.labels_path: " + Path("h.npy") + ": label 1 is 0.5, not an integer"));
  // data.shape that disagrees with the files.
  spec.mutable_data()->set_labels_path(WriteNpy("y2.npy", "<i8", "(3,)", std::string(24, '\0')));
  for (int d : {1, 3, 2}) spec.mutable_data()->add_shape(d);
  data = LoadDataset(spec);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(FailureKindOf(data.status()), FailureKind::kInvalidSpec);
  EXPECT_THAT(data.status().message(), HasSubstr("data.shape: [1, 3, 2], but the images of"));
}

TEST_F(ImagesTest, AnImageFolderIsItsClassesAndFiles) {
  // Two classes of the decoder's test images (same size: rgb.png twice, and
  // a gray copy), listed and decoded; the summary decodes one image only.
  const std::string src = std::string(TRAIND_SOURCE_DIR) + "/data/testdata/images/";
  std::filesystem::create_directories(dir_ / "root/b_class");
  std::filesystem::create_directories(dir_ / "root/a_class");
  std::filesystem::copy_file(src + "rgb.png", dir_ / "root/b_class/x.png");
  std::filesystem::copy_file(src + "rgb.png", dir_ / "root/a_class/y.PNG");
  std::filesystem::copy_file(src + "rgb.png", dir_ / "root/a_class/z.png");
  Write("root/a_class/notes.txt", "not an image");
  JobSpec spec;
  spec.mutable_data()->set_path(Path("root"));
  spec.mutable_data()->set_channels(1);
  spec.mutable_data()->add_image_size(4);
  spec.mutable_data()->add_image_size(5);
  absl::StatusOr<Dataset> data = LoadDataset(spec, /*threads=*/2);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->rows, 3);
  EXPECT_THAT(data->image_shape, ElementsAre(1, 4, 5));
  EXPECT_THAT(data->classes, ElementsAre("a_class", "b_class"));
  EXPECT_THAT(data->y, ElementsAre(0, 0, 1));
  EXPECT_THAT(data->row_names, ElementsAre("a_class/y.PNG", "a_class/z.png", "b_class/x.png"));
  ASSERT_EQ(data->pixels.size(), 60u);
  // The same file thrice: the same pixels.
  EXPECT_TRUE(
      std::equal(data->pixels.begin(), data->pixels.begin() + 20, data->pixels.begin() + 40));

  absl::StatusOr<DatasetSummary> summary = SummarizeDataset(spec);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->rows, 3);
  EXPECT_THAT(summary->image_shape, ElementsAre(1, 4, 5));
  EXPECT_THAT(summary->class_rows, ElementsAre(2, 1));

  spec.mutable_data()->set_labels_path(Path("labels.idx"));
  absl::StatusOr<Dataset> bad = LoadDataset(spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("an image folder's labels are its class folders"));
}

}  // namespace
}  // namespace traind::data
