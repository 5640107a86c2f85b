// What a run session needs of the server: the WorkerService calls about one leased run, each
// fenced by (run, attempt, lease token). The daemon's Coordinator implements it over gRPC; the
// session's tests implement it in process, so the session's decisions (fenced, cancelled, handed
// back, completed) are tested without a server.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ablate::worker {

// Errors follow rpc::ToAbsl: IsTransient (server unreachable: retry) versus FAILED_PRECONDITION
// (fenced: this attempt may no longer write) versus anything else.
class RunCoordinator {
 public:
  virtual ~RunCoordinator() = default;

  // Answers instead of failing when fenced: cancel or lease_lost in the response.
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) = 0;
  virtual absl::Status ReportMetrics(int64_t run_id, int32_t attempt,
                                     const std::string& lease_token,
                                     const std::vector<v1::MetricPoint>& points) = 0;
  virtual absl::Status PutCheckpoint(int64_t run_id, int32_t attempt,
                                     const std::string& lease_token, int64_t step,
                                     const std::string& path) = 0;
  // Writes the checkpoint to `path` (atomically) and checks its SHA-256.
  virtual absl::Status GetCheckpoint(int64_t run_id, int32_t attempt,
                                     const std::string& lease_token, const v1::CheckpointRef& ref,
                                     const std::string& path) = 0;
  virtual absl::Status GetDataset(const std::string& sha256, const std::string& path) = 0;
  virtual absl::Status Complete(const v1::CompleteRequest& request) = 0;
  virtual absl::Status Release(int64_t run_id, int32_t attempt, const std::string& lease_token,
                               const std::string& reason) = 0;
};

}  // namespace ablate::worker
