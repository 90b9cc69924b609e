// ListJobs requests as store queries: the filter and page a ListJobsRequest
// asks for, and the token of the next page.
//
// Thread-safety: pure functions.
#ifndef TRAIND_SERVER_SCHEDULER_LIST_JOBS_QUERY_H_
#define TRAIND_SERVER_SCHEDULER_LIST_JOBS_QUERY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/store/job_store.h"
#include "traind/v1/training_service.pb.h"

namespace traind::server {

// InvalidArgument (naming the field) for a negative page size, an unknown
// state or a page token that no ListJobs returned. A page holds 100 jobs
// unless the request asks for fewer; never more than 1,000.
absl::StatusOr<JobListFilter> ParseListJobsRequest(const traind::v1::ListJobsRequest& req);

// The next page's token for a page of jobs with submit sequences `seqs`
// (newest first), or "" when this page is the last.
std::string NextPageToken(const JobListFilter& f, const std::vector<int64_t>& seqs);

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_LIST_JOBS_QUERY_H_
