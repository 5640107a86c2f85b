// What decides η† and the verdicts: the compared LRs each rests on, how many seeds are behind
// them, and whether the comparison at such an LR is within seed noise (refinement's
// `refine.seeds` adds seeds there: docs/sweep-file.md#extra-seeds-where-the-verdict-is-uncertain).
#pragma once

#include <optional>
#include <vector>

#include "common/analysis/analysis.h"

namespace ablate::analysis {

// The fewest finished seeds (Point::n) among the curves' points at `lr`; nullopt when none of them
// has a point there.
std::optional<int> FewestSeeds(const std::vector<const Curve*>& curves, double lr);

// The two variants compared at one LR.
struct Gap {
  double diff = 0;   // ℓ_baseline - ℓ_treated
  double delta = 0;  // its margin δ (as η† and H1 use it)
  // The standard error of diff from the seeds' spread, sqrt(s_b²/n_b + s_t²/n_t); nullopt when
  // either point has fewer than 2 finished seeds (no spread to judge by).
  std::optional<double> sigma;
};

// Both curves' points at `lr` compared; nullopt unless both have a loss there.
std::optional<Gap> GapAt(const Options& options, const Curve& baseline, const Curve& treated,
                         double lr);

// Whether more seeds could change the decision at this comparison: |diff - δ| <= 2σ (for H1,
// `two_sided`, also |diff + δ| <= 2σ, its other threshold), or no σ yet. A tie far from both
// thresholds (|diff| <= δ, each threshold more than 2σ away) is decided: "no better than
// baseline" is an answer, and more seeds there would not change it.
bool WithinNoise(const Gap& gap, bool two_sided);

// Necessity::seeds from Necessity::deciding_lrs, for every η† of `analysis`.
void CountNecessitySeeds(Analysis* analysis);

// Verdict::seeds from Verdict::deciding.
void CountVerdictSeeds(Analysis* analysis);

}  // namespace ablate::analysis
