// What cost, ETA and budgets read and write (docs/architecture.md#cost): the live fleet, the
// finished runs' measured speeds, a sweep's charged usage and remaining work, and the budget
// keeper's locked round. Device time is charged per attempt in run_usage by a trigger on runs
// (migration 0009), so no transition here or in run_transitions.cc writes it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "common/cost/estimate.h"
#include "server/store/db.h"

namespace ablate::server {

// The newest finished runs the speed model learns from.
inline constexpr int kSpeedSamples = 500;
// The queued runs (in queue order) the budget keeper prices each round.
inline constexpr int kBudgetLookahead = 200;

// What a startup benchmark (WorkerInfo.benchmarks) may claim: from a thousandth of a slow CPU
// core to a thousand of today's fastest accelerators, tokens/s and seconds finite. Register
// refuses anything else; Fleet() leaves out what older rows hold beyond it, so one absurd
// figure (5e-324 FLOP/s) cannot make every estimate infinite.
inline constexpr double kMinBenchmarkFlops = 1e6;
inline constexpr double kMaxBenchmarkFlops = 1e18;
inline constexpr double kMaxTokensPerSecond = 1e12;
inline constexpr double kMaxBenchmarkSeconds = 7 * 86400;
bool PlausibleBenchmark(const v1::DeviceBenchmark& b);

struct RemainingWork {
  std::vector<cost::WorkShape> shapes;  // queued runs and the rest of running ones
  int64_t unknown_size = 0;             // unfinished runs submitted before sizes were recorded
};

using cost::BudgetRound;

class CostStore {
 public:
  CostStore(Db* db, double lease_seconds) : db_(db), lease_seconds_(lease_seconds) {}

  // Live workers (as `ablate workers` calls them online) and the newest finished runs' speeds.
  absl::StatusOr<std::vector<cost::FleetWorker>> Fleet();
  absl::StatusOr<std::vector<cost::SpeedSample>> Samples();

  absl::StatusOr<v1::SweepCost> Usage(int64_t sweep_id);
  absl::StatusOr<RemainingWork> Remaining(int64_t sweep_id);

  // Active sweeps with a budget.
  absl::StatusOr<std::vector<int64_t>> BudgetedSweeps();
  // Locks sweep `sweep_id`, reads a BudgetRound, lets `decide` fill budget (figures) and the
  // runs Lease may start, and writes them. When that takes the count from none to some, the
  // queue is notified so parked workers ask again. A sweep that is no longer active or has no
  // budget is left alone. Returns the budget as written (nullopt when left alone).
  using Decide = std::function<void(BudgetRound*)>;
  absl::StatusOr<std::optional<v1::Budget>> KeepBudget(int64_t sweep_id, const Decide& decide);

  // Adds `amount` to sweep `sweep_id`'s budget. FAILED_PRECONDITION when it has none.
  absl::Status Raise(int64_t sweep_id, double amount);

 private:
  Db* db_;
  double lease_seconds_;
};

}  // namespace ablate::server
