// Adaptive refinement of the LR boundaries and pruning above divergence (issue #11): which runs
// the server adds to a refining sweep, and which queued runs it skips. Pure functions over
// ablate.v1.Run, computed with the same Analyze that `ablate report` uses, so the server refines
// exactly the brackets the report prints (docs/report.md#refinement-and-pruning).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "common/analysis/analysis.h"
#include "common/sweep/sweep.h"

namespace ablate::analysis {

// The boundary names a sweep's `refine.boundaries` may list.
inline constexpr std::string_view kMaxStable = "max_stable";
inline constexpr std::string_view kMaxGood = "max_good";
inline constexpr std::string_view kEtaDagger = "eta_dagger";
// η*: the bracket between the best LR and its neighbour on the side where the curve's minimum
// lies (OptimumBracket).
inline constexpr std::string_view kOptimum = "optimum";
bool IsBoundaryName(std::string_view name);

// The bracket refinement narrows around η* (docs/report.md#refinement-and-pruning): the best
// finished LR and its nearest finished neighbour on the side of the fitted vertex; when the fit
// was not possible because that neighbour diverged, the side of the diverged neighbour (the
// minimum of a curve often sits just below its edge of stability); because the neighbours are
// spaced too unevenly to fit, the wider side. None when the best LR is the smallest or largest
// finished LR, when the bottom is flat or collinear on even spacing, or when the fitted
// minimum lies within delta_floor of the best measured loss: the grid already resolves ℓ* to
// within the noise floor, and more LRs there would not move it.
std::optional<std::pair<double, double>> OptimumBracket(const Options& options, const Curve& c);

// One boundary of one curve (for η†: of a pair of curves) between two tried LRs.
struct Bracket {
  std::string boundary;  // optimum | max_stable | max_good | eta_dagger
  std::string where;     // "qk_norm=none,n_layer=4" (η†: "n_layer=4,qk_norm=layernorm")
  double lo = 0;
  double hi = 0;
  // The curve (η†: the treated variant's pair) it belongs to, to find it in an Analysis.
  std::string context;
  std::string variant;
  std::string moderator;
  // Wider than until_ratio, and its midpoint's runs did not fit what is left of max_new_runs:
  // the budget, not the rule, ends its refinement.
  bool unresolved_by_budget = false;
  double ratio() const { return hi / lo; }
};

// A run refinement adds: a copy of `template_run_id`'s spec (same curve, same seed) at a new
// value of the refined axis.
struct RefineRun {
  int64_t template_run_id = 0;
  std::string axis_value;  // canonical text ("%.6g") of the midpoint, which round-trips
  google::protobuf::Map<std::string, std::string> grid_values;  // the template's, axis replaced
  std::string cell;                                             // sweep::CellKey(grid_values)
  int64_t seed = 0;
  int round = 0;         // 1 + the largest round of the runs at the bracket's ends
  std::string boundary;  // the bracket it bisects, for the run's event
};

struct RefinePlan {
  std::vector<RefineRun> runs;    // to add now (possibly none)
  std::vector<Bracket> brackets;  // every closed bracket of the requested boundaries, as is
  int used = 0;                   // runs refinement added before this plan
  bool budget_exhausted = false;  // a bracket still wide enough did not fit max_new_runs
  // refine.seeds: comparisons within noise at a deciding LR whose next seed did not fit what was
  // left of max_new_runs.
  int seeds_unresolved_by_budget = 0;
};

// Decides which midpoints to add. For every requested boundary of every curve (η†: of every pair
// of curves) whose bracket (lo, hi) is wider than rule.until_ratio, and whose curves have no
// run queued, leased or running (a boundary depends on every LR of its curve, so it is computed
// only from settled curves; in particular both bracketing LRs have every seed finished), it adds
// the geometric midpoint sqrt(lo hi) for every seed of the curve (η†: of both curves). Widest
// brackets first; a bracket whose runs do not all fit the remaining budget (rule.max_new_runs
// minus the runs with refine_round > 0) is not refined at all. Points that already exist (same
// cell and seed) are never planned twice, so repeated calls on the same runs add nothing new.
// `options.lr_axis` is replaced by rule.axis. A midpoint gets the grid's seeds (those of the
// base grid's runs), not seeds refine.seeds added to some cells.
//
// Then, with rule.seeds_max > 0 (`refine.seeds.max`), extra seeds where a decision is uncertain:
// for every comparison of the two variants at an LR that decides η† (Necessity::deciding_lrs) or
// H1 (its Verdict::deciding) that is within noise (WithinNoise: |Δ - δ| <= 2σ, for H1 also
// |Δ + δ| <= 2σ, or |Δ| <= δ, or no σ yet), and whose two curves are settled, both variants'
// cells at that LR get the next seed (the smallest above the grid's largest that either lacks)
// while a cell has fewer than seeds_max seeds, from what the boundaries left of the same
// max_new_runs; the run is the sweep file expanded at that point with that seed (template: the
// cell's run). Once settled it is planned again, until the comparison is no longer within noise
// or the cells reach seeds_max. A comparison whose runs do not fit the budget counts in
// seeds_unresolved_by_budget.
absl::StatusOr<RefinePlan> PlanRefinement(const std::vector<ablate::v1::Run>& runs,
                                          const ablate::v1::RefineStatus& rule,
                                          Options options = {});

// Marks in `analysis` every boundary PlanRefinement(runs, rule, analysis->options) leaves
// unresolved for want of budget (Bracket::unresolved_by_budget): the curve's
// max_stable/max_good_unresolved_by_budget, the η† row's unresolved_by_budget, the count and a
// note; and a note when refine.seeds' comparisons within noise did not fit the budget. `analysis`
// must come from Analyze(runs, analysis->options). The report calls it with the sweep's
// RefineStatus (GetSweep, or sweep.json of an export).
absl::Status MarkUnresolvedByBudget(const std::vector<ablate::v1::Run>& runs,
                                    const ablate::v1::RefineStatus& rule, Analysis* analysis);

struct PruneRun {
  int64_t run_id = 0;
  std::string reason;  // "every seed (2) of qk_norm=none,n_layer=4 diverged at lr=0.1"
};

// Pruning needs consistent evidence (docs/sweep-file.md#refinement-and-pruning). A curve's
// *wall* is its smallest LR at which every seed of the curve ran and diverged (measured: a
// skipped run is no evidence, nor is a failed, cancelled or pending one) and above which no run
// of the curve succeeded. PlanPruning: the queued runs of each curve above its wall. Leased and
// running runs are left alone.
absl::StatusOr<std::vector<PruneRun>> PlanPruning(const std::vector<ablate::v1::Run>& runs,
                                                  Options options = {});

// The skipped runs of each curve that the evidence no longer keeps skipped, to go back to the
// queue: those with no LR below them that is, or may yet become, a wall. An LR may become one
// when none of its runs succeeded, one diverged or is still pending (e.g. retried), and no run
// above it succeeded; so a success above a wall, or a retried wall LR that succeeds, brings the
// runs it skipped back, while a retried wall still running keeps them waiting. Never returns a
// run PlanPruning would skip on the same runs. `reason` says which success freed the run.
absl::StatusOr<std::vector<PruneRun>> PlanRequeue(const std::vector<ablate::v1::Run>& runs,
                                                  Options options = {});

// The options a sweep's refinement and pruning are planned with and `ablate report` defaults
// to: analysis::Options with the sweep file's `analysis:` applied (tau, delta -> delta_floor,
// lr_range -> lr_min/lr_max, variant -> variant_axis, by -> moderator_axis) and lr_axis the
// refined axis (`refine.axis`, else lr).
Options PlanningOptions(const sweep::SweepSpec& sweep);

// What differs between the options a report uses and those its sweep was planned with, e.g.
// {"tau 0.3 (refined for 0.2)"}; empty when they agree.
std::vector<std::string> OptionDifferences(const Options& used, const Options& planned);

}  // namespace ablate::analysis
