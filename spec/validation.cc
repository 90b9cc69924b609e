#include "spec/validation.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "data/csv.h"
#include "data/dataset.h"
#include "data/images.h"
#include "data/split.h"
#include "spec/checks.h"
#include "spec/model_shapes.h"
#include "spec/search.h"
#include "spec/task_plan.h"

namespace traind::spec {
namespace {

using traind::v1::JobSpec;

absl::Status Err(absl::string_view path, absl::string_view what) {
  return InvalidSpecError(absl::StrCat(path, ": ", what));
}

// A regular file that can be opened, without blocking (a FIFO is refused):
// "data.path: <path>: is a FIFO, not a regular file (...)".
absl::Status CheckReadable(const std::string& path, const std::string& field, bool folder = false) {
  if (folder) {
    if (access(path.c_str(), R_OK | X_OK) != 0) {
      return Err(field, absl::StrCat(path, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<int> fd = data::OpenRegularFile(path);
  if (!fd.ok()) return Err(field, fd.status().message());
  close(*fd);
  return absl::OkStatus();
}

// Index of the last dense layer.
int LastDense(const traind::v1::ModelSpec& model) {
  int last = 0;
  for (int i = 0; i < model.layers_size(); ++i) {
    if (model.layers(i).has_dense()) last = i;
  }
  return last;
}

// The image sources' fields: each only where it means something.
absl::Status CheckImageSourceFields(const JobSpec& spec) {
  const traind::v1::DataSpec& d = spec.data();
  const traind::v1::DataFormat format = data::FormatOf(d, d.path());
  const bool images =
      format == traind::v1::IDX || format == traind::v1::NPY || format == traind::v1::IMAGE_FOLDER;
  const bool folder = format == traind::v1::IMAGE_FOLDER;
  struct Field {
    const char* path;
    bool set;
    bool allowed = false;
    const char* where = "";
  };
  const Field fields[] = {
      {"data.labels_path", !d.labels_path().empty(), images && !folder, "IDX and NPY images"},
      {"cross_validation.validation_labels_path",
       !spec.cross_validation().validation_labels_path().empty(), images && !folder,
       "IDX and NPY images"},
      {"data.layout", !d.layout().empty(), format == traind::v1::NPY, "NPY images"},
      {"data.image_size", d.image_size_size() > 0, folder, "image folders"},
      {"data.channels", d.channels() != 0, folder, "image folders"},
      {"data.class_names", d.class_names_size() > 0, images && !folder,
       "the integer labels of IDX and NPY images"},
  };
  if (images) {
    // Columns of a table.
    const Field columns[] = {
        {"data.features", d.features_size() > 0},
        {"data.ignore", d.ignore_size() > 0},
        {"data.id", d.id_size() > 0},
        {"importance", spec.has_importance()},
        {"data.categorical", d.categorical_size() > 0},
        {"data.labels", d.labels_size() > 0},
        {"data.missing", d.missing() != traind::v1::MISSING_ERROR},
    };
    for (const Field& f : columns) {
      if (f.set)
        return Err(f.path, absl::StrCat("only for tables (data.path ", d.path(), " is images)"));
    }
  }
  for (const Field& f : fields) {
    if (f.set && !f.allowed) {
      return Err(f.path,
                 absl::StrCat("only for ", f.where, " (data.path ", d.path(), " is ",
                              images ? (folder ? "an image folder" : "images") : "a table", ")"));
    }
  }
  return absl::OkStatus();
}

// data.normalize and data.augment, for the input `input`.
absl::Status CheckImageFields(const traind::v1::DataSpec& d, const ValueShape& input) {
  const bool used = d.has_normalize() || d.has_augment();
  if (used && !input.image()) {
    return Err(d.has_normalize() ? "data.normalize" : "data.augment",
               "only for images (an image format, or data.shape)");
  }
  if (d.has_normalize()) {
    const auto& n = d.normalize();
    for (const auto& [name, count] : {std::pair<const char*, int>{"mean", n.mean_size()},
                                      std::pair<const char*, int>{"std", n.std_size()}}) {
      if (count != 1 && count != input.channels) {
        return Err(absl::StrCat("data.normalize.", name),
                   absl::StrFormat("give one value, or one per channel (%d); got %d",
                                   input.channels, count));
      }
    }
    for (int i = 0; i < n.mean_size(); ++i) {
      if (!std::isfinite(n.mean(i))) {
        return Err(absl::StrCat("data.normalize.mean[", i, "]"), "must be a finite number");
      }
    }
    for (int i = 0; i < n.std_size(); ++i) {
      if (!(n.std(i) > 0) || !std::isfinite(n.std(i))) {
        return Err(absl::StrCat("data.normalize.std[", i, "]"),
                   absl::StrCat("must be positive, got ", n.std(i)));
      }
    }
    if (d.missing() != traind::v1::MISSING_ERROR) {
      return Err("data.normalize", "images are not imputed: leave out data.missing");
    }
  }
  const int32_t padding = d.augment().crop_padding();
  if (padding < 0 || (padding > 0 && padding > std::min(input.height, input.width))) {
    return Err("data.augment.crop_padding",
               absl::StrFormat("must be between 0 and the image's size (%d×%d), got %d",
                               input.height, input.width, padding));
  }
  return absl::OkStatus();
}

// Checks that need the data's summary. What it does not know (classes or
// groups past its budget) is left to the worker.
absl::Status CheckAgainstData(const JobSpec& spec, const data::DatasetSummary& data) {
  // The layers' shapes: image layers need data.shape, windows must fit.
  if (!spec.data().shape().empty() && spec.data().categorical_size() > 0) {
    return Err("data.categorical",
               "an image (data.shape) has numeric pixels only; leave out data.categorical");
  }
  TRAIND_ASSIGN_OR_RETURN(const ValueShape input, ModelInputShape(spec.data(), data.features));
  TRAIND_RETURN_IF_ERROR(CheckImageSourceFields(spec));
  TRAIND_RETURN_IF_ERROR(CheckImageFields(spec.data(), input));
  TRAIND_RETURN_IF_ERROR(LayerShapes(spec.model(), input).status());
  const int last = LastDense(spec.model());
  const int64_t units = spec.model().layers(last).dense().units();
  const int64_t needed = data.ModelOutputs();  // -1: classes not known
  if (needed < 0) return absl::OkStatus();
  const std::string units_path = absl::StrCat("model.layers[", last, "].dense.units");
  switch (data.target) {
    case data::TargetKind::kClasses:
      if (units != needed) {
        return Err(units_path,
                   absl::StrCat("the last layer has ", units, " units, but ",
                                spec.data().label().empty()
                                    ? std::string("the images' labels name")
                                    : absl::StrCat("data.label \"", spec.data().label(), "\" has"),
                                " ", needed, " classes"));
      }
      break;
    case data::TargetKind::kBinary:
      if (units != 1) {
        return Err(units_path, absl::StrCat("the last layer has ", units,
                                            " units, but a binary sigmoid_binary_cross_entropy "
                                            "needs 1"));
      }
      break;
    case data::TargetKind::kMultiLabel:
    case data::TargetKind::kRegression:
      if (units != needed) {
        return Err(units_path, absl::StrCat("the last layer has ", units, " units, but there are ",
                                            needed, " target columns"));
      }
      break;
  }
  const auto& loss = spec.loss();
  if (loss.has_softmax_cross_entropy() && loss.softmax_cross_entropy().class_weights_size() > 0 &&
      loss.softmax_cross_entropy().class_weights_size() != needed) {
    return Err("loss.softmax_cross_entropy.class_weights",
               absl::StrCat("has ", loss.softmax_cross_entropy().class_weights_size(),
                            " weights, but there are ", needed, " classes"));
  }
  if (loss.has_sigmoid_binary_cross_entropy() &&
      loss.sigmoid_binary_cross_entropy().pos_weight_size() > 0 &&
      loss.sigmoid_binary_cross_entropy().pos_weight_size() != needed) {
    return Err("loss.sigmoid_binary_cross_entropy.pos_weight",
               absl::StrCat("has ", loss.sigmoid_binary_cross_entropy().pos_weight_size(),
                            " values, but the model has ", needed, " outputs"));
  }
  TRAIND_ASSIGN_OR_RETURN(ResolvedMetrics metrics, ResolveSpecMetrics(spec));
  for (const auto* list : {&metrics.train, &metrics.val}) {
    for (traind::v1::Metric m : *list) {
      if (m == traind::v1::ROC_AUC && data.target == data::TargetKind::kClasses && needed != 2) {
        return Err(list == &metrics.train ? "metrics.train" : "metrics.val",
                   absl::StrCat("roc_auc needs a binary or multi-label target (data.label has ",
                                needed, " classes)"));
      }
    }
  }
  if (spec.has_cross_validation()) {
    const auto& cv = spec.cross_validation();
    const int64_t rows = data.rows;
    if (cv.folds() > rows) {
      return Err("cross_validation.folds",
                 absl::StrCat(cv.folds(), " folds, but ", spec.data().path(), " has only ", rows,
                              " rows"));
    }
    if (!cv.group_column().empty() && data.groups_known) {
      const int64_t groups = static_cast<int64_t>(data.group_rows.size());
      if (cv.folds() > groups) {
        return Err("cross_validation.folds",
                   absl::StrCat(cv.folds(), " folds, but group_column \"", cv.group_column(),
                                "\" has only ", groups, " groups"));
      }
    }
    if (cv.validation_fraction() > 0 && rows < 2) {
      return Err("cross_validation.validation_fraction", "needs at least 2 rows");
    }
  }
  return absl::OkStatus();
}

// The fewest rows a task of `spec` trains on, by the worker's splitting
// rules (split.h) on the summary's counts. Every fold of plain and
// stratified k-fold holds at most ceil(rows / folds) rows (their sizes
// differ by at most one), in every repeat; group k-fold (no repeats) and a
// holdout are split once here, as the worker splits them; a validation file
// and the refit task train on every row of data.path. Where the summary does
// not know the classes or groups, the even split is taken.
int64_t MinTrainRows(const JobSpec& spec, const data::DatasetSummary& data) {
  const TaskPlan plan = PlanTasks(spec);
  const int64_t rows = data.rows;
  if (!HasValidation(spec) || !spec.cross_validation().validation_path().empty()) return rows;
  const auto& cv = spec.cross_validation();
  const bool shuffle = !cv.has_shuffle() || cv.shuffle();
  if (cv.validation_fraction() > 0) {  // one task
    const bool class_target =
        data.target == data::TargetKind::kClasses || data.target == data::TargetKind::kBinary;
    const bool stratified = class_target && cv.group_column().empty() &&
                            (!cv.has_stratified() || cv.stratified()) && data.classes_known;
    int64_t val = 0;
    if (stratified) {
      for (int64_t n : data.class_rows) val += data::HoldoutTake(n, cv.validation_fraction(), true);
    } else {
      val = data::HoldoutTake(rows, cv.validation_fraction(), false);
    }
    return rows - val;
  }
  if (!cv.group_column().empty() && data.groups_known) {
    // One split (no repeats), with the job's seed as is.
    const std::vector<int> fold_of =
        data::GroupKFoldAssignment(data.group_rows, plan.folds, shuffle, spec.seed());
    std::vector<int64_t> fold_rows(static_cast<size_t>(plan.folds), 0);
    for (size_t g = 0; g < fold_of.size(); ++g) {
      fold_rows[static_cast<size_t>(fold_of[g])] += data.group_rows[g];
    }
    const int64_t largest =
        fold_rows.empty() ? 0 : *std::max_element(fold_rows.begin(), fold_rows.end());
    return rows - largest;
  }
  return rows - (rows + plan.folds - 1) / plan.folds;
}

// What needs no data, of one spec (a trial's, in a search).
absl::Status CheckWithoutData(const JobSpec& spec, const ValidationContext& context) {
  if (spec.name().size() > 200) return Err("name", "longer than 200 characters");

  // Everything that does not need the data first: cheap, and the errors a
  // user fixes first.
  if (!spec.has_data() || spec.data().path().empty()) return Err("data.path", "required");
  if (spec.data().label().empty() && spec.data().labels_size() == 0 &&
      !data::IsImageFormat(spec.data())) {
    return Err("data.label", "required (the label column, or data.labels)");
  }

  // Model, loss, optimizer, training, metrics and handlers: spec/checks.h's,
  // the same checks the worker makes.
  TRAIND_RETURN_IF_ERROR(CheckTrainingSpec(spec));

  if (!traind::v1::Precision_IsValid(spec.training().precision())) {
    return Err("training.precision",
               absl::StrCat("unknown value ", static_cast<int>(spec.training().precision())));
  }
  switch (spec.resources().device()) {
    case traind::v1::CPU:
      if (spec.resources().count() != 0) {
        return Err("resources.count", "only for device: gpu");
      }
      TRAIND_RETURN_IF_ERROR(CheckCpuPrecision(spec.training().precision(), context.cpu_bf16));
      break;
    case traind::v1::GPU:
      if (context.gpus == 0) {
        return Err("resources.device", "gpu requested, but this server has no usable GPU");
      }
      if (spec.resources().count() < 1 || spec.resources().count() > context.gpus) {
        return Err("resources.count", absl::StrCat("must be between 1 and ", context.gpus, " (got ",
                                                   spec.resources().count(), ")"));
      }
      break;
    default:
      return Err("resources.device", "unknown device");
  }
  return absl::OkStatus();
}

// A trial's error, naming the trial and its values.
absl::Status TrialError(const Trial& trial, const absl::Status& s) {
  std::string values;
  for (const auto& [path, value] : trial.params) {
    absl::StrAppend(&values, values.empty() ? "" : ", ", path, " = ", value);
  }
  return InvalidSpecError(
      absl::StrCat("search: trial ", trial.index, " (", values, "): ", s.message()));
}

}  // namespace

absl::Status ValidateJobSpec(const JobSpec& spec, const ValidationContext& context,
                             ValidatedShape* shape) {
  // A search: the base spec, the search section, then every trial's spec.
  std::vector<Trial> trials;
  if (spec.has_search()) {
    JobSpec base = spec;
    base.clear_search();
    TRAIND_RETURN_IF_ERROR(CheckWithoutData(base, context));
    TRAIND_RETURN_IF_ERROR(CheckSearchSpec(spec));
    absl::StatusOr<ResolvedMetrics> metrics = ResolveSpecMetrics(base);
    if (!metrics.ok()) return metrics.status();
    absl::StatusOr<Monitor> score =
        ResolveMonitor(spec.search().metric(), spec.search().mode(), *metrics, "search.metric");
    if (!score.ok()) return score.status();
    if (!score->val) {
      return Err("search.metric",
                 absl::StrCat(spec.search().metric(), ": trials are scored on a val.* metric"));
    }
    const int64_t n = SearchTrials(spec);
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<Trial> trial = MakeTrial(spec, i);
      if (!trial.ok()) return trial.status();
      if (absl::Status s = CheckWithoutData(trial->spec, context); !s.ok()) {
        return TrialError(*trial, s);
      }
      trials.push_back(*std::move(trial));
    }
  } else {
    TRAIND_RETURN_IF_ERROR(CheckWithoutData(spec, context));
  }

  // Now the data.
  const bool folder = data::FormatOf(spec.data(), spec.data().path()) == traind::v1::IMAGE_FOLDER;
  TRAIND_RETURN_IF_ERROR(CheckReadable(spec.data().path(), "data.path", folder));
  if (spec.has_cross_validation() && !spec.cross_validation().validation_path().empty()) {
    TRAIND_RETURN_IF_ERROR(CheckReadable(spec.cross_validation().validation_path(),
                                         "cross_validation.validation_path", folder));
  }
  if (!spec.data().labels_path().empty()) {
    TRAIND_RETURN_IF_ERROR(CheckReadable(spec.data().labels_path(), "data.labels_path"));
  }
  if (!spec.cross_validation().validation_labels_path().empty()) {
    TRAIND_RETURN_IF_ERROR(CheckReadable(spec.cross_validation().validation_labels_path(),
                                         "cross_validation.validation_labels_path"));
  }
  // One pass over the file, holding no rows (SummarizeDataset): submit's
  // memory does not grow with the data.
  absl::StatusOr<data::DatasetSummary> data = data::SummarizeDataset(spec);
  if (!data.ok()) {
    // A spec error (a column that is not there) is the submitter's; a problem
    // in the rows fails the task with DATA_ERROR when the worker loads them.
    if (FailureKindOf(data.status()) == FailureKind::kInvalidSpec) {
      return data.status();
    }
    return absl::OkStatus();
  }
  // Images whose files state their shape: checked as if data.shape said it
  // (Admission stores it in the spec).
  auto with_shape = [&](const JobSpec& s) {
    JobSpec out = s;
    if (out.data().shape().empty() && !data->image_shape.empty()) {
      for (int32_t d : data->image_shape) out.mutable_data()->add_shape(d);
    }
    return out;
  };
  if (trials.empty()) {
    TRAIND_RETURN_IF_ERROR(CheckAgainstData(with_shape(spec), *data));
  }
  for (const Trial& trial : trials) {
    if (absl::Status s = CheckAgainstData(with_shape(trial.spec), *data); !s.ok()) {
      return TrialError(trial, s);
    }
  }
  if (shape != nullptr) {
    shape->features = data->features;
    shape->rows = data->rows;
    shape->validation_rows = data->validation_rows;
    shape->columns = data->columns;
    shape->min_train_rows = MinTrainRows(spec, *data);
    shape->image_shape = data->image_shape;
    const auto& layers = spec.model().layers();
    for (int i = layers.size() - 1; i >= 0; --i) {
      if (layers[i].has_dense()) {
        shape->outputs = layers[i].dense().units();
        break;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace traind::spec
