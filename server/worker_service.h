// WorkerService (role worker): what ablate-worker calls. Lease is a callback-API long-poll
// (see LeaseBroker); the rest are short synchronous calls.
#pragma once

#include "ablate/v1/ablate.grpc.pb.h"
#include "server/rpc_guard.h"
#include "server/service_deps.h"

namespace ablate::server {

class WorkerServiceImpl final
    : public v1::WorkerService::WithCallbackMethod_Lease<v1::WorkerService::Service> {
 public:
  explicit WorkerServiceImpl(ServiceDeps deps)
      : d_(deps), guard_(deps.auth, deps.metrics, Surface::kWorker) {}

  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override;
  grpc::ServerUnaryReactor* Lease(grpc::CallbackServerContext* ctx, const v1::LeaseRequest* req,
                                  v1::LeaseResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status ReportMetrics(grpc::ServerContext* ctx, const v1::ReportMetricsRequest* req,
                             v1::ReportMetricsResponse* resp) override;
  grpc::Status PutCheckpoint(grpc::ServerContext* ctx,
                             grpc::ServerReader<v1::CheckpointChunk>* reader,
                             v1::PutCheckpointResponse* resp) override;
  grpc::Status GetCheckpoint(grpc::ServerContext* ctx, const v1::GetCheckpointRequest* req,
                             grpc::ServerWriter<v1::CheckpointChunk>* writer) override;
  grpc::Status GetDataset(grpc::ServerContext* ctx, const v1::GetDatasetRequest* req,
                          grpc::ServerWriter<v1::DataChunk>* writer) override;
  grpc::Status Complete(grpc::ServerContext* ctx, const v1::CompleteRequest* req,
                        v1::CompleteResponse* resp) override;
  grpc::Status Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                       v1::ReleaseResponse* resp) override;
  grpc::Status ReportLogs(grpc::ServerContext* ctx, const v1::LogReportRequest* req,
                          v1::LogReportResponse* resp) override;
  grpc::Status Deregister(grpc::ServerContext* ctx, const v1::CliDeregisterRequest* req,
                          v1::CliDeregisterResponse* resp) override;
  // Prepared once per fleet (server/store/prepared_store.h).
  grpc::Status ClaimDataPrep(grpc::ServerContext* ctx, const v1::DataPrepClaimRequest* req,
                             v1::DataPrepClaimResponse* resp) override;
  grpc::Status PutPreparedFile(grpc::ServerContext* ctx,
                               grpc::ServerReader<v1::PreparedFileChunk>* reader,
                               v1::PreparedFileRef* resp) override;
  grpc::Status PublishDataPrep(grpc::ServerContext* ctx, const v1::DataPrepPublishRequest* req,
                               v1::DataPrepPublishResponse* resp) override;
  grpc::Status GetPreparedFile(grpc::ServerContext* ctx, const v1::PreparedFileRequest* req,
                               grpc::ServerWriter<v1::DataChunk>* writer) override;

 private:
  ServiceDeps d_;
  RpcGuard guard_;
};

}  // namespace ablate::server
