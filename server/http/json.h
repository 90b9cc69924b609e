// The HTTP side door's JSON: protobuf's canonical JSON mapping of the same
// messages the gRPC read calls return (lowerCamelCase names, enums by name,
// 64-bit integers as strings, defaults printed), errors as
//   {"error": {"code": 404, "status": "NOT_FOUND", "message": "..."}}
// with the HTTP status Google's API design maps each canonical code to.
//
// No HTTP library here: plain functions, unit-tested in json_test.cc.
#ifndef TRAIND_SERVER_HTTP_JSON_H_
#define TRAIND_SERVER_HTTP_JSON_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "traind/v1/training_service.pb.h"

namespace traind::server {

// One line of JSON (no newlines: it also goes into server-sent events).
std::string ToJson(const google::protobuf::Message& message);

// The HTTP status of a canonical error code (INVALID_ARGUMENT 400,
// UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND 404, ...).
int HttpStatus(absl::StatusCode code);
// The error body for `status` (not OK); `http_status` overrides the code
// the body states (405, 413, ...: statuses no canonical code maps to).
std::string ErrorJson(const absl::Status& status, int http_status = 0);

// A ListJobsRequest from query parameters: `state` (repeatable, a Job.State
// name in any case), `name_contains`, `page_size`, `page_token`. An unknown
// parameter or a bad value is INVALID_ARGUMENT naming the parameter.
absl::StatusOr<traind::v1::ListJobsRequest> ListJobsFromQuery(
    const std::multimap<std::string, std::string>& params);

}  // namespace traind::server

#endif  // TRAIND_SERVER_HTTP_JSON_H_
