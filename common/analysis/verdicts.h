// H1/H2/H3 (docs/architecture.md#the-analysis): one line each per treated variant (and context),
// with the numbers.
//
// Each verdict is a test at level Options::alpha over everything it looks at
// (docs/report.md#verdicts-as-tests):
// H1: the variant's effect depends on LR: per moderator value an F test that the gaps at LRs where
//     every seed trained are equal, and an exact stratified test of the divergence counts; Holm
//     over all of them.
// H2: the variant raises max stable and max good LR and lowers LR sensitivity: exact stratified
//     tests of divergences and of seeds ending above the good limit, and a t test of the LR
//     sensitivity difference with its bootstrap standard error; Holm over the three.
// H3: η† falls as the moderator grows: the bootstrap share of resamples in which Kendall's trend
//     of η† over the moderator (censored and "never" ones as intervals) falls.
// A verdict without enough evidence either way is "inconclusive" and says about how many seeds
// would decide it.
#pragma once

#include <vector>

#include "common/analysis/analysis.h"
#include "common/analysis/uncertainty.h"

namespace ablate::analysis {

std::vector<Verdict> ComputeVerdicts(const Analysis& analysis, const Draws& draws);

}  // namespace ablate::analysis
