#include "server/worker_service.h"

#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "server/polling_stream.h"
#include "spdlog/spdlog.h"

namespace ablate::server {
namespace {

// Under the default 16 MiB message cap with room to spare; large enough that a 100 MB
// checkpoint is ~100 messages.
constexpr size_t kChunkBytes = 1 << 20;

}  // namespace

absl::Status WorkerServiceImpl::Authorize(const grpc::ServerContextBase& ctx, const char* method) {
  return d_.auth->Check(ctx, Surface::kWorker, method).status();
}

grpc::Status WorkerServiceImpl::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                         v1::RegisterResponse* resp) {
  RpcTimer timer(d_.metrics, "Register");
  if (auto a = Authorize(*ctx, "WorkerService.Register"); !a.ok()) return ToGrpc(a);
  auto id = d_.queue->Register(req->info());
  if (!id.ok()) return ToGrpc(id.status());
  resp->set_worker_id(*id);
  resp->set_lease_seconds(d_.queue->lease_seconds());
  spdlog::info("worker registered id={} name={} device={}", *id, req->info().name(),
               req->info().device_kind());
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Lease(grpc::CallbackServerContext* ctx,
                                                   const v1::LeaseRequest* req,
                                                   v1::LeaseResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  const auto start = std::chrono::steady_clock::now();
  auto finish = [this, reactor, start](const grpc::Status& status) {
    d_.metrics->ObserveRpc(
        "Lease", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    reactor->Finish(status);
  };
  // Authentication may query the database: do it on the executor, not on gRPC's thread.
  d_.executor->Post([this, ctx, req, resp, finish] {
    if (auto a = Authorize(*ctx, "WorkerService.Lease"); !a.ok()) {
      finish(ToGrpc(a));
      return;
    }
    d_.broker->Lease(
        req->worker_id(), req->wait_seconds(), [ctx] { return !ctx->IsCancelled(); },
        [this, ctx, resp, finish](absl::StatusOr<v1::LeaseResponse> r) {
          if (!r.ok()) {
            finish(ToGrpc(r.status()));
            return;
          }
          if (r->has_run()) {
            if (ctx->IsCancelled()) {
              // The worker hung up while we leased for it: hand the run straight back rather
              // than let it sit leased until the lease expires.
              v1::ReleaseRequest back;
              back.set_run_id(r->lease().run_id());
              back.set_attempt(r->lease().attempt());
              back.set_reason("lease reply undeliverable: caller went away");
              auto s = d_.queue->Release(back);
              if (!s.ok()) spdlog::warn("release after cancelled lease: {}", s.ToString());
              finish(grpc::Status(grpc::StatusCode::CANCELLED, "caller went away"));
              return;
            }
            d_.metrics->LeaseGranted();
          }
          *resp = *std::move(r);
          finish(grpc::Status::OK);
        });
  });
  return reactor;
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                          v1::HeartbeatResponse* resp) {
  RpcTimer timer(d_.metrics, "Heartbeat");
  if (auto a = Authorize(*ctx, "WorkerService.Heartbeat"); !a.ok()) return ToGrpc(a);
  auto r = d_.queue->Heartbeat(*req);
  if (!r.ok()) return ToGrpc(r.status());
  *resp = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::ReportMetrics(grpc::ServerContext* ctx,
                                              const v1::ReportMetricsRequest* req,
                                              v1::ReportMetricsResponse* resp) {
  RpcTimer timer(d_.metrics, "ReportMetrics");
  if (auto a = Authorize(*ctx, "WorkerService.ReportMetrics"); !a.ok()) return ToGrpc(a);
  if (req->points_size() > d_.options->max_points_per_report) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("points: ", req->points_size(), " points in one report; the limit is ",
                     d_.options->max_points_per_report, " (send smaller batches)")));
  }
  for (int i = 0; i < req->points_size(); ++i) {
    const auto& p = req->points(i);
    if (p.name().empty() || p.name().size() > 200 || p.step() < 0) {
      return ToGrpc(absl::InvalidArgumentError(
          absl::StrCat("points[", i, "]: name must be 1..200 characters and step >= 0 (got name \"",
                       p.name().substr(0, 50), "\", step ", p.step(), ")")));
    }
  }
  auto n = d_.queue->ReportMetrics(*req);
  if (!n.ok()) return ToGrpc(n.status());
  d_.metrics->MetricPoints(*n);
  resp->set_accepted(*n);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::PutCheckpoint(grpc::ServerContext* ctx,
                                              grpc::ServerReader<v1::CheckpointChunk>* reader,
                                              v1::PutCheckpointResponse* resp) {
  RpcTimer timer(d_.metrics, "PutCheckpoint");
  if (auto a = Authorize(*ctx, "WorkerService.PutCheckpoint"); !a.ok()) return ToGrpc(a);
  v1::CheckpointChunk header;
  if (!reader->Read(&header)) {
    return ToGrpc(absl::InvalidArgumentError("checkpoint: empty stream (no header chunk)"));
  }
  const v1::CheckpointRef ref = header.ref();
  const int64_t run_id = header.run_id();
  const int attempt = header.attempt();
  if (!IsSha256Hex(ref.sha256()) || ref.size_bytes() < 0 || ref.step() < 0) {
    return ToGrpc(absl::InvalidArgumentError(
        "checkpoint: header ref needs step >= 0, size_bytes >= 0 and a 64-hex-digit sha256"));
  }
  // Refuse a stale attempt before it uploads hundreds of MB; checked again when recording.
  if (auto f = d_.queue->CheckFence(run_id, attempt); !f.ok()) return ToGrpc(f);
  auto writer = d_.blobs->NewWriter();
  if (!writer.ok()) return ToGrpc(writer.status());
  v1::CheckpointChunk chunk = std::move(header);
  do {
    if (auto s = (*writer)->Append(chunk.data()); !s.ok()) return ToGrpc(s);
  } while (reader->Read(&chunk));
  if (auto s = (*writer)->Commit(ref.sha256(), ref.size_bytes()); !s.ok()) return ToGrpc(s);
  if (auto s = d_.queue->RecordCheckpoint(run_id, attempt, ref); !s.ok()) return ToGrpc(s);
  *resp->mutable_stored() = ref;
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::GetCheckpoint(grpc::ServerContext* ctx,
                                              const v1::GetCheckpointRequest* req,
                                              grpc::ServerWriter<v1::CheckpointChunk>* writer) {
  RpcTimer timer(d_.metrics, "GetCheckpoint");
  if (auto a = Authorize(*ctx, "WorkerService.GetCheckpoint"); !a.ok()) return ToGrpc(a);
  if (auto f = d_.queue->CheckFence(req->run_id(), req->attempt()); !f.ok()) return ToGrpc(f);
  auto ref = d_.queue->FindCheckpoint(req->run_id(), req->sha256());
  if (!ref.ok()) return ToGrpc(ref.status());
  auto path = d_.blobs->PathOf(ref->sha256());
  if (!path.ok()) return ToGrpc(path.status());
  bool first = true;
  auto s = StreamFile(*path, kChunkBytes, [&](std::string&& data, int64_t) {
    v1::CheckpointChunk chunk;
    if (first) {
      chunk.set_run_id(req->run_id());
      chunk.set_attempt(req->attempt());
      *chunk.mutable_ref() = *ref;
      first = false;
    }
    chunk.set_data(std::move(data));
    return writer->Write(chunk);
  });
  return ToGrpc(s);
}

grpc::Status WorkerServiceImpl::GetDataset(grpc::ServerContext* ctx,
                                           const v1::GetDatasetRequest* req,
                                           grpc::ServerWriter<v1::DataChunk>* writer) {
  RpcTimer timer(d_.metrics, "GetDataset");
  if (auto a = Authorize(*ctx, "WorkerService.GetDataset"); !a.ok()) return ToGrpc(a);
  auto found = d_.queue->DatasetPath(req->sha256());
  if (!found.ok()) return ToGrpc(found.status());
  std::error_code ec;
  const auto size = static_cast<int64_t>(std::filesystem::file_size(found->first, ec));
  if (ec || size != found->second) {
    // The worker checks the digest anyway; refusing early names the cause.
    return ToGrpc(absl::FailedPreconditionError(
        absl::StrCat("data set ", req->sha256(), " (", found->first,
                     ") changed or vanished on the server since it was submitted")));
  }
  auto s = StreamFile(found->first, kChunkBytes, [&](std::string&& data, int64_t total) {
    v1::DataChunk chunk;
    chunk.set_total_bytes(total);
    chunk.set_data(std::move(data));
    return writer->Write(chunk);
  });
  return ToGrpc(s);
}

grpc::Status WorkerServiceImpl::Complete(grpc::ServerContext* ctx, const v1::CompleteRequest* req,
                                         v1::CompleteResponse* /*resp*/) {
  RpcTimer timer(d_.metrics, "Complete");
  if (auto a = Authorize(*ctx, "WorkerService.Complete"); !a.ok()) return ToGrpc(a);
  return ToGrpc(d_.queue->Complete(*req));
}

grpc::Status WorkerServiceImpl::Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                                        v1::ReleaseResponse* /*resp*/) {
  RpcTimer timer(d_.metrics, "Release");
  if (auto a = Authorize(*ctx, "WorkerService.Release"); !a.ok()) return ToGrpc(a);
  return ToGrpc(d_.queue->Release(*req));
}

}  // namespace ablate::server
