// SweepService (role user): what the ablate CLI calls. WatchSweep and GetRunMetrics are
// callback-API streams woken by NOTIFY (see PollingStream); the rest are synchronous.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "ablate/v1/ablate.grpc.pb.h"
#include "server/rpc_guard.h"
#include "server/service_deps.h"

namespace ablate::server {

// A counting semaphore with a bounded wait: how many sweep files are parsed and expanded at once.
// Each costs CPU and (for a real submit) memory in proportion to its grid, so a burst of large
// submits queues briefly and then is told to retry instead of growing the server without bound.
class ParseSlots {
 public:
  explicit ParseSlots(int slots) : free_(slots > 0 ? slots : 1) {}
  // True once a slot is held (release it with Release); false after waiting `wait` in vain.
  bool Acquire(std::chrono::milliseconds wait);
  void Release();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_;
};

class SweepServiceImpl final
    : public v1::SweepService::WithCallbackMethod_WatchSweep<
          v1::SweepService::WithCallbackMethod_GetRunMetrics<v1::SweepService::Service>> {
 public:
  explicit SweepServiceImpl(ServiceDeps deps)
      : d_(deps),
        guard_(deps.auth, deps.metrics, Surface::kSweep),
        parse_slots_(deps.options->max_concurrent_parses) {}

  grpc::Status SubmitSweep(grpc::ServerContext* ctx, const v1::SubmitSweepRequest* req,
                           v1::SubmitSweepResponse* resp) override;
  grpc::Status GetSweep(grpc::ServerContext* ctx, const v1::GetSweepRequest* req,
                        v1::GetSweepResponse* resp) override;
  grpc::Status ListSweeps(grpc::ServerContext* ctx, const v1::ListSweepsRequest* req,
                          v1::ListSweepsResponse* resp) override;
  grpc::Status CancelSweep(grpc::ServerContext* ctx, const v1::CancelSweepRequest* req,
                           v1::CancelSweepResponse* resp) override;
  grpc::Status RetryRuns(grpc::ServerContext* ctx, const v1::RetryRunsRequest* req,
                         v1::RetryRunsResponse* resp) override;
  grpc::ServerWriteReactor<v1::SweepUpdate>* WatchSweep(grpc::CallbackServerContext* ctx,
                                                        const v1::WatchSweepRequest* req) override;
  grpc::Status ListRuns(grpc::ServerContext* ctx, const v1::ListRunsRequest* req,
                        v1::ListRunsResponse* resp) override;
  grpc::Status ListCells(grpc::ServerContext* ctx, const v1::ListCellsRequest* req,
                         v1::ListCellsResponse* resp) override;
  grpc::ServerWriteReactor<v1::GetRunMetricsResponse>* GetRunMetrics(
      grpc::CallbackServerContext* ctx, const v1::GetRunMetricsRequest* req) override;
  grpc::Status ListRunEvents(grpc::ServerContext* ctx, const v1::ListRunEventsRequest* req,
                             v1::ListRunEventsResponse* resp) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override;
  grpc::Status GetArtifact(grpc::ServerContext* ctx, const v1::ArtifactRequest* req,
                           grpc::ServerWriter<v1::ArtifactChunk>* writer) override;
  grpc::Status ListArtifacts(grpc::ServerContext* ctx, const v1::ListArtifactsRequest* req,
                             v1::ListArtifactsResponse* resp) override;
  grpc::Status SetBudget(grpc::ServerContext* ctx, const v1::SetBudgetRequest* req,
                         v1::SetBudgetResponse* resp) override;
  grpc::Status DeleteSweep(grpc::ServerContext* ctx, const v1::DeleteSweepRequest* req,
                           v1::DeleteSweepResponse* resp) override;
  grpc::Status UnbenchWorker(grpc::ServerContext* ctx, const v1::UnbenchWorkerRequest* req,
                             v1::UnbenchWorkerResponse* resp) override;

 private:
  // A sweep as GetSweep answers it: its counts, its cost, and an ETA of the work that can run
  // (eta_basis "held: why" and no ETA when none can).
  absl::StatusOr<v1::Sweep> ReadSweep(int64_t sweep_id);
  absl::Status Submit(const Caller& caller, const v1::SubmitSweepRequest& req,
                      v1::SubmitSweepResponse* resp);
  ServiceDeps d_;
  RpcGuard guard_;
  ParseSlots parse_slots_;
};

}  // namespace ablate::server
