#include "server/api/services.h"

#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "base/log.h"
#include "google/protobuf/util/time_util.h"
#include "server/api/grpc_reply.h"
#include "server/core/event_feed.h"
#include "server/store/job_files.h"

namespace traind::server {
namespace {

using google::protobuf::util::TimeUtil;
using grpc::CallbackServerContext;
using grpc::ServerUnaryReactor;

// WatchJob: a job's EventFeed (core/event_feed.h) written to one gRPC
// stream, one event per write. The method is raw (services.h): a stream
// writes each event's wire bytes, serialized once for every stream that
// sends it (core/published_event.h), not once per stream.
//
// The hub calls OnEvent on its delivery thread: the feed enqueues, and an
// idle stream starts its next write there, after its own lock is released
// (no lock is held across a write). (No buffer_hint when a stream lags:
// a hinted write may complete only once a later write flushes it, and a
// stream has one write in flight.) Every store read (whether the job exists and has ended, events
// after the cursor) runs on the store-reads pool, never on a gRPC thread. The reactor deletes
// itself once gRPC is done with it and no read is pending.
class WatchReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                           public EventSubscriber {
 public:
  WatchReactor(Scheduler* scheduler, WorkPool* store_reads, ServerMetrics* metrics,
               std::string job_id, int64_t after)
      : scheduler_(scheduler),
        store_reads_(store_reads),
        metrics_(metrics),
        job_id_(std::move(job_id)),
        feed_(after) {
    if (metrics_ != nullptr) metrics_->StreamOpened(ServerMetrics::Stream::kGrpc);
    scheduler_->hub()->Subscribe(job_id_, this);
    absl::MutexLock lock(&mu_);
    checking_ = true;
    refs_.fetch_add(1);
    store_reads_->Post([this] { CheckJob(); });
  }

  void OnEvent(const SharedEvent& event) override {
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      if (feed_.OnLive(event)) write = PumpLocked();
    }
    if (write) StartWrite(&current_);
  }

  void OnJobRemoved() override {
    absl::MutexLock lock(&mu_);
    removed_ = true;
    if (!writing_ && !checking_) FinishLocked(RemovedStatus());
    finishing_ = true;
  }

  void OnWriteDone(bool ok) override {
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      current_.Clear();
      if (!ok) {
        FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
        return;
      }
      if (removed_) {
        FinishLocked(RemovedStatus());
        return;
      }
      if (feed_.ended()) {
        FinishLocked(grpc::Status::OK);
        return;
      }
      if (finishing_) {  // cancelled while this write was in flight
        FinishLocked(grpc::Status::CANCELLED);
        return;
      }
      write = PumpLocked();
    }
    if (write) StartWrite(&current_);
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    if (!writing_) FinishLocked(grpc::Status::CANCELLED);
    finishing_ = true;
  }

  void OnDone() override {
    scheduler_->hub()->Unsubscribe(job_id_, this);
    if (metrics_ != nullptr) metrics_->StreamClosed(ServerMetrics::Stream::kGrpc);
    Unref();
  }

 private:
  // Pool thread: ends at once for an unknown job, or one that ended and
  // whose every event the client has seen; else starts streaming.
  void CheckJob() {
    int64_t last = 0;
    bool terminal = false;
    absl::Status s = scheduler_->JobEventsState(job_id_, &last, &terminal);
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      checking_ = false;
      if (!s.ok()) {
        FinishLocked(ToGrpc(s));
      } else if (feed_.cursor() > last) {
        // Past the job's last event: every later event, the terminal one
        // included, would be skipped and the stream outlive the job.
        FinishLocked(grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                                  absl::StrCat("after_sequence: ", feed_.cursor(),
                                               " is past the job's last event, ", last)));
      } else if (terminal && feed_.cursor() >= last) {
        FinishLocked(grpc::Status::OK);
      } else {
        write = PumpLocked();
      }
    }
    if (write) StartWrite(&current_);
    Unref();
  }

  // Pool thread: the events after `after`, from the store.
  void ReadStore(int64_t after) {
    absl::StatusOr<std::vector<traind::v1::JobEvent>> events =
        scheduler_->store_as_is()->ReadEvents(job_id_, after, EventFeed::kStoreBatch);
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      if (!events.ok()) {
        feed_.AbortRead();
        FinishLocked(
            grpc::Status(grpc::StatusCode::INTERNAL, std::string(events.status().message())));
      } else {
        feed_.EndRead(*std::move(events));
        write = PumpLocked();
      }
    }
    if (write) StartWrite(&current_);
    Unref();
  }

  // Decides what comes next. True: current_ holds the next write, writing_ is set, and the caller
  // starts it once it has released mu_ (nothing else touches them until OnWriteDone).
  bool PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (removed_ && !writing_ && !checking_) {
      FinishLocked(RemovedStatus());
      return false;
    }
    if (writing_ || finishing_ || checking_) return false;
    switch (feed_.next()) {
      case EventFeed::Next::kWait:
        return false;  // for OnEvent, or the read in flight
      case EventFeed::Next::kReadStore: {
        const int64_t after = feed_.BeginRead();
        refs_.fetch_add(1);
        store_reads_->Post([this, after] { ReadStore(after); });
        return false;
      }
      case EventFeed::Next::kSend: {
        SharedEvent e = feed_.TakeOne();
        current_ = WireBytes(std::move(e));
        writing_ = true;
        return true;
      }
    }
    return false;
  }

  // The event's bytes, shared: the slice keeps the event alive.
  static grpc::ByteBuffer WireBytes(SharedEvent e) {
    const std::string& wire = e->wire();
    auto* keep = new SharedEvent(std::move(e));
    grpc::Slice slice(
        const_cast<char*>(wire.data()), wire.size(),
        [](void* p) { delete static_cast<SharedEvent*>(p); }, keep);
    return grpc::ByteBuffer(&slice, 1);
  }

  grpc::Status RemovedStatus() const {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("job ", job_id_, " was deleted while it was watched"));
  }

  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    finishing_ = true;
    Finish(status);
  }

  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  Scheduler* const scheduler_;
  WorkPool* const store_reads_;
  ServerMetrics* const metrics_;
  const std::string job_id_;
  // gRPC's (until OnDone) and one per pending pool task.
  std::atomic<int> refs_{1};
  absl::Mutex mu_;
  EventFeed feed_ ABSL_GUARDED_BY(mu_);
  bool checking_ ABSL_GUARDED_BY(mu_) = false;  // CheckJob has not answered yet
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool removed_ ABSL_GUARDED_BY(mu_) = false;  // the job was deleted (OnJobRemoved)
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // The write in flight: set under mu_ by PumpLocked, then only read by the
  // StartWrite it asked for, until OnWriteDone.
  grpc::ByteBuffer current_;
};

}  // namespace

TrainingServiceImpl::TrainingServiceImpl(Scheduler* scheduler, ReadApi* reads, AccessPolicy policy,
                                         SessionStore* sessions, ServerMetrics* metrics,
                                         DatasetCatalog* datasets)
    : scheduler_(scheduler),
      reads_(reads),
      policy_(std::move(policy)),
      datasets_(datasets),
      sessions_(sessions),
      metrics_(metrics),
      validation_(std::make_unique<WorkPool>(kValidationThreads)),
      store_reads_(std::make_unique<WorkPool>(kStoreReadThreads)),
      files_(std::make_unique<WorkPool>(kFileThreads)),
      deletions_(std::make_unique<WorkPool>(1)),
      predictions_(std::make_unique<WorkPool>(kPredictThreads)),
      uploads_(std::make_unique<UploadSlots>(UploadLimits{policy_.limits.max_uploads,
                                                          policy_.limits.max_uploads_per_user,
                                                          policy_.limits.upload_idle_timeout})) {}

ServerUnaryReactor* TrainingServiceImpl::OnStoreReads(CallbackServerContext* ctx,
                                                      std::function<absl::Status()> work) {
  ServerUnaryReactor* reactor = ctx->DefaultReactor();
  store_reads_->Post([reactor, work = std::move(work)] { reactor->Finish(ToGrpc(work())); });
  return reactor;
}

absl::StatusOr<Caller> TrainingServiceImpl::Authorize(CallbackServerContext* ctx, Rpc rpc) const {
  std::optional<absl::string_view> authorization;
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end()) authorization = absl::string_view(it->second.data(), it->second.size());
  return policy_.authenticator->Authorize(ctx->peer(), authorization, rpc);
}

ServerUnaryReactor* TrainingServiceImpl::SubmitJob(CallbackServerContext* ctx,
                                                   const traind::v1::SubmitJobRequest* req,
                                                   traind::v1::Job* resp) {
  absl::StatusOr<Caller> caller = Authorize(ctx, Rpc::kSubmitJob);
  if (!caller.ok()) return Reply(ctx, caller.status());
  if (req->idempotency_key().size() > 128) {
    return Reply(ctx, absl::InvalidArgumentError("idempotency_key: longer than 128 characters"));
  }
  // Everything else reads text or the file system (the data file among
  // it): on the validation pool, which finishes the call.
  ServerUnaryReactor* reactor = ctx->DefaultReactor();
  validation_->Post([this, reactor, req, resp, caller = *std::move(caller)] {
    absl::StatusOr<traind::v1::Job> job = admission_.Submit(*req, caller);
    if (job.ok()) *resp = *std::move(job);
    reactor->Finish(ToGrpc(job.status()));
  });
  return reactor;
}

ServerUnaryReactor* TrainingServiceImpl::GetJob(CallbackServerContext* ctx,
                                                const traind::v1::GetJobRequest* req,
                                                traind::v1::Job* resp) {
  if (absl::StatusOr<Caller> c = Authorize(ctx, Rpc::kGetJob); !c.ok()) {
    return Reply(ctx, c.status());
  }
  if (absl::Status s = RequireJobId(req->job_id()); !s.ok()) return Reply(ctx, s);
  if (std::optional<traind::v1::Job> job = reads_->GetJobInMemory(req->job_id()); job.has_value()) {
    *resp = *std::move(job);
    return Reply(ctx, absl::OkStatus());
  }
  return OnStoreReads(ctx, [this, req, resp] {
    absl::StatusOr<traind::v1::Job> job = reads_->GetJob(req->job_id());
    if (job.ok()) *resp = *std::move(job);
    return job.status();
  });
}

ServerUnaryReactor* TrainingServiceImpl::ListJobs(CallbackServerContext* ctx,
                                                  const traind::v1::ListJobsRequest* req,
                                                  traind::v1::ListJobsResponse* resp) {
  if (absl::StatusOr<Caller> c = Authorize(ctx, Rpc::kListJobs); !c.ok()) {
    return Reply(ctx, c.status());
  }
  return OnStoreReads(ctx, [this, req, resp] {
    absl::StatusOr<traind::v1::ListJobsResponse> list = reads_->ListJobs(*req);
    if (list.ok()) *resp = *std::move(list);
    return list.status();
  });
}

ServerUnaryReactor* TrainingServiceImpl::CancelJob(CallbackServerContext* ctx,
                                                   const traind::v1::CancelJobRequest* req,
                                                   traind::v1::Job* resp) {
  absl::StatusOr<Caller> caller = Authorize(ctx, Rpc::kCancelJob);
  if (!caller.ok()) return Reply(ctx, caller.status());
  if (absl::Status s = RequireJobId(req->job_id()); !s.ok()) return Reply(ctx, s);
  return OnStoreReads(ctx, [this, req, resp, caller = *std::move(caller)]() -> absl::Status {
    if (caller.role != Role::kAdmin) {
      absl::StatusOr<traind::v1::Job> job = scheduler_->GetJob(req->job_id());
      if (!job.ok()) return job.status();
      if (absl::Status s = MayCancel(caller, job->owner(), job->id()); !s.ok()) return s;
    }
    absl::StatusOr<traind::v1::Job> job = scheduler_->Cancel(req->job_id(), req->force());
    if (job.ok()) *resp = *std::move(job);
    return job.status();
  });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* TrainingServiceImpl::WatchJob(
    CallbackServerContext* ctx, const grpc::ByteBuffer* raw) {
  using Writer = FinishedWriter<grpc::ByteBuffer>;
  if (absl::StatusOr<Caller> c = Authorize(ctx, Rpc::kWatchJob); !c.ok()) {
    return new Writer(ToGrpc(c.status()));
  }
  traind::v1::WatchJobRequest req;
  grpc::ByteBuffer bytes(*raw);  // shares the slices; Deserialize consumes it
  if (!grpc::SerializationTraits<traind::v1::WatchJobRequest>::Deserialize(&bytes, &req).ok()) {
    return new Writer(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the request is not a WatchJobRequest"));
  }
  if (req.job_id().empty()) {
    return new Writer(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job_id: required"));
  }
  if (req.after_sequence() < 0) {
    return new Writer(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "after_sequence: must not be negative"));
  }
  // Whether the job exists, and whether the client has seen everything of
  // it already, the reactor finds out on the store-reads pool.
  return new WatchReactor(scheduler_, store_reads_.get(), metrics_, req.job_id(),
                          req.after_sequence());
}

ServerUnaryReactor* TrainingServiceImpl::GetJobResult(CallbackServerContext* ctx,
                                                      const traind::v1::GetJobResultRequest* req,
                                                      traind::v1::JobResult* resp) {
  if (absl::StatusOr<Caller> c = Authorize(ctx, Rpc::kGetJobResult); !c.ok()) {
    return Reply(ctx, c.status());
  }
  if (absl::Status s = RequireJobId(req->job_id()); !s.ok()) return Reply(ctx, s);
  if (std::optional<traind::v1::Job> job = reads_->GetJobInMemory(req->job_id()); job.has_value()) {
    *resp = job->result();
    return Reply(ctx, absl::OkStatus());
  }
  return OnStoreReads(ctx, [this, req, resp] {
    absl::StatusOr<traind::v1::JobResult> result = reads_->GetJobResult(req->job_id());
    if (result.ok()) *resp = *std::move(result);
    return result.status();
  });
}

ServerUnaryReactor* TrainingServiceImpl::ListDevices(CallbackServerContext* ctx,
                                                     const traind::v1::ListDevicesRequest* req,
                                                     traind::v1::ListDevicesResponse* resp) {
  if (absl::StatusOr<Caller> c = Authorize(ctx, Rpc::kListDevices); !c.ok()) {
    return Reply(ctx, c.status());
  }
  // Reads /proc and asks the GPU probe: on the pool, never on a reactor.
  return OnStoreReads(ctx, [this, resp] {
    *resp = reads_->ListDevices();
    return absl::OkStatus();
  });
}

ServerUnaryReactor* TrainingServiceImpl::GetServerInfo(CallbackServerContext* ctx,
                                                       const traind::v1::GetServerInfoRequest* req,
                                                       traind::v1::ServerInfo* resp) {
  if (absl::StatusOr<Caller> c = Authorize(ctx, Rpc::kGetServerInfo); !c.ok()) {
    return Reply(ctx, c.status());
  }
  // May wait for the workers' capabilities at start: on the pool.
  return OnStoreReads(ctx, [this, resp] {
    *resp = reads_->GetServerInfo();
    return absl::OkStatus();
  });
}

ServerUnaryReactor* TrainingServiceImpl::CreateDashboardLogin(
    CallbackServerContext* ctx, const traind::v1::CreateDashboardLoginRequest* req,
    traind::v1::DashboardLogin* resp) {
  absl::StatusOr<Caller> caller = Authorize(ctx, Rpc::kCreateDashboardLogin);
  if (!caller.ok()) return Reply(ctx, caller.status());
  const std::string url = reads_->http_url();
  if (sessions_ == nullptr || url.empty()) {
    return Reply(ctx, absl::FailedPreconditionError(
                          "this traind serves no HTTP (http_listen is off): no dashboard"));
  }
  SessionStore::Ticket ticket = sessions_->NewTicket(*caller);
  resp->set_url(absl::StrCat(url, "/login?ticket=", ticket.secret));
  *resp->mutable_expire_time() =
      TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(ticket.expire_time));
  LogInfo("dashboard login created for %s (role %s), valid until %s", caller->name,
          RoleName(caller->role), absl::FormatTime(ticket.expire_time));
  return Reply(ctx, absl::OkStatus());
}

// --------------------------------------------------------------------------

// Replies to a worker's report once what it changed is stored: the worker
// forgets what was acknowledged, so it must survive a crash of traind.
void WorkerServiceImpl::Call(const traind::v1::AttemptCredentials& c, std::function<void()> call) {
  // A worker that calls before its own launch is recorded is answered from
  // the dispatch thread once it is: the reactor never waits.
  auto shared = std::make_shared<std::function<void()>>(std::move(call));
  if (!scheduler_->AfterLaunchRecorded(c, [shared] { (*shared)(); })) (*shared)();
}

void WorkerServiceImpl::FinishOnceStored(ServerUnaryReactor* reactor,
                                         const absl::StatusOr<bool>& stop,
                                         traind::v1::ReportResponse* resp) {
  if (!stop.ok()) {
    reactor->Finish(ToGrpc(stop.status()));
    return;
  }
  resp->set_stop(*stop);
  scheduler_->WhenStored([reactor] { reactor->Finish(grpc::Status::OK); });
}

ServerUnaryReactor* WorkerServiceImpl::GetTask(CallbackServerContext* ctx,
                                               const traind::v1::GetTaskRequest* req,
                                               traind::v1::TaskAssignment* resp) {
  ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Call(req->credentials(), [this, reactor, req, resp] {
    absl::StatusOr<traind::v1::TaskAssignment> task = scheduler_->GetTask(req->credentials());
    if (task.ok()) *resp = *std::move(task);
    reactor->Finish(ToGrpc(task.status()));
  });
  return reactor;
}

ServerUnaryReactor* WorkerServiceImpl::ReportEpoch(CallbackServerContext* ctx,
                                                   const traind::v1::ReportEpochRequest* req,
                                                   traind::v1::ReportResponse* resp) {
  ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Call(req->credentials(), [this, reactor, req, resp] {
    std::vector<const traind::v1::EpochMetrics*> epochs = {&req->metrics()};
    for (const traind::v1::EpochMetrics& m : req->more()) epochs.push_back(&m);
    FinishOnceStored(reactor, scheduler_->ReportEpochs(req->credentials(), epochs), resp);
  });
  return reactor;
}

ServerUnaryReactor* WorkerServiceImpl::ReportEvent(CallbackServerContext* ctx,
                                                   const traind::v1::ReportEventRequest* req,
                                                   traind::v1::ReportResponse* resp) {
  ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Call(req->credentials(), [this, reactor, req, resp] {
    FinishOnceStored(reactor, scheduler_->ReportEvent(*req), resp);
  });
  return reactor;
}

ServerUnaryReactor* WorkerServiceImpl::Heartbeat(CallbackServerContext* ctx,
                                                 const traind::v1::HeartbeatRequest* req,
                                                 traind::v1::ReportResponse* resp) {
  ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Call(req->credentials(), [this, reactor, req, resp] {
    absl::StatusOr<bool> stop = scheduler_->Heartbeat(req->credentials());
    if (stop.ok()) resp->set_stop(*stop);
    reactor->Finish(ToGrpc(stop.status()));
  });
  return reactor;
}

ServerUnaryReactor* WorkerServiceImpl::Rendezvous(CallbackServerContext* ctx,
                                                  const traind::v1::RendezvousRequest* req,
                                                  traind::v1::RendezvousResponse* resp) {
  // Waits (without holding a thread) until rank 0 has posted its id.
  ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Call(req->credentials(), [this, reactor, req, resp] {
    scheduler_->Rendezvous(req->credentials(), req->world_size(), req->unique_id(),
                           [reactor, resp](absl::StatusOr<std::string> id) {
                             if (id.ok()) resp->set_unique_id(*id);
                             reactor->Finish(ToGrpc(id.status()));
                           });
  });
  return reactor;
}

}  // namespace traind::server
