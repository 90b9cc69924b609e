#include "client/datasets_command.h"

#include <openssl/evp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/dataset_render.h"
#include "data/images.h"

namespace traind::client {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kPiece = 1 << 20;  // bytes per UploadDataset message
constexpr int kUploadRetries = 3;   // resumptions after a broken stream

bool StderrIsTerminal() {
  const char* term = std::getenv("TERM");
  return isatty(STDERR_FILENO) && term != nullptr && std::string(term) != "dumb";
}

void Note(const std::string& text) {
  std::cout.flush();
  std::cerr << "trainctl: " << text << std::endl;
}

// The progress line of one transfer on stderr, when stderr is a terminal:
// redrawn in place at most 10 times a second, erased by Clear().
class ProgressMeter {
 public:
  explicit ProgressMeter(std::string label) : label_(std::move(label)) {}
  ~ProgressMeter() { Clear(); }
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  // A transfer of `total` bytes starts with `done` of them already there:
  // the rate counts only what follows.
  void Start(int64_t done, int64_t total) {
    start_ = last_draw_ = Clock::now();
    start_done_ = done;
    total_ = total;
  }

  // Redraws the line unless it was drawn less than 0.1 s ago (force: even
  // then).
  void Update(int64_t done, bool force = false) {
    if (!enabled_) return;
    const Clock::time_point now = Clock::now();
    if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    TransferProgress progress;
    progress.label = label_;
    progress.done = done;
    progress.total = total_;
    progress.bytes_per_second =
        seconds > 0.2 ? static_cast<double>(done - start_done_) / seconds : 0.0;
    struct winsize ws {};
    const int width = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
    std::cerr << '\r' << ProgressLine(progress, width) << "\033[K" << std::flush;
    drawn_ = true;
  }

  void Clear() {
    if (!drawn_) return;
    std::cerr << "\r\033[K" << std::flush;
    drawn_ = false;
  }

 private:
  const bool enabled_ = StderrIsTerminal();
  const std::string label_;
  Clock::time_point start_, last_draw_;
  int64_t start_done_ = 0;
  int64_t total_ = 0;
  bool drawn_ = false;
};

// While an upload runs, Ctrl-C says how to resume it. The text is made
// before the signal can come: the handler only writes it and exits.
class UploadInterruptNotice {
 public:
  explicit UploadInterruptNotice(const std::string& file) {
    const std::string text =
        absl::StrCat(StderrIsTerminal() ? "\r\033[K" : "", "trainctl: upload of ", file,
                     " stopped; run the same command again to resume it\n");
    std::snprintf(text_, sizeof(text_), "%s", text.c_str());
    struct sigaction sa {};
    sa.sa_handler = &UploadInterruptNotice::Handle;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &previous_);
  }
  ~UploadInterruptNotice() { sigaction(SIGINT, &previous_, nullptr); }
  UploadInterruptNotice(const UploadInterruptNotice&) = delete;
  UploadInterruptNotice& operator=(const UploadInterruptNotice&) = delete;

 private:
  static void Handle(int) {
    const ssize_t ignored = write(STDERR_FILENO, text_, std::strlen(text_));
    (void)ignored;
    _exit(130);  // 128 + SIGINT
  }
  static inline char text_[1024];
  struct sigaction previous_ {};
};

// The file's size and lower-case hex SHA-256, read in one pass.
struct FileDigest {
  int64_t size = 0;
  std::string sha256;
};

absl::StatusOr<FileDigest> HashFile(std::ifstream& in, const std::string& file_name, int64_t size) {
  ProgressMeter meter("hashing " + std::filesystem::path(file_name).filename().string());
  meter.Start(0, size);
  EVP_MD_CTX* sha = EVP_MD_CTX_new();
  EVP_DigestInit_ex(sha, EVP_sha256(), nullptr);
  std::string buffer(kPiece, '\0');
  FileDigest digest;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0) break;
    EVP_DigestUpdate(sha, buffer.data(), static_cast<size_t>(n));
    digest.size += n;
    meter.Update(digest.size);
  }
  unsigned char bytes[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(sha, bytes, &length);
  EVP_MD_CTX_free(sha);
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(file_name, ": read failed"));
  digest.sha256 =
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes), length));
  return digest;
}

bool IsReadableRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), R_OK) == 0;
}

// The terminal's width for stdout's tables, else 80.
int OutputWidth() {
  struct winsize ws {};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    return ws.ws_col;
  }
  return 80;
}

int Upload(const GlobalOptions& global, const DatasetsArgs& args) {
  const std::string name = args.name.empty() ? DefaultDatasetName(args.file) : args.name;
  if (!IsDatasetName(name)) {
    return UsageError(absl::StrCat("--name ", name,
                                   ": a dataset name is 1 to 128 characters of A-Z a-z 0-9 . _ "
                                   "-, not starting with '.'"));
  }
  std::unique_ptr<TraindClient> client = global.MakeClient();
  absl::StatusOr<UploadOutcome> outcome = UploadFile(*client, args.file, args.file, name);
  if (!outcome.ok()) return Fail(outcome.status());
  if (outcome->already_stored) Note("already stored, nothing sent");
  std::cout << (global.structured() ? global.Encode(outcome->dataset, true)
                                    : RenderDatasetSummary(outcome->dataset, OutputWidth()));
  return kExitOk;
}

int List(const GlobalOptions& global, const DatasetsArgs& args) {
  traind::v1::ListDatasetsRequest request;
  request.set_name(args.name);
  request.set_owner(args.owner);
  absl::StatusOr<traind::v1::ListDatasetsResponse> list =
      global.MakeClient()->ListDatasets(request);
  if (!list.ok()) return Fail(list.status());
  std::cout << (global.structured() ? global.Encode(*list, true) : RenderDatasetList(*list));
  return kExitOk;
}

int Get(const GlobalOptions& global, const DatasetsArgs& args) {
  traind::v1::GetDatasetRequest request;
  request.set_ref(args.ref);
  request.set_owner(args.owner);
  absl::StatusOr<traind::v1::Dataset> dataset = global.MakeClient()->GetDataset(request);
  if (!dataset.ok()) return Fail(dataset.status());
  std::cout << (global.structured() ? global.Encode(*dataset, true)
                                    : RenderDataset(*dataset, OutputWidth()));
  return kExitOk;
}

int Delete(const GlobalOptions& global, const DatasetsArgs& args) {
  traind::v1::DeleteDatasetRequest request;
  request.set_ref(args.ref);
  request.set_owner(args.owner);
  request.set_all_versions(args.all_versions);
  absl::StatusOr<traind::v1::DeleteDatasetResponse> deleted =
      global.MakeClient()->DeleteDataset(request);
  if (!deleted.ok()) return Fail(deleted.status());
  std::cout << (global.structured() ? global.Encode(*deleted, true)
                                    : RenderDeletedDatasets(*deleted));
  return kExitOk;
}

// The dataset is looked up first: its name and version name the file by
// default, and its SHA-256 is what the bytes must hash to.
int Download(const GlobalOptions& global, const DatasetsArgs& args) {
  std::unique_ptr<TraindClient> client = global.MakeClient();
  traind::v1::GetDatasetRequest request;
  request.set_ref(args.ref);
  request.set_owner(args.owner);
  absl::StatusOr<traind::v1::Dataset> dataset = client->GetDataset(request);
  if (!dataset.ok()) return Fail(dataset.status());
  const std::string file_name = absl::StrCat(dataset->name(), "-", dataset->version(), ".csv");
  const std::string out = args.out.empty() ? file_name : args.out;
  // The bytes are the digest's, whichever version the name meant meanwhile.
  request.set_ref("sha256:" + dataset->sha256());
  std::string written_to;
  absl::StatusOr<traind::v1::Artifact> artifact =
      client->DownloadDatasetToFile(request, dataset->sha256(), out, file_name, &written_to);
  if (!artifact.ok()) return Fail(artifact.status());
  if (out != "-") {
    Note(absl::StrCat("saved dataset ", DatasetRef(*dataset), " to ", written_to, " (",
                      FormatDecimalBytes(artifact->size_bytes()), ", SHA-256 checked)"));
  }
  return kExitOk;
}

}  // namespace

void AddDatasetsCommand(CLI::App* app, DatasetsArgs* args) {
  args->command = app->add_subcommand(
      "datasets",
      "Datasets stored by traind: upload a CSV once and name it in specs (data.dataset), list, "
      "show, delete and download them");
  args->command->require_subcommand(1);
  CLI::App* datasets = args->command;

  args->upload = datasets->add_subcommand(
      "upload",
      "Upload a CSV as a dataset (its next version when the name has other bytes); nothing is "
      "sent when traind has these bytes, and an interrupted upload resumes where it stopped");
  args->upload->add_option("FILE", args->file, "The CSV file")->required();
  args->upload
      ->add_option("--name", args->name,
                   "Dataset name (default: FILE's base name without its extension, characters "
                   "outside A-Z a-z 0-9 . _ - made '-')")
      ->type_name("NAME");

  args->list = datasets->add_subcommand("list", "List your datasets (an admin: everyone's)");
  args->list->add_option("NAME", args->name, "Only this name's versions");

  const std::string ref_help = "Dataset: NAME (its latest version), NAME:VERSION or sha256:HEX";
  args->get = datasets->add_subcommand(
      "get",
      "Show a dataset: its profile (per column: kind, missing, distinct, min, max, mean, "
      "most frequent values) and the jobs that used it");
  args->get->add_option("REF", args->ref, ref_help)->required();

  args->remove = datasets->add_subcommand(
      "delete", "Delete a dataset version; refused while a job that has not finished uses it");
  args->remove->add_option("REF", args->ref, ref_help)->required();
  args->remove->add_flag("--all-versions", args->all_versions, "Every version of REF's name");

  args->download = datasets->add_subcommand(
      "download", "Download a dataset's bytes (their size and SHA-256 are checked)");
  args->download->add_option("REF", args->ref, ref_help)->required();
  args->download
      ->add_option("-O,--out", args->out,
                   "Where to save it (default: NAME-VERSION.csv in the current directory; into "
                   "FILE when it is a directory; - for stdout)")
      ->type_name("FILE");

  for (CLI::App* sub : {args->list, args->get, args->remove, args->download}) {
    sub->add_option("--owner", args->owner, "An admin: the owner whose datasets to use")
        ->type_name("USER");
  }
}

int RunDatasets(const GlobalOptions& global, const DatasetsArgs& args) {
  if (*args.upload) return Upload(global, args);
  if (*args.list) return List(global, args);
  if (*args.get) return Get(global, args);
  if (*args.remove) return Delete(global, args);
  if (*args.download) return Download(global, args);
  return UsageError("datasets: no command given (see trainctl datasets --help)");
}

absl::StatusOr<UploadOutcome> UploadFile(TraindClient& client, const std::string& path,
                                         const std::string& file_name, const std::string& name) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ": ", ec ? ec.message() : "not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(file_name, ": ", std::strerror(errno)));
  const int64_t size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  absl::StatusOr<FileDigest> digest = HashFile(in, file_name, ec ? 0 : size);
  if (!digest.ok()) return digest.status();

  traind::v1::PrepareDatasetUploadRequest file;
  file.set_name(name);
  file.set_size_bytes(digest->size);
  file.set_sha256(digest->sha256);
  file.set_kind(traind::v1::Dataset::CSV);
  file.set_file_name(file_name);

  UploadInterruptNotice notice(file_name);
  UploadOutcome outcome;
  int64_t sent = 0;  // by this command, over every try
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<traind::v1::PrepareDatasetUploadResponse> prepared =
        client.PrepareDatasetUpload(file);
    if (!prepared.ok()) return prepared.status();
    if (prepared->has_dataset()) {
      outcome.dataset = prepared->dataset();
      outcome.already_stored = sent == 0;
      return outcome;
    }
    const int64_t offset = prepared->offset();
    if (offset < 0 || offset > digest->size) {
      return absl::InternalError(absl::StrCat("traind holds ", offset, " bytes of ", file_name,
                                              ", which has ", digest->size));
    }
    if (offset > 0) {
      if (attempt == 0) outcome.resumed_at = offset;
      Note(absl::StrCat(file_name, ": resuming at ", offset, " bytes (", FormatDecimalBytes(offset),
                        " of ", FormatDecimalBytes(digest->size), ")"));
    }
    in.clear();
    in.seekg(offset);
    if (!in) return absl::InvalidArgumentError(absl::StrCat(file_name, ": seek failed"));

    traind::v1::UploadDatasetRequest::Header header;
    *header.mutable_file() = file;
    header.set_offset(offset);
    ProgressMeter meter(std::filesystem::path(file_name).filename().string());
    meter.Start(offset, digest->size);
    int64_t position = offset;
    absl::StatusOr<traind::v1::Dataset> dataset =
        client.UploadDataset(header, [&](std::string* piece) -> absl::Status {
          const int64_t want = std::min<int64_t>(kPiece, digest->size - position);
          if (want == 0) {
            // Every byte is on its way: 100% stays shown while traind
            // receives the last ones and checks the file.
            meter.Update(position, /*force=*/true);
            return absl::OkStatus();
          }
          piece->resize(static_cast<size_t>(want));
          in.read(piece->data(), want);
          if (in.gcount() != want) {
            return absl::FailedPreconditionError(absl::StrCat(
                file_name, ": ", in.bad() ? "read failed" : "the file changed while it was sent",
                "; traind keeps what it received: upload it again"));
          }
          position += want;
          sent += want;
          meter.Update(position);
          return absl::OkStatus();
        });
    meter.Clear();
    if (dataset.ok()) {
      outcome.dataset = *std::move(dataset);
      return outcome;
    }
    // A broken stream (or the end of the last one not yet seen by traind):
    // ask again where to resume.
    const absl::StatusCode code = dataset.status().code();
    if (attempt >= kUploadRetries ||
        (code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kAborted)) {
      return dataset.status();
    }
    const int wait_seconds = 1 << attempt;
    Note(absl::StrCat(file_name, ": upload interrupted (", dataset.status().message(),
                      "); trying again in ", wait_seconds, "s"));
    std::this_thread::sleep_for(std::chrono::seconds(wait_seconds));
  }
}

absl::StatusOr<std::vector<std::string>> UploadSpecFiles(TraindClient& client,
                                                         const traind::v1::JobSpec& spec,
                                                         const std::string& base_dir) {
  struct Field {
    const std::string& path;
    const std::string& dataset;
    std::string* sha256;
  };
  if (data::IsImageFormat(spec.data())) {
    // Uploads hold tables (their profile reads CSV): image files go to traind
    // as paths on its machine.
    Note(absl::StrCat(spec.data().path(), ": images are not uploaded; traind reads the path"));
    return std::vector<std::string>();
  }
  SpecUploads uploads;
  const Field fields[] = {
      {spec.data().path(), spec.data().dataset(), &uploads.data_sha256},
      {spec.cross_validation().validation_path(), spec.cross_validation().validation_dataset(),
       &uploads.validation_sha256},
  };
  for (const Field& field : fields) {
    if (field.path.empty() || !field.dataset.empty()) continue;
    std::filesystem::path resolved(field.path);
    if (resolved.is_relative()) {
      if (base_dir.empty()) continue;
      resolved = std::filesystem::path(base_dir) / resolved;
    }
    if (!IsReadableRegularFile(resolved.string())) continue;  // traind's to find
    absl::StatusOr<UploadOutcome> outcome =
        UploadFile(client, resolved.string(), field.path, DefaultDatasetName(field.path));
    if (!outcome.ok() && outcome.status().code() == absl::StatusCode::kUnimplemented) {
      // A traind that stores no datasets: the paths go to it as they are.
      Note(absl::StrCat(field.path, ": this traind takes no uploads; it reads the path itself"));
      return std::vector<std::string>();
    }
    if (!outcome.ok() && outcome.status().code() == absl::StatusCode::kPermissionDenied) {
      // A caller who may not upload: the submit goes as before, for traind
      // to answer (a viewer may not submit either).
      return std::vector<std::string>();
    }
    if (!outcome.ok()) return outcome.status();
    const traind::v1::Dataset& d = outcome->dataset;
    if (outcome->already_stored) {
      Note(absl::StrCat(field.path, ": traind already has it (", DatasetRef(d), ")"));
    } else {
      Note(absl::StrCat("uploaded ", field.path, " as ", DatasetRef(d), " (",
                        FormatDecimalBytes(d.size_bytes()), ")"));
    }
    *field.sha256 = d.sha256();
  }
  return DatasetOverrides(uploads);
}

}  // namespace traind::client
