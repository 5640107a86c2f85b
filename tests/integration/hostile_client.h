// A client for attacking the RPC surface of ablate-server: one method per RPC of both services
// (proto/ablate/v1), each a single call made with the bearer token given (none when empty) that
// returns the status the server answered; streams are sent or read to their end. Used by
// integration.server.surface (surface_test.cc: which caller gets which code) and by
// bench/hostile/hostile_bench (memory under bursts of abusive calls).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ablate/v1/ablate.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace ablate::testing {

// One worker-side lease: what the fenced calls send.
struct Held {
  int64_t run = 0;
  int attempt = 0;
  std::string token;
};

class HostileClient {
 public:
  explicit HostileClient(const std::shared_ptr<grpc::Channel>& channel);

  // A context carrying `token` (no authorization header when empty), due in `seconds`.
  static std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token, double seconds = 60);

  // ---- WorkerService ----
  grpc::Status Register(const std::string& token, const std::string& name, int slots,
                        int64_t* id = nullptr);
  // `extra`'s fields with `name` and device kind cpu.
  grpc::Status RegisterWith(const std::string& token, const std::string& name,
                            const v1::WorkerInfo& extra);
  // NOT_FOUND when the call succeeds with nothing to lease.
  grpc::Status Lease(const std::string& token, int64_t worker, Held* held = nullptr);
  grpc::Status Heartbeat(const std::string& token, int64_t worker, const Held& h,
                         v1::HeartbeatResponse* resp);
  grpc::Status Report(const std::string& token, const Held& h);  // ReportMetrics, one point
  // ReportLogs: `lines` lines of `bytes` bytes each.
  grpc::Status Logs(const std::string& token, const Held& h, int lines, size_t bytes);
  // Announces `announced` bytes and streams `data` in 1 MiB chunks; `ref`: the header's ref.
  grpc::Status PutCheckpoint(const std::string& token, const Held& h, const std::string& data,
                             int64_t announced, v1::CheckpointRef* ref = nullptr);
  grpc::Status GetCheckpoint(const std::string& token, const Held& h, const std::string& sha = "");
  grpc::Status GetDataset(const std::string& token, const std::string& sha);
  grpc::Status Complete(const std::string& token, const Held& h, v1::RunState state,
                        const v1::CheckpointRef* final_ref = nullptr);
  grpc::Status Release(const std::string& token, const Held& h);
  grpc::Status Deregister(const std::string& token, int64_t worker);
  grpc::Status Claim(const std::string& token, int64_t worker, const std::string& key,
                     v1::DataPrepClaimResponse* resp, const std::string& claim = "");
  // Announces `announced` bytes and streams `data` in 1 MiB chunks.
  grpc::Status PutPrepared(const std::string& token, const std::string& key,
                           const std::string& claim, const std::string& role,
                           const std::string& data, int64_t announced,
                           v1::PreparedFileRef* stored = nullptr);
  grpc::Status Publish(const std::string& token, const std::string& key, const std::string& claim,
                       const std::vector<v1::PreparedFileRef>& files);
  grpc::Status GetPrepared(const std::string& token, const std::string& sha,
                           std::string* out = nullptr);

  // ---- SweepService ----
  grpc::Status Submit(const std::string& token, const std::string& yaml, int64_t* id = nullptr,
                      int priority = 0);
  grpc::Status GetSweep(const std::string& token, int64_t sweep);
  grpc::Status ListSweeps(const std::string& token);
  grpc::Status ListRuns(const std::string& token);
  grpc::Status ListCells(const std::string& token, int64_t sweep, const std::string& after = "");
  grpc::Status ListRunEvents(const std::string& token, int64_t run);
  // OK once the first update arrives (the stream lasts until the sweep ends).
  grpc::Status WatchSweep(const std::string& token, int64_t sweep);
  grpc::Status Metrics(const std::string& token, int64_t run);  // GetRunMetrics with logs
  grpc::Status ListWorkers(const std::string& token);
  grpc::Status ListArtifacts(const std::string& token, int64_t run);
  // `bytes`: adds the bytes read.
  grpc::Status GetArtifact(const std::string& token, int64_t run, const std::string& name = "",
                           int64_t* bytes = nullptr);
  grpc::Status Retry(const std::string& token, int64_t sweep);
  grpc::Status Cancel(const std::string& token, int64_t sweep);
  grpc::Status Raise(const std::string& token, int64_t sweep, double amount);  // SetBudget
  grpc::Status Delete(const std::string& token, const v1::SweepRef& ref, bool dry_run = false);
  grpc::Status Delete(const std::string& token, int64_t sweep);
  grpc::Status Unbench(const std::string& token, const std::string& name);

 private:
  // gRPC client proxies for the two services (what gRPC calls a Stub), over one channel.
  std::unique_ptr<v1::WorkerService::Stub> workers_;
  std::unique_ptr<v1::SweepService::Stub> sweeps_;
};

}  // namespace ablate::testing
