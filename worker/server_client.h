// The worker's view of ablate-server: one method per WorkerService RPC, each returning
// absl::Status so the daemon can tell "server unreachable, keep going" (IsTransient) from
// "fenced, stop this run" (FailedPrecondition) from real errors.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ablate/v1/ablate.grpc.pb.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/rpc/channel.h"
#include "worker/data_prep_claim.h"
#include "worker/run_client.h"

namespace ablate::worker {

class ServerClient : public RunClient {
 public:
  static absl::StatusOr<std::unique_ptr<ServerClient>> Connect(const rpc::ClientConfig& config);

  // `previous`: this process's first Register, with what its work dir says of the process before
  // (RegisterRequest.new_process and crashed); nullptr for any later one (the self-check, a
  // server that forgot the worker), which must leave the leases this process holds alone.
  absl::StatusOr<v1::RegisterResponse> Register(
      const v1::WorkerInfo& info, const std::vector<v1::CrashedAttempt>* previous = nullptr);
  // Long-polls up to `wait_seconds`. Cancel() from another thread ends the wait early.
  absl::StatusOr<v1::LeaseResponse> Lease(int64_t worker_id, double wait_seconds);
  // The fenced calls: each stamps `lease` into its request (RunLease::Stamp) and nothing else
  // sets the request's run, attempt or token.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const RunLease& lease,
                                                  v1::HeartbeatRequest progress) override;
  absl::Status ReportMetrics(const RunLease& lease,
                             const std::vector<v1::MetricPoint>& points) override;
  absl::Status PutCheckpoint(const RunLease& lease, int64_t step, const std::string& path,
                             v1::CheckpointRef* stored) override;
  // Progress lines the trainer printed.
  absl::Status ReportLogs(const RunLease& lease, const std::vector<v1::LogLine>& lines) override;
  // Streams the checkpoint into `path` (atomically) and checks its SHA-256.
  absl::Status GetCheckpoint(const RunLease& lease, const v1::CheckpointRef& ref,
                             const std::string& path) override;
  // Not fenced: a data set is named by its SHA-256 alone.
  absl::Status GetDataset(const std::string& sha256, const std::string& path) override;
  absl::Status Complete(const RunLease& lease, v1::CompleteRequest outcome) override;
  absl::Status Release(const RunLease& lease, const std::string& reason,
                       v1::FaultClass fault) override;
  // Tells the server this worker is stopping cleanly, so it shows offline at once.
  absl::Status Deregister(int64_t worker_id);

  // Prepared once per fleet (worker/fleet_data.h). Asks about a data key (request without a
  // claim_token): READY, PREPARING or CLAIMED.
  absl::StatusOr<v1::DataPrepClaimResponse> ClaimDataPrep(const v1::DataPrepClaimRequest& request);
  // The calls under a claim take the DataPrepClaim and stamp it into their requests
  // (DataPrepClaim::Stamp), as the fenced run calls do with a RunLease.
  // Renews the claim; FAILED_PRECONDITION ("claim lost") once it is not this worker's any more.
  absl::StatusOr<v1::DataPrepClaimResponse> RenewDataPrep(int64_t worker_id,
                                                          const DataPrepClaim& claim);
  // Uploads the file at `path` under the claim; returns what the server stored.
  absl::StatusOr<v1::PreparedFileRef> PutPreparedFile(const DataPrepClaim& claim,
                                                      const std::string& role,
                                                      const std::string& path);
  // Makes the key ready with `files` (each uploaded with PutPreparedFile under this claim).
  absl::Status PublishDataPrep(const DataPrepClaim& claim,
                               const std::vector<v1::PreparedFileRef>& files);
  // Drops the claim (preparing failed) so another worker may try.
  absl::Status AbandonDataPrep(const DataPrepClaim& claim);
  // Streams a published file into `path` (atomically) and checks its SHA-256.
  absl::Status GetPreparedFile(const std::string& sha256, const std::string& path);

  // Ends a Lease long-poll in flight (shutdown).
  void CancelLongPoll();
  const std::string& server() const { return config_.server; }

 private:
  ServerClient(rpc::ClientConfig config, std::shared_ptr<grpc::Channel> channel);
  void Prepare(grpc::ClientContext* context, double deadline_seconds) const;

  rpc::ClientConfig config_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  std::mutex poll_mu_;
  grpc::ClientContext* poll_context_ = nullptr;  // guarded by poll_mu_
  bool poll_cancelled_ = false;                  // guarded by poll_mu_
};

}  // namespace ablate::worker
