// H1/H2/H3 (docs/architecture.md#the-analysis): one line each per treated variant (and context),
// with the numbers.
//
// H1: the variant's effect depends on LR (within noise at some LRs, beyond it at others).
// H2: the variant raises max stable and max good LR and lowers LR sensitivity.
// H3: η† falls as the moderator grows ("none" counts as infinitely high: never needed).
#pragma once

#include <vector>

#include "common/analysis/analysis.h"

namespace ablate::analysis {

std::vector<Verdict> ComputeVerdicts(const Analysis& analysis);

}  // namespace ablate::analysis
