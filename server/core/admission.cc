#include "server/core/admission.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "server/core/auth.h"
#include "spec/memory_estimate.h"
#include "spec/submitted_spec.h"
#include "spec/validation.h"

namespace traind::server {

absl::StatusOr<traind::v1::Job> Admission::Submit(const traind::v1::SubmitJobRequest& req,
                                                  const Caller& caller) const {
  // A retry first: its answer is the job the first submit created, even if
  // the spec would be refused now (the owner's queue is full, the data file
  // changed, the limits were lowered).
  std::string request_sha256;
  if (!req.idempotency_key().empty()) {
    // What identifies a retry: the request itself, key aside, serialized
    // deterministically.
    traind::v1::SubmitJobRequest keyless = req;
    keyless.clear_idempotency_key();
    std::string bytes;
    {
      google::protobuf::io::StringOutputStream out(&bytes);
      google::protobuf::io::CodedOutputStream coded(&out);
      coded.SetSerializationDeterministic(true);
      keyless.SerializeToCodedStream(&coded);
    }
    request_sha256 = Sha256Hex(bytes);
  }
  absl::StatusOr<std::optional<traind::v1::Job>> existing =
      scheduler_->FindSubmitted(caller.name, req.idempotency_key(), request_sha256);
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) return **std::move(existing);

  // The spec as a message or as text, with its overrides and relative paths
  // resolved against the client's base_dir.
  spec::SpecSubmission submission;
  if (req.has_spec()) submission.spec = &req.spec();
  if (req.has_spec_text()) submission.spec_text = &req.spec_text();
  submission.overrides.assign(req.overrides().begin(), req.overrides().end());
  submission.base_dir = req.base_dir();
  absl::StatusOr<traind::v1::JobSpec> submitted = spec::BuildSubmittedSpec(submission);
  if (!submitted.ok()) return submitted.status();
  traind::v1::JobSpec spec = *std::move(submitted);

  // Sizes first (cheap), then confinement: validation reads the data file,
  // so it must only ever see paths inside the data roots.
  if (absl::Status s = CheckSpecLimits(spec, policy_->limits); !s.ok()) return s;
  if (absl::Status s = policy_->data_roots.ConfineSpec(&spec); !s.ok()) return s;
  // Stored datasets: their files (traind's own, not under the data roots).
  std::optional<DatasetCatalog::Pins> pins;
  const bool names_dataset =
      !spec.data().dataset().empty() || !spec.cross_validation().validation_dataset().empty();
  if (names_dataset && datasets_ == nullptr) {
    return absl::FailedPreconditionError("spec.data.dataset: this traind stores no datasets");
  }
  if (datasets_ != nullptr) {
    absl::StatusOr<DatasetCatalog::Pins> pinned = datasets_->ResolveSpec(caller, &spec);
    if (!pinned.ok()) return pinned.status();
    pins.emplace(*std::move(pinned));
  }
  spec::ValidationContext context;
  context.cpu_bf16 = scheduler_->WorkerCpuBf16();
  std::string no_gpu;
  context.gpus = scheduler_->UsableGpus(&no_gpu);
  const bool gpu = spec.resources().device() == traind::v1::GPU;
  if (gpu && context.gpus == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.resources.device: gpu requested, but ", no_gpu));
  }
  spec::ValidatedShape shape;
  absl::Status valid = spec::ValidateJobSpec(spec, context, &shape);
  if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat("spec.", valid.message()));
  if (absl::Status s = CheckDataLimits(spec, shape, policy_->limits); !s.ok()) return s;
  // Images whose files state their shape: the stored spec says it, for the
  // memory estimate, the workers and the model.
  if (spec.data().shape().empty() && !shape.image_shape.empty()) {
    for (int32_t d : shape.image_shape) spec.mutable_data()->add_shape(d);
  }

  absl::StatusOr<spec::TaskMemory> memory = spec::EstimateTaskMemory(
      spec, shape.features, shape.outputs, shape.rows + shape.validation_rows);
  if (!memory.ok()) return memory.status();
  // A task that could never fit this machine is refused now, not failed
  // later by the kernel's OOM killer or an allocation in the worker.
  const int64_t machine = policy_->host_memory_bytes;
  if (machine > 0 && memory->host_bytes > machine) {
    const auto gib = [](int64_t b) {
      return absl::StrFormat("%.1f GiB", static_cast<double>(b) / (int64_t{1} << 30));
    };
    return absl::InvalidArgumentError(absl::StrCat(
        "spec: a task needs an estimated ", gib(memory->host_bytes),
        " of host memory (the model, its batches and the data), more than this machine lets "
        "traind use (",
        gib(machine), "): a smaller model or training.batch_size"));
  }
  SubmitOptions options;
  options.host_memory_bytes = memory->host_bytes;
  if (gpu) options.gpu_memory_bytes = memory->model_bytes;
  options.owner = caller.name;
  options.idempotency_key = req.idempotency_key();
  options.request_sha256 = request_sha256;
  // Checked by Submit after its own idempotency lookup, atomically with the
  // insert (a concurrent retry of the same key may have won the race).
  options.max_queued_jobs = policy_->limits.max_queued_jobs_per_user;
  return scheduler_->Submit(spec, options);
}

}  // namespace traind::server
