// trainctl: the command-line client of traind.
//
// Exit codes (also in --help):
//   0  success; for `submit --wait`, `submit --watch` and `watch`: the job
//      SUCCEEDED
//   1  the job FAILED, or the server answered NOT_FOUND or any other error
//   2  usage error or invalid spec (local parse error, or server
//      INVALID_ARGUMENT)
//   3  the job was CANCELLED
//   4  server unreachable (UNAVAILABLE, or DEADLINE_EXCEEDED)
//   5  permission denied (PERMISSION_DENIED, UNAUTHENTICATED)
// Errors print one line to stderr: "trainctl: <message>".

#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
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
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "client/client.h"
#include "client/render.h"
#include "traind/spec_file.h"

#ifndef TRAIND_VERSION
#define TRAIND_VERSION "0.1.0"
#endif

namespace traind::client {
namespace {

using ::traind::v1::Job;
using ::traind::v1::JobEvent;

enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,
  kExitUsage = 2,
  kExitCancelled = 3,
  kExitUnreachable = 4,
  kExitPermissionDenied = 5,
};

constexpr char kFooter[] = R"(
Address (--address): unix:PATH or HOST:PORT. Default: $TRAIND_ADDRESS if set;
else unix:$TRAIND_STATE_DIR/traind.sock if TRAIND_STATE_DIR is set; else
unix:.traind/traind.sock if that socket exists; else 127.0.0.1:7070.

Output (-o): table (for people) or json (protobuf JSON, proto field names;
`watch -o json` prints one JobEvent per line). Folds are numbered from 0.

Exit codes:
  0  success (submit --wait/--watch, watch: the job SUCCEEDED)
  1  the job FAILED, or the server answered NOT_FOUND or another error
  2  usage error or invalid spec (local parse error or server INVALID_ARGUMENT)
  3  the job was CANCELLED
  4  server unreachable (UNAVAILABLE, or no answer within --timeout)
  5  permission denied)";

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

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
      return kExitUsage;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnreachable;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return kExitPermissionDenied;
    default:
      return kExitFailed;
  }
}

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

void PrintError(absl::string_view message) {
  std::string line = absl::StrReplaceAll(message, {{"\r\n", " "}, {"\n", " "}});
  std::cout.flush();
  std::cerr << "trainctl: " << line << std::endl;
}

int Fail(const absl::Status& status) {
  PrintError(status.message());
  return ExitCodeFor(status);
}

int UsageError(absl::string_view message) {
  PrintError(message);
  return kExitUsage;
}

// Options shared by every command.
struct GlobalOptions {
  std::string address;
  std::string output = "table";
  double timeout_seconds = 10;

  bool json() const { return output == "json"; }
};

class Commands {
 public:
  explicit Commands(const GlobalOptions& global) : global_(global) {}

  // submit FILE [--watch | --wait] [--name NAME] [--set PATH=VALUE]...
  int Submit(const std::string& file, bool watch, bool wait,
             const std::string& name, const std::vector<std::string>& sets) {
    absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(file);
    if (!spec.ok()) return Fail(spec.status());
    for (const std::string& assignment : sets) {
      size_t eq = assignment.find('=');
      if (eq == std::string::npos || eq == 0) {
        return UsageError(
            absl::StrCat("--set ", assignment, ": expected PATH=VALUE"));
      }
      absl::Status set = SetJobSpecField(&*spec, assignment.substr(0, eq),
                                         assignment.substr(eq + 1));
      if (!set.ok()) return UsageError(absl::StrCat("--set ", set.message()));
    }
    if (!name.empty()) spec->set_name(name);
    // The daemon may run in another directory: resolve data.path here.
    const std::string& data_path = spec->data().path();
    if (!data_path.empty() && std::filesystem::path(data_path).is_relative()) {
      std::error_code ec;
      std::filesystem::path absolute = std::filesystem::absolute(data_path, ec);
      if (!ec) spec->mutable_data()->set_path(absolute.lexically_normal());
    }

    absl::StatusOr<Job> job = client().SubmitJob(*spec);
    if (!job.ok()) return Fail(job.status());
    if (wait) return Follow(*job, /*after_sequence=*/0, /*quiet=*/true);
    if (!global_.json()) Print(RenderSubmitted(*job));
    if (watch) return Follow(*job, /*after_sequence=*/0, /*quiet=*/false);
    if (global_.json()) Print(ToJson(*job, /*pretty=*/true));
    return kExitOk;
  }

  int Get(const std::string& job_id) {
    absl::StatusOr<Job> job = client().GetJob(job_id);
    if (!job.ok()) return Fail(job.status());
    Print(global_.json() ? ToJson(*job, true) : RenderJob(*job));
    return kExitOk;
  }

  int List(const std::vector<std::string>& states, const std::string& name,
           int limit, const std::string& page_token) {
    v1::ListJobsRequest request;
    for (const std::string& text : states) {
      Job::State state;
      if (!Job::State_Parse(absl::AsciiStrToUpper(text), &state) ||
          state == Job::STATE_UNSPECIFIED) {
        return UsageError(absl::StrCat(
            "--state ", text,
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
    Print(global_.json() ? ToJson(*response, true) : RenderJobList(*response));
    return kExitOk;
  }

  int Watch(const std::string& job_id, int64_t after_sequence) {
    Job job;
    job.set_id(job_id);
    if (!global_.json()) {
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
    Print(global_.json() ? ToJson(*job, true) : RenderJobState(*job));
    return kExitOk;
  }

  int Result(const std::string& job_id) {
    absl::StatusOr<v1::JobResult> result = client().GetJobResult(job_id);
    if (!result.ok()) return Fail(result.status());
    if (global_.json()) {
      Print(ToJson(*result, true));
    } else {
      std::string text = RenderResult(*result);
      Print(text.empty() ? "no fold has finished yet\n" : text);
    }
    return kExitOk;
  }

  int Devices() {
    absl::StatusOr<v1::ListDevicesResponse> devices = client().ListDevices();
    if (!devices.ok()) return Fail(devices.status());
    Print(global_.json() ? ToJson(*devices, true) : RenderDevices(*devices));
    return kExitOk;
  }

  int Info() {
    absl::StatusOr<v1::ServerInfo> info = client().GetServerInfo();
    if (!info.ok()) return Fail(info.status());
    Print(global_.json() ? ToJson(*info, true) : RenderServerInfo(*info));
    return kExitOk;
  }

 private:
  TraindClient& client() {
    if (client_ == nullptr) {
      ClientOptions options;
      options.address = global_.address;
      options.timeout_seconds = global_.timeout_seconds;
      client_ = std::make_unique<TraindClient>(options);
    }
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
    std::optional<Job::State> final_state;
    absl::Status watched =
        client().WatchJob(job.id(), after_sequence, [&](const JobEvent& event) {
          if (event.last() && event.has_job_state()) {
            final_state = event.job_state().state();
          }
          if (quiet) return;
          if (global_.json()) {
            std::string line = ToJson(event, /*pretty=*/false);
            line.pop_back();  // PrintLine adds the newline and flushes
            PrintLine(line);
          } else {
            PrintLine(RenderEvent(event, job.spec()));
          }
        });
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
      Print(global_.json() ? ToJson(*done, true) : RenderJob(*done));
      return ExitCodeFor(done->state());
    }

    if (!final_state.has_value()) {
      // The last event was not a job state change (it should be): ask.
      absl::StatusOr<Job> done = client().GetJob(job.id());
      if (!done.ok()) return Fail(done.status());
      final_state = done->state();
    }
    if (global_.json()) return ExitCodeFor(*final_state);

    absl::StatusOr<v1::JobResult> result = client().GetJobResult(job.id());
    if (!result.ok()) {
      // The job's outcome is known; a missing result matters only on success.
      PrintError(result.status().message());
      return *final_state == Job::SUCCEEDED ? ExitCodeFor(result.status())
                                            : ExitCodeFor(*final_state);
    }
    std::string text = RenderResult(*result);
    if (!text.empty()) Print("\n" + text);
    std::cout.flush();
    return ExitCodeFor(*final_state);
  }

  const GlobalOptions& global_;
  std::unique_ptr<TraindClient> client_;
};

// The first word that is neither an option nor an option's value, if it
// names no subcommand ("trainctl stauts").
std::optional<std::string> UnknownCommand(const CLI::App& app, int argc,
                                          char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--address" || arg == "-o" || arg == "--output" ||
        arg == "--timeout") {
      ++i;  // skip the value
      continue;
    }
    if (arg.empty() || arg[0] == '-') continue;
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (sub->get_name() == arg) return std::nullopt;
    }
    return arg;
  }
  return std::nullopt;
}

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
  app.add_option("-o,--output", global.output, "Output format: table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  app.add_option("--timeout", global.timeout_seconds,
                 "Deadline of each call in seconds; WatchJob streams have "
                 "none, but wait at most this long to connect")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  std::string file, job_id, name, page_token;
  std::vector<std::string> sets, states;
  bool watch = false, wait = false, force = false;
  int limit = 0;
  int64_t after = 0;

  CLI::App* submit = app.add_subcommand(
      "submit",
      "Submit a job spec (YAML or JSON) and print the job id. A relative "
      "data.path in the spec is made absolute against trainctl's current "
      "directory, since the daemon may run elsewhere.");
  submit->add_option("FILE", file, "Job spec file (YAML or JSON)")->required();
  CLI::Option* watch_flag = submit->add_flag(
      "--watch", watch,
      "Then stream the job's events (as `watch`; with -o json only the "
      "events, one per line) and end with the result");
  CLI::Option* wait_flag = submit->add_flag(
      "--wait", wait,
      "Then wait quietly until the job ends and print it (with its result); "
      "exit 0 only if it SUCCEEDED");
  watch_flag->excludes(wait_flag);
  submit->add_option("--name", name, "Job name (overrides the spec's name)");
  submit
      ->add_option("--set", sets,
                   "Override a spec field, e.g. --set training.epochs=5 or "
                   "--set model.layers[0].dense.units=32 (repeatable)")
      ->type_name("PATH=VALUE");

  CLI::App* get = app.add_subcommand(
      "get", "Show a job: state, times, failure, tasks and result");
  get->add_option("JOB", job_id, "Job id")->required();

  CLI::App* list = app.add_subcommand("list", "List jobs, newest first");
  list->add_option("--state", states,
                   "Only jobs in this state (QUEUED, RUNNING, CANCELLING, "
                   "SUCCEEDED, FAILED, CANCELLED; repeatable)")
      ->delimiter(',')
      ->type_name("STATE");
  list->add_option("--name", name, "Only jobs whose name contains TEXT")
      ->type_name("TEXT");
  list->add_option("--limit", limit, "At most N jobs (server default 100)")
      ->check(CLI::PositiveNumber)
      ->type_name("N");
  list->add_option("--page-token", page_token,
                   "Continue a listing (the token printed after a full page)")
      ->type_name("T");

  CLI::App* watch_cmd = app.add_subcommand(
      "watch",
      "Stream a job's events until it ends, then print the per-fold result "
      "and mean ± std; exit status as the job's outcome");
  watch_cmd->add_option("JOB", job_id, "Job id")->required();
  watch_cmd
      ->add_option("--after", after, "Only events after this sequence number")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()))
      ->type_name("SEQ");

  CLI::App* cancel = app.add_subcommand(
      "cancel", "Cancel a job and print its state after the call");
  cancel->add_option("JOB", job_id, "Job id")->required();
  cancel->add_flag("--force", force,
                   "Kill running workers at once instead of asking them to "
                   "stop");

  CLI::App* result = app.add_subcommand(
      "result", "Show a job's per-fold result and mean ± std so far");
  result->add_option("JOB", job_id, "Job id")->required();

  CLI::App* devices =
      app.add_subcommand("devices", "List the server's CPU and GPU devices");
  CLI::App* info = app.add_subcommand("info", "Show the server's status");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    if (std::optional<std::string> word = UnknownCommand(app, argc, argv)) {
      return UsageError(absl::StrCat("unknown command \"", *word,
                                     "\" (see trainctl --help)"));
    }
    return UsageError(absl::StrCat(e.what(), " (see trainctl --help)"));
  }

  if (global.address.empty() || global.address.find(':') == std::string::npos ||
      global.address == "unix:") {
    return UsageError(absl::StrCat("--address ", global.address,
                                   ": expected unix:PATH or HOST:PORT"));
  }

  Commands commands(global);
  if (*submit) return commands.Submit(file, watch, wait, name, sets);
  if (*get) return commands.Get(job_id);
  if (*list) return commands.List(states, name, limit, page_token);
  if (*watch_cmd) return commands.Watch(job_id, after);
  if (*cancel) return commands.Cancel(job_id, force);
  if (*result) return commands.Result(job_id);
  if (*devices) return commands.Devices();
  if (*info) return commands.Info();
  return UsageError("no command given (see trainctl --help)");
}

}  // namespace
}  // namespace traind::client

int main(int argc, char** argv) { return traind::client::Main(argc, argv); }
