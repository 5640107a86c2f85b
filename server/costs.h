// Cost, ETA and budgets on the server (docs/architecture.md#cost). The speed model (common/cost)
// is rebuilt from the database at most every few seconds; the budget keeper runs in every
// replica, each sweep's round under its row lock, so replicas may share the work.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "common/cost/estimate.h"
#include "server/periodic.h"
#include "server/store/cost_store.h"

namespace ablate::server {

class Costs {
 public:
  explicit Costs(CostStore* store) : store_(store) {}
  ~Costs() { Stop(); }

  // The speed model of the live fleet, at most a few seconds old.
  absl::StatusOr<std::shared_ptr<const cost::SpeedModel>> Model();

  // A worker registered or stopped: the next Model() reads the fleet again.
  void FleetChanged() {
    std::lock_guard<std::mutex> lock(mu_);
    model_.reset();
  }

  // Fills sweep.cost (charged so far, by device class) and, for an active sweep whose runs have
  // known sizes and a fleet with known speeds, eta_seconds from that speed (eta_basis
  // "throughput"); otherwise leaves the durations-based ETA (eta_basis "durations").
  absl::Status Annotate(v1::Sweep* sweep);

  // The estimate of a grid of `base` shapes (`base_runs` runs) before it is submitted.
  absl::StatusOr<v1::SweepEstimate> Estimate(const std::vector<cost::WorkShape>& base,
                                             int64_t base_runs, int64_t max_new_runs);

  // One budget round for a sweep: how many runs Lease may start now (0 when the budget is
  // reached), written to the sweep with the figures shown as Sweep.budget.
  absl::Status KeepBudget(int64_t sweep_id);
  // Adds `amount` to the sweep's budget (in its unit) and re-prices it at once, so leasing
  // resumes without waiting for the keeper. FAILED_PRECONDITION when the sweep has no budget.
  absl::Status Raise(int64_t sweep_id, double amount);
  // Every budgeted active sweep, every `interval`, on a background thread until Stop().
  void StartKeeper(std::chrono::milliseconds interval);
  void Stop() { keeper_.Stop(); }

 private:
  CostStore* store_;
  std::mutex mu_;
  std::shared_ptr<const cost::SpeedModel> model_;
  std::chrono::steady_clock::time_point model_at_;
  // A sweep's remaining work for the ETA, reused for a few seconds: every watcher re-reads the
  // sweep each second. It reads run_counts and the runs in flight (~0.3 ms at 100,000 runs;
  // walking every unfinished run took ~0.1 s before migration 0011).
  struct CachedWork {
    std::chrono::steady_clock::time_point at;
    RemainingWork work;
  };
  std::map<int64_t, CachedWork> remaining_;  // guarded by mu_
  Periodic keeper_;
};

}  // namespace ablate::server
