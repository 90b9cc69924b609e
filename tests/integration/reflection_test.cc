// Server reflection on traind's public listeners, v1 and v1alpha: the
// public services and their files, never the internal WorkerService.
#include <set>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/testing/traind_process.h"

namespace traind::testing {
namespace {

// Sends `requests` on one reflection stream; the responses in order.
template <typename Stub, typename Request, typename Response>
std::vector<Response> Ask(Stub* stub, const std::vector<Request>& requests) {
  auto ctx = Ctx(10);
  auto stream = stub->ServerReflectionInfo(ctx.get());
  std::vector<Response> out;
  for (const Request& r : requests) {
    EXPECT_TRUE(stream->Write(r));
    Response resp;
    EXPECT_TRUE(stream->Read(&resp));
    out.push_back(resp);
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  return out;
}

template <typename Service, typename Request, typename Response>
void CheckReflection(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = Service::NewStub(channel);
  std::vector<Request> reqs(6);
  reqs[0].set_list_services("");
  reqs[1].set_file_containing_symbol("traind.v1.TrainingService");
  reqs[2].set_file_containing_symbol("traind.v1.WorkerService");
  reqs[3].set_file_by_filename("traind/v1/worker_service.proto");
  reqs[4].set_file_containing_symbol("traind.v1.ReportEpochRequest");
  reqs[5].set_file_containing_symbol("grpc.health.v1.Health");
  std::vector<Response> r = Ask<typename Service::Stub, Request, Response>(stub.get(), reqs);
  ASSERT_EQ(r.size(), 6u);

  std::set<std::string> services;
  for (const auto& s : r[0].list_services_response().service()) services.insert(s.name());
  EXPECT_EQ(services, (std::set<std::string>{"traind.v1.TrainingService", "grpc.health.v1.Health",
                                             "grpc.reflection.v1.ServerReflection",
                                             "grpc.reflection.v1alpha.ServerReflection"}));

  // The public service's file first, then what it imports.
  std::vector<std::string> names;
  bool submit_job = false;
  for (const std::string& bytes : r[1].file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto f;
    ASSERT_TRUE(f.ParseFromString(bytes));
    names.push_back(f.name());
    for (const auto& s : f.service()) {
      for (const auto& m : s.method()) submit_job = submit_job || m.name() == "SubmitJob";
    }
  }
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0], "traind/v1/training_service.proto");
  EXPECT_TRUE(std::set<std::string>(names.begin(), names.end()).count("traind/v1/job.proto"));
  EXPECT_TRUE(submit_job);

  // The internal service, its file and its messages: not found.
  for (int i : {2, 3, 4}) {
    EXPECT_EQ(r[i].error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND))
        << i;
    EXPECT_EQ(r[i].file_descriptor_response().file_descriptor_proto_size(), 0) << i;
  }
  ASSERT_GT(r[5].file_descriptor_response().file_descriptor_proto_size(), 0);
  google::protobuf::FileDescriptorProto health;
  ASSERT_TRUE(health.ParseFromString(r[5].file_descriptor_response().file_descriptor_proto(0)));
  EXPECT_EQ(health.name(), "grpc/health/v1/health.proto");
}

TEST(ReflectionTest, V1AndV1AlphaDescribeOnlyThePublicApi) {
  TempDir dir;
  TraindProcess daemon(dir.path() + "/state");
  ASSERT_TRUE(daemon.Start()) << daemon.Log();
  CheckReflection<grpc::reflection::v1::ServerReflection,
                  grpc::reflection::v1::ServerReflectionRequest,
                  grpc::reflection::v1::ServerReflectionResponse>(daemon.channel());
  CheckReflection<grpc::reflection::v1alpha::ServerReflection,
                  grpc::reflection::v1alpha::ServerReflectionRequest,
                  grpc::reflection::v1alpha::ServerReflectionResponse>(daemon.channel());
}

}  // namespace
}  // namespace traind::testing
