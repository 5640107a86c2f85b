// The study's analysis (docs/architecture.md#the-analysis): per variant x moderator, loss vs LR
// and the figures derived from it; per moderator the necessity threshold eta-dagger; H1/H2/H3
// verdicts.
//
// Pure functions over ablate.v1.Run protos: no I/O, no server, no torch. The "variant" is any
// grid axis (qk_norm by default; attn_softcap, pos, ...), the "moderator" any other (n_layer by
// default). Grid axes other than variant, moderator, lr and seed form a "context": each context
// is analysed separately, never averaged over.
//
// Conventions: a figure that does not exist ("no max stable LR: the smallest LR diverged") is
// std::nullopt, never a sentinel number. Losses are in nats.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "common/analysis/provenance.h"

namespace ablate::analysis {

struct Options {
  std::string variant_axis = "qk_norm";
  std::string moderator_axis = "n_layer";
  std::string lr_axis = "lr";
  // The variant that means "off" (the reference η† compares against). Empty: "none", else "0",
  // else "false", else the first value in sorted order.
  std::string baseline;
  // LR sensitivity is the capped curve's mean over log-uniform LRs in [lr_min, lr_max].
  double lr_min = 3e-4;
  double lr_max = 3e-1;
  double delta_floor = 0.02;  // η†'s δ = max(delta_floor, 2 x pooled non-diverged seed std)
  double tau = 0.2;           // max good LR keeps (1 - tau) of the achievable improvement
  // ℓ0 fallback when no run of a cell reports an initial loss: ln(vocab). 0 = no fallback.
  int vocab = 0;
  // The verdicts' tests control their false-positive rate at alpha across everything each looks
  // at; intervals are (1 - alpha) percentile intervals (docs/report.md#uncertainty).
  double alpha = 0.05;
  // The seed bootstrap behind every interval and H2's and H3's tests: resamples and the seed of
  // its generator (the same report from the same runs). 0 resamples: no intervals, H2 and H3
  // inconclusive (the server plans refinement with 0: it needs the point figures only).
  int bootstrap_resamples = 1000;
  uint64_t bootstrap_seed = 20261203;
  // The effect (nats) an inconclusive verdict says how many seeds would detect, with `power`.
  double effect = 0.1;
  double power = 0.8;
  // A run whose final loss is within this many nats of ℓ0 never trained: above the curve's best
  // LR it ends the stable range as a divergence does.
  double untrained_margin = 0.1;
};

// A (1 - alpha) percentile interval from the seed bootstrap. Special ends keep their meaning:
// +infinity is "never" / "above every compared LR" (η†), 0 is "none" (below the smallest LR:
// max stable and good LR).
struct Interval {
  double lo = 0;
  double hi = 0;
};

// One finished seed of a cell, as the analysis and the bootstrap use it.
struct SeedValue {
  double loss = 0;         // final validation loss capped at ℓ0; ℓ0 when diverged
  bool diverged = false;   // diverged or skipped (inferred)
  bool grid = true;        // a seed of the grid (false: added by refine.seeds at this LR)
  bool untrained = false;  // did not diverge but ended within untrained_margin of ℓ0
};

// One (curve, LR) cell: its runs summarised over seeds.
struct Point {
  double lr = 0;
  std::string lr_text;       // as in grid_values
  std::optional<double> l0;  // mean initial loss of the cell's runs (else the curve's, ln vocab)
  // ℓ(η): final validation loss, each seed capped at ℓ0 (a diverged one is ℓ0), averaged over
  // finished seeds.
  std::optional<double> loss;
  // The mean's (1 - alpha) t-interval from the curve's pooled seed spread; nullopt without one.
  std::optional<Interval> loss_ci;
  std::optional<double> loss_std;    // sample std; nullopt with fewer than 2 finished seeds
  std::optional<double> train_loss;  // mean final train loss over succeeded runs
  std::optional<double> perplexity;  // exp(loss)
  // Median over finished seeds; a seed that never reached the target counts as infinitely slow,
  // so the median is nullopt ("never") when half or more never got there.
  std::optional<double> steps_to_threshold;
  int n = 0;           // finished seeds (succeeded + diverged + skipped)
  int n_diverged = 0;  // skipped runs included (inferred, below)
  // Skipped runs (pruned above divergence): counted as diverged at ℓ0 without being run.
  int n_inferred = 0;
  // Over the seeds that did not diverge, the spread η†'s δ uses: a diverged seed's ℓ0 is not
  // seed noise, and counting it would make δ exceed any gap (docs/report.md).
  std::optional<double> stable_loss_std;
  int n_stable = 0;
  std::vector<SeedValue> seed_values;  // the finished seeds, in run order
  int n_diverged_grid = 0;  // diverged seeds of the grid (max stable LR counts only these)
  int n_untrained = 0;      // grid seeds that neither diverged nor trained (SeedValue::untrained)
  int n_extra_seeds = 0;    // finished seeds refine.seeds added here
  // 0: an LR of the base grid; k >= 1: an LR the sweep's refinement added in round k (the
  // smallest round of the point's runs).
  int refine_round = 0;
  int n_pending = 0;    // queued, leased or running
  int n_failed = 0;     // failed or cancelled
  int n_cancelled = 0;  // of n_failed: cancelled (a user's decision, not a fault)
  int n_absent = 0;     // seeds seen elsewhere in the sweep but with no run here
  std::vector<int64_t> run_ids;
  std::map<std::string, double> probes;  // mean over finished runs of each finite final probe
  std::map<std::string, double> probe_std;
  ProvenanceCounts provenance;  // the finished runs (those in n) per device/dtype/torch/tokenizer
  std::vector<std::string>
      mixed;  // what differs among them (ProvenanceDifferences); empty: uniform
};

struct Curve {
  std::string context;  // "pos=rope" or ""
  std::string variant;
  std::string moderator;
  std::optional<double> l0;   // mean initial loss of all the curve's runs
  std::vector<Point> points;  // ascending LR
  // The finished LR with the lowest seed-averaged loss (any LR, refined ones included).
  std::optional<double> best_lr;
  // The nearest LRs below and above best_lr with a finished run: the parabola's other two
  // points, and the ends of η*'s bracket that refinement bisects.
  std::optional<double> best_below;
  std::optional<double> best_above;
  // η* and ℓ*, the curve's minimum: the vertex of the parabola in log10 LR through best_lr and
  // its two finished neighbours when all three trained stably (opt_fitted), else best_lr and its
  // loss. The ℓ* LR sensitivity and max good LR are measured from (docs/report.md).
  std::optional<double> opt_lr;
  std::optional<double> opt_loss;
  bool opt_fitted = false;
  // The fitted ℓ* fell more than two standard errors below the best measured mean and was raised
  // to that bound (next to a wall a steep side drags the vertex below every measured point).
  bool opt_clamped = false;
  // The seed noise of the curve: the std of its non-diverged seeds about their cell means, pooled
  // over its cells (dof = sum of n_stable - 1); nullopt with no cell of 2+ such seeds.
  std::optional<double> seed_sigma;
  int seed_dof = 0;
  // LR sensitivity: the capped curve's area over [lr_min, lr_max] divided by log10(lr_max /
  // lr_min), the finished LRs joined point to point and the end values carried flat to the range
  // ends; coverage is the share of the range the finished LRs span.
  std::optional<double> lr_sensitivity;
  std::optional<double> lr_sensitivity_coverage;
  // Wortsman et al. (2023)'s own estimator: the plain mean of min(ℓ, ℓ0) - ℓ* over the
  // half-decade grid 3e-4, 1e-3, ..., 3e-1 within [lr_min, lr_max], the curve read off (log-linear)
  // at each grid LR the finished LRs span; paper_points of them.
  std::optional<double> lr_sensitivity_paper;
  int paper_points = 0;
  int sensitivity_points = 0;  // finished LRs in [lr_min, lr_max] that entered the area
  // Of those, LRs whose ℓ rests on skipped runs (inferred at ℓ0, never measured).
  int sensitivity_inferred = 0;
  std::optional<double> max_stable_lr;
  std::optional<double> max_good_lr;
  // The bracket around each boundary: the next LR above it that has a finished run (where the
  // curve diverged / stopped being good). nullopt: the boundary is the largest LR tried, so the
  // bracket is open above.
  std::optional<double> max_stable_above;
  std::optional<double> max_good_above;
  // Seed-bootstrap intervals (Options::bootstrap_resamples); nullopt without resamples or spread.
  std::optional<Interval> opt_lr_ci;
  std::optional<Interval> opt_loss_ci;
  std::optional<Interval> lr_sensitivity_ci;
  std::optional<Interval> max_stable_ci;
  std::optional<Interval> max_good_ci;
  // The sweep refines this boundary, its bracket is still wider than until_ratio, and the
  // refinement budget (max_new_runs) could not pay for its midpoint (MarkUnresolvedByBudget).
  bool max_stable_unresolved_by_budget = false;
  bool max_good_unresolved_by_budget = false;
  bool opt_unresolved_by_budget = false;  // refine.boundaries lists optimum (OptimumBracket)
  int seeds = 0;                          // most finished seeds at any LR
  bool complete = true;                   // no pending, failed or absent run
  // What differs among all the curve's finished runs (η*, sensitivity and max LRs compare LRs).
  std::vector<std::string> mixed;

  const Point* PointAt(double lr) const;  // the point at this LR (to 1e-9 relative), or null
};

// The seed noise of a set of curves: their seed_sigma pooled by degrees of freedom,
// sqrt(sum dof * sigma^2 / sum dof), over the curves that have one (null entries skipped).
// dof 0 and sigma 0: no curve had a cell with 2+ seeds that trained.
struct PooledNoise {
  double sigma = 0;
  int dof = 0;
};
PooledNoise PoolSeedNoise(const std::vector<const Curve*>& curves);
PooledNoise PoolSeedNoise(const std::vector<Curve>& curves);

// η† for one (context, moderator, treated variant) against the baseline.
struct Necessity {
  std::string context;
  std::string moderator;
  std::string baseline;
  std::string variant;
  std::optional<double> eta_dagger;
  bool interpolated = false;
  // When interpolated: the two compared LRs bracketing η† (the last that fails, the first that
  // holds); refinement bisects this bracket.
  std::optional<double> bracket_lo;
  std::optional<double> bracket_hi;
  // The comparison's upper end: the treated variant's max good LR (where it still trains a good
  // model); no η† without one.
  std::optional<double> cap;
  int inferred = 0;                   // compared LRs where either point rests on skipped runs
  bool unresolved_by_budget = false;  // as Curve::max_stable_unresolved_by_budget, for η†
  std::string detail;                 // the numbers at the crossing, or why there is none
  std::vector<std::string> mixed;     // what differs among the runs of the two curves compared
  // The compared LRs η† rests on (ComputeNecessity): interpolated, the two bracketing it; at the
  // smallest compared LR, every compared LR whose gap held; never necessary, the top compared LR
  // and the failing one below it that made it so. Ascending; empty without a comparison.
  std::vector<double> deciding_lrs;
  int seeds = 0;  // the fewest finished seeds of either variant at a deciding LR; 0: none
  // No η† but the comparison stopped short: the treated variant is not good (or not measured with
  // the baseline) above `censored_at`, so "not necessary up to censored_at", not "never".
  // Uncensored and no η†: never necessary over every LR both variants finished.
  bool censored = false;
  std::optional<double> censored_at;  // nullopt when censored: no comparison at all
  std::string censor_reason;
  // The bootstrap's interval for η† (+infinity: no η† in that share of resamples) and the share
  // of resamples with no η†.
  std::optional<Interval> eta_dagger_ci;
  double never_share = 0;
};

struct Verdict {
  std::string hypothesis;  // "H1", "H2", "H3"
  std::string outcome;     // supported | not supported | mixed | inconclusive
  std::string line;        // one line with the numbers behind it
  std::string context;     // the context and treated variant the verdict is about
  std::string variant;
  std::vector<std::string> mixed;  // what differs among the runs it rests on; empty: uniform
  int inferred = 0;                // H1: compared LRs where either point rests on skipped runs
  // The (moderator, LR) points it rests on: H1, per moderator value, the LRs of the smallest and
  // largest gap; H2, both curves' max stable/good LRs and the LRs above them; H3, its η†s'
  // deciding LRs.
  std::vector<std::pair<std::string, double>> deciding;
  int seeds = 0;  // the fewest finished seeds of either variant at a deciding point; 0: none
  // The test that decided it (docs/report.md#verdicts-as-tests), its p-value (Holm-adjusted, the
  // smallest of its family; H3: the bootstrap share of resamples in which η† does not fall) and the
  // level.
  std::string test;
  std::optional<double> p_value;
  double alpha = 0.05;
  // Inconclusive: about how many seeds per cell would detect Options::effect with
  // Options::power at alpha; 0 when not estimated (no seed spread yet).
  int seeds_needed = 0;
};

struct Analysis {
  Options options;
  std::string baseline;
  std::vector<std::string> contexts;    // sorted
  std::vector<std::string> variants;    // baseline first, then sorted
  std::vector<std::string> moderators;  // numeric order when all numeric
  std::vector<Curve> curves;            // by context, variant, moderator
  std::vector<Necessity> necessity;     // by context, variant, moderator
  std::vector<Verdict> verdicts;
  int runs = 0;
  int finished = 0;  // succeeded + diverged
  int diverged = 0;
  int pending = 0;
  int failed = 0;     // failed or cancelled
  int cancelled = 0;  // of failed: cancelled
  int absent = 0;
  int inferred = 0;  // skipped runs counted as diverged at ℓ0 (pruning), included in diverged
  int refined = 0;   // runs at LRs the sweep's refinement added
  int unresolved_by_budget = 0;  // boundaries marked so (MarkUnresolvedByBudget); 0 until then
  int max_seeds = 0;
  bool has_threshold = false;      // some run reached a steps-to-threshold target (else n/a)
  bool partial = false;            // some run is pending, failed or absent
  std::vector<std::string> notes;  // honest caveats ("no spread available: 1 seed")
  std::vector<MixedRuns> mixed;    // every cell, pair, pair of curves, trend on mixed runs
  int bootstrap_resamples = 0;     // the resamples behind the intervals (0: none drawn)
  // Cells that got seeds from refine.seeds: "qk_norm=none,n_layer=4,lr=0.01 +1".
  std::vector<std::string> adaptive_seed_cells;

  const Curve* FindCurve(const std::string& context, const std::string& variant,
                         const std::string& moderator) const;
};

// Fails only when the run set cannot be analysed at all (no runs, variant == moderator).
absl::StatusOr<Analysis> Analyze(const std::vector<ablate::v1::Run>& runs,
                                 const Options& options = {});

}  // namespace ablate::analysis
