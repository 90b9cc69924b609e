// Data-root confinement and request limits, end to end against the real
// traind over its unix socket (the local admin): path escapes are denied
// naming the path; oversized, malformed and over-limit requests are refused
// and nothing is stored; queued jobs per user are limited.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/testing/traind_process.h"

namespace traind::testing {
namespace {

using traind::v1::Job;

// ---------------------------------------------------------------------------
// Data confinement and limits (over the unix socket: the local admin)
// ---------------------------------------------------------------------------

class ConfinementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    root_ = dir_.path() + "/data";
    fs::create_directories(root_ + "/sub");
    fs::create_directories(dir_.path() + "/outside");
    fs::copy_file(SourceDir() + "/examples/data/iris.csv", root_ + "/sub/iris.csv");
    fs::copy_file(SourceDir() + "/examples/data/iris.csv", dir_.path() + "/outside/iris.csv");
    fs::create_symlink(dir_.path() + "/outside/iris.csv", root_ + "/out-link.csv");
    fs::create_symlink(dir_.path() + "/outside", root_ + "/out-dir");
    fs::create_symlink(root_ + "/sub/iris.csv", root_ + "/in-link.csv");
    daemon_ = std::make_unique<TraindProcess>(
        dir_.path() + "/state",
        std::vector<std::string>{"--cpu-slots=1", "--data-root=" + root_,
                                 "--max-request-bytes=65536", "--max-queued-jobs-per-user=1",
                                 "--max-layers=8", "--max-units=512", "--max-epochs=100000",
                                 "--max-batches=1000000", "--max-tasks=20", "--max-rows=1000",
                                 "--max-columns=10"});
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
  }
  void TearDown() override {
    daemon_->Stop();
    if (HasFailure()) std::cerr << "--- traind log ---\n" << daemon_->Log();
  }

  grpc::Status Submit(const traind::v1::JobSpec& spec, Job* job) {
    traind::v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    auto ctx = Ctx();
    return daemon_->stub()->SubmitJob(ctx.get(), req, job);
  }
  void CancelAll() {
    traind::v1::ListJobsResponse resp;
    auto ctx = Ctx();
    daemon_->stub()->ListJobs(ctx.get(), {}, &resp);
    for (const Job& j : resp.jobs()) {
      traind::v1::CancelJobRequest c;
      c.set_job_id(j.id());
      c.set_force(true);
      Job out;
      auto cc = Ctx();
      daemon_->stub()->CancelJob(cc.get(), c, &out);
    }
  }

  TempDir dir_;
  std::string root_;
  std::unique_ptr<TraindProcess> daemon_;
};

TEST_F(ConfinementTest, PathEscapesAreDeniedNamingThePath) {
  const std::string outside = dir_.path() + "/outside/iris.csv";
  const std::vector<std::string> escapes = {
      root_ + "/../outside/iris.csv",           // ..
      root_ + "/sub/../../outside/iris.csv",    // .. deeper
      outside,                                  // absolute, outside the roots
      SourceDir() + "/examples/data/iris.csv",  // another real dataset, not a root here
      root_ + "/out-link.csv",                  // a symlink pointing out
      root_ + "/out-dir/iris.csv",              // through a symlinked directory
  };
  const int before = JobCount(daemon_->stub());
  for (const std::string& path : escapes) {
    traind::v1::JobSpec spec = IrisExampleSpec(2, 2);
    spec.mutable_data()->set_path(path);
    Job job;
    grpc::Status s = Submit(spec, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << path << ": " << s.error_message();
    EXPECT_EQ(s.error_message().rfind("spec.data.path: " + path, 0), 0u) << s.error_message();
  }
  // validation_path is confined as well.
  traind::v1::JobSpec spec = IrisExampleSpec(2, 2);
  spec.mutable_data()->set_path(root_ + "/sub/iris.csv");
  spec.mutable_cross_validation()->Clear();
  spec.mutable_cross_validation()->set_validation_path(root_ + "/out-link.csv");
  Job job;
  grpc::Status s = Submit(spec, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_EQ(JobCount(daemon_->stub()), before) << "nothing stored";

  // Inside: a plain path and a symlink that stays inside; the job records
  // the resolved path.
  for (const std::string& path : {root_ + "/sub/iris.csv", root_ + "/in-link.csv"}) {
    traind::v1::JobSpec ok = IrisExampleSpec(2, 2);
    ok.mutable_data()->set_path(path);
    Job accepted;
    grpc::Status s2 = Submit(ok, &accepted);
    ASSERT_TRUE(s2.ok()) << path << ": " << s2.error_message();
    EXPECT_EQ(accepted.spec().data().path(), root_ + "/sub/iris.csv");
    std::vector<traind::v1::JobEvent> events;
    WatchAll(daemon_->stub(), accepted.id(), 0, &events);
  }
}

TEST_F(ConfinementTest, OversizedAndMalformedRequestsAreRefusedAndNothingIsStored) {
  const int before = JobCount(daemon_->stub());
  {  // Data over limits.max_rows and limits.max_columns.
    std::ofstream long_csv(root_ + "/long.csv");
    long_csv << "a,species\n";
    for (int i = 0; i < 1001; ++i) long_csv << i << "," << (i % 3) << "\n";
    std::ofstream wide_csv(root_ + "/wide.csv");
    wide_csv << "c0,c1,c2,c3,c4,c5,c6,c7,c8,c9,species\n";
    for (int i = 0; i < 10; ++i) wide_csv << "1,2,3,4,5,6,7,8,9,10," << (i % 3) << "\n";
  }
  traind::v1::JobSpec spec = IrisExampleSpec(2, 2);
  spec.mutable_data()->set_path(root_ + "/sub/iris.csv");

  // Larger than limits.max_request_bytes.
  traind::v1::JobSpec big = spec;
  big.set_name(std::string(100000, 'x'));
  Job job;
  grpc::Status s = Submit(big, &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();

  // Spec sizes.
  struct Case {
    std::function<void(traind::v1::JobSpec*)> mutate;
    std::string prefix;
  };
  for (const Case& c : std::vector<Case>{
           {[](auto* sp) {
              for (int i = 0; i < 8; ++i) sp->mutable_model()->add_layers()->mutable_dropout();
            },
            "spec.model.layers: 10 layers"},
           {[](auto* sp) {
              sp->mutable_model()->mutable_layers(0)->mutable_dense()->set_units(513);
            },
            "spec.model.layers[0].dense.units: 513"},
           {[](auto* sp) { sp->mutable_training()->set_epochs(100001); },
            "spec.training.epochs: 100001"},
           // batches walk around neither max_batches nor max_epochs: 75
           // training rows (2 folds) in batches of 16 are 5 batches an epoch.
           {[](auto* sp) {
              sp->mutable_training()->clear_epochs();
              sp->mutable_training()->set_batches(4611686018427387904);
            },
            "spec.training.batches: 4611686018427387904 batches, more than this traind allows "
            "(1000000, limits.max_batches)"},
           {[](auto* sp) {
              sp->mutable_training()->clear_epochs();
              sp->mutable_training()->set_batches(500001);
            },
            "spec.training.batches: 500001 batches are 100001 epochs of 5 batches (75 training "
            "rows, batch_size 16), more than this traind allows (100000, limits.max_epochs)"},
           {[](auto* sp) {
              sp->mutable_cross_validation()->set_folds(7);
              sp->mutable_cross_validation()->set_repeats(3);
            },
            "spec.cross_validation: 7 folds × 3 repeats = 21 tasks, more than this traind allows "
            "(20, limits.max_tasks)"},
           {[this](auto* sp) { sp->mutable_data()->set_path(root_ + "/long.csv"); },
            "spec.data.path: " + root_ +
                "/long.csv has 1001 rows, more than this traind allows "
                "(1000, limits.max_rows)"},
           {[this](auto* sp) { sp->mutable_data()->set_path(root_ + "/wide.csv"); },
            "spec.data.path: " + root_ +
                "/wide.csv has 11 columns, more than this traind "
                "allows (10, limits.max_columns)"},
       }) {
    traind::v1::JobSpec bad = spec;
    c.mutate(&bad);
    grpc::Status b = Submit(bad, &job);
    EXPECT_EQ(b.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << b.error_message();
    EXPECT_EQ(b.error_message().rfind(c.prefix, 0), 0u) << b.error_message();
  }
  // At the limits: accepted.
  traind::v1::JobSpec at = spec;
  at.mutable_training()->clear_epochs();
  at.mutable_training()->set_batches(10);
  at.mutable_cross_validation()->set_folds(5);
  at.mutable_cross_validation()->set_repeats(4);
  Job accepted;
  grpc::Status a = Submit(at, &accepted);
  EXPECT_TRUE(a.ok()) << a.error_message();
  CancelAll();
  const int accepted_jobs = a.ok() ? 1 : 0;

  // Bytes that are no SubmitJobRequest.
  const std::string garbage = "\x0a\xff\xff\xff\xff\x0f garbage";
  grpc::Status status =
      RawUnaryCall(daemon_->channel(), "/traind.v1.TrainingService/SubmitJob", garbage);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  // gRPC answers a request it cannot parse before traind sees it, with
  // UNIMPLEMENTED and no message (gRPC C++ 1.51's callback API), for every
  // method, unary or streaming: documented in docs/operations.md (Limits).
  // A truncated message is refused the same way; a valid one is served.
  // WatchJob is raw (its events' bytes are serialized once for every
  // stream): traind parses its request and says what is wrong.
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  for (const char* method :
       {"/traind.v1.TrainingService/GetJob", "/traind.v1.TrainingService/WatchJob",
        "/traind.v1.TrainingService/CancelJob"}) {
    const bool watch = absl::EndsWith(method, "/WatchJob");
    for (const std::string& bytes : {garbage, std::string("\x0a\x05")}) {
      grpc::Status st = RawUnaryCall(daemon_->channel(), method, bytes);
      EXPECT_EQ(st.error_code(),
                watch ? grpc::StatusCode::INVALID_ARGUMENT : grpc::StatusCode::UNIMPLEMENTED)
          << method << ": " << st.error_message();
      if (watch) {
        EXPECT_EQ(st.error_message(), "the request is not a WatchJobRequest");
      }
    }
  }
  traind::v1::GetJobRequest get;
  get.set_job_id("nope");
  grpc::Status valid = RawUnaryCall(daemon_->channel(), "/traind.v1.TrainingService/GetJob",
                                    get.SerializeAsString());
  EXPECT_EQ(valid.error_code(), grpc::StatusCode::NOT_FOUND) << valid.error_message();

  // An absurd idempotency key.
  traind::v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  req.set_idempotency_key(std::string(200, 'k'));
  auto ictx = Ctx();
  EXPECT_EQ(daemon_->stub()->SubmitJob(ictx.get(), req, &job).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  EXPECT_EQ(JobCount(daemon_->stub()), before + accepted_jobs) << "nothing stored";
  // The daemon still serves.
  Job ok;
  grpc::Status fine = Submit(spec, &ok);
  EXPECT_TRUE(fine.ok()) << fine.error_message();
  CancelAll();
}

TEST_F(ConfinementTest, QueuedJobsPerUserAreLimited) {
  traind::v1::JobSpec slow = IrisExampleSpec(2, 100000);
  slow.mutable_data()->set_path(root_ + "/sub/iris.csv");
  Job first, second, third;
  ASSERT_TRUE(Submit(slow, &first).ok());
  // Wait for the first to start (it then no longer counts as queued).
  for (int i = 0; i < 200; ++i) {
    traind::v1::GetJobRequest g;
    g.set_job_id(first.id());
    auto ctx = Ctx();
    daemon_->stub()->GetJob(ctx.get(), g, &first);
    if (first.state() != Job::QUEUED) break;
    usleep(50000);
  }
  ASSERT_NE(first.state(), Job::QUEUED);
  ASSERT_TRUE(Submit(slow, &second).ok());  // waits behind the first: queued
  grpc::Status s = Submit(slow, &third);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("local"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("max_queued_jobs_per_user"), std::string::npos);
  CancelAll();
}

// A client that retries a submit (its answer was lost) with the same
// idempotency key gets the job its first try created, even though that job
// filled the owner's queue; a new key is still refused.
TEST_F(ConfinementTest, IdempotentRetryAtTheQueueLimitReturnsTheJob) {
  traind::v1::JobSpec slow = IrisExampleSpec(2, 100000);
  slow.mutable_data()->set_path(root_ + "/sub/iris.csv");
  Job first;
  ASSERT_TRUE(Submit(slow, &first).ok());
  for (int i = 0; i < 200; ++i) {  // started: no longer queued
    first = GetJob(daemon_->stub(), first.id());
    if (first.state() != Job::QUEUED) break;
    usleep(50000);
  }
  ASSERT_NE(first.state(), Job::QUEUED);
  absl::StatusOr<Job> queued = SubmitJob(daemon_->stub(), slow, "retry-me");
  ASSERT_TRUE(queued.ok()) << queued.status();
  ASSERT_EQ(queued->state(), Job::QUEUED);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Job> retry = SubmitJob(daemon_->stub(), slow, "retry-me");
    ASSERT_TRUE(retry.ok()) << retry.status();
    EXPECT_EQ(retry->id(), queued->id());
  }
  // The same key with another request is not a retry (it was once taken
  // for one, silently): ALREADY_EXISTS naming the job.
  traind::v1::JobSpec changed = slow;
  changed.mutable_training()->set_epochs(100001);
  absl::StatusOr<Job> retry = SubmitJob(daemon_->stub(), changed, "retry-me");
  EXPECT_EQ(retry.status().code(), absl::StatusCode::kAlreadyExists) << retry.status();
  EXPECT_EQ(retry.status().message(),
            absl::StrCat("idempotency_key \"retry-me\": job ", queued->id(),
                         " was submitted with this key and a different request (spec, spec_text, "
                         "overrides or base_dir): a new job needs a new key"));
  absl::StatusOr<Job> fresh = SubmitJob(daemon_->stub(), slow, "another-key");
  EXPECT_EQ(fresh.status().code(), absl::StatusCode::kResourceExhausted) << fresh.status();
  EXPECT_NE(fresh.status().message().find("limits.max_queued_jobs_per_user"), std::string::npos)
      << fresh.status();
  CancelAll();
}

}  // namespace
}  // namespace traind::testing
