#include "data/images.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "data/csv.h"
#include "data/idx.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "data/labels.h"
#include "data/npy.h"
#include "data/target.h"
#include "data/text.h"

namespace traind::data {
namespace {

using traind::v1::DataFormat;
using traind::v1::DataSpec;
using traind::v1::JobSpec;

// Images and labels read at most (2^31 pixels: 8 GB as floats).
constexpr int64_t kMaxElements = int64_t{1} << 31;

std::string Where(const ImageFiles& f) { return absl::StrCat(f.field, ": ", f.path); }

// The label text of an integer value; false when `v` is not an integer.
bool IntegerLabel(double v, std::string* out) {
  if (!std::isfinite(v) || v != std::floor(v) || std::fabs(v) > 9.0e15) return false;
  *out = absl::StrCat(static_cast<int64_t>(v));
  return true;
}

// Sets set->channels/height/width from an array's dims and data.layout;
// `axes` receives the source's axis order as "NCHW" letters.
absl::Status ShapeOf(const DataSpec& data, const ImageFiles& f, const std::vector<int64_t>& dims,
                     bool npy, ImageSet* set, std::string* axes) {
  std::string layout = data.layout();
  for (char& c : layout) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (!npy && !layout.empty()) {
    return InvalidSpecError(
        "data.layout: only NPY arrays take a layout (an IDX file is [N, H, W] "
        "or [N, C, H, W])");
  }
  if (layout.empty()) layout = dims.size() == 3 ? "NHW" : "NCHW";
  if (layout != "NHW" && layout != "NCHW" && layout != "NHWC") {
    return InvalidSpecError(
        absl::StrCat("data.layout: \"", data.layout(), "\" is not one of NHW, NCHW and NHWC"));
  }
  if (dims.size() != layout.size()) {
    return DataError(
        absl::StrFormat("%s: an array of %d axes (%s), but the layout %s has %d (data.layout)",
                        Where(f), dims.size(), absl::StrJoin(dims, "×"), layout, layout.size()));
  }
  set->count = dims[0];
  for (size_t i = 1; i < layout.size(); ++i) {
    if (dims[i] > (int64_t{1} << 20)) {
      return DataError(
          absl::StrFormat("%s: axis %c of %d is too large", Where(f), layout[i], dims[i]));
    }
    const int32_t d = static_cast<int32_t>(dims[i]);
    if (layout[i] == 'C') set->channels = d;
    if (layout[i] == 'H') set->height = d;
    if (layout[i] == 'W') set->width = d;
  }
  if (set->channels == 0) set->channels = 1;
  if (set->count < 1 || set->height < 1 || set->width < 1) {
    return DataError(
        absl::StrFormat("%s: no images (an array of %s)", Where(f), absl::StrJoin(dims, "×")));
  }
  *axes = layout;
  return absl::OkStatus();
}

// NHWC -> NCHW, in place of `v`.
template <typename T>
void ToPlanar(const ImageSet& set, std::vector<T>* v) {
  const int64_t c = set.channels, hw = int64_t{set.height} * set.width;
  std::vector<T> out(v->size());
  for (int64_t n = 0; n < set.count; ++n) {
    const T* in = v->data() + n * hw * c;
    T* o = out.data() + n * hw * c;
    for (int64_t p = 0; p < hw; ++p) {
      for (int64_t k = 0; k < c; ++k) o[k * hw + p] = in[p * c + k];
    }
  }
  v->swap(out);
}

// The labels of `f.labels_path`: an IDX or NPY array of one axis, or the
// column data.label of a CSV file.
absl::StatusOr<std::vector<std::string>> ReadLabels(const DataSpec& data, const ImageFiles& f,
                                                    std::vector<std::string>* groups) {
  const std::string where = absl::StrCat(f.labels_field, ": ", f.labels_path);
  const DataFormat format = FormatOf(data, f.labels_path);
  std::vector<std::string> labels;
  auto from_values = [&](const std::vector<float>& values, const std::vector<int64_t>& dims,
                         const char* kind) -> absl::Status {
    if (dims.size() != 1) {
      return DataError(absl::StrFormat("%s: labels must be an %s array of one axis, got %s", where,
                                       kind, absl::StrJoin(dims, "×")));
    }
    labels.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      if (!IntegerLabel(values[i], &labels[i])) {
        return DataError(absl::StrFormat("%s: label %d is %g, not an integer", where, i,
                                         static_cast<double>(values[i])));
      }
    }
    return absl::OkStatus();
  };
  if (!f.group_column.empty() && format != traind::v1::CSV) {
    return InvalidSpecError(absl::StrCat(
        "cross_validation.group_column: images take their groups from a column of a CSV labels "
        "file, but ",
        where, " is ", format == traind::v1::IDX ? "IDX" : "NPY"));
  }
  if (format == traind::v1::IDX || format == traind::v1::NPY) {
    std::vector<float> values;
    std::vector<int64_t> dims;
    if (format == traind::v1::IDX) {
      TRAIND_ASSIGN_OR_RETURN(IdxArray a, ReadIdx(f.labels_path, kMaxElements));
      dims = a.dims;
      values = a.type == 0x08 ? std::vector<float>(a.bytes.begin(), a.bytes.end()) : a.values;
    } else {
      TRAIND_ASSIGN_OR_RETURN(NpyArray a, ReadNpy(f.labels_path, kMaxElements));
      dims = a.shape;
      values = a.type == NpyArray::Type::kUint8 ? std::vector<float>(a.bytes.begin(), a.bytes.end())
                                                : a.values;
    }
    TRAIND_RETURN_IF_ERROR(from_values(values, dims, format == traind::v1::IDX ? "IDX" : "NPY"));
    return labels;
  }
  if (format != traind::v1::CSV) {
    return InvalidSpecError(absl::StrCat(where, ": labels are read from an IDX, NPY or CSV file"));
  }
  const std::string column = data.label().empty() ? "label" : data.label();
  const char delimiter = data.delimiter().empty() ? ',' : data.delimiter()[0];
  TRAIND_ASSIGN_OR_RETURN(CsvTable table, ReadCsv(f.labels_path, delimiter));
  const auto it = std::find(table.header.begin(), table.header.end(), column);
  if (it == table.header.end()) {
    return InvalidSpecError(absl::StrFormat("data.label: column %s not found in %s; columns: %s",
                                            QuoteForMessage(column), f.labels_path,
                                            absl::StrJoin(table.header, ", ")));
  }
  const size_t c = static_cast<size_t>(it - table.header.begin());
  labels.reserve(table.rows.size());
  for (size_t r = 0; r < table.rows.size(); ++r) {
    if (table.rows[r][c].empty()) {
      return DataError(absl::StrFormat("%s:%d: column %s (column %d): empty label", f.labels_path,
                                       table.lines[r], QuoteForMessage(column), c + 1));
    }
    labels.push_back(std::move(table.rows[r][c]));
  }
  if (!f.group_column.empty()) {
    const auto g = std::find(table.header.begin(), table.header.end(), f.group_column);
    if (g == table.header.end()) {
      return InvalidSpecError(absl::StrFormat(
          "cross_validation.group_column: column %s not found in %s; columns: %s",
          QuoteForMessage(f.group_column), f.labels_path, absl::StrJoin(table.header, ", ")));
    }
    const size_t gc = static_cast<size_t>(g - table.header.begin());
    groups->reserve(table.rows.size());
    for (size_t r = 0; r < table.rows.size(); ++r) {
      if (table.rows[r][gc].empty()) {
        return DataError(absl::StrFormat("%s:%d: column %s (column %d): empty group", f.labels_path,
                                         table.lines[r], QuoteForMessage(f.group_column), gc + 1));
      }
      groups->push_back(std::move(table.rows[r][gc]));
    }
  }
  return labels;
}

absl::Status ReadFolder(const DataSpec& data, const ImageFiles& f, bool header_only, int threads,
                        ImageSet* set) {
  if (!f.labels_path.empty()) {
    return InvalidSpecError(
        absl::StrCat(f.labels_field, ": an image folder's labels are its class folders"));
  }
  if (!f.group_column.empty()) {
    return InvalidSpecError(
        "cross_validation.group_column: images take their groups from a column of a CSV labels "
        "file; an image folder has none");
  }
  const int channels = data.channels() == 0 ? 3 : data.channels();
  if (channels != 1 && channels != 3) {
    return InvalidSpecError(
        absl::StrCat("data.channels: 1 (grayscale) or 3 (RGB), got ", data.channels()));
  }
  int height = 0, width = 0;
  if (data.image_size_size() != 0) {
    if (data.image_size_size() != 2 || data.image_size(0) < 1 || data.image_size(1) < 1 ||
        data.image_size(0) > 16384 || data.image_size(1) > 16384) {
      return InvalidSpecError("data.image_size: give [height, width], each 1 to 16384");
    }
    height = data.image_size(0);
    width = data.image_size(1);
  }
  // A folder that is not an image folder is the spec's error: it names the field.
  auto in_field = [&](absl::StatusOr<ImageFolder> listed) -> absl::StatusOr<ImageFolder> {
    if (!listed.ok() && FailureKindOf(listed.status()) == FailureKind::kInvalidSpec) {
      return InvalidSpecError(absl::StrCat(f.field, ": ", listed.status().message()));
    }
    return listed;
  };
  ImageFolder folder;
  if (header_only) {
    TRAIND_ASSIGN_OR_RETURN(folder, in_field(ListImageFolder(f.path)));
    if (height == 0) {
      TRAIND_ASSIGN_OR_RETURN(Image first,
                              DecodeImageFile(f.path + "/" + folder.files[0], channels));
      height = first.height;
      width = first.width;
    }
    folder.channels = channels;
    folder.height = height;
    folder.width = width;
  } else {
    TRAIND_ASSIGN_OR_RETURN(folder,
                            in_field(LoadImageFolder(f.path, channels, height, width, threads)));
  }
  set->count = static_cast<int64_t>(folder.files.size());
  set->channels = folder.channels;
  set->height = folder.height;
  set->width = folder.width;
  set->bytes = std::move(folder.pixels);
  set->classes = std::move(folder.classes);
  set->names = std::move(folder.files);
  set->labels.reserve(folder.labels.size());
  for (int32_t label : folder.labels) set->labels.push_back(set->classes[label]);
  return absl::OkStatus();
}

}  // namespace

DataFormat FormatOf(const DataSpec& data, const std::string& path) {
  if (data.format() != traind::v1::FORMAT_AUTO) return data.format();
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  const std::string name = path.substr(path.find_last_of('/') + 1);
  // A directory is an image folder, unless its name says a table was meant ("data.csv"): then the
  // CSV reader says it is not a regular file.
  if (exists && S_ISDIR(st.st_mode)) {
    for (const char* table : {".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz"}) {
      if (absl::EndsWithIgnoreCase(name, table)) return traind::v1::CSV;
    }
    return traind::v1::IMAGE_FOLDER;
  }
  // By the first bytes of a regular file (a FIFO is never opened here) (of the gzip stream's
  // contents when gzipped): an NPY file's magic, or an IDX file's two zero bytes, which no CSV file
  // starts with.
  if (gzFile in = exists && S_ISREG(st.st_mode) ? gzopen(path.c_str(), "rb") : nullptr;
      in != nullptr) {
    unsigned char head[6] = {};
    const int got = gzread(in, head, sizeof(head));
    gzclose(in);
    if (got == 6 && std::memcmp(head, "\x93NUMPY", 6) == 0) return traind::v1::NPY;
    if (got >= 4 && head[0] == 0 && head[1] == 0 && head[3] >= 1) return traind::v1::IDX;
  }
  if (absl::EndsWithIgnoreCase(name, ".npy")) return traind::v1::NPY;
  // A table's extension wins over "idx" in its name ("run_idx.csv", or a
  // temporary name such as "tmp-aiDx3q.csv").
  for (const char* table : {".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz"}) {
    if (absl::EndsWithIgnoreCase(name, table)) return traind::v1::CSV;
  }
  if (absl::StrContains(absl::AsciiStrToLower(name), "idx")) return traind::v1::IDX;
  return traind::v1::CSV;
}

bool IsImageFormat(const DataSpec& data) {
  const DataFormat f = FormatOf(data, data.path());
  return f == traind::v1::IDX || f == traind::v1::NPY || f == traind::v1::IMAGE_FOLDER;
}

absl::StatusOr<ImageSet> ReadImages(const DataSpec& data, const ImageFiles& f, bool header_only,
                                    int threads) {
  ImageSet set;
  const DataFormat format = FormatOf(data, f.path);
  if (format == traind::v1::IMAGE_FOLDER) {
    TRAIND_RETURN_IF_ERROR(ReadFolder(data, f, header_only, threads, &set));
    return set;
  }
  if (format != traind::v1::IDX && format != traind::v1::NPY) {
    return InvalidSpecError(absl::StrCat(
        Where(f), ": not images (data.format: IDX, NPY or IMAGE_FOLDER, as data.path)"));
  }
  const bool npy = format == traind::v1::NPY;
  std::vector<int64_t> dims;
  std::string axes;
  if (npy) {
    TRAIND_ASSIGN_OR_RETURN(NpyArray a, ReadNpy(f.path, kMaxElements, header_only));
    dims = a.shape;
    TRAIND_RETURN_IF_ERROR(ShapeOf(data, f, dims, true, &set, &axes));
    if (a.type == NpyArray::Type::kUint8) {
      set.bytes = std::move(a.bytes);
    } else {
      set.values = std::move(a.values);
    }
    if (header_only && a.type == NpyArray::Type::kUint8) set.bytes.clear();
  } else {
    TRAIND_ASSIGN_OR_RETURN(IdxArray a, ReadIdx(f.path, kMaxElements, header_only));
    dims = a.dims;
    TRAIND_RETURN_IF_ERROR(ShapeOf(data, f, dims, false, &set, &axes));
    if (a.type == 0x08) {
      set.bytes = std::move(a.bytes);
    } else {
      set.values = std::move(a.values);
    }
  }
  if (!header_only && axes == "NHWC") {
    if (!set.bytes.empty()) ToPlanar(set, &set.bytes);
    if (!set.values.empty()) ToPlanar(set, &set.values);
  }
  if (!header_only) {
    for (size_t i = 0; i < set.values.size(); ++i) {
      if (!std::isfinite(set.values[i])) {
        const int64_t image = static_cast<int64_t>(i) / std::max<int64_t>(1, set.features());
        return DataError(absl::StrFormat("%s: image %d has a value that is not finite (%g)",
                                         Where(f), image, static_cast<double>(set.values[i])));
      }
    }
  }
  if (!f.labels_path.empty()) {
    TRAIND_ASSIGN_OR_RETURN(set.labels, ReadLabels(data, f, &set.groups));
    if (static_cast<int64_t>(set.labels.size()) != set.count) {
      return DataError(absl::StrFormat("%s has %d labels, but %s has %d images", f.labels_path,
                                       set.labels.size(), f.path, set.count));
    }
  }
  return set;
}

namespace {

struct JobImages {
  ImageSet train, val;
  bool has_val = false;
};

absl::StatusOr<JobImages> ReadJobImages(const JobSpec& spec, bool header_only, int threads) {
  const DataSpec& d = spec.data();
  JobImages out;
  const bool folder = FormatOf(d, d.path()) == traind::v1::IMAGE_FOLDER;
  if (!folder && d.labels_path().empty()) {
    return InvalidSpecError("data.labels_path: required: the file of the images' labels");
  }
  if (d.labels_size() > 0) {
    return InvalidSpecError("data.labels: images have one label each (data.labels_path)");
  }
  TRAIND_ASSIGN_OR_RETURN(out.train,
                          ReadImages(d,
                                     {"data.path", d.path(), "data.labels_path", d.labels_path(),
                                      spec.cross_validation().group_column()},
                                     header_only, threads));
  const auto& cv = spec.cross_validation();
  out.has_val = spec.has_cross_validation() && !cv.validation_path().empty();
  if (out.has_val) {
    if (!folder && cv.validation_labels_path().empty()) {
      return InvalidSpecError(
          "cross_validation.validation_labels_path: required: the file of the validation "
          "images' labels");
    }
    TRAIND_ASSIGN_OR_RETURN(
        out.val,
        ReadImages(d,
                   {"cross_validation.validation_path", cv.validation_path(),
                    "cross_validation.validation_labels_path", cv.validation_labels_path()},
                   header_only, threads));
    const ImageSet& t = out.train;
    const ImageSet& v = out.val;
    if (v.channels != t.channels || v.height != t.height || v.width != t.width ||
        v.bytes.empty() != t.bytes.empty()) {
      return DataError(absl::StrFormat(
          "cross_validation.validation_path: %s has %d×%d×%d images of %s, but data.path %s has "
          "%d×%d×%d images of %s",
          cv.validation_path(), v.channels, v.height, v.width,
          v.values.empty() ? "bytes" : "floats", d.path(), t.channels, t.height, t.width,
          t.values.empty() ? "bytes" : "floats"));
    }
  }
  if (d.shape_size() != 0) {
    const ImageSet& t = out.train;
    if (d.shape_size() != 3 || d.shape(0) != t.channels || d.shape(1) != t.height ||
        d.shape(2) != t.width) {
      return InvalidSpecError(absl::StrFormat("data.shape: [%s], but the images of %s are %d×%d×%d",
                                              absl::StrJoin(d.shape(), ", "), d.path(), t.channels,
                                              t.height, t.width));
    }
  }
  return out;
}

// Group codes of `groups`, by the groups' sorted values (as a table's group
// column is coded); empty for none.
std::vector<int32_t> GroupCodes(const std::vector<std::string>& groups) {
  std::map<std::string, int32_t> index;
  for (const std::string& g : groups) index.emplace(g, 0);
  int32_t code = 0;
  for (auto& [value, i] : index) i = code++;
  std::vector<int32_t> codes;
  codes.reserve(groups.size());
  for (const std::string& g : groups) codes.push_back(index[g]);
  return codes;
}

// Class codes of `labels` (train then validation images) and the classes.
absl::Status EncodeImageLabels(const DataSpec& d, const JobImages& images,
                               std::vector<std::string>* classes, std::vector<int32_t>* codes) {
  std::vector<std::string> all = images.train.labels;
  all.insert(all.end(), images.val.labels.begin(), images.val.labels.end());
  if (!images.train.classes.empty()) {  // folders: by class folder, as ImageFolder
    *classes = images.train.classes;
    std::map<std::string, int32_t> index;
    for (size_t i = 0; i < classes->size(); ++i) index[(*classes)[i]] = static_cast<int32_t>(i);
    codes->reserve(all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      const auto it = index.find(all[i]);
      if (it == index.end()) {
        return DataError(absl::StrFormat(
            "cross_validation.validation_path: class folder %s is not a class of data.path %s",
            QuoteForMessage(all[i]), d.path()));
      }
      codes->push_back(it->second);
    }
    return absl::OkStatus();
  }
  if (d.class_names_size() > 0) {
    *classes = {d.class_names().begin(), d.class_names().end()};
    codes->reserve(all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      int64_t v = -1;
      if (!absl::SimpleAtoi(all[i], &v) || v < 0 || v >= d.class_names_size()) {
        const bool val = i >= images.train.labels.size();
        return DataError(
            absl::StrFormat("%s: label %d is %s, but data.class_names names classes 0 to %d",
                            val ? "cross_validation.validation_labels_path" : "data.labels_path",
                            val ? i - images.train.labels.size() : i, QuoteForMessage(all[i]),
                            d.class_names_size() - 1));
      }
      codes->push_back(static_cast<int32_t>(v));
    }
    return absl::OkStatus();
  }
  LabelEncoding encoding = EncodeLabels(all);
  *classes = std::move(encoding.classes);
  *codes = std::move(encoding.codes);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Dataset> LoadImageDataset(const JobSpec& spec, int threads) {
  const DataSpec& d = spec.data();
  TRAIND_ASSIGN_OR_RETURN(JobImages images, ReadJobImages(spec, /*header_only=*/false, threads));
  Dataset data;
  const ImageSet& t = images.train;
  data.path = d.path();
  data.rows = t.count + (images.has_val ? images.val.count : 0);
  data.features = t.features();
  data.image_shape = {t.channels, t.height, t.width};
  data.columns = 0;  // no header: limits on columns do not apply to pixels
  data.validation_start = images.has_val ? t.count : -1;
  data.target = TargetKindOf(spec);
  if (data.target == TargetKind::kMultiLabel) {
    return InvalidSpecError("data.labels: images have one label each (data.labels_path)");
  }
  const size_t n = static_cast<size_t>(data.rows * data.features);
  if (!t.bytes.empty()) {
    data.pixels = std::move(images.train.bytes);
    data.pixels.insert(data.pixels.end(), images.val.bytes.begin(), images.val.bytes.end());
    data.pixels.resize(n);
  } else {
    data.x = std::move(images.train.values);
    data.x.insert(data.x.end(), images.val.values.begin(), images.val.values.end());
    data.x.resize(n);
  }
  data.feature_names.reserve(static_cast<size_t>(data.features));
  for (int32_t c = 0; c < t.channels; ++c) {
    for (int32_t y = 0; y < t.height; ++y) {
      for (int32_t x = 0; x < t.width; ++x) {
        data.feature_names.push_back(absl::StrFormat("c%d_y%d_x%d", c, y, x));
      }
    }
  }
  data.lines.resize(static_cast<size_t>(data.rows));
  for (int64_t r = 0; r < data.rows; ++r) {
    data.lines[static_cast<size_t>(r)] = r < t.count ? r : r - t.count;
  }
  data.row_names = std::move(images.train.names);
  data.row_names.insert(data.row_names.end(), images.val.names.begin(), images.val.names.end());
  if (data.target == TargetKind::kRegression) {
    data.outputs = 1;
    data.target_names = {"target"};
    data.targets.reserve(static_cast<size_t>(data.rows));
    for (const ImageSet* set : {&images.train, &images.val}) {
      for (size_t i = 0; i < set->labels.size(); ++i) {
        float v = 0;
        if (const char* wrong = ParseFeature(set->labels[i], &v); wrong != nullptr) {
          return DataError(absl::StrFormat("%s: label %d: %s %s",
                                           set == &images.train
                                               ? d.labels_path()
                                               : spec.cross_validation().validation_labels_path(),
                                           i, QuoteForMessage(set->labels[i]), wrong));
        }
        data.targets.push_back(v);
      }
    }
    data.groups = GroupCodes(images.train.groups);
    return data;
  }
  TRAIND_RETURN_IF_ERROR(EncodeImageLabels(d, images, &data.classes, &data.y));
  if (data.target == TargetKind::kBinary && data.classes.size() != 2) {
    return InvalidSpecError(absl::StrFormat(
        "data.labels_path: %d classes, but sigmoid_binary_cross_entropy needs exactly 2",
        data.classes.size()));
  }
  data.groups = GroupCodes(images.train.groups);
  data.outputs = data.ModelOutputs();
  return data;
}

absl::StatusOr<DatasetSummary> SummarizeImageDataset(const JobSpec& spec) {
  TRAIND_ASSIGN_OR_RETURN(JobImages images, ReadJobImages(spec, /*header_only=*/true, 1));
  const ImageSet& t = images.train;
  DatasetSummary summary;
  summary.rows = t.count;
  summary.validation_rows = images.has_val ? images.val.count : 0;
  summary.features = t.features();
  summary.columns = 0;  // no header
  summary.image_shape = {t.channels, t.height, t.width};
  summary.target = TargetKindOf(spec);
  summary.target_columns = 1;
  if (summary.target == TargetKind::kMultiLabel) {
    return InvalidSpecError("data.labels: images have one label each (data.labels_path)");
  }
  if (!t.groups.empty()) {
    std::map<std::string, int64_t> rows;
    for (const std::string& g : t.groups) ++rows[g];
    for (const auto& [value, n] : rows) summary.group_rows.push_back(n);
    summary.groups_known = true;
  }
  if (summary.target == TargetKind::kRegression) return summary;
  std::vector<std::string> classes;
  std::vector<int32_t> codes;
  TRAIND_RETURN_IF_ERROR(EncodeImageLabels(spec.data(), images, &classes, &codes));
  summary.class_rows.assign(classes.size(), 0);
  for (int32_t c : codes) ++summary.class_rows[static_cast<size_t>(c)];
  summary.classes_known = true;
  if (summary.target == TargetKind::kBinary && summary.class_rows.size() != 2) {
    return InvalidSpecError(absl::StrFormat(
        "data.labels_path: %d classes, but sigmoid_binary_cross_entropy needs exactly 2",
        summary.class_rows.size()));
  }
  return summary;
}

}  // namespace traind::data
