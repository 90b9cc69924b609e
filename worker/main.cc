// traind-worker: runs one task attempt of a traind job and exits.
//
// Started by traind (never through a shell):
//   traind-worker --server=unix:STATE/worker.sock --job=ID --task=N --attempt=K
// with the attempt's secret in TRAIND_WORKER_SECRET. It fetches its task,
// loads and splits the data (deterministically, from the job's seed),
// trains, reports every epoch, reports its outcome and exits; the process
// exit releases everything it held (task_run.h).
//
// A multi-GPU task runs one process per GPU, started with
// --rank=R --world-size=N (CUDA_VISIBLE_DEVICES names the rank's GPU).
//
// Standalone, without a daemon (every fold in this process, one after the
// other; metrics as JSON lines on stdout; standalone.h):
//   traind-worker --spec=FILE [--fold=K]
//
// Predict, without a daemon (traind's Predict RPC runs this command line;
// predict_main.h is the contract):
//   traind-worker --predict MODEL.ckpt [--predict MODEL2.ckpt ...]
//                 [--data] FILE.csv [--out OUT.csv] [--device gpu]
//
// GPU tasks (resources.device: gpu) train on the CUDA plugin
// (libtraind_cuda.so beside this executable, or ../lib/traind), loaded only
// for them: a CPU task never loads CUDA, cuBLAS or NCCL (gpu_context.h).
//
// traind may instead start it once as a zygote (--zygote, see
// worker/zygote/zygote.h), which forks a fresh worker per task attempt.
//
// Exit status (exit_code.h): 0 succeeded, 1 failed (the failure was
// reported), 2 usage (a bad flag among them), 3 cancelled, 4 the daemon
// could not be reached.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "CLI/CLI.hpp"
#include "worker/capabilities.h"
#include "worker/engine/backend/cpu/cpu_backend.h"
#include "worker/exit_code.h"
#include "worker/predict_main.h"
#include "worker/process_setup.h"
#include "worker/standalone.h"
#include "worker/stop_signal.h"
#include "worker/task_run.h"
#include "worker/zygote/zygote.h"

namespace traind::worker {
namespace {

int WorkerMain(int argc, char** argv) {
  if (!ArmParentDeathSignal()) return kUnreachable;
  engine::DisableOneDnnProfilerHooks();  // before any thread exists
  InstallStopSignalHandlers();

  TaskRunOptions run;
  StandaloneOptions standalone;
  bool capabilities = false;
  CLI::App app{
      "traind-worker: runs one task of a traind job (started by traind), a spec "
      "file's folds in this process (--spec), or scores a CSV file with trained models "
      "(--predict)"};
  app.add_option("--server", run.server, "traind's WorkerService address");
  app.add_option("--job", run.job, "job id");
  app.add_option("--task", run.task, "task index");
  app.add_option("--attempt", run.attempt, "attempt number");
  app.add_option("--rank", run.rank, "multi-GPU task: this process's rank, 0 .. world-size - 1");
  app.add_option("--world-size", run.world_size,
                 "multi-GPU task: its number of ranks (one per GPU)");
  app.add_option("--spec", standalone.spec_path, "standalone: a job spec file (YAML or JSON)");
  app.add_option("--fold", standalone.only_task, "standalone: run only this task (fold)");
  app.add_option("--artifacts", standalone.artifacts_dir,
                 "standalone: write predictions, checkpoints and models under DIR/task-N");
  app.add_flag("--capabilities", capabilities,
               "print the training backends this worker has (\"cpu\", \"cuda\") and exit");
  PredictCommand predict;
  app.add_option("--predict", predict.models,
                 "predict: a model file (model.ckpt); repeat it for the mean of several models")
      ->allow_extra_args(false);
  app.add_option("--data", predict.data, "predict: the CSV file to score");
  std::string data_file;
  app.add_option("data_file", data_file, "predict: the CSV file to score (instead of --data)");
  app.add_option("--out", predict.out, "predict: the output CSV (default -: stdout)");
  std::string predict_device = "cpu";
  app.add_option("--device", predict_device,
                 "predict: cpu (default) or gpu (visible CUDA device 0, through the CUDA plugin)")
      ->check(CLI::IsMember({"cpu", "gpu"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and succeeds; a bad flag is a usage error.
    return app.exit(e) == 0 ? kSucceeded : kUsage;
  }

  if (capabilities) return PrintCapabilities();
  const bool predicting = !predict.models.empty() || app.count("--data") > 0 ||
                          app.count("--out") > 0 || app.count("--device") > 0 || !data_file.empty();
  predict.gpu = predict_device == "gpu";
  if (predicting) {
    if (!data_file.empty() && !predict.data.empty()) {
      std::fprintf(stderr, "traind-worker: two CSV files to score: --data %s and %s\n",
                   predict.data.c_str(), data_file.c_str());
      return kUsage;
    }
    if (predict.data.empty()) predict.data = data_file;
    if (predict.models.empty() || predict.data.empty()) {
      std::fprintf(stderr, "traind-worker: --predict MODEL.ckpt and --data FILE.csv go together\n");
      return kUsage;
    }
    if (!standalone.spec_path.empty() || !run.server.empty() || !run.job.empty()) {
      std::fprintf(stderr,
                   "traind-worker: --predict does not combine with --spec, --server or --job\n");
      return kUsage;
    }
    return RunPredict(predict);
  }
  if (!standalone.spec_path.empty()) return RunStandalone(standalone);
  if (run.server.empty() || run.job.empty() || run.task < 0 || run.attempt < 1) {
    std::fprintf(stderr,
                 "traind-worker: --server, --job, --task and --attempt are required "
                 "(or --spec FILE)\n");
    return kUsage;
  }
  if (run.world_size < 1 || run.rank < 0 || run.rank >= run.world_size) {
    std::fprintf(stderr, "traind-worker: --rank must be in [0, --world-size) (got %d of %d)\n",
                 run.rank, run.world_size);
    return kUsage;
  }
  const int status = RunTaskUnderDaemon(run);
  // What the task held (backend, communicator, data) was released when
  // RunTaskUnderDaemon returned. Skip static destructors and the gRPC
  // library's shutdown (milliseconds per fold): the process exit frees the
  // rest.
  std::fflush(nullptr);
  _exit(status);
}

// A worker forked by the zygote.
int ForkedWorkerMain(int argc, char** argv) {
  ApplyOmpNumThreads();
  return WorkerMain(argc, argv);
}

}  // namespace
}  // namespace traind::worker

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], traind::zygote::kZygoteFlag) == 0) {
    // Started by traind once: fork a fresh worker per task attempt (see
    // worker/zygote/zygote.h). No threads, channels or devices here.
    if (!traind::worker::ArmParentDeathSignal()) return traind::worker::kUnreachable;
    traind::worker::PrewarmZygote();
    return traind::zygote::RunZygote(traind::zygote::kZygoteControlFd,
                                     traind::worker::ForkedWorkerMain);
  }
  return traind::worker::WorkerMain(argc, argv);
}
