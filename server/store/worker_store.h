// What a worker reads or registers outside the run state machine: its own row, a run's
// checkpoints, the data sets. Every change of a run's state, and every fenced write about a run,
// is in server/store/run_transitions.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "server/store/db.h"

namespace ablate::server {

class WorkerStore {
 public:
  WorkerStore(Db* db, double lease_seconds) : db_(db), lease_seconds_(lease_seconds) {}

  double lease_seconds() const { return lease_seconds_; }

  struct Registered {
    int64_t id = 0;
    std::string inherited_from;  // the name whose bench it took over (same box, new name), if any
  };
  // Registers (or re-registers, by name) a worker. `token_id` is the bearer token calling (0
  // with --auth none): the same token takes its row over (a restarted worker); another token
  // gets ALREADY_EXISTS while the name was seen within the lease period. A token with
  // `max_names` other live workers gets RESOURCE_EXHAUSTED for a new name. A worker whose
  // info.host_key is that of a benched worker of the same token inherits its bench.
  absl::StatusOr<Registered> Register(const v1::WorkerInfo& info, int64_t token_id, int max_names);
  // The worker is stopping cleanly: offline from now on (until it registers again). NotFound
  // unless `token_id` registered it.
  absl::Status Deregister(int64_t worker_id, int64_t token_id);

  // The run's checkpoint with `sha256`, or its newest when empty.
  absl::StatusOr<v1::CheckpointRef> FindCheckpoint(int64_t run_id, const std::string& sha256);

  // Path of a data set recorded at submit, by content hash.
  absl::StatusOr<std::pair<std::string, int64_t>> DatasetPath(const std::string& sha256);

 private:
  Db* db_;
  double lease_seconds_;
};

}  // namespace ablate::server
