// Refinement and pruning (issue #11; docs/architecture.md#the-run-state-machine): what happens
// to a refining or pruning sweep when one of its runs finishes. Kept apart from the run state
// machine (run_transitions) so that the one place which finishes a run only calls in here.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "server/store/pqxx_compat.h"

namespace ablate::server {

struct RefineOutcome {
  int added = 0;     // runs refinement inserted
  int skipped = 0;   // queued runs pruned (queued -> skipped)
  int requeued = 0;  // skipped runs the evidence no longer keeps skipped (skipped -> queued)
};

// Call inside the transaction that moved a run of `sweep_id` to a terminal state, after that
// update: every way a run ends does (Complete, Reap past max_attempts, Cancel), through
// AfterRunsEnded in run_transitions.cc. Does nothing (one cheap read) unless the sweep has
// `refine:` or `prune:` and is not cancelled. Otherwise it takes a per-sweep advisory lock, so the
// completions of one sweep's runs decide one after another and each sees the others' committed
// results: two replicas finishing runs at the same moment add each point once (the unique key
// (sweep, cell, seed) backs this up). Then, with common/analysis deciding (the same code as `ablate
// report`):
//   - prune: queued runs above their curve's wall (every seed diverged there, nothing succeeded
//     above it) -> skipped, with the reason as their error and a `skipped` event; a run the user
//     requeued (a `requeued` event, e.g. `ablate retry --state skipped`) is never pruned again;
//     skipped runs whose wall no longer stands (a success above it) -> queued, with an
//     `unskipped` event saying why, and the sweep active again;
//   - refine: the planned midpoints are inserted as queued runs (refine_round set, a `refined`
//     event naming the bracket), each expanded from the stored sweep file at its point
//     (sweep::ExpandPoint), and the queue channel notified.
// Both plan with the sweep file's `analysis:` options (analysis::PlanningOptions).
// Complete calls this before it checks whether the sweep is finished
// (FinishSweepsWithNothingLeft, run_transitions.cc), so runs added here keep the sweep active
// and a sweep pruning leaves with nothing unfinished is finished there, by the one statement
// that finishes sweeps.
absl::StatusOr<RefineOutcome> RefineAfterRunFinished(pqxx::work& tx, int64_t sweep_id);

}  // namespace ablate::server
