// Fair share between owners end to end: a real traind on TCP with two
// submitters' tokens and 2 CPU slots. Alice's search (4 trials x 3 folds)
// holds both slots; Bob's 2-fold CV, submitted meanwhile, starts when the
// next slot frees (within one of Alice's folds), not after her search.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "server/core/auth.h"
#include "spec/loader.h"
#include "tests/integration/testing/traind_process.h"
#include "tests/testing/temp_dir.h"

namespace traind::testing {
namespace {

using google::protobuf::util::TimeUtil;
using traind::v1::Job;
using traind::v1::Task;

const char* kAlice = "alice-token-0123456789abcdef";
const char* kBob = "bob-token-0123456789abcdef";

std::unique_ptr<grpc::ClientContext> As(const std::string& token) {
  auto ctx = Ctx(30);
  ctx->AddMetadata("authorization", "Bearer " + token);
  return ctx;
}

int64_t Micros(const google::protobuf::Timestamp& t) {
  return TimeUtil::TimestampToMicroseconds(t);
}

TEST(FairShareDaemonTest, AColleaguesCvStartsWithinOneFoldWhileASearchHoldsEverySlot) {
  TempDir dir;
  using traind::server::Sha256Hex;
  const std::string tokens = dir.Write(
      "tokens.yaml",
      absl::StrCat("tokens:\n  - {name: alice, role: submitter, sha256: ", Sha256Hex(kAlice),
                   "}\n  - {name: bob, role: submitter, sha256: ", Sha256Hex(kBob), "}\n"));
  TraindProcess daemon(dir.path() + "/state",
                       {"--cpu-slots=2", "--listen=127.0.0.1:0", "--tokens-file=" + tokens,
                        "--data-root=" + SourceDir() + "/examples/data"});
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  std::unique_ptr<traind::v1::TrainingService::Stub> tcp;
  {
    traind::v1::ServerInfo info;
    auto ctx = Ctx();
    ASSERT_TRUE(daemon.stub()->GetServerInfo(ctx.get(), {}, &info).ok());
    for (const std::string& a : info.listen_addresses()) {
      if (!absl::StartsWith(a, "unix:")) {
        tcp = traind::v1::TrainingService::NewStub(
            grpc::CreateChannel(a, grpc::InsecureChannelCredentials()));
      }
    }
    ASSERT_NE(tcp, nullptr);
  }
  auto submit = [&](const char* token, const traind::v1::JobSpec& spec) {
    traind::v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    Job job;
    auto ctx = As(token);
    grpc::Status s = tcp->SubmitJob(ctx.get(), req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  };
  // Folds of a few hundred milliseconds: small batches, many epochs.
  absl::StatusOr<traind::v1::JobSpec> search =
      spec::LoadJobSpecFile(SourceDir() + "/examples/iris-search.yaml");
  ASSERT_TRUE(search.ok()) << search.status();
  search->mutable_data()->set_path(SourceDir() + "/examples/data/iris.csv");
  search->mutable_training()->set_epochs(1000);
  search->mutable_training()->set_batch_size(4);
  const Job alice = submit(kAlice, *search);
  ASSERT_FALSE(alice.id().empty());
  // Both slots are Alice's.
  for (int i = 0; i < 3000; ++i) {
    const Job j = GetJob(daemon.stub(), alice.id());
    int running = 0;
    for (const Task& t : j.tasks()) running += t.state() == Task::RUNNING;
    if (running == 2) break;
    usleep(5000);
  }
  traind::v1::JobSpec cv = IrisExampleSpec(2, 150);
  cv.mutable_training()->set_batch_size(4);
  const Job bob = submit(kBob, cv);
  ASSERT_FALSE(bob.id().empty());
  EXPECT_EQ(bob.owner(), "bob");
  // Bob's job ends; Alice's search is then still far from its end.
  Job b;
  for (int i = 0; i < 12000; ++i) {
    b = GetJob(daemon.stub(), bob.id());
    if (b.state() == Job::SUCCEEDED || b.state() == Job::FAILED) break;
    usleep(5000);
  }
  ASSERT_EQ(b.state(), Job::SUCCEEDED) << daemon.Log();
  const Job a = GetJob(daemon.stub(), alice.id());
  EXPECT_EQ(a.owner(), "alice");
  EXPECT_EQ(a.state(), Job::RUNNING);
  // Bob's first fold started within one of Alice's folds of his submission,
  // and at most one of her tasks started in between (a slot freed while
  // he submitted); Alice's other tasks waited for their owner's share.
  const int64_t submitted = Micros(b.create_time());
  const int64_t bob_start = Micros(b.tasks(0).attempts(0).start_time());
  int64_t longest_fold = 0;
  int alice_started_between = 0, alice_done = 0;
  for (const Task& t : a.tasks()) {
    if (t.attempts_size() == 0) continue;
    const int64_t start = Micros(t.attempts(0).start_time());
    if (start > submitted && start < bob_start) ++alice_started_between;
    if (t.attempts(0).has_end_time()) {
      ++alice_done;
      longest_fold = std::max(longest_fold, Micros(t.attempts(0).end_time()) - start);
    }
  }
  ASSERT_GT(alice_done, 0);
  std::cout << "Bob's first fold started " << (bob_start - submitted) / 1000
            << " ms after his submission; Alice's longest fold took " << longest_fold / 1000
            << " ms; " << alice_started_between << " of her tasks started in between, "
            << alice_done << " had ended when his job ended\n";
  EXPECT_LE(bob_start - submitted, longest_fold + 100000)
      << "Bob waited " << (bob_start - submitted) / 1000 << " ms; Alice's longest fold took "
      << longest_fold / 1000 << " ms";
  EXPECT_LE(alice_started_between, 1);
  EXPECT_LT(alice_done, 12) << "Alice's search was nearly done before Bob started";
  {
    traind::v1::CancelJobRequest cancel;
    cancel.set_job_id(alice.id());
    cancel.set_force(true);
    Job cancelled;
    auto ctx = As(kAlice);
    EXPECT_TRUE(tcp->CancelJob(ctx.get(), cancel, &cancelled).ok());
  }
  daemon.Stop();
}

}  // namespace
}  // namespace traind::testing
