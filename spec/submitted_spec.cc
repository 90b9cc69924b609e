#include "spec/submitted_spec.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spec/loader.h"

namespace traind::spec {
namespace {

// The request field that carries the text; it prefixes parse errors.
constexpr char kSpecTextField[] = "spec_text";

// Joins a relative `path` to `base_dir`, or refuses it.
absl::Status ResolveOne(const char* field, std::string* path, absl::string_view base_dir) {
  if (path->empty() || absl::StartsWith(*path, "/")) return absl::OkStatus();
  if (base_dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", *path,
                     " is a relative path: give base_dir (the directory it is relative "
                     "to, e.g. the client's working directory) or an absolute path"));
  }
  std::string joined(base_dir);
  if (!absl::EndsWith(joined, "/")) joined.push_back('/');
  joined += *path;
  *path = std::move(joined);
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplySpecOverrides(traind::v1::JobSpec* spec,
                                const std::vector<std::string>& overrides) {
  if (overrides.size() > kMaxSpecOverrides) {
    return absl::InvalidArgumentError(
        absl::StrCat("overrides: ", overrides.size(), " overrides, more than ", kMaxSpecOverrides));
  }
  for (size_t i = 0; i < overrides.size(); ++i) {
    const std::string& assignment = overrides[i];
    const size_t eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("overrides[", i, "]: expected PATH=VALUE, got \"", assignment, "\""));
    }
    absl::Status set = SetJobSpecField(spec, absl::string_view(assignment).substr(0, eq),
                                       absl::string_view(assignment).substr(eq + 1));
    if (!set.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("overrides[", i, "]: ", set.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ResolveSpecPaths(traind::v1::JobSpec* spec, absl::string_view base_dir) {
  if (!base_dir.empty() && !absl::StartsWith(base_dir, "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat("base_dir: ", base_dir, " is not an absolute path"));
  }
  if (spec->has_data()) {
    std::string path = spec->data().path();
    if (absl::Status s = ResolveOne("spec.data.path", &path, base_dir); !s.ok()) {
      return s;
    }
    if (path != spec->data().path()) spec->mutable_data()->set_path(path);
    path = spec->data().labels_path();
    if (absl::Status s = ResolveOne("spec.data.labels_path", &path, base_dir); !s.ok()) {
      return s;
    }
    if (path != spec->data().labels_path()) spec->mutable_data()->set_labels_path(path);
  }
  if (spec->has_cross_validation()) {
    std::string path = spec->cross_validation().validation_path();
    if (absl::Status s = ResolveOne("spec.cross_validation.validation_path", &path, base_dir);
        !s.ok()) {
      return s;
    }
    if (path != spec->cross_validation().validation_path()) {
      spec->mutable_cross_validation()->set_validation_path(path);
    }
    path = spec->cross_validation().validation_labels_path();
    if (absl::Status s =
            ResolveOne("spec.cross_validation.validation_labels_path", &path, base_dir);
        !s.ok()) {
      return s;
    }
    if (path != spec->cross_validation().validation_labels_path()) {
      spec->mutable_cross_validation()->set_validation_labels_path(path);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<traind::v1::JobSpec> BuildSubmittedSpec(const SpecSubmission& submission) {
  if (submission.spec != nullptr && submission.spec_text != nullptr) {
    return absl::InvalidArgumentError("spec, spec_text: give exactly one of them");
  }
  traind::v1::JobSpec spec;
  if (submission.spec != nullptr) {
    spec = *submission.spec;
  } else if (submission.spec_text != nullptr) {
    const std::string& text = *submission.spec_text;
    if (text.size() > kMaxSpecTextBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(kSpecTextField, ": ", text.size(), " bytes, more than ", kMaxSpecTextBytes));
    }
    absl::StatusOr<traind::v1::JobSpec> parsed = ParseJobSpec(text, kSpecTextField);
    if (!parsed.ok()) return parsed.status();
    spec = *std::move(parsed);
  } else {
    return absl::InvalidArgumentError(
        "spec or spec_text: required (the job spec, as a message or as "
        "YAML/JSON text)");
  }
  if (absl::Status s = ApplySpecOverrides(&spec, submission.overrides); !s.ok()) {
    return s;
  }
  if (absl::Status s = ResolveSpecPaths(&spec, submission.base_dir); !s.ok()) {
    return s;
  }
  return spec;
}

}  // namespace traind::spec
