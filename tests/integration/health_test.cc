// grpc.health.v1 on the public socket: the whole server ("") and
// traind.v1.TrainingService report SERVING, and NOT_SERVING from SIGTERM on,
// while the workers drain.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "tests/integration/testing/traind_process.h"

namespace traind::testing {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using traind::v1::Job;

constexpr char kService[] = "traind.v1.TrainingService";

grpc::Status Check(Health::Stub* stub, const std::string& service, HealthCheckResponse* out) {
  HealthCheckRequest req;
  req.set_service(service);
  auto ctx = Ctx(5);
  return stub->Check(ctx.get(), req, out);
}

bool Alive(int pid) { return kill(pid, 0) == 0; }

TEST(HealthTest, ServingByNameAndNotServingWhileDraining) {
  TempDir dir;
  // One slot and a grace of 3 s: a stopped worker keeps traind draining.
  TraindProcess daemon(dir.path() + "/state", {"--cpu-slots=1", "--stop-grace=3"});
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  auto health = Health::NewStub(daemon.channel());
  for (const std::string service : {"", kService}) {
    HealthCheckResponse r;
    ASSERT_TRUE(Check(health.get(), service, &r).ok()) << service;
    EXPECT_EQ(r.status(), HealthCheckResponse::SERVING) << service;
  }
  // The internal service is not the public listener's to report.
  HealthCheckResponse unknown;
  EXPECT_EQ(Check(health.get(), "traind.v1.WorkerService", &unknown).error_code(),
            grpc::StatusCode::NOT_FOUND);

  // A running job whose worker cannot stop (SIGSTOP): traind drains for
  // the whole grace.
  auto spec = spec::LoadJobSpecFile(SourceDir() + "/examples/iris-cv.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->mutable_data()->set_path(SourceDir() + "/examples/data/iris.csv");
  spec->mutable_training()->set_epochs(10000);
  absl::StatusOr<Job> job = SubmitJob(daemon.stub(), *spec);
  ASSERT_TRUE(job.ok()) << job.status();
  int worker = 0;
  for (int i = 0; i < 1000 && worker == 0; ++i) {
    Job j = GetJob(daemon.stub(), job->id());
    if (j.tasks(0).epochs_done() >= 2) worker = j.tasks(0).attempts(0).pid();
    usleep(10000);
  }
  ASSERT_GT(worker, 0) << daemon.Log();
  ASSERT_EQ(kill(worker, SIGSTOP), 0);

  grpc::ClientContext watch_ctx;
  watch_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  HealthCheckRequest watch_req;
  watch_req.set_service(kService);
  auto watch = health->Watch(&watch_ctx, watch_req);
  HealthCheckResponse update;
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);

  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  // Watchers hear it at once...
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  // ... and while the worker holds traind draining, new checks say so too,
  // and new work is refused.
  ASSERT_TRUE(Alive(worker));
  for (const std::string service : {"", kService}) {
    HealthCheckResponse r;
    grpc::Status s = Check(health.get(), service, &r);
    ASSERT_TRUE(s.ok()) << service << ": " << s.error_message();
    EXPECT_EQ(r.status(), HealthCheckResponse::NOT_SERVING) << service;
  }
  absl::StatusOr<Job> refused = SubmitJob(daemon.stub(), *spec);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_TRUE(Alive(worker)) << "the checks above ran after the drain";
  watch_ctx.TryCancel();
  watch->Finish();
  watch.reset();
  health.reset();

  // traind kills the stopped worker after the grace and exits cleanly.
  const int status = daemon.Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << daemon.Log();
  for (int i = 0; i < 100 && Alive(worker); ++i) usleep(20000);  // reaped by init
  EXPECT_FALSE(Alive(worker));
}

}  // namespace
}  // namespace traind::testing
