// JobFiles: a job's directory under <state_dir>/jobs/<job> — what its
// tasks left there (predictions, models, logs, checkpoints, TensorBoard
// files) listed as artifacts, opened for download, and removed.
//
// A name is '/'-separated and relative to the job's directory. Only regular
// files found by walking that directory without following symbolic links
// are artifacts, so no name (with "..", an absolute path, or a link placed
// there) can reach outside it.
//
// Deletion is crash-safe with the store: the job's directory is first
// renamed to jobs/.deleted-<job> (MoveAside), then the job's rows are
// deleted (one transaction), then the directory is removed (RemoveAside).
// At start, RecoverDeletions finishes what a kill interrupted: a
// .deleted-<job> whose job the store still has is renamed back (the job is
// whole again), any other is removed (the job is gone).
//
// No SQLite and no gRPC here. Thread-safety: stateless functions.
#ifndef TRAIND_SERVER_STORE_JOB_FILES_H_
#define TRAIND_SERVER_STORE_JOB_FILES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"
#include "traind/v1/training_service.pb.h"

namespace traind::server {

// "<state_dir>/jobs/<job_id>".
std::string JobDir(const std::string& state_dir, const std::string& job_id);

// The artifacts of `job`, by name. A job whose directory does not exist
// (nothing ran yet) has none. With a refit task whose model files exist,
// "model.ckpt" and "model.onnx" name them too.
absl::StatusOr<std::vector<traind::v1::Artifact>> ListArtifacts(const std::string& state_dir,
                                                                const traind::v1::Job& job);

// The file behind artifact `name` of `job` and its listing: NOT_FOUND
// (naming the job and the name) unless ListArtifacts lists it. Looks at
// that one path (each directory on the way and the file), never the rest
// of the job's files.
struct ArtifactFile {
  traind::v1::Artifact artifact;
  std::string path;
};
absl::StatusOr<ArtifactFile> FindArtifact(const std::string& state_dir, const traind::v1::Job& job,
                                          const std::string& name);

// Renames the job's directory to jobs/.deleted-<job>; returns the bytes
// its files hold. A missing directory is no error (0 bytes).
absl::StatusOr<int64_t> MoveAside(const std::string& state_dir, const std::string& job_id);
// Renames it back (the delete did not happen).
absl::Status RestoreAside(const std::string& state_dir, const std::string& job_id);
// Removes jobs/.deleted-<job> (missing: no error).
absl::Status RemoveAside(const std::string& state_dir, const std::string& job_id);

struct DeletionRecovery {
  std::vector<std::string> restored;  // job ids whose directory came back
  std::vector<std::string> removed;   // job ids whose directory was removed
};
// At start, before anything lists artifacts (see the file comment).
DeletionRecovery RecoverDeletions(const std::string& state_dir,
                                  const std::function<bool(const std::string&)>& known);

// The model files Predict scores with: task `task`'s (>= 0), the fold
// models' (ensemble: every task but the refit one), or by default the
// refit task's, else the fold models'. FAILED_PRECONDITION naming what is
// missing when a model file is not there (the task has not finished, or
// was trained by a traind that kept no model).
absl::StatusOr<std::vector<ArtifactFile>> PredictionModels(const std::string& state_dir,
                                                           const traind::v1::Job& job, int task,
                                                           bool ensemble);

// Bytes of the regular files under `dir` (0 when it does not exist).
int64_t DirectoryBytes(const std::string& dir);

}  // namespace traind::server

#endif  // TRAIND_SERVER_STORE_JOB_FILES_H_
