#include "server/store/job_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace traind::server {
namespace fs = std::filesystem;
namespace {

using traind::v1::Artifact;

constexpr absl::string_view kDeletedPrefix = ".deleted-";

// "task-12" -> 12; -1 otherwise.
int TaskOf(absl::string_view part) {
  int task = -1;
  if (!absl::ConsumePrefix(&part, "task-") || !absl::SimpleAtoi(part, &task) || task < 0) return -1;
  return task;
}

// A file being written (an atomic write's temporary beside its target).
bool IsTemporary(absl::string_view base) {
  return absl::StartsWith(base, ".") || absl::StrContains(base, ".tmp.");
}

void Classify(const std::string& name, Artifact* a) {
  std::vector<absl::string_view> parts = absl::StrSplit(name, '/');
  const absl::string_view base = parts.back();
  a->set_task(-1);
  if (parts.size() >= 2 && parts[0] == "tensorboard") {
    a->set_task(TaskOf(parts[1]));
    a->set_kind(Artifact::TENSORBOARD);
    return;
  }
  if (parts.size() >= 2) a->set_task(TaskOf(parts[0]));
  if (absl::EndsWith(base, ".csv") &&
      (absl::StartsWith(base, "predictions") || parts[0] == "predict")) {
    a->set_kind(Artifact::PREDICTIONS);
  } else if (base == "model.ckpt") {
    a->set_kind(Artifact::MODEL);
  } else if (base == "model.onnx") {
    a->set_kind(Artifact::ONNX_MODEL);
  } else if (absl::EndsWith(base, ".log")) {
    a->set_kind(Artifact::LOG);
  } else if (absl::EndsWith(base, ".ckpt")) {
    a->set_kind(Artifact::CHECKPOINT);
  } else {
    a->set_kind(Artifact::OTHER);
  }
}

Artifact Describe(const std::string& name, const struct stat& st) {
  Artifact a;
  a.set_name(name);
  Classify(name, &a);
  a.set_size_bytes(static_cast<int64_t>(st.st_size));
  a.mutable_modify_time()->set_seconds(st.st_mtim.tv_sec);
  a.mutable_modify_time()->set_nanos(static_cast<int32_t>(st.st_mtim.tv_nsec));
  return a;
}

// The refit task's index, if the job has one.
int RefitTask(const traind::v1::Job& job) {
  for (const traind::v1::FoldResult& f : job.result().folds()) {
    if (f.refit()) return f.fold();
  }
  if (job.spec().has_cross_validation() && job.spec().cross_validation().refit()) {
    return job.tasks_size() - 1;  // the last task (spec/task plan)
  }
  return -1;
}

}  // namespace

std::string JobDir(const std::string& state_dir, const std::string& job_id) {
  return (fs::path(state_dir) / "jobs" / job_id).string();
}

absl::StatusOr<std::vector<Artifact>> ListArtifacts(const std::string& state_dir,
                                                    const traind::v1::Job& job) {
  std::vector<Artifact> out;
  const fs::path root = JobDir(state_dir, job.id());
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(root, ec))) return out;
  // recursive_directory_iterator does not follow directory links by default;
  // lstat below skips links to files.
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat(root.string(), ": cannot list: ", ec.message()));
  }
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const fs::path& p = it->path();
    struct stat st;
    if (lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (IsTemporary(p.filename().string())) continue;
    out.push_back(Describe(p.lexically_relative(root).generic_string(), st));
  }
  if (ec) {
    return absl::InternalError(absl::StrCat(root.string(), ": cannot list: ", ec.message()));
  }
  // The refit model under the job's own names.
  if (const int refit = RefitTask(job); refit >= 0) {
    const size_t listed = out.size();
    for (size_t i = 0; i < listed; ++i) {
      const std::string prefix = absl::StrCat("task-", refit, "/");
      const std::string& name = out[i].name();
      if (name == prefix + "model.ckpt" || name == prefix + "model.onnx") {
        Artifact alias = out[i];
        alias.set_name(name.substr(prefix.size()));
        out.push_back(std::move(alias));
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Artifact& a, const Artifact& b) { return a.name() < b.name(); });
  return out;
}

absl::StatusOr<ArtifactFile> FindArtifact(const std::string& state_dir, const traind::v1::Job& job,
                                          const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("name: required");
  const absl::Status not_found = absl::NotFoundError(
      absl::StrCat("job ", job.id(), " has no artifact \"", name, "\" (see ListArtifacts)"));
  // The one file the name can be (not a walk of the job's directory): the
  // refit's model under the job's own names, else the path as it is.
  std::string relative = name;
  if (name == "model.ckpt" || name == "model.onnx") {
    const int refit = RefitTask(job);
    if (refit < 0) return not_found;
    relative = absl::StrCat("task-", refit, "/", name);
  }
  const std::vector<std::string> parts = absl::StrSplit(relative, '/');
  for (const std::string& part : parts) {
    if (part.empty() || part == "." || part == ".." || part.find('\0') != std::string::npos) {
      return not_found;
    }
  }
  if (IsTemporary(parts.back())) return not_found;
  // As ListArtifacts sees it: real directories down to a regular file, no
  // link anywhere on the way.
  fs::path path = JobDir(state_dir, job.id());
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return not_found;
  for (size_t i = 0; i < parts.size(); ++i) {
    path /= parts[i];
    if (lstat(path.c_str(), &st) != 0) return not_found;
    const bool last = i + 1 == parts.size();
    if (last ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode)) return not_found;
  }
  ArtifactFile file;
  file.artifact = Describe(relative, st);
  file.artifact.set_name(name);
  file.path = path.string();
  return file;
}

absl::StatusOr<std::vector<ArtifactFile>> PredictionModels(const std::string& state_dir,
                                                           const traind::v1::Job& job, int task,
                                                           bool ensemble) {
  const int tasks = job.tasks_size();
  const int refit = RefitTask(job);
  std::vector<int> wanted;
  if (task >= 0) {
    if (task >= tasks) {
      return absl::InvalidArgumentError(
          absl::StrCat("task: job ", job.id(), " has tasks 0 to ", tasks - 1, ", not ", task));
    }
    wanted.push_back(task);
  } else if (!ensemble && refit >= 0) {
    wanted.push_back(refit);
  } else {
    for (int t = 0; t < tasks; ++t) {
      if (t != refit) wanted.push_back(t);
    }
  }
  std::vector<ArtifactFile> out;
  for (int t : wanted) {
    absl::StatusOr<ArtifactFile> file =
        FindArtifact(state_dir, job, absl::StrCat("task-", t, "/model.ckpt"));
    if (!file.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job.id(), " has no model of task ", t, " (task-", t,
          "/model.ckpt): the task has not finished training",
          job.tasks_size() > t
              ? absl::StrCat(" (it is ", traind::v1::Task::State_Name(job.tasks(t).state()), ")")
              : ""));
    }
    out.push_back(*std::move(file));
  }
  if (out.empty())
    return absl::FailedPreconditionError(absl::StrCat("job ", job.id(), " has no model"));
  return out;
}

int64_t DirectoryBytes(const std::string& dir) {
  int64_t bytes = 0;
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return 0;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st;
    if (lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) bytes += st.st_size;
  }
  return bytes;
}

namespace {
fs::path AsidePath(const std::string& state_dir, const std::string& job_id) {
  return fs::path(state_dir) / "jobs" / absl::StrCat(kDeletedPrefix, job_id);
}
}  // namespace

absl::StatusOr<int64_t> MoveAside(const std::string& state_dir, const std::string& job_id) {
  const fs::path dir = JobDir(state_dir, job_id);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) return 0;
  const int64_t bytes = DirectoryBytes(dir.string());
  fs::rename(dir, AsidePath(state_dir, job_id), ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat(dir.string(), ": cannot move aside for deletion: ", ec.message()));
  }
  return bytes;
}

absl::Status RestoreAside(const std::string& state_dir, const std::string& job_id) {
  const fs::path aside = AsidePath(state_dir, job_id);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(aside, ec))) return absl::OkStatus();
  fs::rename(aside, JobDir(state_dir, job_id), ec);
  if (ec) {
    return absl::InternalError(absl::StrCat(aside.string(), ": cannot move back: ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status RemoveAside(const std::string& state_dir, const std::string& job_id) {
  const fs::path aside = AsidePath(state_dir, job_id);
  std::error_code ec;
  fs::remove_all(aside, ec);
  if (ec)
    return absl::InternalError(absl::StrCat(aside.string(), ": cannot remove: ", ec.message()));
  return absl::OkStatus();
}

DeletionRecovery RecoverDeletions(const std::string& state_dir,
                                  const std::function<bool(const std::string&)>& known) {
  DeletionRecovery out;
  const fs::path jobs = fs::path(state_dir) / "jobs";
  std::error_code ec;
  if (!fs::is_directory(jobs, ec)) return out;
  std::vector<std::string> ids;
  for (fs::directory_iterator it(jobs, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    absl::string_view name = file;
    if (absl::ConsumePrefix(&name, kDeletedPrefix)) ids.emplace_back(name);
  }
  for (const std::string& id : ids) {
    if (known(id) && RestoreAside(state_dir, id).ok()) {
      out.restored.push_back(id);
    } else if (RemoveAside(state_dir, id).ok()) {
      out.removed.push_back(id);
    }
  }
  return out;
}

}  // namespace traind::server
