#include "server/http/json.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/json.h"
#include "google/protobuf/util/json_util.h"

namespace traind::server {

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.add_whitespace = false;
  std::string out;
  // Only fails for messages with unknown Any types; traind's have none.
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) return "{}";
  return out;
}

int HttpStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string ErrorJson(const absl::Status& status, int http_status) {
  return absl::StrCat(
      "{\"error\":{\"code\":", http_status != 0 ? http_status : HttpStatus(status.code()),
      ",\"status\":", JsonQuote(absl::StatusCodeToString(status.code())),
      ",\"message\":", JsonQuote(status.message()), "}}");
}

absl::StatusOr<traind::v1::ListJobsRequest> ListJobsFromQuery(
    const std::multimap<std::string, std::string>& params) {
  traind::v1::ListJobsRequest req;
  for (const auto& [key, value] : params) {
    if (key == "state") {
      traind::v1::Job::State s;
      if (!traind::v1::Job::State_Parse(absl::AsciiStrToUpper(value), &s) ||
          s == traind::v1::Job::STATE_UNSPECIFIED) {
        return absl::InvalidArgumentError(absl::StrCat(
            "state: \"", value,
            "\" is not a job state (QUEUED, RUNNING, CANCELLING, SUCCEEDED, FAILED, CANCELLED)"));
      }
      req.add_states(s);
    } else if (key == "name_contains") {
      req.set_name_contains(value);
    } else if (key == "page_size") {
      int32_t n;
      if (!absl::SimpleAtoi(value, &n) || n < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("page_size: \"", value, "\" is not a non-negative integer"));
      }
      req.set_page_size(n);
    } else if (key == "page_token") {
      req.set_page_token(value);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown query parameter \"", key,
                       "\" (expected state, name_contains, page_size, page_token)"));
    }
  }
  return req;
}

}  // namespace traind::server
