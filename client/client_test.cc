// TraindClient and the trainctl binary against an in-process fake
// TrainingService on a unix socket: exit codes, output shapes, WatchJob
// reconnection. (End-to-end tests against the real daemon live in tests/.)

#include "client/client.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "traind/v1/training_service.grpc.pb.h"

namespace traind::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::traind::v1::Job;
using ::traind::v1::JobEvent;

class FakeTrainingService final : public v1::TrainingService::Service {
 public:
  // Job ids: "job-ok" (SUCCEEDED), "job-fail" (FAILED), "job-cancel"
  // (CANCELLED). Anything else is NOT_FOUND.
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req, Job* job) override {
    std::lock_guard<std::mutex> lock(mu_);
    submitted_.push_back(req->spec());
    base_dirs_.push_back(req->base_dir());
    if (req->spec().name() == "invalid") {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "model.layers: at least one layer is required");
    }
    if (req->spec().name() == "denied") {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "not allowed");
    }
    std::string id = req->spec().name().empty() ? "job-ok" : req->spec().name();
    job->set_id(id);
    *job->mutable_spec() = req->spec();
    job->set_state(Job::QUEUED);
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* req, Job* job) override {
    if (FinalState(req->job_id()) == Job::STATE_UNSPECIFIED) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + req->job_id() + " not found");
    }
    job->set_id(req->job_id());
    job->mutable_spec()->set_name("iris-cv");
    job->mutable_spec()->mutable_cross_validation()->set_folds(2);
    job->mutable_spec()->mutable_training()->set_epochs(2);
    job->set_state(FinalState(req->job_id()));
    job->mutable_create_time()->set_seconds(1714566896);
    for (int i = 0; i < 2; ++i) {
      v1::Task* task = job->add_tasks();
      task->set_index(i);
      task->set_state(v1::Task::SUCCEEDED);
      task->set_epochs_done(2);
      task->set_epochs_total(2);
      task->add_attempts()->set_pid(100 + i);
    }
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    last_list_ = *req;
    Job* job = resp->add_jobs();
    job->set_id("job-ok");
    job->set_state(Job::SUCCEEDED);
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req, Job* job) override {
    job->set_id(req->job_id());
    job->set_state(req->force() ? Job::CANCELLED : Job::CANCELLING);
    return grpc::Status::OK;
  }

  grpc::Status GetJobResult(grpc::ServerContext*, const v1::GetJobResultRequest* req,
                            v1::JobResult* result) override {
    for (int i = 0; i < 2; ++i) {
      v1::FoldResult* fold = result->add_folds();
      fold->set_fold(i);
      fold->set_best_epoch(2);
      (*fold->mutable_val())["loss"] = 0.25 + 0.5 * i;
      (*fold->mutable_val())["accuracy"] = 1.0 - 0.5 * i;
    }
    (*result->mutable_val())["loss"].set_mean(0.5);
    (*result->mutable_val())["loss"].set_std(0.25);
    (*result->mutable_val())["accuracy"].set_mean(0.75);
    (*result->mutable_val())["accuracy"].set_std(0.25);
    result->set_complete(true);
    return grpc::Status::OK;
  }

  // Six events; the first call of each job breaks (UNAVAILABLE) after
  // sequence 3.
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<JobEvent>* writer) override {
    const Job::State final_state = FinalState(req->job_id());
    if (final_state == Job::STATE_UNSPECIFIED) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "job " + req->job_id() + " not found");
    }
    bool break_now;
    {
      std::lock_guard<std::mutex> lock(mu_);
      watch_after_.push_back(req->after_sequence());
      break_now = broken_.insert(req->job_id()).second;
    }
    for (const JobEvent& event : Events(req->job_id(), final_state)) {
      if (event.sequence() <= req->after_sequence()) continue;
      if (break_now && event.sequence() > 3) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "going away");
      }
      writer->Write(event);
    }
    return grpc::Status::OK;
  }

  grpc::Status ListDevices(grpc::ServerContext*, const v1::ListDevicesRequest*,
                           v1::ListDevicesResponse* resp) override {
    v1::Device* cpu = resp->add_devices();
    cpu->set_id("cpu");
    cpu->set_state(v1::Device::IDLE);
    cpu->set_slots(2);
    return grpc::Status::OK;
  }

  grpc::Status GetServerInfo(grpc::ServerContext*, const v1::GetServerInfoRequest*,
                             v1::ServerInfo* info) override {
    info->set_version("fake");
    return grpc::Status::OK;
  }

  std::vector<v1::JobSpec> submitted() {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  std::vector<std::string> base_dirs() {
    std::lock_guard<std::mutex> lock(mu_);
    return base_dirs_;
  }
  std::vector<int64_t> watch_after() {
    std::lock_guard<std::mutex> lock(mu_);
    return watch_after_;
  }
  v1::ListJobsRequest last_list() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_list_;
  }

 private:
  static Job::State FinalState(const std::string& id) {
    if (id == "job-ok") return Job::SUCCEEDED;
    if (id == "job-fail") return Job::FAILED;
    if (id == "job-cancel") return Job::CANCELLED;
    return Job::STATE_UNSPECIFIED;
  }

  static std::vector<JobEvent> Events(const std::string& id, Job::State final_state) {
    std::vector<JobEvent> events(6);
    for (int i = 0; i < 6; ++i) {
      events[i].set_job_id(id);
      events[i].set_sequence(i + 1);
    }
    events[0].mutable_job_state()->set_state(Job::RUNNING);
    auto* running = events[1].mutable_task_state();
    running->set_task(0);
    running->set_attempt(1);
    running->set_state(v1::Task::RUNNING);
    running->set_pid(1234);
    for (int e = 0; e < 2; ++e) {
      auto* epoch = events[2 + e].mutable_epoch();
      epoch->set_task(0);
      epoch->set_attempt(1);
      epoch->set_epoch(e + 1);
      (*epoch->mutable_train())["loss"] = 0.5;
      (*epoch->mutable_val())["loss"] = 0.25;
      epoch->set_seconds(0.01);
    }
    auto* done = events[4].mutable_task_state();
    done->set_task(0);
    done->set_attempt(1);
    done->set_state(v1::Task::SUCCEEDED);
    events[5].mutable_job_state()->set_state(final_state);
    if (final_state == Job::FAILED) {
      events[5].mutable_job_state()->mutable_failure()->set_reason(v1::Failure::DIVERGED);
    }
    events[5].set_last(true);
    return events;
  }

  std::mutex mu_;
  std::vector<v1::JobSpec> submitted_;
  std::vector<std::string> base_dirs_;
  std::vector<int64_t> watch_after_;
  std::set<std::string> broken_;
  v1::ListJobsRequest last_list_;
};

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class TrainctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "trainctl_client_test_" + std::to_string(::getpid());
    ::mkdir(dir_.c_str(), 0700);
    address_ = "unix:" + dir_ + "/traind.sock";
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address_, grpc::InsecureServerCredentials());
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }

  void TearDown() override {
    server_->Shutdown();
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  // Runs trainctl with `args` (shell words) against the fake server.
  RunResult Run(const std::string& args, const std::string& address = "") {
    const std::string out = dir_ + "/out", err = dir_ + "/err";
    std::string command = std::string("cd '") + dir_ + "' && " + TRAINCTL_PATH + " --address " +
                          (address.empty() ? address_ : address) + " " + args + " >'" + out +
                          "' 2>'" + err + "'";
    int status = std::system(command.c_str());
    RunResult result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = ReadFile(out);
    result.err = ReadFile(err);
    return result;
  }

  std::string WriteSpec(const std::string& text) {
    const std::string path = dir_ + "/spec.yaml";
    std::ofstream(path) << text;
    return path;
  }

  std::string dir_;
  std::string address_;
  FakeTrainingService service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(TrainctlTest, WatchReconnectsWithoutGapsOrDuplicates) {
  ClientOptions options;
  options.address = address_;
  options.timeout_seconds = 5;
  TraindClient client(options);
  std::vector<int64_t> sequences;
  absl::Status status =
      client.WatchJob("job-ok", 0, [&](const JobEvent& e) { sequences.push_back(e.sequence()); });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(sequences, ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_THAT(service_.watch_after(), ElementsAre(0, 3));
}

TEST_F(TrainctlTest, WatchFromACursor) {
  ClientOptions options;
  options.address = address_;
  TraindClient client(options);
  std::vector<int64_t> sequences;
  ASSERT_TRUE(
      client.WatchJob("job-ok", 2, [&](const JobEvent& e) { sequences.push_back(e.sequence()); })
          .ok());
  EXPECT_THAT(sequences, ElementsAre(3, 4, 5, 6));
}

TEST_F(TrainctlTest, ClientErrorsKeepTheServerMessage) {
  ClientOptions options;
  options.address = address_;
  TraindClient client(options);
  absl::StatusOr<Job> job = client.GetJob("nope");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(job.status().message(), "job nope not found");
}

TEST_F(TrainctlTest, SubmitPrintsTheJobAndSendsItsDirectoryAsBaseDir) {
  std::string spec =
      WriteSpec("name: job-ok\ndata: {path: data/iris.csv}\ntraining: {epochs: 2}\n");
  RunResult r = Run("submit " + spec);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "submitted job job-ok (job-ok)\n");
  ASSERT_EQ(service_.submitted().size(), 1u);
  // The server resolves relative paths against trainctl's directory.
  EXPECT_EQ(service_.submitted()[0].data().path(), "data/iris.csv");
  EXPECT_EQ(service_.base_dirs()[0], std::filesystem::canonical(dir_).string());

  r = Run("submit " + spec + " --name renamed --set training.epochs=7 -o json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"id\": \"renamed\""));
  EXPECT_EQ(service_.submitted()[1].name(), "renamed");
  EXPECT_EQ(service_.submitted()[1].training().epochs(), 7);
}

TEST_F(TrainctlTest, SubmitErrors) {
  RunResult r = Run("submit " + WriteSpec("name: invalid\n"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "trainctl: model.layers: at least one layer is required\n");
  r = Run("submit " + WriteSpec("name: denied\n"));
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_EQ(r.err, "trainctl: not allowed\n");
  r = Run("submit " + WriteSpec("name: x\nbogus: 1\n"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("spec.yaml: unknown field \"bogus\" (line 2"));
  EXPECT_EQ(service_.submitted().size(), 2u);  // the bad file never got sent
  r = Run("submit");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, StartsWith("trainctl: "));
  r = Run("submit x.yaml --wait --watch");
  EXPECT_EQ(r.exit_code, 2);
}

TEST_F(TrainctlTest, SubmitWaitPrintsTheFinalJob) {
  std::string spec = WriteSpec("name: job-ok\n");
  RunResult r = Run("submit --wait " + spec);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("id:       job-ok\n"));
  EXPECT_THAT(r.out, HasSubstr("state:    SUCCEEDED\n"));
  EXPECT_THAT(r.out, HasSubstr("FOLD  BEST_EPOCH  VAL_LOSS  VAL_ACCURACY\n"));
  EXPECT_THAT(r.out, HasSubstr("loss 0.5000 \xC2\xB1 0.2500"));
  // The job is named at once on stderr (stdout keeps only the final job).
  EXPECT_EQ(r.err, "trainctl: submitted job job-ok (job-ok); waiting for it to end\n");

  r = Run("submit --wait -o json " + WriteSpec("name: job-fail\n"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("\"state\": \"FAILED\""));
  EXPECT_THAT(r.out, HasSubstr("\"result\": {"));

  r = Run("submit --wait " + WriteSpec("name: job-cancel\n"));
  EXPECT_EQ(r.exit_code, 3);
}

TEST_F(TrainctlTest, SubmitWatchStreamsThenPrintsTheResult) {
  RunResult r = Run("submit --watch " + WriteSpec("name: job-ok\n"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "submitted job job-ok (job-ok)\n"
            "job job-ok RUNNING\n"
            "task 0 RUNNING (attempt 1, pid 1234)\n"
            "task 0  epoch 1  train loss 0.5000 | val loss 0.2500  (0.01s)\n"
            "task 0  epoch 2  train loss 0.5000 | val loss 0.2500  (0.01s)\n"
            "task 0 SUCCEEDED (attempt 1)\n"
            "job job-ok SUCCEEDED\n"
            "\n"
            "FOLD  BEST_EPOCH  VAL_LOSS  VAL_ACCURACY\n"
            "   0           2    0.2500        1.0000\n"
            "   1           2    0.7500        0.5000\n"
            "val mean \xC2\xB1 std over 2 folds: loss 0.5000 \xC2\xB1 0.2500  "
            "accuracy 0.7500 \xC2\xB1 0.2500\n");
}

TEST_F(TrainctlTest, WatchTableUsesTheSpec) {
  RunResult r = Run("watch job-fail");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("fold 0  epoch 2/2  train loss 0.5000"));
  EXPECT_THAT(r.out, HasSubstr("job job-fail FAILED: DIVERGED\n"));
  // A cursor past the last event of a finished job: nothing to stream.
  r = Run("watch job-fail --after 6 -o json");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
  r = Run("watch job-cancel --after 4");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.out, StartsWith("fold 0 SUCCEEDED (attempt 1)\n"));
}

TEST_F(TrainctlTest, WatchJsonIsJsonLinesOnly) {
  RunResult r = Run("watch job-ok -o json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines;
  std::stringstream out(r.out);
  for (std::string line; std::getline(out, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 6u) << r.out;
  EXPECT_EQ(lines[0],
            "{\"job_id\":\"job-ok\",\"sequence\":1,\"job_state\":{\"state\":"
            "\"RUNNING\"},\"last\":false}");
  EXPECT_THAT(lines[5], HasSubstr("\"last\":true"));
}

TEST_F(TrainctlTest, GetListCancelResultDevicesInfo) {
  RunResult r = Run("get job-ok");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("TASK  STATE      ATTEMPTS  EPOCHS  PID  WAIT\n"
                               "   0  SUCCEEDED  1         2/2     100  -\n"));
  r = Run("get nope");
  EXPECT_EQ(r.exit_code, 6);
  EXPECT_EQ(r.err, "trainctl: job nope not found\n");
  EXPECT_EQ(r.out, "");

  r =
      Run("list --state running --state Succeeded --name iris --limit 5 "
          "--page-token t1");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, StartsWith("ID      NAME  STATE      TASKS  CREATED\n"));
  v1::ListJobsRequest list = service_.last_list();
  EXPECT_THAT(list.states(), ElementsAre(Job::RUNNING, Job::SUCCEEDED));
  EXPECT_EQ(list.name_contains(), "iris");
  EXPECT_EQ(list.page_size(), 5);
  EXPECT_EQ(list.page_token(), "t1");
  r = Run("list -o json");
  EXPECT_THAT(r.out, HasSubstr("\"jobs\": ["));

  r = Run("cancel job-ok");
  EXPECT_EQ(r.out, "job job-ok CANCELLING\n");
  r = Run("cancel job-ok --force -o json");
  EXPECT_THAT(r.out, HasSubstr("\"state\": \"CANCELLED\""));

  r = Run("result job-ok");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, StartsWith("FOLD  BEST_EPOCH  VAL_LOSS  VAL_ACCURACY\n"));
  r = Run("result job-ok -o json");
  EXPECT_THAT(r.out, HasSubstr("\"complete\": true"));
  // A job that failed or was cancelled: what finished, then how it ended,
  // with the job's exit code; an unknown job: 6.
  r = Run("result job-fail");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, StartsWith("FOLD  BEST_EPOCH  VAL_LOSS  VAL_ACCURACY\n"));
  EXPECT_EQ(r.err, "trainctl: job job-fail FAILED\n");
  r = Run("result job-fail -o json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("\"complete\": true"));
  r = Run("result job-cancel");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.err, "trainctl: job job-cancel CANCELLED\n");
  r = Run("result nope");
  EXPECT_EQ(r.exit_code, 6);
  EXPECT_EQ(r.err, "trainctl: job nope not found\n");

  r = Run("devices");
  EXPECT_THAT(r.out, HasSubstr("cpu  CPU   "));
  r = Run("info -o json");
  EXPECT_THAT(r.out, HasSubstr("\"version\": \"fake\""));
}

TEST_F(TrainctlTest, UnreachableServerExitsWith4) {
  RunResult r = Run("get job-ok", "unix:" + dir_ + "/missing.sock");
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_THAT(r.err, StartsWith("trainctl: cannot reach traind at unix:"));
  r = Run("watch job-ok", "unix:" + dir_ + "/missing.sock");
  EXPECT_EQ(r.exit_code, 4);
  r = Run("watch job-ok -o json", "unix:" + dir_ + "/missing.sock");
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.out, "");
}

TEST_F(TrainctlTest, YamlOutput) {
  RunResult r = Run("get job-ok -o yaml");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("id: job-ok\n"));
}

TEST_F(TrainctlTest, UsageErrorsExitWith2) {
  EXPECT_EQ(Run("").exit_code, 2);
  RunResult r = Run("stauts");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "trainctl: unknown command \"stauts\" (see trainctl --help)\n");
  EXPECT_EQ(Run("get job-ok -o xml").exit_code, 2);
  EXPECT_EQ(Run("submit x.yaml --priority high").exit_code, 2);
  EXPECT_EQ(Run("get job-ok --tls-cert c.pem").exit_code, 2) << "--tls-cert needs --tls-key";
  EXPECT_EQ(Run("list --state bogus").exit_code, 2);
  EXPECT_EQ(Run("get job-ok", "nocolon").exit_code, 2);
  r = Run("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("Exit codes:"));
}

}  // namespace
}  // namespace traind::client
