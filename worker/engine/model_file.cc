#include "worker/engine/model_file.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "worker/engine/checkpoint.h"

namespace traind::engine {
namespace {

constexpr const char* kPrefix = "model.";

const char* TargetName(data::TargetKind target) {
  switch (target) {
    case data::TargetKind::kClasses:
      return "classes";
    case data::TargetKind::kBinary:
      return "binary";
    case data::TargetKind::kMultiLabel:
      return "multi_label";
    case data::TargetKind::kRegression:
      return "regression";
  }
  return "";
}

bool ParseTargetName(const std::string& name, data::TargetKind* target) {
  for (data::TargetKind t : {data::TargetKind::kClasses, data::TargetKind::kBinary,
                             data::TargetKind::kMultiLabel, data::TargetKind::kRegression}) {
    if (name == TargetName(t)) {
      *target = t;
      return true;
    }
  }
  return false;
}

// A list of strings as one string record: per item its byte count (u32
// little-endian) and its bytes. Any byte may appear in an item.
std::string EncodeStrings(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    const unsigned char size[4] = {
        static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
        static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)};
    out.append(reinterpret_cast<const char*>(size), 4);
    out.append(s);
  }
  return out;
}

bool DecodeStrings(const std::string& bytes, std::vector<std::string>* items) {
  items->clear();
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < 4) return false;
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + pos);
    const uint32_t n = static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                       static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
    pos += 4;
    if (bytes.size() - pos < n) return false;
    items->push_back(bytes.substr(pos, n));
    pos += n;
  }
  return true;
}

std::string StateKey(const std::string& name, const char* what) {
  return absl::StrCat("state.", name, ".", what);
}

// The "model.*" records of a verified container, every error a DataError
// naming the file.
class ModelRecords {
 public:
  ModelRecords(const CheckpointReader& in, const std::string& path) : in_(in), path_(path) {}

  absl::Status Error(absl::string_view what) const {
    return DataError(absl::StrCat(path_, ": ", what));
  }

  absl::StatusOr<int64_t> Int(const std::string& key) const {
    TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> v, Ints(key));
    if (v.size() != 1) {
      return Error(
          absl::StrFormat("record \"%s%s\" holds %d values, expected 1", kPrefix, key, v.size()));
    }
    return v[0];
  }
  absl::StatusOr<std::vector<int64_t>> Ints(const std::string& key) const {
    return Checked(in_.GetInt64s(kPrefix + key));
  }
  absl::StatusOr<std::vector<double>> Doubles(const std::string& key, size_t expected) const {
    TRAIND_ASSIGN_OR_RETURN(std::vector<double> v, Checked(in_.GetDoubles(kPrefix + key)));
    if (v.size() != expected) {
      return Error(absl::StrFormat("record \"%s%s\" holds %d values, expected %d (one per feature)",
                                   kPrefix, key, v.size(), expected));
    }
    return v;
  }
  absl::StatusOr<std::string> String(const std::string& key) const {
    return Checked(in_.GetString(kPrefix + key));
  }
  absl::StatusOr<std::vector<std::string>> Strings(const std::string& key) const {
    TRAIND_ASSIGN_OR_RETURN(const std::string bytes, String(key));
    std::vector<std::string> items;
    if (!DecodeStrings(bytes, &items)) {
      return Error(absl::StrCat("record \"", kPrefix, key, "\" is not a list of strings"));
    }
    return items;
  }
  absl::Status Floats(const std::string& key, std::vector<float>* out) const {
    absl::Status s = in_.GetFloats(kPrefix + key, out->data(), out->size());
    return s.ok() ? s : Checked(s);
  }

 private:
  // The container names the file in its messages; a missing record
  // (NotFound) becomes a DataError too.
  absl::Status Checked(const absl::Status& s) const {
    if (s.ok() || FailureKindOf(s) == FailureKind::kDataError) return s;
    return DataError(s.message());
  }
  template <typename T>
  absl::StatusOr<T> Checked(absl::StatusOr<T> v) const {
    if (!v.ok()) return Checked(v.status());
    return v;
  }

  const CheckpointReader& in_;
  const std::string& path_;
};

}  // namespace

int64_t TrainedModel::InputWidth() const {
  int64_t width = static_cast<int64_t>(feature_names.size());
  for (const Categorical& c : categorical) width += static_cast<int64_t>(c.categories.size());
  return width;
}

int64_t TrainedModel::Outputs() const {
  switch (target) {
    case data::TargetKind::kClasses:
      return static_cast<int64_t>(classes.size());
    case data::TargetKind::kBinary:
      return 1;
    default:
      return static_cast<int64_t>(target_names.size());
  }
}

absl::Status WriteModelFile(const TrainedModel& model, const std::string& path) {
  const size_t f = model.feature_names.size();
  if (model.impute.size() != f || model.offset.size() != f || model.scale.size() != f) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d features but %d/%d/%d imputation/offset/scale values", path, f,
                        model.impute.size(), model.offset.size(), model.scale.size()));
  }
  CheckpointWriter w;
  StateWriter out(&w, "model");
  out.PutInt("format_version", kModelFormatVersion);
  out.PutString("spec", model.spec.SerializeAsString());
  out.PutInt("task", model.task);
  out.PutInt("epoch", model.epoch);
  out.PutString("features", EncodeStrings(model.feature_names));
  out.PutDoubles("impute", model.impute);
  out.PutDoubles("offset", model.offset);
  out.PutDoubles("scale", model.scale);
  out.PutInt("categorical.count", static_cast<int64_t>(model.categorical.size()));
  for (size_t k = 0; k < model.categorical.size(); ++k) {
    out.PutString(absl::StrCat("categorical.", k, ".name"), model.categorical[k].name);
    out.PutString(absl::StrCat("categorical.", k, ".categories"),
                  EncodeStrings(model.categorical[k].categories));
  }
  out.PutString("target", TargetName(model.target));
  out.PutString("classes", EncodeStrings(model.classes));
  out.PutString("target_names", EncodeStrings(model.target_names));
  std::vector<std::string> names;
  for (const TrainedModel::NamedTensor& t : model.state) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (t.shape.empty() || n != static_cast<int64_t>(t.values.size())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: state \"%s\" has %d values, not its shape's", path, t.name, t.values.size()));
    }
    names.push_back(t.name);
    out.PutInts(StateKey(t.name, "shape"), t.shape);
    out.PutFloats(StateKey(t.name, "values"), t.values.data(), t.values.size());
  }
  out.PutString("state.names", EncodeStrings(names));
  return w.WriteFile(path);
}

absl::StatusOr<TrainedModel> ReadModelFile(const std::string& path) {
  TRAIND_ASSIGN_OR_RETURN(const CheckpointReader in, CheckpointReader::ReadFile(path));
  if (!in.Has("model.format_version")) {
    if (in.Has("meta.spec")) {
      return DataError(absl::StrCat(
          path,
          ": a training checkpoint (epoch-*.ckpt or best.ckpt: the state to resume training "
          "from), not a model; give the task's model.ckpt"));
    }
    return DataError(absl::StrCat(path, ": not a traind model (no model.format_version record)"));
  }
  const ModelRecords r(in, path);
  TRAIND_ASSIGN_OR_RETURN(const int64_t version, r.Int("format_version"));
  if (version != kModelFormatVersion) {
    return r.Error(absl::StrFormat("model format version %d (this traind reads version %d)",
                                   version, kModelFormatVersion));
  }
  TrainedModel model;
  TRAIND_ASSIGN_OR_RETURN(const std::string spec, r.String("spec"));
  if (!model.spec.ParseFromString(spec)) return r.Error("record \"model.spec\" is not a job spec");
  TRAIND_ASSIGN_OR_RETURN(const int64_t task, r.Int("task"));
  TRAIND_ASSIGN_OR_RETURN(const int64_t epoch, r.Int("epoch"));
  model.task = static_cast<int32_t>(task);
  model.epoch = static_cast<int32_t>(epoch);

  TRAIND_ASSIGN_OR_RETURN(model.feature_names, r.Strings("features"));
  const size_t f = model.feature_names.size();
  TRAIND_ASSIGN_OR_RETURN(model.impute, r.Doubles("impute", f));
  TRAIND_ASSIGN_OR_RETURN(model.offset, r.Doubles("offset", f));
  TRAIND_ASSIGN_OR_RETURN(model.scale, r.Doubles("scale", f));
  for (size_t j = 0; j < f; ++j) {
    if (!std::isfinite(model.impute[j]) || !std::isfinite(model.offset[j]) ||
        !std::isfinite(model.scale[j]) || model.scale[j] == 0) {
      return r.Error(absl::StrFormat(
          "feature %d: imputation %g, offset %g, scale %g (finite values and a scale other "
          "than 0 expected)",
          j, model.impute[j], model.offset[j], model.scale[j]));
    }
  }
  TRAIND_ASSIGN_OR_RETURN(const int64_t categorical, r.Int("categorical.count"));
  if (categorical < 0) return r.Error("record \"model.categorical.count\" is negative");
  for (int64_t k = 0; k < categorical; ++k) {
    TrainedModel::Categorical c;
    TRAIND_ASSIGN_OR_RETURN(c.name, r.String(absl::StrCat("categorical.", k, ".name")));
    TRAIND_ASSIGN_OR_RETURN(c.categories,
                            r.Strings(absl::StrCat("categorical.", k, ".categories")));
    model.categorical.push_back(std::move(c));
  }

  TRAIND_ASSIGN_OR_RETURN(const std::string target, r.String("target"));
  if (!ParseTargetName(target, &model.target)) {
    return r.Error(absl::StrCat("record \"model.target\" is \"", target,
                                "\" (expected classes, binary, multi_label or regression)"));
  }
  if (model.target != data::TargetKindOf(model.spec)) {
    return r.Error(
        absl::StrCat("record \"model.target\" (", target, ") disagrees with the loss of its spec"));
  }
  TRAIND_ASSIGN_OR_RETURN(model.classes, r.Strings("classes"));
  TRAIND_ASSIGN_OR_RETURN(model.target_names, r.Strings("target_names"));
  if (model.target == data::TargetKind::kClasses && model.classes.empty()) {
    return r.Error("a class target without classes");
  }
  if (model.target == data::TargetKind::kBinary && model.classes.size() != 2) {
    return r.Error(
        absl::StrFormat("a binary target with %d classes (expected 2)", model.classes.size()));
  }
  if ((model.target == data::TargetKind::kMultiLabel ||
       model.target == data::TargetKind::kRegression) &&
      model.target_names.empty()) {
    return r.Error("no target columns (record \"model.target_names\" is empty)");
  }

  TRAIND_ASSIGN_OR_RETURN(const std::vector<std::string> names, r.Strings("state.names"));
  for (const std::string& name : names) {
    TrainedModel::NamedTensor t;
    t.name = name;
    TRAIND_ASSIGN_OR_RETURN(t.shape, r.Ints(StateKey(name, "shape")));
    int64_t n = 1;
    for (int64_t d : t.shape) {
      if (d <= 0 || n > std::numeric_limits<int32_t>::max() / d) {
        return r.Error(absl::StrCat("record \"model.", StateKey(name, "shape"),
                                    "\" is not the shape of a tensor"));
      }
      n *= d;
    }
    if (t.shape.empty()) {
      return r.Error(absl::StrCat("record \"model.", StateKey(name, "shape"), "\" is empty"));
    }
    t.values.resize(static_cast<size_t>(n));
    TRAIND_RETURN_IF_ERROR(r.Floats(StateKey(name, "values"), &t.values));
    model.state.push_back(std::move(t));
  }
  return model;
}

}  // namespace traind::engine
