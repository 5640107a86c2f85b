// The run state machine: every change of runs.state, and the lease fence every write a worker
// makes about a run passes, in one place. The diagram, and what each function here writes, is
// drawn once, in docs/architecture.md#the-run-state-machine; the functions below are named there
// edge by edge. The bulk writes a running attempt streams in (metric points, progress lines)
// change no state and live in server/store/ingest_store.h, behind this fence.
//
// All of it is explained by one concept, the lease (run, attempt, token, expiry)
// (docs/architecture.md#leases-and-fencing). Lease takes the next queued run with FOR UPDATE SKIP
// LOCKED, bumps `attempt` and hands the worker a random lease token (only its SHA-256 is stored);
// every write a worker makes afterwards names (run, attempt, token) and is applied only while
// that attempt is current, the token is the one handed out and the run is leased or running. So
// a worker that stalled past its expiry and comes back can never overwrite the attempt that
// replaced it, and no other worker can write into a run it does not hold by guessing the (small)
// attempt number: such writes fail with FAILED_PRECONDITION, the same error whichever part did
// not match.
//
// What this cannot prevent: a stalled worker keeps computing until its next heartbeat tells it
// the lease is lost, so a run may briefly train twice; only one attempt's results are kept.
//
// Why one class rather than the queue/sweep split it replaced: the transitions share the fence,
// the list of unfinished states, the rule that finishes a sweep and the rule for how each
// NOTIFY is sent; kept together they are written once and read beside the diagram.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/store/db.h"
#include "server/store/fault_policy.h"
#include "server/store/notify_batcher.h"

namespace ablate::server {

// The most runs one worker may hold leases on at once, whatever slots it declares (the worker's
// own --slots limit, worker/slots.h kMaxSlots).
inline constexpr int kMaxWorkerSlots = 64;

struct LeaseOutcome {
  std::string device_kind;                 // the worker's, for routing wake-ups
  std::optional<v1::LeaseResponse> lease;  // nullopt: nothing this worker can run is queued
  // Set (has_run false, the bench's end and reason, or self_check_due) when the worker is benched
  // or owes its self-check: it gets this answer at once, without waiting for work.
  std::optional<v1::LeaseResponse> benched;
};

struct ReapResult {
  int requeued = 0;
  int failed = 0;
  int sweeps_finished = 0;
};

// What a worker's new process found at Register (RunTransitions::WorkerRestarted).
struct RestartResult {
  int faulted = 0;   // reported attempts counted as worker-side failures
  int stale = 0;     // reported attempts whose lease had already ended (nothing changed)
  int released = 0;  // other leases the dead process held, requeued as preemptions (or failed)
};

// The fence (docs/architecture.md#leases-and-fencing), shared with the fenced writes outside
// this class (ingest_store.cc): every fenced statement asks the SQL function lease_held
// (migrations/0018_lease_held.sql), the one definition of the condition.
//
// The error every fenced write returns when its statement matched no row; a worker that sees it
// stops the run. It is the same whether the attempt is stale, the lease token wrong or missing,
// or the run no longer leased: a caller probing someone else's run learns nothing about which
// part it got wrong.
absl::Status FenceError(pqxx::work& tx, int64_t run_id, int attempt);

class RunTransitions {
 public:
  // `notes` sends the watcher notifications after commit (see Notices, NotifyBatcher).
  RunTransitions(Db* db, NotifyBatcher* notes, double lease_seconds, FaultPolicy faults = {})
      : db_(db), notes_(notes), lease_seconds_(lease_seconds), faults_(faults) {}

  // queued -> leased. Leases the next run this worker can run, if one is queued. When the run
  // has a checkpoint the response says so, and the run's points after that step are deleted in
  // the same transaction, so the new attempt's series continues without gap or duplicate.
  // The worker must be registered with the caller's token (`token_id`, 0 without auth) and not
  // deregistered (NOT_FOUND: register again), and hold fewer leases than the slots it declared
  // (RESOURCE_EXHAUSTED naming the runs it holds).
  absl::StatusOr<LeaseOutcome> Lease(int64_t worker_id, int64_t token_id);

  // leased -> running (the first one), running -> running: extends the lease. Fenced attempts
  // get lease_lost, cancelled runs cancel.
  // The worker must be the caller's (`token_id`), as for Lease.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request,
                                                  int64_t token_id);

  // No state change: FAILED_PRECONDITION unless `attempt` is the run's current attempt,
  // `lease_token` is its token and it is leased/running.
  absl::Status CheckFence(int64_t run_id, int attempt, const std::string& lease_token);

  // No state change, fenced: records a checkpoint for the run. `store_blob` moves the uploaded
  // blob into the store; it runs only once the fence has passed, with the run row locked, so a
  // refused upload leaves no blob behind and a re-lease cannot slip in between.
  absl::Status RecordCheckpoint(int64_t run_id, int attempt, const std::string& lease_token,
                                const v1::CheckpointRef& ref,
                                const std::function<absl::Status()>& store_blob);

  // leased/running -> succeeded | diverged | failed, and the sweep -> finished when that was its
  // last unfinished run. Repeating the same Complete after a lost reply is accepted.
  // A FAILED whose fault is not FAULT_RUN is an attempt that faulted (AttemptFaulted below): the
  // run goes back to the queue unless its allowance is spent.
  absl::Status Complete(const v1::CompleteRequest& request);

  // leased/running -> queued: hands the run back, the attempt not counted against max_attempts.
  // With a fault (the worker cannot go on), an attempt that faulted, as for Complete.
  absl::Status Release(const v1::ReleaseRequest& request);

  // leased/running -> queued, or failed once preempted FaultPolicy::max_preemptions times, for
  // runs whose lease expired; then finishes every active sweep with no unfinished run. Safe to
  // run in every replica at once (SKIP LOCKED; idempotent updates).
  absl::StatusOr<ReapResult> Reap();

  // A worker registered as a new process (RegisterRequest.new_process): its old process is gone.
  // Each attempt it reports `crashed` (with the lease token it held) is a worker-side failure
  // with that cause, as Complete FAILED with FAULT_WORKER would be; every other lease the worker
  // still holds is requeued as a preemption (failed past --max-preemptions), at once rather than
  // when it expires, so the new process's slots are free.
  absl::StatusOr<RestartResult> WorkerRestarted(int64_t worker_id,
                                                const std::vector<v1::CrashedAttempt>& crashed);

  // unfinished -> cancelled. Returns how many runs were cancelled. Whole-sweep cancel (no
  // `run_ids`) marks the sweep cancelled; cancelling some runs may finish it.
  absl::StatusOr<int> Cancel(int64_t sweep_id, const std::vector<int64_t>& run_ids);

  // terminal -> queued, for runs in `states` (default failed and cancelled) or the given ids;
  // the attempt counter is kept and max_attempts raised by the sweep's max_attempts, so history
  // stays truthful. The sweep becomes active again.
  absl::StatusOr<int> Retry(int64_t sweep_id, const std::vector<int64_t>& run_ids,
                            const std::vector<v1::RunState>& states);

 private:
  // Runs `fn` as one transaction and sends what it announced the one way each channel goes.
  template <typename T>
  absl::StatusOr<T> Transition(const std::string& what,
                               const std::function<absl::StatusOr<T>(pqxx::work&, Notices&)>& fn);

  // Reap (worker_id 0: expired leases) or the leases worker_id holds (WorkerRestarted).
  absl::StatusOr<ReapResult> ReapLeases(int64_t worker_id);

  // leased/running -> queued | failed for an attempt that failed for a worker-side (`fault`
  // "worker") or unknown cause; counts toward benching the worker (attempt_faulted.sql).
  absl::Status AttemptFaulted(int64_t run_id, int attempt, const std::string& lease_token,
                              const std::string& fault, const std::string& error,
                              const v1::RunResult& result);

  Db* db_;
  NotifyBatcher* notes_;
  double lease_seconds_;
  FaultPolicy faults_;
};

}  // namespace ablate::server
