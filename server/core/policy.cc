#include "server/core/policy.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spec/search.h"

namespace traind::server {
namespace {

// realpath(3); errno on failure.
bool RealPath(const std::string& path, std::string* out) {
  std::unique_ptr<char, decltype(&free)> resolved(realpath(path.c_str(), nullptr), &free);
  if (!resolved) return false;
  *out = resolved.get();
  return true;
}

bool Inside(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || (absl::StartsWith(path, root) && path[root.size()] == '/');
}

}  // namespace

absl::StatusOr<DataRoots> DataRoots::Create(const std::vector<std::string>& roots) {
  DataRoots d;
  for (const std::string& root : roots) {
    std::string resolved;
    if (root.empty() || !RealPath(root, &resolved)) {
      return absl::InvalidArgumentError(
          absl::StrCat("data_roots: ", root, ": ", root.empty() ? "empty path" : strerror(errno)));
    }
    struct stat st;
    if (stat(resolved.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("data_roots: ", root, ": not a directory"));
    }
    d.roots_.push_back(resolved);
  }
  return d;
}

absl::StatusOr<std::string> DataRoots::Confine(const std::string& field,
                                               const std::string& path) const {
  std::string resolved;
  if (!RealPath(path, &resolved)) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      // Existence is not secret; contents are. Nothing is opened.
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": ", path,
                       ": no such file on the traind server (to train on a file of your machine, "
                       "upload it: trainctl datasets upload FILE; trainctl submit over TCP "
                       "uploads it itself)"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat(field, ": ", path, ": cannot resolve: ", strerror(err)));
  }
  for (const std::string& root : roots_) {
    if (Inside(resolved, root)) return resolved;
  }
  std::string shown = resolved == path ? path : absl::StrCat(path, " (resolves to ", resolved, ")");
  return absl::PermissionDeniedError(
      absl::StrCat(field, ": ", shown, " is outside the data roots of this traind (",
                   absl::StrJoin(roots_, ", "),
                   "); a file of your machine is uploaded with trainctl datasets upload FILE"));
}

absl::Status DataRoots::ConfineSpec(traind::v1::JobSpec* spec) const {
  if (!spec->data().path().empty()) {
    absl::StatusOr<std::string> p = Confine("spec.data.path", spec->data().path());
    if (!p.ok()) return p.status();
    spec->mutable_data()->set_path(*p);
  }
  if (spec->has_cross_validation() && !spec->cross_validation().validation_path().empty()) {
    absl::StatusOr<std::string> p = Confine("spec.cross_validation.validation_path",
                                            spec->cross_validation().validation_path());
    if (!p.ok()) return p.status();
    spec->mutable_cross_validation()->set_validation_path(*p);
  }
  if (!spec->data().labels_path().empty()) {
    absl::StatusOr<std::string> p = Confine("spec.data.labels_path", spec->data().labels_path());
    if (!p.ok()) return p.status();
    spec->mutable_data()->set_labels_path(*p);
  }
  if (spec->has_cross_validation() && !spec->cross_validation().validation_labels_path().empty()) {
    absl::StatusOr<std::string> p = Confine("spec.cross_validation.validation_labels_path",
                                            spec->cross_validation().validation_labels_path());
    if (!p.ok()) return p.status();
    spec->mutable_cross_validation()->set_validation_labels_path(*p);
  }
  return absl::OkStatus();
}

namespace {

// The limits on one spec's own values (a search's base spec, or a trial's).
absl::Status CheckModelAndTraining(const traind::v1::JobSpec& spec, const LimitsConfig& limits) {
  const int layers = spec.model().layers_size();
  if (layers > limits.max_layers) {
    return absl::InvalidArgumentError(absl::StrCat("spec.model.layers: ", layers,
                                                   " layers, more than this traind allows (",
                                                   limits.max_layers, ", limits.max_layers)"));
  }
  for (int i = 0; i < layers; ++i) {
    const traind::v1::Layer& layer = spec.model().layers(i);
    if (layer.has_dense() && layer.dense().units() > limits.max_units) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.model.layers[", i, "].dense.units: ", layer.dense().units(),
          " units, more than this traind allows (", limits.max_units, ", limits.max_units)"));
    }
  }
  if (spec.training().epochs() > limits.max_epochs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.training.epochs: ", spec.training().epochs(),
        " epochs, more than this traind allows (", limits.max_epochs, ", limits.max_epochs)"));
  }
  if (spec.training().batches() > limits.max_batches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.training.batches: ", spec.training().batches(),
        " batches, more than this traind allows (", limits.max_batches, ", limits.max_batches)"));
  }
  return absl::OkStatus();
}

// Runs `check` on every trial of a search as on a spec of its own: a trial
// sets values the base spec's check never saw. The error names the trial
// and its values. Trials that cannot be made are left to validation.
absl::Status CheckEveryTrial(const traind::v1::JobSpec& spec,
                             const std::function<absl::Status(const traind::v1::JobSpec&)>& check) {
  if (!spec.has_search() || !spec::CheckSearchSpec(spec).ok()) return absl::OkStatus();
  const int64_t trials = std::min<int64_t>(spec::SearchTrials(spec), spec::kMaxSearchTrials);
  for (int64_t i = 0; i < trials; ++i) {
    absl::StatusOr<spec::Trial> trial = spec::MakeTrial(spec, static_cast<int>(i));
    if (!trial.ok()) continue;
    if (absl::Status s = check(trial->spec); !s.ok()) {
      std::vector<std::string> values;
      for (const auto& [path, value] : trial->params) values.push_back(path + " = " + value);
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.search: trial ", i, " (", absl::StrJoin(values, ", "), "): ", s.message()));
    }
  }
  return absl::OkStatus();
}

// training.batches: the epochs the worker runs for it (fit_task.cc:
// ceil(batches / batches_per_epoch)), on the task with the fewest rows.
absl::Status CheckBatchesAsEpochs(const traind::v1::JobSpec& spec,
                                  const spec::ValidatedShape& shape, const LimitsConfig& limits) {
  const int64_t batches = spec.training().batches();
  const int64_t batch_size = spec.training().batch_size();
  if (batches > 0 && batch_size > 0 && shape.min_train_rows > 0) {
    const int64_t per_epoch = (shape.min_train_rows + batch_size - 1) / batch_size;
    const int64_t epochs = (batches + per_epoch - 1) / per_epoch;
    if (epochs > limits.max_epochs) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.training.batches: ", batches, " batches are ", epochs, " epochs of ", per_epoch,
          per_epoch == 1 ? " batch" : " batches", " (", shape.min_train_rows,
          " training rows, batch_size ", batch_size, "), more than this traind allows (",
          limits.max_epochs, ", limits.max_epochs)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSpecLimits(const traind::v1::JobSpec& spec, const LimitsConfig& limits) {
  if (absl::Status s = CheckModelAndTraining(spec, limits); !s.ok()) return s;
  // As PlanTasks counts them, in 64 bits: the spec is not validated yet.
  const traind::v1::CrossValidationSpec& cv = spec.cross_validation();
  const int64_t folds = cv.folds() > 0 ? cv.folds() : 1;
  const int64_t repeats = std::max(1, cv.repeats());
  if (spec.has_cross_validation()) {
    const int64_t tasks = folds * repeats + (cv.refit() ? 1 : 0);
    if (tasks > limits.max_tasks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.cross_validation: ", folds, " folds × ", repeats, " repeats",
          cv.refit() ? " + refit" : "", " = ", tasks, " tasks, more than this traind allows (",
          limits.max_tasks, ", limits.max_tasks)"));
    }
  }
  if (spec.has_search()) {
    const int64_t trials = std::max<int64_t>(1, spec::SearchTrials(spec));
    const bool refit = spec.search().refit_best();
    const int64_t all = trials * folds * repeats + (refit ? 1 : 0);
    if (all > limits.max_tasks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.search: ", trials, " trials × ", folds * repeats, " fold tasks",
          refit ? " + refit_best" : "", " = ", all, " tasks, more than this traind allows (",
          limits.max_tasks, ", limits.max_tasks)"));
    }
  }
  return CheckEveryTrial(spec, [&limits](const traind::v1::JobSpec& trial) {
    return CheckModelAndTraining(trial, limits);
  });
}

absl::Status CheckDataLimits(const traind::v1::JobSpec& spec, const spec::ValidatedShape& shape,
                             const LimitsConfig& limits) {
  const std::string& path = spec.data().path();
  if (shape.rows > limits.max_rows) {
    return absl::InvalidArgumentError(absl::StrCat("spec.data.path: ", path, " has ", shape.rows,
                                                   " rows, more than this traind allows (",
                                                   limits.max_rows, ", limits.max_rows)"));
  }
  if (shape.validation_rows > limits.max_rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.cross_validation.validation_path: ", spec.cross_validation().validation_path(),
        " has ", shape.validation_rows, " rows, more than this traind allows (", limits.max_rows,
        ", limits.max_rows)"));
  }
  if (shape.columns > limits.max_columns) {
    return absl::InvalidArgumentError(absl::StrCat("spec.data.path: ", path, " has ", shape.columns,
                                                   " columns, more than this traind allows (",
                                                   limits.max_columns, ", limits.max_columns)"));
  }
  if (absl::Status s = CheckBatchesAsEpochs(spec, shape, limits); !s.ok()) return s;
  return CheckEveryTrial(spec, [&shape, &limits](const traind::v1::JobSpec& trial) {
    return CheckBatchesAsEpochs(trial, shape, limits);
  });
}

}  // namespace traind::server
