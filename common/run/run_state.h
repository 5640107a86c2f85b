// Run states: which ones end a run, and their lower-case names (the runs table, logs, the CLI).
// The one home of both, so that a new state is taught here and nowhere else: the server's SQL
// list of unfinished states (server/store/run_transitions.cc) is derived from IsTerminal.
// The states and their transitions: docs/architecture.md#the-run-state-machine.
//
// Header-only so that every binary (server, worker, CLI, analysis) can use it without a new
// library; each already links ablate_proto.
#pragma once

#include <string_view>

#include "ablate/v1/ablate.pb.h"

namespace ablate::util {

// A tripwire for whoever adds a state (e.g. SKIPPED): decide below whether it is terminal,
// whether it has an outcome, and give it a name; then move this assertion to the new last state.
static_assert(v1::RunState_MAX == v1::SKIPPED,
              "a new run state: teach IsTerminal, HasOutcome and RunStateName about it");

// Terminal: nothing will lease, train or report the run again unless a user retries it. The
// other real states (queued, leased, running) are "unfinished": a sweep is finished when none
// of its runs is. RUN_STATE_UNSPECIFIED is neither.
constexpr bool IsTerminal(v1::RunState state) {
  switch (state) {
    case v1::SUCCEEDED:
    case v1::DIVERGED:
    case v1::FAILED:
    case v1::CANCELLED:
    case v1::SKIPPED:  // pruned above divergence (issue #11): never runs unless retried
      return true;
    default:
      return false;
  }
}

// Has an outcome the study can use: the trainer ran the run to its end (succeeded) or to a
// divergence, which is itself a measurement (common/analysis counts it as the initial loss).
// Failed, cancelled and skipped runs are terminal without an outcome (the analysis still counts
// a skipped run as an inferred divergence).
constexpr bool HasOutcome(v1::RunState state) {
  return state == v1::SUCCEEDED || state == v1::DIVERGED;
}

// "queued", "leased", ...: the values migrations/0004_refinement.sql allows in runs.state. Empty
// for RUN_STATE_UNSPECIFIED and values this build does not know.
constexpr std::string_view RunStateName(v1::RunState state) {
  switch (state) {
    case v1::QUEUED:
      return "queued";
    case v1::LEASED:
      return "leased";
    case v1::RUNNING:
      return "running";
    case v1::SUCCEEDED:
      return "succeeded";
    case v1::DIVERGED:
      return "diverged";
    case v1::FAILED:
      return "failed";
    case v1::CANCELLED:
      return "cancelled";
    case v1::SKIPPED:
      return "skipped";
    default:
      return "";
  }
}

// The inverse of RunStateName; RUN_STATE_UNSPECIFIED for a name it does not know.
constexpr v1::RunState RunStateFromName(std::string_view name) {
  for (int i = v1::RunState_MIN; i <= v1::RunState_MAX; ++i) {
    const auto state = static_cast<v1::RunState>(i);
    if (!RunStateName(state).empty() && RunStateName(state) == name) return state;
  }
  return v1::RUN_STATE_UNSPECIFIED;
}

}  // namespace ablate::util
