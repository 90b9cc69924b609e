#include "client/client.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind::client {
namespace {

using Clock = std::chrono::system_clock;

std::string SecondsText(double seconds) {
  if (seconds == std::floor(seconds)) {
    return absl::StrCat(static_cast<int64_t>(seconds), "s");
  }
  return absl::StrCat(seconds, "s");
}

bool IsTerminal(traind::v1::Job::State state) {
  return state == traind::v1::Job::SUCCEEDED || state == traind::v1::Job::FAILED ||
         state == traind::v1::Job::CANCELLED;
}

bool ReadFile(const std::string& path, std::string* out, absl::Status* error) {
  std::ifstream in(path);
  if (!in) {
    *error = absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(errno)));
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

using ChunkSink = std::function<absl::Status(absl::string_view bytes)>;
using Fetch = std::function<absl::StatusOr<traind::v1::Artifact>(const ChunkSink& sink)>;

// Writes what `fetch` streams into `out` (client.h, DownloadToFile); an
// existing directory gets `file_name` inside it.
absl::StatusOr<traind::v1::Artifact> SaveDownload(const Fetch& fetch, const std::string& file_name,
                                                  const std::string& out, std::string* written_to) {
  namespace fs = std::filesystem;
  if (written_to != nullptr) *written_to = out;
  if (out == "-") {
    return fetch([](absl::string_view bytes) {
      std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      return std::cout ? absl::OkStatus() : absl::UnavailableError("stdout: write failed");
    });
  }
  std::error_code ec;
  fs::path target(out);
  fs::file_status status = fs::status(target, ec);  // follows symbolic links
  if (fs::is_directory(status)) {
    target /= file_name;
    status = fs::status(target, ec);
    if (fs::is_directory(status)) {
      return absl::InvalidArgumentError(
          absl::StrCat(target.string(), ": is a directory; name the file to write"));
    }
  }
  if (written_to != nullptr) *written_to = target.string();
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    // A device or a FIFO: it cannot be replaced, only written to.
    std::ofstream file(target, std::ios::binary);
    if (!file) {
      return absl::InvalidArgumentError(absl::StrCat(target.string(), ": ", std::strerror(errno)));
    }
    absl::StatusOr<traind::v1::Artifact> artifact =
        fetch([&file, &target](absl::string_view bytes) {
          file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
          return file ? absl::OkStatus()
                      : absl::InternalError(absl::StrCat(target.string(), ": write failed"));
        });
    file.close();
    if (artifact.ok() && !file) {
      return absl::InternalError(absl::StrCat(target.string(), ": write failed"));
    }
    return artifact;
  }
  if (fs::is_symlink(fs::symlink_status(target, ec))) {
    fs::path resolved = fs::weakly_canonical(target, ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat(target.string(), ": ", ec.message()));
    target = resolved;
  }
  const std::string part = target.string() + ".part";
  std::ofstream file(part, std::ios::binary | std::ios::trunc);
  if (!file) return absl::InvalidArgumentError(absl::StrCat(part, ": ", std::strerror(errno)));
  absl::StatusOr<traind::v1::Artifact> artifact = fetch([&file, &part](absl::string_view bytes) {
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return file ? absl::OkStatus() : absl::InternalError(absl::StrCat(part, ": write failed"));
  });
  file.close();
  if (artifact.ok() && !file) {
    artifact = absl::InternalError(absl::StrCat(part, ": write failed"));
  }
  if (!artifact.ok()) {
    fs::remove(part, ec);
    return artifact;
  }
  fs::rename(part, target, ec);
  if (ec) {
    fs::remove(part, ec);
    return absl::InternalError(absl::StrCat(target.string(), ": ", ec.message()));
  }
  return artifact;
}

}  // namespace

struct TraindClient::Impl {
  ClientOptions options;
  absl::Status setup_error;  // reading TLS files failed
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<traind::v1::TrainingService::Stub> stub;

  Clock::time_point Deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(options.timeout_seconds));
  }

  absl::Status Unreachable(const std::string& detail) const {
    return absl::UnavailableError(absl::StrCat("cannot reach traind at ", options.address,
                                               detail.empty() ? "" : ": ", detail));
  }

  absl::Status NoAnswer() const {
    return absl::DeadlineExceededError(absl::StrCat("no answer from traind at ", options.address,
                                                    " within ",
                                                    SecondsText(options.timeout_seconds)));
  }

  absl::Status ToStatus(const grpc::Status& status) const {
    if (status.ok()) return absl::OkStatus();
    switch (status.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
        return Unreachable(status.error_message());
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return NoAnswer();
      default:
        break;
    }
    std::string message = status.error_message();
    if (message.empty()) {
      message = absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
    }
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), message);
  }

  void Authorize(grpc::ClientContext* context) const {
    if (!options.token.empty()) {
      context->AddMetadata("authorization", "Bearer " + options.token);
    }
  }

  template <typename Request, typename Response, typename Method>
  absl::StatusOr<Response> Unary(Method method, const Request& request) {
    if (!setup_error.ok()) return setup_error;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    Authorize(&context);
    Response response;
    grpc::Status status = (stub.get()->*method)(&context, request, &response);
    if (!status.ok()) return ToStatus(status);
    return response;
  }

  // Reads a stream of ArtifactChunk (the artifact first, the SHA-256 of all
  // data last) to `sink` and checks the size (when the first message gives
  // it), the SHA-256 the server sent and, when given, `expected_sha256`.
  // `what` names the file in errors ("artifact \"x\" of job 1").
  absl::StatusOr<traind::v1::Artifact> ReadChunks(
      grpc::ClientContext* context, grpc::ClientReader<traind::v1::ArtifactChunk>* reader,
      const std::string& what, const std::string& expected_sha256, const ChunkSink& sink) {
    traind::v1::ArtifactChunk chunk;
    traind::v1::Artifact artifact;
    bool first = true, sized = false;
    int64_t received = 0;
    std::string sha256;
    EVP_MD_CTX* sha = EVP_MD_CTX_new();
    EVP_DigestInit_ex(sha, EVP_sha256(), nullptr);
    absl::Status sink_error;
    while (reader->Read(&chunk)) {
      if (first) {
        sized = chunk.has_artifact();
        artifact = chunk.artifact();
        first = false;
      }
      EVP_DigestUpdate(sha, chunk.data().data(), chunk.data().size());
      received += static_cast<int64_t>(chunk.data().size());
      if (!chunk.sha256().empty()) sha256 = chunk.sha256();
      sink_error = sink(chunk.data());
      if (!sink_error.ok()) {
        context->TryCancel();
        break;
      }
    }
    grpc::Status status = reader->Finish();
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    EVP_DigestFinal_ex(sha, digest, &size);
    EVP_MD_CTX_free(sha);
    if (!sink_error.ok()) return sink_error;
    if (!status.ok()) return ToStatus(status);
    const std::string actual =
        absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), size));
    if (first || (sized && received != artifact.size_bytes()) || sha256 != actual) {
      return absl::DataLossError(absl::StrCat(
          what, " arrived damaged: ", received, " of ", artifact.size_bytes(), " bytes, SHA-256 ",
          actual, ", the server's ", sha256.empty() ? "(none)" : sha256));
    }
    if (!expected_sha256.empty() && actual != expected_sha256) {
      return absl::DataLossError(
          absl::StrCat(what, " arrived with SHA-256 ", actual, ", not ", expected_sha256));
    }
    if (!sized) artifact.set_size_bytes(received);
    return artifact;
  }

  // Waits until the channel is connected. fail_fast: give up as soon as a
  // connection attempt fails (the server is down); otherwise keep trying
  // until the timeout.
  absl::Status WaitConnected(bool fail_fast) {
    const auto deadline = Deadline();
    grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
    while (state != GRPC_CHANNEL_READY) {
      if (state == GRPC_CHANNEL_SHUTDOWN ||
          (fail_fast && state == GRPC_CHANNEL_TRANSIENT_FAILURE)) {
        return Unreachable("failed to connect");
      }
      if (!channel->WaitForStateChange(state, deadline)) {
        return state == GRPC_CHANNEL_TRANSIENT_FAILURE ? Unreachable("failed to connect")
                                                       : NoAnswer();
      }
      state = channel->GetState(/*try_to_connect=*/true);
    }
    return absl::OkStatus();
  }
};

TraindClient::TraindClient(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  const ClientOptions& o = impl_->options;
  if (o.tls) {
    grpc::SslCredentialsOptions ssl;
    absl::Status error;
    if ((!o.tls_ca.empty() && !ReadFile(o.tls_ca, &ssl.pem_root_certs, &error)) ||
        (!o.tls_cert.empty() && !ReadFile(o.tls_cert, &ssl.pem_cert_chain, &error)) ||
        (!o.tls_key.empty() && !ReadFile(o.tls_key, &ssl.pem_private_key, &error))) {
      impl_->setup_error = error;
    }
    credentials = grpc::SslCredentials(ssl);
    if (!o.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(o.tls_server_name);
    }
  }
  impl_->channel = grpc::CreateCustomChannel(impl_->options.address, credentials, args);
  impl_->stub = traind::v1::TrainingService::NewStub(impl_->channel);
}

TraindClient::~TraindClient() = default;

absl::StatusOr<traind::v1::Job> TraindClient::SubmitJob(const traind::v1::JobSpec& spec,
                                                        const std::string& base_dir) {
  traind::v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  request.set_base_dir(base_dir);
  return impl_->Unary<traind::v1::SubmitJobRequest, traind::v1::Job>(
      &traind::v1::TrainingService::Stub::SubmitJob, request);
}

absl::StatusOr<traind::v1::Job> TraindClient::GetJob(const std::string& job_id) {
  traind::v1::GetJobRequest request;
  request.set_job_id(job_id);
  return impl_->Unary<traind::v1::GetJobRequest, traind::v1::Job>(
      &traind::v1::TrainingService::Stub::GetJob, request);
}

absl::StatusOr<traind::v1::ListJobsResponse> TraindClient::ListJobs(
    const traind::v1::ListJobsRequest& request) {
  return impl_->Unary<traind::v1::ListJobsRequest, traind::v1::ListJobsResponse>(
      &traind::v1::TrainingService::Stub::ListJobs, request);
}

absl::StatusOr<traind::v1::Job> TraindClient::CancelJob(const std::string& job_id, bool force) {
  traind::v1::CancelJobRequest request;
  request.set_job_id(job_id);
  request.set_force(force);
  return impl_->Unary<traind::v1::CancelJobRequest, traind::v1::Job>(
      &traind::v1::TrainingService::Stub::CancelJob, request);
}

absl::StatusOr<traind::v1::JobResult> TraindClient::GetJobResult(const std::string& job_id) {
  traind::v1::GetJobResultRequest request;
  request.set_job_id(job_id);
  return impl_->Unary<traind::v1::GetJobResultRequest, traind::v1::JobResult>(
      &traind::v1::TrainingService::Stub::GetJobResult, request);
}

absl::StatusOr<traind::v1::ListDevicesResponse> TraindClient::ListDevices() {
  return impl_->Unary<traind::v1::ListDevicesRequest, traind::v1::ListDevicesResponse>(
      &traind::v1::TrainingService::Stub::ListDevices, traind::v1::ListDevicesRequest());
}

absl::StatusOr<traind::v1::ServerInfo> TraindClient::GetServerInfo() {
  return impl_->Unary<traind::v1::GetServerInfoRequest, traind::v1::ServerInfo>(
      &traind::v1::TrainingService::Stub::GetServerInfo, traind::v1::GetServerInfoRequest());
}

absl::StatusOr<traind::v1::DashboardLogin> TraindClient::CreateDashboardLogin() {
  return impl_->Unary<traind::v1::CreateDashboardLoginRequest, traind::v1::DashboardLogin>(
      &traind::v1::TrainingService::Stub::CreateDashboardLogin,
      traind::v1::CreateDashboardLoginRequest());
}

absl::StatusOr<traind::v1::ListArtifactsResponse> TraindClient::ListArtifacts(
    const std::string& job_id) {
  // Every page, as one list.
  traind::v1::ListArtifactsResponse all;
  traind::v1::ListArtifactsRequest request;
  request.set_job_id(job_id);
  do {
    absl::StatusOr<traind::v1::ListArtifactsResponse> page =
        impl_->Unary<traind::v1::ListArtifactsRequest, traind::v1::ListArtifactsResponse>(
            &traind::v1::TrainingService::Stub::ListArtifacts, request);
    if (!page.ok()) return page.status();
    for (traind::v1::Artifact& a : *page->mutable_artifacts()) *all.add_artifacts() = std::move(a);
    request.set_page_token(page->next_page_token());
  } while (!request.page_token().empty());
  return all;
}

absl::StatusOr<traind::v1::DeleteJobResponse> TraindClient::DeleteJob(const std::string& job_id,
                                                                      bool cancel) {
  traind::v1::DeleteJobRequest request;
  request.set_job_id(job_id);
  request.set_cancel(cancel);
  return impl_->Unary<traind::v1::DeleteJobRequest, traind::v1::DeleteJobResponse>(
      &traind::v1::TrainingService::Stub::DeleteJob, request);
}

absl::StatusOr<traind::v1::Artifact> TraindClient::DownloadArtifact(
    const std::string& job_id, const std::string& name,
    const std::function<absl::Status(absl::string_view bytes)>& sink) {
  if (!impl_->setup_error.ok()) return impl_->setup_error;
  if (absl::Status s = impl_->WaitConnected(/*fail_fast=*/true); !s.ok()) return s;
  grpc::ClientContext context;  // no deadline: a model can be large
  impl_->Authorize(&context);
  traind::v1::GetArtifactRequest request;
  request.set_job_id(job_id);
  request.set_name(name);
  std::unique_ptr<grpc::ClientReader<traind::v1::ArtifactChunk>> reader =
      impl_->stub->GetArtifact(&context, request);
  return impl_->ReadChunks(&context, reader.get(),
                           absl::StrCat("artifact \"", name, "\" of job ", job_id), "", sink);
}

absl::StatusOr<traind::v1::Artifact> TraindClient::DownloadToFile(const std::string& job_id,
                                                                  const std::string& name,
                                                                  const std::string& out,
                                                                  std::string* written_to) {
  return SaveDownload([&](const ChunkSink& sink) { return DownloadArtifact(job_id, name, sink); },
                      std::filesystem::path(name).filename().string(), out, written_to);
}

absl::StatusOr<traind::v1::PredictResponse> TraindClient::Predict(
    const traind::v1::PredictRequest::Header& header,
    const std::function<absl::StatusOr<std::string>()>& source) {
  if (!impl_->setup_error.ok()) return impl_->setup_error;
  if (absl::Status s = impl_->WaitConnected(/*fail_fast=*/true); !s.ok()) return s;
  grpc::ClientContext context;  // no deadline: scoring a large file takes its time
  impl_->Authorize(&context);
  traind::v1::PredictResponse response;
  std::unique_ptr<grpc::ClientWriter<traind::v1::PredictRequest>> writer =
      impl_->stub->Predict(&context, &response);
  traind::v1::PredictRequest message;
  *message.mutable_header() = header;
  bool open = writer->Write(message);
  absl::Status source_error;
  while (open && header.data_path().empty()) {
    absl::StatusOr<std::string> piece = source();
    if (!piece.ok()) {
      source_error = piece.status();
      context.TryCancel();
      break;
    }
    if (piece->empty()) break;
    message.set_csv(*std::move(piece));
    open = writer->Write(message);
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!source_error.ok()) return source_error;
  if (!status.ok()) return impl_->ToStatus(status);
  return response;
}

absl::StatusOr<traind::v1::PrepareDatasetUploadResponse> TraindClient::PrepareDatasetUpload(
    const traind::v1::PrepareDatasetUploadRequest& request) {
  return impl_
      ->Unary<traind::v1::PrepareDatasetUploadRequest, traind::v1::PrepareDatasetUploadResponse>(
          &traind::v1::TrainingService::Stub::PrepareDatasetUpload, request);
}

absl::StatusOr<traind::v1::Dataset> TraindClient::UploadDataset(
    const traind::v1::UploadDatasetRequest::Header& header,
    const std::function<absl::Status(std::string* piece)>& source) {
  if (!impl_->setup_error.ok()) return impl_->setup_error;
  if (absl::Status s = impl_->WaitConnected(/*fail_fast=*/true); !s.ok()) return s;
  grpc::ClientContext context;  // no deadline: a dataset can be large
  impl_->Authorize(&context);
  traind::v1::Dataset dataset;
  std::unique_ptr<grpc::ClientWriter<traind::v1::UploadDatasetRequest>> writer =
      impl_->stub->UploadDataset(&context, &dataset);
  traind::v1::UploadDatasetRequest message;
  *message.mutable_header() = header;
  bool open = writer->Write(message);
  absl::Status source_error;
  // One buffer for every piece: read into, sent from, read into again.
  std::string* piece = message.mutable_data();
  while (open) {
    piece->clear();
    if (absl::Status s = source(piece); !s.ok()) {
      source_error = s;
      context.TryCancel();
      break;
    }
    if (piece->empty()) break;
    open = writer->Write(message);
  }
  if (open) writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!source_error.ok()) return source_error;
  // traind may answer before every byte is sent (it had them already).
  if (!status.ok()) return impl_->ToStatus(status);
  return dataset;
}

absl::StatusOr<traind::v1::ListDatasetsResponse> TraindClient::ListDatasets(
    const traind::v1::ListDatasetsRequest& request) {
  return impl_->Unary<traind::v1::ListDatasetsRequest, traind::v1::ListDatasetsResponse>(
      &traind::v1::TrainingService::Stub::ListDatasets, request);
}

absl::StatusOr<traind::v1::Dataset> TraindClient::GetDataset(
    const traind::v1::GetDatasetRequest& request) {
  return impl_->Unary<traind::v1::GetDatasetRequest, traind::v1::Dataset>(
      &traind::v1::TrainingService::Stub::GetDataset, request);
}

absl::StatusOr<traind::v1::DeleteDatasetResponse> TraindClient::DeleteDataset(
    const traind::v1::DeleteDatasetRequest& request) {
  return impl_->Unary<traind::v1::DeleteDatasetRequest, traind::v1::DeleteDatasetResponse>(
      &traind::v1::TrainingService::Stub::DeleteDataset, request);
}

absl::StatusOr<traind::v1::Artifact> TraindClient::DownloadDatasetToFile(
    const traind::v1::GetDatasetRequest& request, const std::string& expected_sha256,
    const std::string& out, const std::string& file_name, std::string* written_to) {
  auto fetch = [&](const ChunkSink& sink) -> absl::StatusOr<traind::v1::Artifact> {
    if (!impl_->setup_error.ok()) return impl_->setup_error;
    if (absl::Status s = impl_->WaitConnected(/*fail_fast=*/true); !s.ok()) return s;
    grpc::ClientContext context;  // no deadline: a dataset can be large
    impl_->Authorize(&context);
    std::unique_ptr<grpc::ClientReader<traind::v1::ArtifactChunk>> reader =
        impl_->stub->DownloadDataset(&context, request);
    return impl_->ReadChunks(&context, reader.get(), absl::StrCat("dataset ", request.ref()),
                             expected_sha256, sink);
  };
  return SaveDownload(fetch, file_name, out, written_to);
}

absl::StatusOr<std::string> TraindClient::Health() {
  if (!impl_->setup_error.ok()) return impl_->setup_error;
  // grpc.health.v1 is not shipped with Debian's gRPC: speak it by hand.
  // HealthCheckRequest{service: ""} is the empty message; the response is
  // HealthCheckResponse{ServingStatus status = 1}.
  grpc::GenericStub generic(impl_->channel);
  grpc::ClientContext context;
  context.set_deadline(impl_->Deadline());
  impl_->Authorize(&context);
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      status = std::move(s);
                      done = true;
                      cv.notify_one();
                    });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  if (!status.ok()) return impl_->ToStatus(status);
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  int value = 0;  // field 1 (varint) absent: UNKNOWN
  if (bytes.size() >= 2 && bytes[0] == 0x08) value = bytes[1];
  switch (value) {
    case 1:
      return std::string("SERVING");
    case 2:
      return std::string("NOT_SERVING");
    case 3:
      return std::string("SERVICE_UNKNOWN");
    default:
      return std::string("UNKNOWN");
  }
}

absl::Status TraindClient::WatchJob(
    const std::string& job_id, int64_t after_sequence,
    const std::function<void(const traind::v1::JobEvent&)>& on_event) {
  if (!impl_->setup_error.ok()) return impl_->setup_error;
  int64_t last_sequence = after_sequence;
  int failures = 0;  // consecutive broken streams without a new event
  bool first_connection = true;
  absl::Status last_error;
  while (true) {
    if (failures > 0) {
      if (failures > impl_->options.watch_retries) return last_error;
      const double backoff = std::min(5.0, 0.2 * (1 << (failures - 1)));
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    }
    absl::Status connected = impl_->WaitConnected(first_connection);
    if (!connected.ok()) {
      if (first_connection) return connected;
      last_error = connected;
      ++failures;
      continue;
    }
    first_connection = false;

    grpc::ClientContext context;  // no deadline: jobs run for hours
    impl_->Authorize(&context);
    traind::v1::WatchJobRequest request;
    request.set_job_id(job_id);
    request.set_after_sequence(last_sequence);
    std::unique_ptr<grpc::ClientReader<traind::v1::JobEvent>> reader =
        impl_->stub->WatchJob(&context, request);
    traind::v1::JobEvent event;
    while (reader->Read(&event)) {
      if (event.sequence() <= last_sequence) continue;  // already delivered
      last_sequence = event.sequence();
      failures = 0;
      on_event(event);
      if (event.last()) {
        context.TryCancel();
        reader->Finish();
        return absl::OkStatus();
      }
    }
    grpc::Status status = reader->Finish();
    if (!status.ok() && status.error_code() != grpc::StatusCode::UNAVAILABLE) {
      return impl_->ToStatus(status);
    }
    if (status.ok()) {
      // Closed without a `last` event: either the cursor is already past
      // the job's last event (a finished job: nothing more to see), or the
      // server went away cleanly.
      absl::StatusOr<traind::v1::Job> job = GetJob(job_id);
      if (job.ok() && IsTerminal(job->state())) return absl::OkStatus();
      if (!job.ok() && job.status().code() != absl::StatusCode::kUnavailable) {
        return job.status();
      }
    }
    // UNAVAILABLE, or a stream that ended before its last event: reconnect
    // from the last sequence seen.
    last_error =
        status.ok() ? impl_->Unreachable("the event stream ended early") : impl_->ToStatus(status);
    ++failures;
  }
}

}  // namespace traind::client
