// Test helpers that run the real traind binary on a temporary state
// directory, talking to it over a unix socket.
#ifndef TRAIND_TESTS_INTEGRATION_TESTING_TRAIND_PROCESS_H_
#define TRAIND_TESTS_INTEGRATION_TESTING_TRAIND_PROCESS_H_

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "tests/testing/temp_dir.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind::testing {

inline std::string BinDir() { return TRAIND_BIN_DIR; }
inline std::string SourceDir() { return TRAIND_SOURCE_DIR; }

// examples/iris-cv.yaml with its data path made absolute; `folds` and
// `epochs` replace the example's where given (> 0).
inline traind::v1::JobSpec IrisExampleSpec(int folds = 0, int epochs = 0) {
  absl::StatusOr<traind::v1::JobSpec> spec =
      spec::LoadJobSpecFile(SourceDir() + "/examples/iris-cv.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return traind::v1::JobSpec();
  spec->mutable_data()->set_path(SourceDir() + "/examples/data/iris.csv");
  if (folds > 0) spec->mutable_cross_validation()->set_folds(folds);
  if (epochs > 0) spec->mutable_training()->set_epochs(epochs);
  return *std::move(spec);
}

// A traind process. Stopped (SIGTERM, then SIGKILL) on destruction.
class TraindProcess {
 public:
  explicit TraindProcess(std::string state_dir, std::vector<std::string> extra_args = {})
      : state_dir_(std::move(state_dir)), extra_args_(std::move(extra_args)) {}
  ~TraindProcess() { Stop(); }

  // Starts traind and waits until its API answers. False on failure.
  bool Start() {
    std::filesystem::create_directories(state_dir_);
    address_ = "unix:" + state_dir_ + "/traind.sock";
    std::vector<std::string> args = {BinDir() + "/traind", "--state-dir=" + state_dir_,
                                     "--listen=" + address_};
    // Tests read data under the source tree and /tmp: those are the data
    // roots unless a test chooses its own (--data-root or --config).
    bool roots_given = false;
    for (const auto& a : extra_args_) {
      roots_given = roots_given || a.rfind("--data-root", 0) == 0 || a.rfind("--config", 0) == 0;
    }
    if (!roots_given) {
      args.push_back("--data-root=" + SourceDir());
      args.push_back("--data-root=/tmp");
    }
    // Every test's traind serves HTTP on a port of its own (not the
    // default 7071, which parallel tests would share).
    bool http_given = false;
    for (const auto& a : extra_args_) http_given = http_given || a.rfind("--http-listen", 0) == 0;
    if (!http_given) args.push_back("--http-listen=127.0.0.1:0");
    for (const auto& a : extra_args_) args.push_back(a);
    std::string log = state_dir_ + "/traind.log";
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = freopen(log.c_str(), "a", stderr);
      (void)f;
      for (const auto& [name, value] : env_) setenv(name.c_str(), value.c_str(), 1);
      if (nofile_ > 0) {
        struct rlimit r = {static_cast<rlim_t>(nofile_), static_cast<rlim_t>(nofile_)};
        setrlimit(RLIMIT_NOFILE, &r);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    // Wait for the socket first: a failed first connect would put the
    // channel into gRPC's reconnect backoff (a second or more).
    const std::string socket_path = state_dir_ + "/traind.sock";
    for (int i = 0; i < 400 && !std::filesystem::exists(socket_path); ++i) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return false;
      }
      usleep(10000);
    }
    grpc::ChannelArguments channel_args;
    channel_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
    channel_args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
    channel_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
    // A channel of its own: a restarted traind on the same socket path must
    // not be reached through a connection to the one before it.
    channel_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ =
        grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), channel_args);
    stub_ = traind::v1::TrainingService::NewStub(channel_);
    for (int i = 0; i < 200; ++i) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return false;
      }
      if (channel_->WaitForConnected(std::chrono::system_clock::now() +
                                     std::chrono::milliseconds(50))) {
        return true;
      }
    }
    return false;
  }

  // `sig` (SIGTERM); returns the exit status (or -1). A traind still running
  // after `wait` is killed (SIGKILL): give more than any grace under test.
  int Stop(int sig = SIGTERM, std::chrono::milliseconds wait = std::chrono::seconds(10)) {
    if (pid_ <= 0) return -1;
    stub_.reset();
    channel_.reset();
    kill(pid_, sig);
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      usleep(50000);
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  // Sets an environment variable of the traind process (before Start()).
  void SetEnv(const std::string& name, const std::string& value) { env_.emplace_back(name, value); }
  // The descriptors traind may open (RLIMIT_NOFILE, soft and hard).
  void SetNofile(int n) { nofile_ = n; }

  traind::v1::TrainingService::Stub* stub() { return stub_.get(); }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  const std::string& address() const { return address_; }
  const std::string& state_dir() const { return state_dir_; }
  int pid() const { return pid_; }
  // The exit code of a traind that exited during Start() (-1: none did).
  int exit_code() const { return exit_code_; }
  std::string Log() const {
    std::ifstream in(state_dir_ + "/traind.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  std::string state_dir_;
  std::vector<std::string> extra_args_;
  std::vector<std::pair<std::string, std::string>> env_;
  int nofile_ = 0;
  std::string address_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<traind::v1::TrainingService::Stub> stub_;
};

inline std::unique_ptr<grpc::ClientContext> Ctx(int seconds = 10) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return ctx;
}

// SubmitJob; the server's error as an absl::Status.
inline absl::StatusOr<traind::v1::Job> SubmitJob(traind::v1::TrainingService::Stub* stub,
                                                 const traind::v1::JobSpec& spec,
                                                 const std::string& idempotency_key = "") {
  traind::v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  req.set_idempotency_key(idempotency_key);
  traind::v1::Job job;
  auto ctx = Ctx();
  grpc::Status s = stub->SubmitJob(ctx.get(), req, &job);
  if (!s.ok())
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  return job;
}

// GetJob of a job that must exist.
// Calls `method` with `bytes` as the request, whatever they are, and waits.
inline grpc::Status RawUnaryCall(std::shared_ptr<grpc::Channel> channel, const std::string& method,
                                 const std::string& bytes) {
  grpc::GenericStub generic(channel);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status st) {
    std::lock_guard<std::mutex> l(mu);
    status = st;
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done; });
  return status;
}

// How many jobs ListJobs lists (as the local admin, on the unix socket).
inline int JobCount(traind::v1::TrainingService::Stub* stub) {
  traind::v1::ListJobsResponse resp;
  auto ctx = Ctx();
  EXPECT_TRUE(stub->ListJobs(ctx.get(), traind::v1::ListJobsRequest(), &resp).ok());
  return resp.jobs_size();
}

inline traind::v1::Job GetJob(traind::v1::TrainingService::Stub* stub, const std::string& id) {
  traind::v1::GetJobRequest req;
  req.set_job_id(id);
  traind::v1::Job job;
  auto ctx = Ctx();
  grpc::Status s = stub->GetJob(ctx.get(), req, &job);
  EXPECT_TRUE(s.ok()) << id << ": " << s.error_message();
  return job;
}

// Reads WatchJob to its end.
inline grpc::Status WatchAll(traind::v1::TrainingService::Stub* stub, const std::string& job_id,
                             int64_t after, std::vector<traind::v1::JobEvent>* events,
                             int seconds = 120) {
  auto ctx = Ctx(seconds);
  traind::v1::WatchJobRequest req;
  req.set_job_id(job_id);
  req.set_after_sequence(after);
  auto reader = stub->WatchJob(ctx.get(), req);
  traind::v1::JobEvent e;
  while (reader->Read(&e)) events->push_back(e);
  return reader->Finish();
}

// Runs a command; returns its exit status and stdout.
inline int RunCommand(const std::string& cmd, std::string* out) {
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  out->clear();
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace traind::testing

#endif  // TRAIND_TESTS_INTEGRATION_TESTING_TRAIND_PROCESS_H_
