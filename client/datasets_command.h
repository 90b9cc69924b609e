// trainctl's dataset commands (`trainctl datasets upload|list|get|delete|
// download`) and the uploads `trainctl submit` makes of a spec's data files
// when traind is reached over TCP.
//
// An upload hashes the file (SHA-256), asks traind whether it has those
// bytes (PrepareDatasetUpload: then nothing is sent) or how many of them it
// holds from an interrupted upload, and sends the rest in 1 MiB pieces
// (UploadDataset). A broken stream is resumed the same way, a few times,
// before trainctl gives up; running the command again resumes too. On a
// terminal stderr shows a progress line, redrawn in place.
#ifndef TRAIND_CLIENT_DATASETS_COMMAND_H_
#define TRAIND_CLIENT_DATASETS_COMMAND_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cli_common.h"
#include "client/client.h"
#include "traind/v1/dataset.pb.h"
#include "traind/v1/job.pb.h"

namespace traind::client {

// The `datasets` command as parsed.
struct DatasetsArgs {
  CLI::App* command = nullptr;
  CLI::App* upload = nullptr;
  CLI::App* list = nullptr;
  CLI::App* get = nullptr;
  CLI::App* remove = nullptr;
  CLI::App* download = nullptr;
  std::string file, name, ref, owner, out;
  bool all_versions = false;
};

// Adds `datasets` and its subcommands to `app`, parsing into *args (which
// must outlive the parse).
void AddDatasetsCommand(CLI::App* app, DatasetsArgs* args);

// Runs the `datasets` subcommand parsed into `args`; returns the exit code.
int RunDatasets(const GlobalOptions& global, const DatasetsArgs& args);

// What uploading one file came to.
struct UploadOutcome {
  traind::v1::Dataset dataset;
  bool already_stored = false;  // traind had the bytes: none were sent
  int64_t resumed_at = 0;       // bytes traind held of an earlier upload
};

// Uploads the file at `path` as dataset `name` (a CSV); `file_name` is what
// traind and trainctl's messages call it. Notes ("resuming at ...") and the
// progress line go to stderr.
absl::StatusOr<UploadOutcome> UploadFile(TraindClient& client, const std::string& path,
                                         const std::string& file_name, const std::string& name);

// For `submit` over TCP: uploads data.path and
// cross_validation.validation_path of `spec` where they name a readable
// regular file here (a relative one against `base_dir`) and no dataset is
// named instead, saying one line per file on stderr; returns the overrides
// that name the uploads (DatasetOverrides), to apply after the user's.
absl::StatusOr<std::vector<std::string>> UploadSpecFiles(TraindClient& client,
                                                         const traind::v1::JobSpec& spec,
                                                         const std::string& base_dir);

}  // namespace traind::client

#endif  // TRAIND_CLIENT_DATASETS_COMMAND_H_
