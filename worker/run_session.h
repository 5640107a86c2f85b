// Runs one leased run to its end: fetches what it lacks (data sets, the checkpoint to resume
// from), trains, and keeps the server informed — heartbeats, metrics through the on-disk spool,
// checkpoint uploads — on two background threads so the training thread never waits on the
// network: the heartbeat's (here) and the sender's (worker/metric_sender.h, which coalesces a
// run's points into requests by size and age). Everything it writes carries the attempt's lease,
// one RunLease (worker/run_lease.h) passed whole to every fenced RunClient call; when the
// server says the attempt is no longer current (the fence refused a call) the run stops within one
// step and nothing more is sent for it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "worker/failure_class.h"
#include "worker/run_client.h"
#include "worker/train/trainer.h"

namespace ablate::worker {

// Heartbeats per lease period: a worker may miss three in a row (a GC pause, a brief network
// blip) and still keep its run.
inline constexpr double kHeartbeatsPerLease = 4;
// While heartbeats fail the session tries every second (or every period, if shorter): the lease
// runs out `lease_seconds` after the last one that got through, so the first chance after an
// outage must not wait a whole period.
inline constexpr std::chrono::milliseconds kHeartbeatRetryPeriod{1000};

// The heartbeat period for a lease of `lease_seconds` (RegisterResponse.lease_seconds; 0 means
// the server did not say, and 60 s is assumed).
double HeartbeatSeconds(double lease_seconds);

// Trains one run: train::Train in the daemon, a scripted fake in tests (so they need no torch).
using TrainFn = std::function<absl::StatusOr<train::TrainResult>(
    const v1::RunSpec&, const train::TrainOptions&, train::TrainObserver*)>;

struct SessionOptions {
  std::string work_dir;  // datasets/, cache/, runs/, spool/
  std::string device = "auto";
  int threads = 0;
  double min_step_seconds = 0;  // train::TrainOptions::min_step_seconds (tests only)
  double heartbeat_seconds = 10;
  const std::atomic<bool>* shutdown = nullptr;  // SIGTERM/SIGINT: checkpoint, hand back, stop
  TrainFn train;
  // Makes the run's tokenizer and token files ready in the cache before training (the daemon:
  // worker/fleet_data.h, this worker's cache else the fleet's). Unset: Train prepares them.
  std::function<absl::Status(const v1::DataSpec& data, int64_t run_id,
                             const std::function<bool()>& should_stop)>
      prepare_data;
  // The most device memory held so far (train::PeakMemoryBytes for the worker's device), put in
  // a failed attempt's RunResult.peak_memory_bytes; unset: not measured.
  std::function<int64_t()> peak_memory_bytes;
  // Hidden --test-fault-file (worker/failure_class.h, InjectedFault): while this file exists,
  // every attempt fails at step 0 with its contents as the error. Empty: off.
  std::string fault_file;
};

// Live figures of the session, read by the worker's /metrics and heartbeats.
struct SessionStats {
  std::atomic<int64_t> run_id{0};
  std::atomic<int64_t> step{0};
  std::atomic<double> tokens_per_second{0};
  std::atomic<double> step_seconds{0};
  std::atomic<int64_t> spooled_points{0};
  // Training waits for space in the work dir (a spool or checkpoint write found the disk full).
  std::atomic<bool> paused_for_space{false};
  // Runs whose tokenizer and token files came from each source (worker/fleet_data.h).
  std::atomic<int64_t> data_from_cache{0};
  std::atomic<int64_t> data_downloaded{0};
  std::atomic<int64_t> data_prepared{0};
  std::atomic<int64_t> data_prepared_locally{0};
};

enum class SessionEnd {
  kCompleted,  // Complete accepted (succeeded, diverged or failed)
  kCancelled,  // the server cancelled the run
  kLeaseLost,  // the fence refused the attempt: another attempt owns the run
  kReleased,   // shutting down: checkpointed and handed back
  kAbandoned,  // shutting down while the server was unreachable: the lease will expire
  // The worker could not go on with the run (its spool, its run dir, a thread it could not
  // start): released at once with FAULT_WORKER and the cause, for another worker to take.
  kWorkerFault,
};

struct SessionOutcome {
  SessionEnd end;
  std::string detail;
  // For an attempt that ended with a worker-side or unknown failure: what it points at, which a
  // benched worker's self-check tests again (worker/self_check.h). kOther otherwise.
  FaultArea area = FaultArea::kOther;
  double train_seconds = 0;     // inside the trainer
  double overhead_seconds = 0;  // everything else the worker spent on this run
  std::chrono::steady_clock::time_point train_started;  // zero if training never started
  std::chrono::steady_clock::time_point ended;
};

// Runs the leased run to its end under `lease.lease()`, the one lease every fenced call carries.
SessionOutcome RunSession(RunClient* client, int64_t worker_id, const v1::LeaseResponse& lease,
                          const SessionOptions& options, SessionStats* stats);

}  // namespace ablate::worker
