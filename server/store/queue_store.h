// The run queue: every state change a worker causes, and the reaper. All of it is explained by
// one concept, the lease (run, attempt, token, expiry). The state machine (queued -> leased ->
// running -> succeeded | diverged | failed, plus Release, the reaper, CancelSweep and RetryRuns)
// and what each transition writes are drawn once, in docs/architecture.md#the-run-state-machine.
//
// Lease takes the next queued run with FOR UPDATE SKIP LOCKED, bumps `attempt` and hands the
// worker a random lease token (only its SHA-256 is stored); every write a worker makes afterwards
// names (run, attempt, token) and is applied only while that attempt is current, the token is the
// one handed out and the run is leased or running. So a worker that stalled past its expiry and
// comes back can never overwrite the attempt that replaced it, and no other worker can write into
// a run it does not hold by guessing the (small) attempt number: such writes fail with
// FAILED_PRECONDITION, the same error whichever part did not match.
//
// What this cannot prevent: a stalled worker keeps computing until its next heartbeat tells it
// the lease is lost, so a run may briefly train twice; only one attempt's results are kept.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "server/store/db.h"
#include "server/store/notify_batcher.h"

namespace ablate::server {

struct LeaseOutcome {
  std::string device_kind;                 // the worker's, for routing wake-ups
  std::optional<v1::LeaseResponse> lease;  // nullopt: nothing this worker can run is queued
};

struct ReapResult {
  int requeued = 0;
  int failed = 0;
  int sweeps_finished = 0;
};

class QueueStore {
 public:
  // `notes` carries the watcher notifications of the hot paths (see NotifyBatcher).
  QueueStore(Db* db, NotifyBatcher* notes, double lease_seconds)
      : db_(db), notes_(notes), lease_seconds_(lease_seconds) {}

  double lease_seconds() const { return lease_seconds_; }

  // Registers (or re-registers, by name) a worker; returns its id. `token_id` is the bearer
  // token calling (0 with --auth none): the same token takes its row over (a restarted worker);
  // another token gets ALREADY_EXISTS while the name was seen within the lease period.
  absl::StatusOr<int64_t> Register(const v1::WorkerInfo& info, int64_t token_id);
  // The worker is stopping cleanly: offline from now on (until it registers again). NotFound
  // unless `token_id` registered it.
  absl::Status Deregister(int64_t worker_id, int64_t token_id);

  // Leases the next run this worker can run, if one is queued. When the run has a
  // checkpoint the response says so, and the run's points after that step are deleted in the
  // same transaction, so the new attempt's series continues without gap or duplicate.
  absl::StatusOr<LeaseOutcome> Lease(int64_t worker_id);

  // Extends the lease (leased -> running). Fenced attempts get lease_lost, cancelled runs cancel.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request);

  // Upserts points keyed (run, name, step). Returns how many were stored.
  absl::StatusOr<int> ReportMetrics(const v1::ReportMetricsRequest& request);

  // FAILED_PRECONDITION unless `attempt` is the run's current attempt, `lease_token` is its
  // token and it is leased/running.
  absl::Status CheckFence(int64_t run_id, int attempt, const std::string& lease_token);

  // Records a checkpoint for the run (fenced). `store_blob` moves the uploaded blob into the
  // store; it runs only once the fence has passed, with the run row locked, so a refused upload
  // leaves no blob behind and a re-lease cannot slip in between.
  absl::Status RecordCheckpoint(int64_t run_id, int attempt, const std::string& lease_token,
                                const v1::CheckpointRef& ref,
                                const std::function<absl::Status()>& store_blob);

  // The run's checkpoint with `sha256`, or its newest when empty.
  absl::StatusOr<v1::CheckpointRef> FindCheckpoint(int64_t run_id, const std::string& sha256);

  // Final state of an attempt. Repeating the same Complete after a lost reply is accepted.
  absl::Status Complete(const v1::CompleteRequest& request);

  // Hands the run back: queued at once, the attempt not counted against max_attempts.
  absl::Status Release(const v1::ReleaseRequest& request);

  // Requeues (or fails, past max_attempts) runs whose lease expired, and finishes sweeps with no
  // unfinished run. Safe to run in every replica at once (SKIP LOCKED; idempotent updates).
  absl::StatusOr<ReapResult> Reap();

  // Path of a data set recorded at submit, by content hash.
  absl::StatusOr<std::pair<std::string, int64_t>> DatasetPath(const std::string& sha256);

 private:
  Db* db_;
  NotifyBatcher* notes_;
  double lease_seconds_;
};

}  // namespace ablate::server
