// trainctl: the command-line client of traind.
//
// Exit codes (also in --help):
//   0  success; for `submit --wait`, `submit --watch` and `watch`: the job
//      SUCCEEDED
//   1  the job FAILED (`result` of a failed job too), or another server error
//   2  usage error or invalid spec (local parse error, or server
//      INVALID_ARGUMENT)
//   3  the job was CANCELLED
//   4  server unreachable (UNAVAILABLE, or DEADLINE_EXCEEDED)
//   5  permission denied (PERMISSION_DENIED, UNAUTHENTICATED)
//   6  not found: no such job, dataset or artifact (NOT_FOUND)
// Errors print one line to stderr: "trainctl: <message>".

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "client/cli_common.h"
#include "client/cli_words.h"
#include "client/client.h"
#include "client/datasets_command.h"
#include "client/format.h"
#include "client/live_view.h"
#include "client/render.h"
#include "spec/loader.h"

#ifndef TRAIND_VERSION
#define TRAIND_VERSION "0.1.0"
#endif

namespace traind::client {
namespace {

using ::traind::v1::Job;
using ::traind::v1::JobEvent;

constexpr char kFooter[] = R"(
Address (--address): unix:PATH or HOST:PORT. Default: $TRAIND_ADDRESS if set;
else unix:$TRAIND_STATE_DIR/traind.sock if TRAIND_STATE_DIR is set; else
unix:.traind/traind.sock if that socket exists; else 127.0.0.1:7070.

Output (-o): table (for people), json (protobuf JSON, proto field names,
default values included, e.g. "fold": 0; 64-bit integers as numbers where
exact, |v| <= 2^53, else strings; `watch -o json` prints one JobEvent
per line) or yaml (the same as YAML;
`watch -o yaml` prints one document per event). Folds are numbered from 0.
`watch` on a terminal redraws a live view (a progress bar per fold, the
latest metrics); piped, it prints one line per event.

Authentication: TCP addresses need a bearer token: --token, --token-file
or $TRAIND_TOKEN (in that order). The unix socket needs none. TLS: --tls
(system roots), or --tls-ca FILE; mutual TLS adds --tls-cert and --tls-key.

Exit codes:
  0  success (submit --wait/--watch, watch: the job SUCCEEDED)
  1  the job FAILED (result: of a failed job too), or another server error
  2  usage error or invalid spec (local parse error or server INVALID_ARGUMENT)
  3  the job was CANCELLED
  4  server unreachable (UNAVAILABLE, or no answer within --timeout)
  5  permission denied
  6  not found (no such job, dataset or artifact))";

std::string DefaultAddress() {
  const char* address = std::getenv("TRAIND_ADDRESS");
  if (address != nullptr && *address != '\0') return address;
  const char* state_dir = std::getenv("TRAIND_STATE_DIR");
  if (state_dir != nullptr && *state_dir != '\0') {
    return absl::StrCat("unix:", state_dir, "/traind.sock");
  }
  struct stat st;
  if (::stat(".traind/traind.sock", &st) == 0 && S_ISSOCK(st.st_mode)) {
    return "unix:.traind/traind.sock";
  }
  return "127.0.0.1:7070";
}

// The terminal's width; 80 when stdout is not a terminal.
int TerminalWidth() {
  struct winsize ws {};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    return ws.ws_col;
  }
  return 80;
}

using ::traind::client::ExitCodeFor;  // of a Status, beside this one of a state
int ExitCodeFor(Job::State state) {
  switch (state) {
    case Job::SUCCEEDED:
      return kExitOk;
    case Job::CANCELLED:
      return kExitCancelled;
    default:
      return kExitFailed;
  }
}

// While trainctl follows a job, Ctrl-C says that the job goes on without
// it, and how to come back or stop it. The text is made before the signal
// can come: the handler only writes it and exits (async-signal-safe).
class InterruptNotice {
 public:
  explicit InterruptNotice(const std::string& job_id) {
    const std::string text =
        absl::StrCat(isatty(STDOUT_FILENO) ? "\033[?25h" : "", "\ntrainctl: stopped watching; job ",
                     job_id, " keeps running on traind. Follow it again: trainctl watch ", job_id,
                     "  Stop it: trainctl cancel ", job_id, "\n");
    std::snprintf(text_, sizeof(text_), "%s", text.c_str());
    struct sigaction sa {};
    sa.sa_handler = &InterruptNotice::Handle;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &previous_);
  }
  ~InterruptNotice() { sigaction(SIGINT, &previous_, nullptr); }
  InterruptNotice(const InterruptNotice&) = delete;
  InterruptNotice& operator=(const InterruptNotice&) = delete;

 private:
  static void Handle(int) {
    const ssize_t ignored = write(STDERR_FILENO, text_, std::strlen(text_));
    (void)ignored;
    _exit(130);  // 128 + SIGINT, as a shell reports an interrupted command
  }
  static inline char text_[512];
  struct sigaction previous_ {};
};

class Commands {
 public:
  explicit Commands(const GlobalOptions& global) : global_(global) {}

  // submit FILE [--watch | --wait] [--name NAME] [--set PATH=VALUE]...
  // Over TCP (unless `upload` is false), data files found here are uploaded
  // first and the spec names them by digest (datasets_command.h).
  int Submit(const std::string& file, bool watch, bool wait, const std::string& name,
             const std::vector<std::string>& sets, std::optional<int> priority, bool upload) {
    absl::StatusOr<v1::JobSpec> spec = spec::LoadJobSpecFile(file);
    if (!spec.ok()) return Fail(spec.status());
    for (const std::string& assignment : sets) {
      size_t eq = assignment.find('=');
      if (eq == std::string::npos || eq == 0) {
        return UsageError(absl::StrCat("--set ", assignment, ": expected PATH=VALUE"));
      }
      absl::Status set =
          spec::SetJobSpecField(&*spec, assignment.substr(0, eq), assignment.substr(eq + 1));
      if (!set.ok()) return UsageError(absl::StrCat("--set ", set.message()));
    }
    if (!name.empty()) spec->set_name(name);
    if (priority.has_value()) spec->set_priority(*priority);
    // The daemon may run in another directory: it resolves relative data
    // paths against ours.
    std::error_code ec;
    std::filesystem::path cwd = std::filesystem::current_path(ec);
    if (upload && !global_.local()) {
      absl::StatusOr<std::vector<std::string>> overrides =
          UploadSpecFiles(client(), *spec, ec ? "" : cwd.string());
      if (!overrides.ok()) return Fail(overrides.status());
      for (const std::string& assignment : *overrides) {
        const size_t eq = assignment.find('=');
        absl::Status set =
            spec::SetJobSpecField(&*spec, assignment.substr(0, eq), assignment.substr(eq + 1));
        if (!set.ok()) return Fail(absl::InternalError(set.message()));
      }
    }

    absl::StatusOr<Job> job = client().SubmitJob(*spec, ec ? "" : cwd.string());
    if (!job.ok()) return Fail(job.status());
    if (wait) {
      // At once, so that a long wait can be followed or cancelled from
      // elsewhere (stderr: stdout keeps only the final job).
      std::cerr << "trainctl: submitted job " << job->id() << " (" << job->spec().name()
                << "); waiting for it to end" << std::endl;
      return Follow(*job, /*after_sequence=*/0, /*quiet=*/true);
    }
    if (!global_.structured()) Print(RenderSubmitted(*job));
    if (watch) return Follow(*job, /*after_sequence=*/0, /*quiet=*/false);
    if (global_.structured()) Print(global_.Encode(*job, /*pretty=*/true));
    return kExitOk;
  }

  int Get(const std::string& job_id) {
    absl::StatusOr<Job> job = client().GetJob(job_id);
    if (!job.ok()) return Fail(job.status());
    Print(global_.structured() ? global_.Encode(*job, true) : RenderJob(*job));
    return kExitOk;
  }

  int List(const std::vector<std::string>& states, const std::string& name, int limit,
           const std::string& page_token) {
    v1::ListJobsRequest request;
    for (const std::string& text : states) {
      Job::State state;
      if (!Job::State_Parse(absl::AsciiStrToUpper(text), &state) ||
          state == Job::STATE_UNSPECIFIED) {
        return UsageError(
            absl::StrCat("--state ", text,
                         ": unknown state (expected one of QUEUED, RUNNING, CANCELLING, "
                         "SUCCEEDED, FAILED, CANCELLED)"));
      }
      request.add_states(state);
    }
    request.set_name_contains(name);
    request.set_page_size(limit);
    request.set_page_token(page_token);
    absl::StatusOr<v1::ListJobsResponse> response = client().ListJobs(request);
    if (!response.ok()) return Fail(response.status());
    Print(global_.structured() ? global_.Encode(*response, true) : RenderJobList(*response));
    return kExitOk;
  }

  int Watch(const std::string& job_id, int64_t after_sequence) {
    Job job;
    job.set_id(job_id);
    if (!global_.structured()) {
      // The spec gives the epoch total and whether tasks are folds.
      absl::StatusOr<Job> got = client().GetJob(job_id);
      if (!got.ok()) return Fail(got.status());
      job = *std::move(got);
    }
    return Follow(job, after_sequence, /*quiet=*/false);
  }

  int Cancel(const std::string& job_id, bool force) {
    absl::StatusOr<Job> job = client().CancelJob(job_id, force);
    if (!job.ok()) return Fail(job.status());
    Print(global_.structured() ? global_.Encode(*job, true) : RenderJobState(*job));
    return kExitOk;
  }

  // What finished, then, for a job that FAILED or was CANCELLED, how it
  // ended (on stderr) and its exit code: a script sees a failed job's result
  // as a failure.
  int Result(const std::string& job_id, bool importance) {
    absl::StatusOr<Job> job = client().GetJob(job_id);
    if (!job.ok()) return Fail(job.status());
    absl::StatusOr<v1::JobResult> result = client().GetJobResult(job_id);
    if (!result.ok()) return Fail(result.status());
    const bool ended_badly = job->state() == Job::FAILED || job->state() == Job::CANCELLED;
    if (importance && !job->spec().has_importance()) {
      PrintError(absl::StrCat("job ", job->id(),
                              " computes no importance: its spec has no `importance: {repeats: "
                              "5}` (submit it again with --set importance.repeats=5)"));
      return kExitFailed;
    }
    if (importance && !global_.structured()) {
      std::string text = RenderImportance(*result, TerminalWidth());
      if (text.empty()) text = "no fold has finished yet\n";
      Print(text);
    } else if (global_.structured()) {
      Print(global_.Encode(*result, true));
    } else {
      std::string text = RenderResult(*result, &job->spec(), TerminalWidth());
      if (text.empty()) text = ended_badly ? "no fold finished\n" : "no fold has finished yet\n";
      Print(text);
    }
    if (!ended_badly) return kExitOk;
    std::string how = absl::StrCat("job ", job->id(), " ", JobStateName(job->state()));
    if (const std::string failure = FailureText(job->failure()); !failure.empty()) {
      absl::StrAppend(&how, ": ", failure);
    }
    PrintError(how);
    return ExitCodeFor(job->state());
  }

  int Devices() {
    absl::StatusOr<v1::ListDevicesResponse> devices = client().ListDevices();
    if (!devices.ok()) return Fail(devices.status());
    Print(global_.structured() ? global_.Encode(*devices, true) : RenderDevices(*devices));
    return kExitOk;
  }

  int Health() {
    absl::StatusOr<std::string> status = client().Health();
    if (!status.ok()) return Fail(status.status());
    if (global_.json()) {
      Print(absl::StrCat("{\"status\": \"", *status, "\"}\n"));
    } else if (global_.yaml()) {
      Print(absl::StrCat("status: ", *status, "\n"));
    } else {
      Print(*status + "\n");
    }
    return *status == "SERVING" ? kExitOk : kExitFailed;
  }

  // A one-time link that logs a browser into the dashboard as this caller,
  // landing on `job_id`'s page when one is given (after checking it is
  // there).
  int Dashboard(const std::string& job_id) {
    if (!job_id.empty()) {
      absl::StatusOr<Job> job = client().GetJob(job_id);
      if (!job.ok()) return Fail(job.status());
    }
    absl::StatusOr<v1::DashboardLogin> login = client().CreateDashboardLogin();
    if (!login.ok()) return Fail(login.status());
    if (!job_id.empty()) {
      std::string encoded;
      for (unsigned char ch : job_id) {
        if (absl::ascii_isalnum(ch) || ch == '-' || ch == '_') {
          encoded.push_back(static_cast<char>(ch));
        } else {
          absl::StrAppend(&encoded, absl::StrFormat("%%%02X", ch));
        }
      }
      login->set_url(absl::StrCat(login->url(), "&job=", encoded));
    }
    if (global_.structured()) {
      Print(global_.Encode(*login, true));
    } else {
      Print(absl::StrCat("Open this link in a browser within a minute (it works once):\n  ",
                         login->url(), "\n"));
    }
    return kExitOk;
  }

  int Artifacts(const std::string& job_id) {
    absl::StatusOr<v1::ListArtifactsResponse> list = client().ListArtifacts(job_id);
    if (!list.ok()) return Fail(list.status());
    Print(global_.structured() ? global_.Encode(*list, true) : RenderArtifacts(*list));
    return kExitOk;
  }

  // download JOB NAME [-O FILE]: to FILE (default: NAME's last part, in the
  // current directory; inside FILE when it is a directory), written beside
  // it and renamed once complete and checked, or to stdout with -O -.
  int Download(const std::string& job_id, const std::string& name, std::string out) {
    if (out.empty()) out = std::filesystem::path(name).filename().string();
    std::string written_to;
    absl::StatusOr<v1::Artifact> artifact = client().DownloadToFile(job_id, name, out, &written_to);
    if (!artifact.ok()) return Fail(artifact.status());
    if (out != "-") {
      std::cerr << "trainctl: saved " << name << " of job " << job_id << " to " << written_to
                << " (" << FormatBytes(artifact->size_bytes()) << ", SHA-256 checked)" << std::endl;
    }
    return kExitOk;
  }

  int Delete(const std::string& job_id, bool cancel) {
    absl::StatusOr<v1::DeleteJobResponse> deleted = client().DeleteJob(job_id, cancel);
    if (!deleted.ok()) return Fail(deleted.status());
    if (global_.structured()) {
      Print(global_.Encode(*deleted, true));
    } else {
      Print(absl::StrCat("deleted job ", job_id, " (", FormatBytes(deleted->freed_bytes()),
                         " of artifacts freed)\n"));
    }
    return kExitOk;
  }

  // predict JOB FILE [--task N | --ensemble] [-O FILE]: uploads FILE
  // (or, with --server-path, names a file on the server), then downloads
  // the predictions (stdout by default).
  int Predict(const std::string& job_id, const std::string& file, std::optional<int> task,
              bool ensemble, bool server_path, const std::string& out) {
    v1::PredictRequest::Header header;
    header.set_job_id(job_id);
    if (task.has_value()) header.set_task(*task);
    header.set_ensemble(ensemble);
    std::ifstream in;
    if (server_path) {
      header.set_data_path(file);
      std::error_code ec;
      std::filesystem::path cwd = std::filesystem::current_path(ec);
      if (!ec) header.set_base_dir(cwd.string());
    } else {
      header.set_file_name(file);
      std::error_code dir_ec;
      if (std::filesystem::is_directory(file, dir_ec)) {
        return UsageError(absl::StrCat(
            file,
            ": a directory (an image folder) is not uploaded; name one on traind's machine "
            "with --server-path"));
      }
      in.open(file, std::ios::binary);
      if (!in) return UsageError(absl::StrCat(file, ": ", std::strerror(errno)));
    }
    absl::StatusOr<v1::PredictResponse> response =
        client().Predict(header, [&in, &file]() -> absl::StatusOr<std::string> {
          std::string piece(1 << 20, '\0');
          in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
          if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(file, ": read failed"));
          piece.resize(static_cast<size_t>(in.gcount()));
          return piece;
        });
    if (!response.ok()) return Fail(response.status());
    std::cerr << "trainctl: scored " << response->rows() << " rows of " << file << " with "
              << absl::StrJoin(response->models(), " + ") << " on "
              << (response->device().empty() ? "cpu" : response->device()) << " (job " << job_id
              << ")" << std::endl;
    absl::StatusOr<v1::Artifact> artifact =
        client().DownloadToFile(job_id, response->artifact().name(), out.empty() ? "-" : out);
    if (!artifact.ok()) return Fail(artifact.status());
    return kExitOk;
  }

  int Info() {
    absl::StatusOr<v1::ServerInfo> info = client().GetServerInfo();
    if (!info.ok()) return Fail(info.status());
    Print(global_.structured() ? global_.Encode(*info, true) : RenderServerInfo(*info));
    return kExitOk;
  }

 private:
  TraindClient& client() {
    if (client_ == nullptr) client_ = global_.MakeClient();
    return *client_;
  }

  static void Print(const std::string& text) { std::cout << text; }
  static void PrintLine(const std::string& line) {
    std::cout << line << std::endl;  // flushed: events are watched live
  }

  // Streams the job's events until its last one and reports the outcome.
  //   quiet (submit --wait): no output until the end, then the final Job.
  //   table: one line per event, then the per-fold result and mean ± std.
  //   json: one JobEvent per line, nothing else.
  // Returns the exit code for the job's final state.
  int Follow(const Job& job, int64_t after_sequence, bool quiet) {
    InterruptNotice notice(job.id());
    std::optional<Job::State> final_state;
    // A terminal gets the live view, redrawn in place (at most 10 times a
    // second, and once at the end); a pipe gets one line per event.
    const bool live = !quiet && !global_.structured() && isatty(STDOUT_FILENO) &&
                      std::getenv("TERM") != nullptr && std::string(std::getenv("TERM")) != "dumb";
    LiveView view(job);
    std::string last_frame;
    auto last_draw = std::chrono::steady_clock::time_point();
    auto draw = [&](bool force) {
      const auto now = std::chrono::steady_clock::now();
      if (!force && now - last_draw < std::chrono::milliseconds(100)) return;
      last_draw = now;
      struct winsize ws {};
      const bool sized = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0;
      const int width = sized && ws.ws_col > 0 ? ws.ws_col : 80;
      const int height = sized && ws.ws_row > 0 ? ws.ws_row : 24;
      // A terminal made narrower may have rewrapped the last frame's lines.
      const int rewind = LiveView::RowsAfterResize(last_frame, width);
      last_frame = view.Render(width, height);
      std::cout << LiveView::Rewind(rewind) << last_frame << std::flush;
    };
    absl::Status watched = client().WatchJob(job.id(), after_sequence, [&](const JobEvent& event) {
      if (event.last() && event.has_job_state()) {
        final_state = event.job_state().state();
      }
      if (quiet) return;
      if (global_.structured()) {
        std::string line = global_.Encode(event, /*pretty=*/false);
        line.pop_back();  // PrintLine adds the newline and flushes
        PrintLine(line);
      } else if (live) {
        view.Update(event);
        draw(event.last() || !event.has_epoch());
      } else {
        PrintLine(RenderEvent(event, job.spec()));
      }
    });
    if (live) draw(true);
    if (!watched.ok()) return Fail(watched);

    if (quiet) {
      absl::StatusOr<Job> done = client().GetJob(job.id());
      if (!done.ok()) return Fail(done.status());
      if (!done->has_result()) {
        absl::StatusOr<v1::JobResult> result = client().GetJobResult(job.id());
        if (result.ok() && !result->folds().empty()) {
          *done->mutable_result() = *std::move(result);
        }
      }
      Print(global_.structured() ? global_.Encode(*done, true) : RenderJob(*done));
      return ExitCodeFor(done->state());
    }

    if (!final_state.has_value()) {
      // The last event was not a job state change (it should be): ask.
      absl::StatusOr<Job> done = client().GetJob(job.id());
      if (!done.ok()) return Fail(done.status());
      final_state = done->state();
    }
    if (global_.structured()) return ExitCodeFor(*final_state);

    absl::StatusOr<v1::JobResult> result = client().GetJobResult(job.id());
    if (!result.ok()) {
      // The job's outcome is known; a missing result matters only on success.
      PrintError(result.status().message());
      return *final_state == Job::SUCCEEDED ? ExitCodeFor(result.status())
                                            : ExitCodeFor(*final_state);
    }
    std::string text = RenderResult(*result, &job.spec(), TerminalWidth());
    if (!text.empty()) Print("\n" + text);
    std::cout.flush();
    return ExitCodeFor(*final_state);
  }

  const GlobalOptions& global_;
  std::unique_ptr<TraindClient> client_;
};

int Main(int argc, char** argv) {
  CLI::App app(
      "trainctl: the command-line client of traind, the training "
      "daemon.",
      "trainctl");
  app.footer(kFooter);
  app.require_subcommand(1);
  app.fallthrough();  // global options also after the subcommand
  app.set_version_flag("--version", "trainctl " TRAIND_VERSION);

  GlobalOptions global;
  global.address = DefaultAddress();
  app.add_option("--address", global.address,
                 "traind's address: unix:PATH or HOST:PORT (default: see "
                 "below)");
  app.add_option("-o,--output", global.output, "Output format: table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}))
      ->capture_default_str();
  app.add_option("--timeout", global.timeout_seconds,
                 "Deadline of each call in seconds; WatchJob streams have "
                 "none, but wait at most this long to connect")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  app.add_option("--token", global.token,
                 "Bearer token for TCP addresses (default: --token-file, else "
                 "$TRAIND_TOKEN)")
      ->type_name("TOKEN");
  app.add_option("--token-file", global.token_file, "File holding the bearer token (first line)")
      ->type_name("FILE");
  app.add_flag("--tls", global.tls, "Use TLS (implied by --tls-ca, --tls-cert and --tls-key)");
  app.add_option("--tls-ca", global.tls_ca,
                 "PEM CA bundle to trust for the server's certificate "
                 "(default: the system's roots)")
      ->type_name("FILE");
  app.add_option("--tls-cert", global.tls_cert, "PEM client certificate, for mutual TLS")
      ->type_name("FILE");
  app.add_option("--tls-key", global.tls_key, "PEM private key of --tls-cert")->type_name("FILE");
  app.add_option("--tls-server-name", global.tls_server_name,
                 "Name to check in the server's certificate (default: the "
                 "address's host)")
      ->type_name("NAME");

  std::string file, job_id, name, page_token;
  std::optional<int> priority;
  std::vector<std::string> sets, states;
  bool watch = false, wait = false, force = false;
  int limit = 0;
  int64_t after = 0;

  CLI::App* submit =
      app.add_subcommand("submit",
                         "Submit a job spec (YAML or JSON) and print the job id. Relative "
                         "file paths in the spec (data.path, cross_validation.validation_path) "
                         "are relative to trainctl's current directory, since the daemon may "
                         "run elsewhere. Over TCP such a file found here is uploaded to traind "
                         "first (nothing is sent when traind has its bytes) and the job trains "
                         "on that upload.");
  submit->add_option("FILE", file, "Job spec file (YAML or JSON)")->required();
  CLI::Option* watch_flag =
      submit->add_flag("--watch", watch,
                       "Then stream the job's events (as `watch`; with -o json only the "
                       "events, one per line) and end with the result");
  CLI::Option* wait_flag =
      submit->add_flag("--wait", wait,
                       "Then wait quietly until the job ends and print it (with its result); "
                       "exit 0 only if it SUCCEEDED");
  watch_flag->excludes(wait_flag);
  submit->add_option("--name", name, "Job name (overrides the spec's name)");
  submit
      ->add_option("--priority", priority,
                   "Job priority (overrides the spec's; higher runs first, "
                   "default 0)")
      ->type_name("N");
  bool no_upload = false;
  submit->add_flag("--no-upload", no_upload,
                   "Over TCP, leave data files to traind (by default a data.path or "
                   "cross_validation.validation_path naming a file here is uploaded first, "
                   "once: see `datasets upload`)");
  submit
      ->add_option("--set", sets,
                   "Override a spec field, e.g. --set training.epochs=5 or "
                   "--set model.layers[0].dense.units=32 (repeatable; [+] appends an element: "
                   "--set data.categorical[+]=region)")
      ->type_name("PATH=VALUE");

  CLI::App* get = app.add_subcommand("get", "Show a job: state, times, failure, tasks and result");
  get->add_option("JOB", job_id, "Job id")->required();

  CLI::App* list = app.add_subcommand("list", "List jobs, newest first");
  list->add_option("--state", states,
                   "Only jobs in this state (QUEUED, RUNNING, CANCELLING, "
                   "SUCCEEDED, FAILED, CANCELLED; repeatable)")
      ->delimiter(',')
      ->type_name("STATE");
  list->add_option("--name", name, "Only jobs whose name contains TEXT")->type_name("TEXT");
  list->add_option("--limit", limit, "At most N jobs (server default 100)")
      ->check(CLI::PositiveNumber)
      ->type_name("N");
  list->add_option("--page-token", page_token,
                   "Continue a listing (the token printed after a full page)")
      ->type_name("T");

  CLI::App* watch_cmd =
      app.add_subcommand("watch",
                         "Stream a job's events until it ends, then print the per-fold result "
                         "and mean ± std; exit status as the job's outcome");
  watch_cmd->add_option("JOB", job_id, "Job id")->required();
  watch_cmd->add_option("--after", after, "Only events after this sequence number")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()))
      ->type_name("SEQ");

  CLI::App* cancel =
      app.add_subcommand("cancel", "Cancel a job and print its state after the call");
  cancel->add_option("JOB", job_id, "Job id")->required();
  cancel->add_flag("--force", force,
                   "Kill running workers at once instead of asking them to "
                   "stop");

  CLI::App* result =
      app.add_subcommand("result", "Show a job's per-fold result and mean ± std so far");
  result->add_option("JOB", job_id, "Job id")->required();
  bool show_importance = false;
  result->add_flag("--importance", show_importance,
                   "Show the permutation importance of each feature over the folds (a spec "
                   "with importance: {repeats: N})");

  CLI::App* artifacts = app.add_subcommand(
      "artifacts",
      "List a job's artifacts: predictions, models (model.ckpt, model.onnx), logs, "
      "checkpoints, TensorBoard files");
  artifacts->add_option("JOB", job_id, "Job id")->required();
  std::string artifact_name, out_file;
  CLI::App* download = app.add_subcommand(
      "download", "Download one artifact of a job (its size and SHA-256 are checked)");
  download->add_option("JOB", job_id, "Job id")->required();
  download->add_option("NAME", artifact_name, "Artifact name, as `trainctl artifacts` lists it")
      ->required();
  download
      ->add_option("-O,--out", out_file,
                   "Where to save it (default: NAME's file name in the current directory; "
                   "into FILE when it is a directory; - for stdout)")
      ->type_name("FILE");
  bool cancel_first = false;
  CLI::App* delete_cmd =
      app.add_subcommand("delete", "Delete a finished job: its records, events and every artifact");
  delete_cmd->add_option("JOB", job_id, "Job id")->required();
  delete_cmd->add_flag("--cancel", cancel_first, "Cancel the job first if it still runs");
  std::optional<int> predict_task;
  bool ensemble = false, server_path = false;
  CLI::App* predict = app.add_subcommand(
      "predict",
      "Score a CSV or images with a job's model (the refit model by default) and print the "
      "predictions: row, the file's id and true-target columns, then label and p_<class> "
      "columns (class targets) or the targets' columns");
  predict->add_option("JOB", job_id, "Job id")->required();
  predict
      ->add_option("FILE", file,
                   "CSV with the training data's feature columns; for an image model, an IDX "
                   "or NPY file of images (or, with --server-path, a folder of PNG/JPEG "
                   "files)")
      ->required();
  CLI::Option* task_opt =
      predict->add_option("--task", predict_task, "Use this task's model")->type_name("N");
  predict->add_flag("--ensemble", ensemble, "Use the mean of the fold models")->excludes(task_opt);
  predict->add_flag("--server-path", server_path,
                    "FILE is a path on the server, inside its data roots (nothing is uploaded)");
  predict->add_option("-O,--out", out_file, "Where to save the predictions (default: stdout)")
      ->type_name("FILE");

  DatasetsArgs datasets;
  AddDatasetsCommand(&app, &datasets);

  CLI::App* devices = app.add_subcommand("devices", "List the server's CPU and GPU devices");
  CLI::App* info = app.add_subcommand("info", "Show the server's status");
  std::string shell;
  CLI::App* completion = app.add_subcommand(
      "completion",
      "Print a shell completion script: source <(trainctl completion bash), or put it in "
      "/etc/bash_completion.d/trainctl (zsh: trainctl completion zsh)");
  completion->add_option("SHELL", shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  CLI::App* dashboard = app.add_subcommand(
      "dashboard",
      "Print a one-time link that logs a browser into traind's web dashboard as you (on JOB's "
      "page when given)");
  std::string dashboard_job;
  dashboard->add_option("JOB", dashboard_job, "Job whose page the link opens");
  CLI::App* health =
      app.add_subcommand("health",
                         "Ask the server's grpc.health.v1 service; print SERVING (exit 0) or "
                         "another status (exit 1); exit 4 when unreachable");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    if (std::optional<std::string> word = UnknownCommand(app, argc, argv)) {
      return UsageError(absl::StrCat("unknown command \"", *word, "\" (see trainctl --help)"));
    }
    return UsageError(absl::StrCat(e.what(), " (see trainctl --help)"));
  }

  if (*completion) {
    // zsh runs bash completion functions through bashcompinit.
    if (shell == "zsh") std::cout << "autoload -U +X bashcompinit && bashcompinit\n";
    std::cout << BashCompletion(app);
    return kExitOk;
  }

  if (global.address.empty() || global.address.find(':') == std::string::npos ||
      global.address == "unix:") {
    return UsageError(
        absl::StrCat("--address ", global.address, ": expected unix:PATH or HOST:PORT"));
  }

  const bool any_tls =
      global.tls || !global.tls_ca.empty() || !global.tls_cert.empty() || !global.tls_key.empty();
  SetTransportHint(!global.local(), any_tls);
  if (app.count("--address") == 0 && global.address == "127.0.0.1:7070") {
    const char* env = std::getenv("TRAIND_ADDRESS");
    if (env == nullptr || *env == '\0') {
      SetAddressHint(
          "trainctl tried 127.0.0.1:7070, its default when it finds no unix socket: point it at "
          "traind's socket with --address unix:PATH, TRAIND_ADDRESS, or TRAIND_STATE_DIR=DIR "
          "(its state directory), or give a token for TCP with --token or TRAIND_TOKEN");
    }
  }
  if (global.token.empty() && !global.token_file.empty()) {
    std::ifstream in(global.token_file);
    if (!in) {
      return UsageError(absl::StrCat("--token-file ", global.token_file, ": cannot read it"));
    }
    std::getline(in, global.token);
  }
  if (global.token.empty()) {
    const char* token = std::getenv("TRAIND_TOKEN");
    if (token != nullptr) global.token = token;
  }
  global.token = std::string(absl::StripAsciiWhitespace(global.token));
  if (!global.tls_ca.empty() || !global.tls_cert.empty() || !global.tls_key.empty()) {
    global.tls = true;
  }
  if (global.tls_cert.empty() != global.tls_key.empty()) {
    return UsageError("--tls-cert and --tls-key go together");
  }

  Commands commands(global);
  if (*submit) return commands.Submit(file, watch, wait, name, sets, priority, !no_upload);
  if (*datasets.command) return RunDatasets(global, datasets);
  if (*get) return commands.Get(job_id);
  if (*list) return commands.List(states, name, limit, page_token);
  if (*watch_cmd) return commands.Watch(job_id, after);
  if (*cancel) return commands.Cancel(job_id, force);
  if (*result) return commands.Result(job_id, show_importance);
  if (*devices) return commands.Devices();
  if (*info) return commands.Info();
  if (*artifacts) return commands.Artifacts(job_id);
  if (*download) return commands.Download(job_id, artifact_name, out_file);
  if (*delete_cmd) return commands.Delete(job_id, cancel_first);
  if (*predict)
    return commands.Predict(job_id, file, predict_task, ensemble, server_path, out_file);
  if (*dashboard) return commands.Dashboard(dashboard_job);
  if (*health) return commands.Health();
  return UsageError("no command given (see trainctl --help)");
}

}  // namespace
}  // namespace traind::client

int main(int argc, char** argv) { return traind::client::Main(argc, argv); }
