// SweepService (role user): what the ablate CLI calls. WatchSweep and GetRunMetrics are
// callback-API streams woken by NOTIFY (see PollingStream); the rest are synchronous.
#pragma once

#include "ablate/v1/ablate.grpc.pb.h"
#include "server/service_deps.h"

namespace ablate::server {

class SweepServiceImpl final
    : public v1::SweepService::WithCallbackMethod_WatchSweep<
          v1::SweepService::WithCallbackMethod_GetRunMetrics<v1::SweepService::Service>> {
 public:
  explicit SweepServiceImpl(ServiceDeps deps) : d_(deps) {}

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
  grpc::ServerWriteReactor<v1::GetRunMetricsResponse>* GetRunMetrics(
      grpc::CallbackServerContext* ctx, const v1::GetRunMetricsRequest* req) override;
  grpc::Status ListRunEvents(grpc::ServerContext* ctx, const v1::ListRunEventsRequest* req,
                             v1::ListRunEventsResponse* resp) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override;

 private:
  absl::StatusOr<Caller> Authorize(const grpc::ServerContextBase& ctx, const char* method);
  ServiceDeps d_;
};

}  // namespace ablate::server
