// The ablate-worker daemon: register, long-poll for runs this device can run, run up to --slots
// of them at once, repeat. Survives the server going away (it keeps training and retries), and on
// SIGTERM/SIGINT finishes the current step, checkpoints and hands the run back; during start-up
// (before it registers, holding no run) a signal ends it at once, with exit code 0. A run it
// cannot go on with (its spool, run dir, a thread it cannot start) is released as the worker's
// fault; a worker the server benches waits, runs its self-check and registers again.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "common/rpc/channel.h"

namespace ablate::worker {

struct DaemonOptions {
  rpc::ClientConfig client;
  std::string device = "auto";
  std::string work_dir;
  std::string name;               // default: hostname
  std::string metrics_listen;     // empty: no /metrics
  bool metrics_insecure = false;  // allow metrics_listen beyond loopback (no TLS, no auth)
  int threads = 0;  // the worker's total, divided evenly between the slots (0: all cores)
  int slots = 1;    // runs trained at once, each with its own lease (1..kMaxSlots)
  double lease_wait_seconds = 30;
  int max_runs = 0;             // stop after this many runs (0: never); for scripts and benches
  bool exit_when_idle = false;  // stop when a long-poll returns no run
  // What the machine costs an hour in US dollars (--price-per-hour, env ABLATE_PRICE_PER_HOUR),
  // sent at Register for the server's estimates and budgets; 0: not declared.
  double price_per_hour = 0;
  // Hidden --test-min-step-ms: every training step lasts at least this long (the e2e fault tests'
  // long-in-wall-time, cheap-in-CPU runs; train::TrainOptions::min_step_seconds). 0: off.
  double min_step_seconds = 0;
  // Hidden --test-fault-file PATH (the e2e and soak tests' broken worker): while the file exists,
  // every attempt fails at step 0 with its contents as the error, the worker's fault (or the
  // run's, for contents starting `run:`; or, for `crash:`, the whole process dies in training by
  // std::terminate, for the next process to report), and the self-check of a benched worker fails
  // too; removing the file heals the worker. worker/failure_class.h, InjectedFault. Empty: off.
  std::string fault_file;
};

// INVALID_ARGUMENT naming the flag for any option out of range (NaN and infinity included), and
// FAILED_PRECONDITION for --metrics-listen beyond loopback without --metrics-insecure.
absl::Status CheckDaemonOptions(const DaemonOptions& options);

// Returns the process exit code (2 for bad options).
int RunDaemon(const DaemonOptions& options);

}  // namespace ablate::worker
