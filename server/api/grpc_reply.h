// Small gRPC helpers shared by the TrainingService's files (services.cc,
// artifact_services.cc): status mapping and replies.
#ifndef TRAIND_SERVER_API_GRPC_REPLY_H_
#define TRAIND_SERVER_API_GRPC_REPLY_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/job.pb.h"

namespace traind::server {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, const absl::Status& s) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(ToGrpc(s));
  return r;
}

template <typename T, typename Out>
grpc::ServerUnaryReactor* ReplyWith(grpc::CallbackServerContext* ctx, absl::StatusOr<T> result,
                                    Out* out) {
  if (result.ok()) *out = *std::move(result);
  return Reply(ctx, result.status());
}

inline absl::Status RequireJobId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("job_id: required");
  return absl::OkStatus();
}

// A stream that ends at once with `status`.
template <typename T = traind::v1::JobEvent>
class FinishedWriter final : public grpc::ServerWriteReactor<T> {
 public:
  explicit FinishedWriter(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_API_GRPC_REPLY_H_
