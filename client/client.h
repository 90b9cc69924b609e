// TraindClient: trainctl's connection to traind's TrainingService.
//
// This header includes no gRPC headers (only the generated messages); the
// channel and stub live in client.cc.
//
// Errors are absl::Status with the gRPC code of the call and a message fit to
// print after "trainctl: ": the server's message, or for UNAVAILABLE and
// DEADLINE_EXCEEDED one that names the address.
//
// Thread-safety: not thread-safe; one command uses one client.
#ifndef TRAIND_CLIENT_CLIENT_H_
#define TRAIND_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "traind/v1/dataset.pb.h"
#include "traind/v1/job.pb.h"
#include "traind/v1/training_service.pb.h"

namespace traind::client {

struct ClientOptions {
  // gRPC target: "unix:PATH" or "HOST:PORT" (any gRPC target URI works).
  std::string address;
  // Deadline of each unary call, and the longest WatchJob waits to connect.
  double timeout_seconds = 10;
  // WatchJob: reconnect attempts after the stream breaks (UNAVAILABLE) before
  // its last event; each waits 0.2 s, 0.4 s, ... (at most 5 s) first. The count
  // restarts whenever an event arrives.
  int watch_retries = 5;
  // Bearer token sent as `authorization: Bearer TOKEN` on every call (TCP
  // addresses need one; the unix socket ignores it). Empty: none.
  std::string token;
  // TLS: use it (for HOST:PORT addresses); tls_ca is a PEM bundle to trust
  // (empty: the system's roots); tls_cert/tls_key a client certificate for
  // mutual TLS; tls_server_name overrides the name checked in the server's
  // certificate.
  bool tls = false;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_server_name;
};

class TraindClient final {
 public:
  // Connecting is lazy: this never fails; calls report UNAVAILABLE instead.
  // Reading the TLS files can fail: then every call returns that error
  // (INVALID_ARGUMENT naming the file).
  explicit TraindClient(ClientOptions options);
  ~TraindClient();
  TraindClient(const TraindClient&) = delete;
  TraindClient& operator=(const TraindClient&) = delete;

  // `base_dir`: the absolute directory relative file paths of the spec are
  // relative to (the server resolves them); empty: none.
  absl::StatusOr<traind::v1::Job> SubmitJob(const traind::v1::JobSpec& spec,
                                            const std::string& base_dir = "");
  absl::StatusOr<traind::v1::Job> GetJob(const std::string& job_id);
  absl::StatusOr<traind::v1::ListJobsResponse> ListJobs(const traind::v1::ListJobsRequest& request);
  absl::StatusOr<traind::v1::Job> CancelJob(const std::string& job_id, bool force);
  absl::StatusOr<traind::v1::JobResult> GetJobResult(const std::string& job_id);
  absl::StatusOr<traind::v1::ListDevicesResponse> ListDevices();
  absl::StatusOr<traind::v1::ServerInfo> GetServerInfo();
  absl::StatusOr<traind::v1::DashboardLogin> CreateDashboardLogin();
  absl::StatusOr<traind::v1::ListArtifactsResponse> ListArtifacts(const std::string& job_id);
  // Streams artifact `name` of the job to `sink`, chunk by chunk, and checks
  // the size and the SHA-256 the server sends (DATA_LOSS naming the artifact
  // when either disagrees: the bytes given to `sink` are not to be kept).
  // The call has no deadline; it waits at most the timeout to connect.
  absl::StatusOr<traind::v1::Artifact> DownloadArtifact(
      const std::string& job_id, const std::string& name,
      const std::function<absl::Status(absl::string_view bytes)>& sink);
  // DownloadArtifact into `out`: "-" is stdout; an existing directory gets
  // the file NAME's last part inside it; a regular file (or a new name) is
  // written to TARGET.part beside it and renamed over it once complete and
  // checked (removed when not), a symbolic link's target being the file
  // replaced, never the link; anything else (a character device, a FIFO) is
  // written to in place, as `cp` would. Sets *written_to to the path the
  // bytes went to.
  absl::StatusOr<traind::v1::Artifact> DownloadToFile(const std::string& job_id,
                                                      const std::string& name,
                                                      const std::string& out,
                                                      std::string* written_to = nullptr);
  absl::StatusOr<traind::v1::DeleteJobResponse> DeleteJob(const std::string& job_id, bool cancel);
  // Predict: sends `header`, then (without header.data_path) the bytes
  // `source` gives until it returns an empty piece (or an error).
  absl::StatusOr<traind::v1::PredictResponse> Predict(
      const traind::v1::PredictRequest::Header& header,
      const std::function<absl::StatusOr<std::string>()>& source);
  // Datasets. UploadDataset sends `header`, then the bytes `source` puts in
  // *piece (a buffer it may reuse) until it leaves it empty (or returns an
  // error: then the call is cancelled and that error returned). The upload
  // has no deadline; it waits at most the timeout to connect.
  absl::StatusOr<traind::v1::PrepareDatasetUploadResponse> PrepareDatasetUpload(
      const traind::v1::PrepareDatasetUploadRequest& request);
  absl::StatusOr<traind::v1::Dataset> UploadDataset(
      const traind::v1::UploadDatasetRequest::Header& header,
      const std::function<absl::Status(std::string* piece)>& source);
  absl::StatusOr<traind::v1::ListDatasetsResponse> ListDatasets(
      const traind::v1::ListDatasetsRequest& request);
  absl::StatusOr<traind::v1::Dataset> GetDataset(const traind::v1::GetDatasetRequest& request);
  absl::StatusOr<traind::v1::DeleteDatasetResponse> DeleteDataset(
      const traind::v1::DeleteDatasetRequest& request);
  // DownloadDataset into `out` as DownloadToFile writes an artifact (a
  // directory gets `file_name` inside it), checking the size and SHA-256 the
  // server sends and, when given, that the SHA-256 is `expected_sha256`
  // (DATA_LOSS otherwise).
  absl::StatusOr<traind::v1::Artifact> DownloadDatasetToFile(
      const traind::v1::GetDatasetRequest& request, const std::string& expected_sha256,
      const std::string& out, const std::string& file_name, std::string* written_to = nullptr);

  // grpc.health.v1.Health/Check of the whole server: "SERVING",
  // "NOT_SERVING", "UNKNOWN" or "SERVICE_UNKNOWN".
  absl::StatusOr<std::string> Health();

  // Streams the job's events with sequence > after_sequence to `on_event`, in
  // order, until the event marked `last` (returns OK after delivering it),
  // or, when after_sequence is already past the last event of a finished
  // job, returns OK without delivering any.
  // If the stream breaks before that, reconnects with after_sequence = the
  // last sequence delivered, so no event is missed or delivered twice.
  // The first connection fails fast when the server is down and waits at most
  // the timeout otherwise; the stream itself has no deadline.
  absl::Status WatchJob(const std::string& job_id, int64_t after_sequence,
                        const std::function<void(const traind::v1::JobEvent&)>& on_event);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace traind::client

#endif  // TRAIND_CLIENT_CLIENT_H_
