// gRPC server reflection (v1 and v1alpha) that describes only the public
// API: the services given (TrainingService, health, reflection itself) and
// the files they import. gRPC's own reflection plugin answers from every
// file linked into the binary, which would hand out the internal
// WorkerService's schema on the public listeners; and Debian's gRPC has no
// v1.
//
// Thread-safety: the services are stateless between calls.
#ifndef TRAIND_SERVER_API_REFLECTION_H_
#define TRAIND_SERVER_API_REFLECTION_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"

namespace traind::server {

// The services and files that reflection may describe.
class PublicSchema {
 public:
  // `services`: full names ("traind.v1.TrainingService"); each must be in
  // the generated descriptor pool.
  explicit PublicSchema(std::vector<std::string> services);
  const std::vector<std::string>& services() const { return services_; }
  // Whether `file` is one of the services' files or what they import.
  bool Allowed(const google::protobuf::FileDescriptor* file) const;

 private:
  std::vector<std::string> services_;
  std::set<std::string> files_;
};

class ReflectionV1 final : public grpc::reflection::v1::ServerReflection::Service {
 public:
  explicit ReflectionV1(std::shared_ptr<const PublicSchema> schema) : schema_(std::move(schema)) {}
  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                               grpc::reflection::v1::ServerReflectionRequest>* stream) override;

 private:
  std::shared_ptr<const PublicSchema> schema_;
};

class ReflectionV1Alpha final : public grpc::reflection::v1alpha::ServerReflection::Service {
 public:
  explicit ReflectionV1Alpha(std::shared_ptr<const PublicSchema> schema)
      : schema_(std::move(schema)) {}
  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<grpc::reflection::v1alpha::ServerReflectionResponse,
                               grpc::reflection::v1alpha::ServerReflectionRequest>* stream)
      override;

 private:
  std::shared_ptr<const PublicSchema> schema_;
};

// The public schema of traind's listeners: TrainingService, grpc.health.v1
// and both reflection versions.
std::shared_ptr<const PublicSchema> TraindPublicSchema();

}  // namespace traind::server

#endif  // TRAIND_SERVER_API_REFLECTION_H_
