#include "client/json_numbers.h"

#include <string>

#include "client/render.h"
#include "gtest/gtest.h"
#include "traind/v1/job.pb.h"
#include "traind/v1/training_service.pb.h"

namespace traind::client {
namespace {

namespace v1 = traind::v1;

// 64-bit counts come out as numbers; what only looks like one (a string
// field, a map key, a parameter's JSON text) and what a double cannot hold
// exactly stay strings.
TEST(JsonNumbersTest, Int64FieldsBecomeNumbersWhereExact) {
  v1::Job job;
  job.set_id("12345");                                    // a string field of digits
  job.mutable_spec()->set_seed(18446744073709551615ull);  // above 2^53
  job.mutable_spec()->mutable_training()->set_batches(9007199254740992);  // 2^53
  auto* dim = job.mutable_spec()->mutable_search()->add_space();
  dim->set_path("seed");
  dim->mutable_int_uniform()->set_low(-3);
  dim->mutable_int_uniform()->set_high(9007199254740993);  // 2^53 + 1
  v1::FoldResult* fold = job.mutable_result()->add_folds();
  fold->set_train_rows(120);
  fold->set_val_rows(30);
  fold->set_epochs_run(7);
  v1::TrialResult* trial = job.mutable_result()->add_trials();
  (*trial->mutable_params())["train_rows"] = "\"150\"";  // a parameter's JSON text
  (*trial->mutable_params())["seed"] = "42";
  job.mutable_create_time()->set_seconds(1714566896);
  const std::string json = ToJson(job, /*pretty=*/false);
  EXPECT_NE(json.find("\"id\":\"12345\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"seed\":\"18446744073709551615\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"batches\":9007199254740992"), std::string::npos) << json;
  EXPECT_NE(json.find("\"low\":-3"), std::string::npos) << json;
  EXPECT_NE(json.find("\"high\":\"9007199254740993\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"train_rows\":120,\"val_rows\":30"), std::string::npos) << json;
  EXPECT_NE(json.find("\"epochs_run\":7"), std::string::npos) << json;
  EXPECT_NE(json.find("\"train_rows\":\"\\\"150\\\"\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"seed\":\"42\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"create_time\":\"2024-05-01T12:34:56Z\""), std::string::npos) << json;
  // Pretty output, the same numbers; an event's sequence.
  EXPECT_NE(ToJson(job, true).find("\"train_rows\": 120"), std::string::npos);
  v1::JobEvent event;
  event.set_sequence(77);
  EXPECT_NE(ToJson(event, false).find("\"sequence\":77"), std::string::npos);
  // YAML is made from the JSON: numbers there too.
  EXPECT_NE(ToYaml(event).find("sequence: 77\n"), std::string::npos) << ToYaml(event);
}

TEST(JsonNumbersTest, ArraysAndEscapesAreWalked) {
  const google::protobuf::Descriptor* d = v1::Job::descriptor();
  EXPECT_EQ(Int64sAsNumbers(
                "{\"result\":{\"folds\":[{\"train_rows\":\"5\"},{\"train_rows\":\"-6\"}]}}", d),
            "{\"result\":{\"folds\":[{\"train_rows\":5},{\"train_rows\":-6}]}}");
  EXPECT_EQ(
      Int64sAsNumbers("{\"id\":\"a\\\"b\",\"result\":{\"folds\":[{\"train_rows\":\"007\"}]}}", d),
      "{\"id\":\"a\\\"b\",\"result\":{\"folds\":[{\"train_rows\":\"007\"}]}}");
  EXPECT_EQ(Int64sAsNumbers("{\"unknown\":{\"train_rows\":\"5\"}}", d),
            "{\"unknown\":{\"train_rows\":\"5\"}}");
}

}  // namespace
}  // namespace traind::client
