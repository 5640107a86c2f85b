// What the Prometheus exporter reads: gauges of state come from the database, not from
// in-process counters, so every replica exports the same values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/run/metric_names.h"
#include "server/store/db.h"

namespace ablate::server {

// The aggregate probes exported per active run as ablate_run_probe{probe=...}: what the Run
// dashboard plots. Per-layer probes stay in metric_points (ablate metrics / report).
inline constexpr const char* kExportedProbes[] = {metric::kAttnEntropy,    metric::kKurtosis,
                                                  metric::kGradNorm,       metric::kParamNorm,
                                                  metric::kOutputLogitMax, metric::kLr};

struct RunStats {
  int64_t run_id = 0;
  int64_t sweep_id = 0;
  std::string qk_norm, lr, n_layer, seed;  // label values as written in the sweep
  std::map<std::string, std::string>
      grid_values;  // every grid axis of the sweep -> this run's value
  double step = 0;
  std::optional<double> train_loss, val_loss, tokens_per_second, max_attn_logit;
  std::map<std::string, double> probes;  // newest value of each of kExportedProbes reported
  int refine_round = 0;                  // 0: a base-grid run; k: added by refinement round k
};

// One cell of an active sweep (its runs folded, seeds and all): the Sweep dashboard's LR x depth
// tables read these rather than every run, so a 100,000-run sweep exports its cells.
struct CellStats {
  int64_t sweep_id = 0;
  std::string qk_norm, lr, n_layer;                // label values as written in the sweep
  std::map<std::string, std::string> grid_values;  // the cell's grid point, seed left out
  int refine_round = 0;                            // 0: the grid's; k: added by refinement round k
  std::optional<double> val_loss;                  // the mean over its runs (run_loss, 0013)
  std::optional<double> max_attn_logit;            // the highest any of its runs reported
};

// What an active sweep's runs were charged on one device class (docs/architecture.md#cost).
struct UsageStats {
  int64_t sweep_id = 0;
  std::string device_class;
  double device_seconds = 0;
  double usd = 0;
  bool priced = false;  // some attempt was priced (else no money series)
};

struct WorkerCount {
  std::string state;  // idle | busy | benched | lost | offline (workers_list's states)
  std::string device;
  int count = 0;
  int64_t runs_faulted = 0;  // attempts they ended with a worker-side or unknown failure
};

// A worker not offline that has had worker-side failures or is benched (docs/server.md#failures).
struct WorkerFaults {
  std::string name;
  std::string device;
  int64_t runs_faulted = 0;
  bool benched = false;
  double benched_until = 0;  // unix seconds; 0: none
};

class StatsStore {
 public:
  StatsStore(Db* db, double lease_seconds) : db_(db), lease_seconds_(lease_seconds) {}

  // Every run of an active sweep that has started (queued runs have nothing to show yet).
  // Runs of active sweeps in flight (leased, running) that have started.
  absl::StatusOr<std::vector<RunStats>> ActiveRuns();
  // Every cell of an active sweep with a loss, a logit or a refinement round to show.
  absl::StatusOr<std::vector<CellStats>> ActiveCells();
  absl::StatusOr<std::vector<WorkerCount>> Workers();
  // The workers not offline that ended attempts for a worker-side cause or are benched: few.
  absl::StatusOr<std::vector<WorkerFaults>> FaultedWorkers();
  absl::StatusOr<std::vector<UsageStats>> Usage();
  // The `sweep` label of every active sweep (sweeps.metric_label, migration 0006). A sweep gets
  // its label the first time it is seen active and keeps it until it ends: its name, or name#id
  // when an active sweep already holds that name. So a second sweep submitted with a live
  // sweep's name never renames the live one's series. Labels of ended sweeps are cleared (a
  // retried sweep is labelled afresh). Serialised across replicas by an advisory lock.
  absl::StatusOr<std::map<int64_t, std::string>> SweepLabels();

 private:
  Db* db_;
  double lease_seconds_;
};

}  // namespace ablate::server
