#include "server/api/reflection.h"

#include <utility>

#include "base/log.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/health/v1/health.pb.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind::server {
namespace {

using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

// The file and everything it imports, each once, the file first.
void AddWithImports(const FileDescriptor* file, std::set<std::string>* seen,
                    std::vector<const FileDescriptor*>* out) {
  if (!seen->insert(file->name()).second) return;
  out->push_back(file);
  for (int i = 0; i < file->dependency_count(); ++i) AddWithImports(file->dependency(i), seen, out);
}

// One reflection stream, for either version (their messages have the same
// fields under different packages).
template <typename Request, typename Response>
grpc::Status Serve(const PublicSchema& schema,
                   grpc::ServerReaderWriter<Response, Request>* stream) {
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  Request req;
  while (stream->Read(&req)) {
    Response resp;
    resp.set_valid_host(req.host());
    *resp.mutable_original_request() = req;
    auto not_found = [&resp](const std::string& what) {
      resp.mutable_error_response()->set_error_code(static_cast<int>(grpc::StatusCode::NOT_FOUND));
      resp.mutable_error_response()->set_error_message(what);
    };
    auto files = [&](const FileDescriptor* file, const std::string& what) {
      if (file == nullptr || !schema.Allowed(file)) return not_found(what);
      std::set<std::string> seen;
      std::vector<const FileDescriptor*> list;
      AddWithImports(file, &seen, &list);
      for (const FileDescriptor* f : list) {
        google::protobuf::FileDescriptorProto proto;
        f->CopyTo(&proto);
        proto.SerializeToString(
            resp.mutable_file_descriptor_response()->add_file_descriptor_proto());
      }
    };
    switch (req.message_request_case()) {
      case Request::kFileByFilename:
        files(pool->FindFileByName(req.file_by_filename()),
              "file " + req.file_by_filename() + " not found");
        break;
      case Request::kFileContainingSymbol:
        files(pool->FindFileContainingSymbol(req.file_containing_symbol()),
              "symbol " + req.file_containing_symbol() + " not found");
        break;
      case Request::kFileContainingExtension: {
        const auto* type =
            pool->FindMessageTypeByName(req.file_containing_extension().containing_type());
        const auto* ext = type == nullptr
                              ? nullptr
                              : pool->FindExtensionByNumber(
                                    type, req.file_containing_extension().extension_number());
        files(ext == nullptr ? nullptr : ext->file(), "extension not found");
        break;
      }
      case Request::kAllExtensionNumbersOfType: {
        const auto* type = pool->FindMessageTypeByName(req.all_extension_numbers_of_type());
        if (type == nullptr || !schema.Allowed(type->file())) {
          not_found("type " + req.all_extension_numbers_of_type() + " not found");
          break;
        }
        std::vector<const google::protobuf::FieldDescriptor*> extensions;
        pool->FindAllExtensions(type, &extensions);
        auto* out = resp.mutable_all_extension_numbers_response();
        out->set_base_type_name(type->full_name());
        for (const auto* e : extensions) {
          if (schema.Allowed(e->file())) out->add_extension_number(e->number());
        }
        break;
      }
      case Request::kListServices:
        for (const std::string& name : schema.services()) {
          resp.mutable_list_services_response()->add_service()->set_name(name);
        }
        break;
      default:
        resp.mutable_error_response()->set_error_code(
            static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
        resp.mutable_error_response()->set_error_message("no request in ServerReflectionRequest");
        break;
    }
    if (!stream->Write(resp)) break;
  }
  return grpc::Status::OK;
}

}  // namespace

PublicSchema::PublicSchema(std::vector<std::string> services) : services_(std::move(services)) {
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  for (const std::string& name : services_) {
    const google::protobuf::ServiceDescriptor* s = pool->FindServiceByName(name);
    if (s == nullptr) {
      LogError("reflection: service %s is not linked into traind", name);
      continue;
    }
    std::vector<const FileDescriptor*> list;
    AddWithImports(s->file(), &files_, &list);
  }
}

bool PublicSchema::Allowed(const FileDescriptor* file) const {
  return file != nullptr && files_.count(file->name()) > 0;
}

grpc::Status ReflectionV1::ServerReflectionInfo(
    grpc::ServerContext*,
    grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                             grpc::reflection::v1::ServerReflectionRequest>* stream) {
  return Serve(*schema_, stream);
}

grpc::Status ReflectionV1Alpha::ServerReflectionInfo(
    grpc::ServerContext*,
    grpc::ServerReaderWriter<grpc::reflection::v1alpha::ServerReflectionResponse,
                             grpc::reflection::v1alpha::ServerReflectionRequest>* stream) {
  return Serve(*schema_, stream);
}

std::shared_ptr<const PublicSchema> TraindPublicSchema() {
  // Referenced so that the linker keeps their descriptors in the pool.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  (void)grpc::reflection::v1::ServerReflectionRequest::descriptor();
  (void)grpc::reflection::v1alpha::ServerReflectionRequest::descriptor();
  return std::make_shared<PublicSchema>(std::vector<std::string>{
      traind::v1::TrainingService::service_full_name(), "grpc.health.v1.Health",
      "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"});
}

}  // namespace traind::server
