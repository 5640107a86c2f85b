// `ablate estimate FILE --sigma S | --pilot SWEEP`: how many seeds per cell the sweep needs for
// its hypotheses' tests to detect an effect of `--effect` nats with `--power` at `--alpha`, and
// what that many seeds cost on the fleet. Pure functions (the command fetches the pilot and the
// estimate), so the arithmetic is tested without a server (tests/unit/seed_plan_test.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/status.h"
#include "common/analysis/analysis.h"
#include "common/sweep/sweep.h"
#include "nlohmann/json.hpp"

namespace ablate::cli {

struct SeedPlanFlags {
  double effect = 0.1;  // nats: the smallest difference the study must detect
  double power = 0.8;
  double alpha = 0.05;
  std::optional<double> sigma;  // --sigma: the seed noise in nats
  std::string pilot;            // --pilot: a finished sweep (id or name) to take it from
};

// InvalidArgument naming the flag: effect <= 0, power outside (0, 1), alpha outside (0, 0.5),
// sigma <= 0, any of them not finite, or both --sigma and --pilot.
absl::Status CheckSeedPlanFlags(const SeedPlanFlags& flags);

// What the report's test families count, from the sweep file's grid: the values of the LR axis
// and of the moderator axis (`analysis.by`, else n_layer; 1 when the axis is not in the grid),
// and the seeds per cell (the `seed` axis, 1 without one).
struct GridCounts {
  std::string moderator_axis = analysis::Options{}.moderator_axis;
  int lrs = 1;
  int moderators = 1;
  int seeds = 1;
};
GridCounts CountGrid(const sweep::SweepSpec& spec);

// One family of tests and the seeds per cell it needs. H1 and eta-dagger compare the variants at
// every (moderator, LR) point (Holm over them); H2 tests max stable LR, max good LR and LR
// sensitivity; H3 the trend over the moderator's values (none with fewer than two: seeds 0).
struct SeedFamily {
  std::string name;  // "H1/eta-dagger", "H2", "H3"
  int comparisons = 1;
  int seeds = 0;  // 0: the family has nothing to test in this grid
};

struct SeedPlan {
  double sigma = 0;
  double effect = 0;
  double power = 0;
  double alpha = 0;
  int64_t pilot_sweep = 0;  // the sweep sigma came from (0: --sigma)
  int pilot_dof = 0;
  GridCounts grid;
  std::vector<SeedFamily> families;
  int seeds = 0;          // per cell: the most any family needs
  bool at_cap = false;    // even kSeedCap seeds would not do
  double cost_scale = 1;  // seeds / grid.seeds: what the file's estimate is multiplied by
};

// SeedsForPower's cap: a plan that reaches it says "kSeedCap or more".
inline constexpr int kSeedCap = 1000;

// The plan for seed noise `sigma` (flags already checked).
SeedPlan PlanSeeds(double sigma, const SeedPlanFlags& flags, const GridCounts& grid);

// "pilot sweep 12: sigma 0.031 nats from 24 dof".
std::string PilotLine(int64_t sweep_id, const analysis::PooledNoise& pooled);

// The plan in words; with the file's estimate, what the plan's seeds cost: the estimate's
// GPU-hours, money and wall time x cost_scale (null: the seed counts alone, the caller says why).
std::string SeedPlanText(const SeedPlan& plan, const v1::SweepEstimate* estimate);

// The one line `ablate estimate` prints without --sigma or --pilot.
std::string SeedPlanHint(const SeedPlanFlags& flags);

// `-o json`'s "seed_plan": every number of the plan; with an estimate, the scaled cost
// (device_hours_*, usd_*, wall_seconds_*; -1 where the estimate's is unknown).
nlohmann::ordered_json SeedPlanJson(const SeedPlan& plan, const v1::SweepEstimate* estimate);

}  // namespace ablate::cli
