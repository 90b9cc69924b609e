// The end-to-end tests' fixture: a real traind (2 CPU slots) on a unix
// socket in a temporary state directory, and the iris example spec
// (daemon_test.cc, trainctl_daemon_test.cc).
#ifndef TRAIND_TESTS_INTEGRATION_TESTING_DAEMON_FIXTURE_H_
#define TRAIND_TESTS_INTEGRATION_TESTING_DAEMON_FIXTURE_H_

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "spec/loader.h"
#include "tests/integration/testing/traind_process.h"

namespace traind::testing {

inline std::string IrisPath() { return SourceDir() + "/examples/data/iris.csv"; }

// The example spec with an absolute data path.
inline traind::v1::JobSpec ExampleIrisSpec() {
  auto spec = spec::LoadJobSpecFile(SourceDir() + "/examples/iris-cv.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->mutable_data()->set_path(IrisPath());
  return *spec;
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<TraindProcess>(dir_.path() + "/state",
                                              std::vector<std::string>{"--cpu-slots=2"});
    ASSERT_TRUE(daemon_->Start()) << daemon_->Log();
  }
  void TearDown() override {
    daemon_->Stop();
    if (HasFailure() || getenv("TRAIND_TEST_SHOW_LOG"))
      std::cerr << "--- traind log ---\n" << daemon_->Log();
  }

  absl::StatusOr<traind::v1::Job> Submit(const traind::v1::JobSpec& spec) {
    return SubmitJob(daemon_->stub(), spec);
  }
  traind::v1::Job Get(const std::string& id) { return GetJob(daemon_->stub(), id); }

  int JobCount() { return ::traind::testing::JobCount(daemon_->stub()); }

  traind::v1::Job RunToEnd(const traind::v1::JobSpec& spec,
                           std::vector<traind::v1::JobEvent>* events) {
    auto job = Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return traind::v1::Job();
    grpc::Status s = WatchAll(daemon_->stub(), job->id(), 0, events);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return Get(job->id());
  }

  TempDir dir_;
  std::unique_ptr<TraindProcess> daemon_;
};

}  // namespace traind::testing

#endif  // TRAIND_TESTS_INTEGRATION_TESTING_DAEMON_FIXTURE_H_
