#include "server/scheduler/list_jobs_query.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace traind::server {

using traind::v1::Job;

absl::StatusOr<JobListFilter> ParseListJobsRequest(const traind::v1::ListJobsRequest& req) {
  JobListFilter f;
  if (req.page_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must not be negative (got ", req.page_size(), ")"));
  }
  f.limit = req.page_size() == 0 ? 100 : std::min(req.page_size(), 1000);
  for (int s : req.states()) {
    if (!Job::State_IsValid(s) || s == Job::STATE_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat("states: unknown job state ", s));
    }
    f.states.push_back(static_cast<Job::State>(s));
  }
  f.name_contains = req.name_contains();
  if (!req.page_token().empty() &&
      (!absl::SimpleAtoi(req.page_token(), &f.before_seq) || f.before_seq <= 0)) {
    return absl::InvalidArgumentError("page_token: not a token from a previous ListJobs");
  }
  return f;
}

std::string NextPageToken(const JobListFilter& f, const std::vector<int64_t>& seqs) {
  if (seqs.empty() || static_cast<int>(seqs.size()) != f.limit) return "";
  return absl::StrCat(seqs.back());
}

}  // namespace traind::server
