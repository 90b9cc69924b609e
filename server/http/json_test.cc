#include "server/http/json.h"

#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace traind::server {
namespace {

TEST(JsonTest, TheCanonicalMappingWithDefaultsOnOneLine) {
  traind::v1::JobEvent e;
  e.set_job_id("j-1");
  e.set_sequence(12);
  e.mutable_time()->set_seconds(1764720000);
  traind::v1::EpochMetrics* m = e.mutable_epoch();
  m->set_task(2);
  m->set_epoch(3);
  (*m->mutable_val())["accuracy"] = 0.5;
  m->set_batches(300);
  const std::string json = ToJson(e);
  EXPECT_EQ(json.find('\n'), std::string::npos);
  EXPECT_NE(json.find("\"jobId\":\"j-1\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"sequence\":\"12\""), std::string::npos) << json;  // int64 as a string
  EXPECT_NE(json.find("\"time\":\"2025-12-03T00:00:00Z\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"val\":{\"accuracy\":0.5}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"attempt\":0"), std::string::npos) << "defaults printed: " << json;
  EXPECT_NE(json.find("\"last\":false"), std::string::npos) << json;
  // And it reads back as the same message (what any JSON client gets).
  traind::v1::JobEvent back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(e, back));
}

TEST(JsonTest, EnumsByName) {
  traind::v1::Job job;
  job.set_state(traind::v1::Job::RUNNING);
  job.add_tasks()->set_wait_reason(traind::v1::Task::RESOURCES);
  const std::string json = ToJson(job);
  EXPECT_NE(json.find("\"state\":\"RUNNING\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"waitReason\":\"RESOURCES\""), std::string::npos) << json;
}

TEST(JsonTest, ErrorsCarryTheCodeTheStatusAndTheHttpStatus) {
  EXPECT_EQ(
      ErrorJson(absl::NotFoundError("job j-9 not found")),
      "{\"error\":{\"code\":404,\"status\":\"NOT_FOUND\",\"message\":\"job j-9 not found\"}}");
  EXPECT_EQ(ErrorJson(absl::InvalidArgumentError("a \"b\"\n\\")),
            "{\"error\":{\"code\":400,\"status\":\"INVALID_ARGUMENT\",\"message\":"
            "\"a \\\"b\\\"\\n\\\\\"}}");
  EXPECT_EQ(ErrorJson(absl::InternalError(std::string("x\x01y", 3))),
            "{\"error\":{\"code\":500,\"status\":\"INTERNAL\",\"message\":\"x\\u0001y\"}}");
}

TEST(JsonTest, HttpStatusOfEveryCanonicalCode) {
  using C = absl::StatusCode;
  const std::vector<std::pair<C, int>> table = {
      {C::kOk, 200},
      {C::kCancelled, 499},
      {C::kUnknown, 500},
      {C::kInvalidArgument, 400},
      {C::kDeadlineExceeded, 504},
      {C::kNotFound, 404},
      {C::kAlreadyExists, 409},
      {C::kPermissionDenied, 403},
      {C::kResourceExhausted, 429},
      {C::kFailedPrecondition, 400},
      {C::kAborted, 409},
      {C::kOutOfRange, 400},
      {C::kUnimplemented, 501},
      {C::kInternal, 500},
      {C::kUnavailable, 503},
      {C::kDataLoss, 500},
      {C::kUnauthenticated, 401},
  };
  for (auto [code, status] : table)
    EXPECT_EQ(HttpStatus(code), status) << absl::StatusCodeToString(code);
}

TEST(JsonTest, ListJobsFromQuery) {
  absl::StatusOr<traind::v1::ListJobsRequest> req = ListJobsFromQuery({{"state", "running"},
                                                                       {"state", "QUEUED"},
                                                                       {"name_contains", "iris"},
                                                                       {"page_size", "50"},
                                                                       {"page_token", "abc"}});
  ASSERT_TRUE(req.ok()) << req.status();
  ASSERT_EQ(req->states_size(), 2);
  EXPECT_EQ(req->states(0), traind::v1::Job::RUNNING);
  EXPECT_EQ(req->states(1), traind::v1::Job::QUEUED);
  EXPECT_EQ(req->name_contains(), "iris");
  EXPECT_EQ(req->page_size(), 50);
  EXPECT_EQ(req->page_token(), "abc");

  for (auto [key, value, error] :
       {std::tuple{"state", "DONE", "state: \"DONE\" is not a job state"},
        std::tuple{"state", "state_unspecified", "is not a job state"},
        std::tuple{"page_size", "-1", "page_size: \"-1\" is not a non-negative integer"},
        std::tuple{"page_size", "ten", "page_size: \"ten\""},
        std::tuple{"limit", "5", "unknown query parameter \"limit\""}}) {
    absl::StatusOr<traind::v1::ListJobsRequest> bad = ListJobsFromQuery({{key, value}});
    ASSERT_FALSE(bad.ok()) << key << "=" << value;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(error), std::string::npos) << bad.status();
  }
}

}  // namespace
}  // namespace traind::server
