// Limits at submit that a spec cannot walk around: a task whose memory
// estimate no machine of this kind holds is refused naming the estimate
// and the limit; a batch larger than the rows is all the rows (not an
// estimate of terabytes).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/integration/testing/traind_process.h"

namespace traind::testing {
namespace {

TEST(SubmitLimitsTest, ATaskThatCannotFitTheMachineIsRefusedAtSubmit) {
  TempDir dir;
  TraindProcess d(dir.path() + "/state", {"--cpu-slots=1"});
  ASSERT_TRUE(d.Start()) << d.Log();
  // 20 dense layers of 65,536 units (each within limits.max_units): about
  // 64 GiB of weights, gradients and Adam moments per layer.
  traind::v1::JobSpec huge = IrisExampleSpec(2, 1);
  huge.mutable_model()->clear_layers();
  for (int i = 0; i < 20; ++i) {
    traind::v1::Layer* l = huge.mutable_model()->add_layers();
    l->mutable_dense()->set_units(65536);
    l->mutable_dense()->set_activation(traind::v1::RELU);
  }
  huge.mutable_model()->add_layers()->mutable_dense()->set_units(3);
  absl::StatusOr<traind::v1::Job> job = SubmitJob(d.stub(), huge);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << job.status();
  EXPECT_TRUE(absl::StartsWith(job.status().message(), "spec: a task needs an estimated "))
      << job.status();
  EXPECT_NE(job.status().message().find("more than this machine lets traind use ("),
            std::string::npos)
      << job.status();
  // batch_size 2^31-1 on 150 rows trains on the 150 at once: accepted, and
  // it runs (it was once estimated at 816 GiB and failed in the worker).
  traind::v1::JobSpec big_batch = IrisExampleSpec(2, 2);
  big_batch.mutable_training()->set_batch_size(2147483647);
  job = SubmitJob(d.stub(), big_batch);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_LT(job->host_memory_bytes(), int64_t{1} << 30);
  std::vector<traind::v1::JobEvent> events;
  ASSERT_TRUE(WatchAll(d.stub(), job->id(), 0, &events).ok());
  EXPECT_EQ(GetJob(d.stub(), job->id()).state(), traind::v1::Job::SUCCEEDED) << d.Log();
}

// Predict uploads: capped per owner, ended when they send nothing, and the
// partial files a killed traind left are removed at start.
TEST(UploadLimitsTest, PredictUploadsAreCappedEndedWhenIdleAndLeftOnesRemoved) {
  TempDir dir;
  const std::string state = dir.path() + "/state";
  std::filesystem::create_directories(state + "/uploads");
  const std::string left = state + "/uploads/predict-123-456.csv";
  std::ofstream(left) << "a,b\n1,2\n";
  TraindProcess d(state, {"--cpu-slots=1", "--max-uploads-per-user=2", "--upload-idle-timeout=1s"});
  ASSERT_TRUE(d.Start()) << d.Log();
  EXPECT_FALSE(std::filesystem::exists(left));
  EXPECT_NE(d.Log().find("predict uploads left by the last run removed=1"), std::string::npos)
      << d.Log();
  absl::StatusOr<traind::v1::Job> job = SubmitJob(d.stub(), IrisExampleSpec(2, 1));
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<traind::v1::JobEvent> events;
  ASSERT_TRUE(WatchAll(d.stub(), job->id(), 0, &events).ok());

  traind::v1::PredictRequest header;
  header.mutable_header()->set_job_id(job->id());
  struct Call {
    std::unique_ptr<grpc::ClientContext> ctx = Ctx(30);
    traind::v1::PredictResponse resp;
    std::unique_ptr<grpc::ClientWriter<traind::v1::PredictRequest>> writer;
  };
  std::vector<std::unique_ptr<Call>> idle;
  for (int i = 0; i < 2; ++i) {
    idle.push_back(std::make_unique<Call>());
    idle.back()->writer = d.stub()->Predict(idle.back()->ctx.get(), &idle.back()->resp);
    ASSERT_TRUE(idle.back()->writer->Write(header));
  }
  usleep(200 * 1000);
  const auto start = std::chrono::steady_clock::now();
  {
    Call third;
    third.writer = d.stub()->Predict(third.ctx.get(), &third.resp);
    third.writer->Write(header);
    third.writer->WritesDone();
    const grpc::Status s = third.writer->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_EQ(s.error_message(),
              "Predict: local has 2 uploads in flight, the most one caller may "
              "(limits.max_uploads_per_user): wait for one to end");
  }
  // The two that send nothing more are ended after the idle timeout.
  for (auto& c : idle) {
    const grpc::Status s = c->writer->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
    EXPECT_EQ(s.error_message(), "the upload sent nothing for 1s (limits.upload_idle_timeout)");
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  // Their slots are free again: a whole upload is scored.
  std::ifstream in(SourceDir() + "/examples/data/iris.csv");
  std::stringstream csv;
  csv << in.rdbuf();
  traind::v1::PredictRequest data;
  data.set_csv(csv.str());
  Call whole;
  whole.writer = d.stub()->Predict(whole.ctx.get(), &whole.resp);
  ASSERT_TRUE(whole.writer->Write(header));
  ASSERT_TRUE(whole.writer->Write(data));
  whole.writer->WritesDone();
  const grpc::Status s = whole.writer->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(whole.resp.rows(), 0);
  EXPECT_FALSE(std::filesystem::exists(left));
}

}  // namespace
}  // namespace traind::testing
