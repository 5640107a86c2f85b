// What a run session needs of the server: the WorkerService calls about one leased run. Each
// fenced call takes the attempt's RunLease (worker/run_lease.h) whole and builds its request's
// (run, attempt, lease token) from it with RunLease::Stamp, nothing else. The daemon's
// ServerClient implements it over gRPC; the session's tests implement it in process, so the
// session's decisions (fenced, cancelled, handed back, completed) are tested without a server.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/run_lease.h"

namespace ablate::worker {

// Errors follow rpc::ToAbsl: IsTransient (server unreachable: retry) versus FAILED_PRECONDITION
// (fenced: this attempt may no longer write) versus anything else.
class RunClient {
 public:
  virtual ~RunClient() = default;

  // Answers instead of failing when fenced: cancel or lease_lost in the response. `progress`
  // carries the worker and the run's progress; its lease fields are stamped from `lease`.
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const RunLease& lease,
                                                          v1::HeartbeatRequest progress) = 0;
  virtual absl::Status ReportMetrics(const RunLease& lease,
                                     const std::vector<v1::MetricPoint>& points) = 0;
  // `stored` (may be null) receives the ref the upload was recorded under.
  virtual absl::Status PutCheckpoint(const RunLease& lease, int64_t step, const std::string& path,
                                     v1::CheckpointRef* stored) = 0;
  // Progress lines the trainer printed; fenced like ReportMetrics, kept capped by the server.
  virtual absl::Status ReportLogs(const RunLease& lease, const std::vector<v1::LogLine>& lines) = 0;
  // Writes the checkpoint to `path` (atomically) and checks its SHA-256.
  virtual absl::Status GetCheckpoint(const RunLease& lease, const v1::CheckpointRef& ref,
                                     const std::string& path) = 0;
  // Not fenced: a data set is named by its SHA-256 alone.
  virtual absl::Status GetDataset(const std::string& sha256, const std::string& path) = 0;
  // `outcome` carries the state, result and error; its lease fields are stamped from `lease`.
  virtual absl::Status Complete(const RunLease& lease, v1::CompleteRequest outcome) = 0;
  // Hands the run back. `fault` FAULT_CLASS_UNSPECIFIED: a clean hand-back (shutdown);
  // FAULT_WORKER: this worker cannot go on with the run, `reason` says why
  // (worker/failure_class.h).
  virtual absl::Status Release(const RunLease& lease, const std::string& reason,
                               v1::FaultClass fault) = 0;
};

}  // namespace ablate::worker
