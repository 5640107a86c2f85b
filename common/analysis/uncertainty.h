// Seed-level uncertainty (docs/report.md#uncertainty): a bootstrap over each cell's seeds that
// recomputes every curve figure and every η† from resampled cells, giving their intervals and
// the resampled values H2's and H3's tests read.
#pragma once

#include <vector>

#include "common/analysis/analysis.h"

namespace ablate::analysis {

// Each resample's figures, by the index of the curve / η† in the Analysis. NaN: the figure is not
// defined in that resample (no ℓ*, no sensitivity); max stable and good LR use 0 for "none".
struct CurveDraws {
  std::vector<double> opt_lr, opt_loss, lr_sensitivity, max_stable, max_good;
};

// Where η† lies in one resample: a point (lo == hi), "not necessary up to X" (X, +inf), never
// necessary (+inf, +inf), or no comparison (0, +inf). bracket_lo/hi widen an interpolated η† to
// its bracket, the two compared LRs it lies between (the interval's ends).
struct NecessityDraws {
  std::vector<double> lo, hi;
  std::vector<double> bracket_lo, bracket_hi;
};

struct Draws {
  int resamples = 0;
  std::vector<CurveDraws> curves;
  std::vector<NecessityDraws> necessity;
};

// Draws options.bootstrap_resamples resamples (none when 0) and fills the curves' and η†s'
// interval fields. Within each cell it resamples which seeds ran (with replacement: a diverged
// seed stays diverged), and gives each resampled seed that trained the cell's mean of such seeds
// plus a residual drawn from the curve's pool of them (each cell's residuals about its mean,
// scaled by sqrt(n / (n - 1))): with 2 seeds a cell's own two values would give its mean half the
// variance it has. A curve without any cell of 2+ trained seeds has no spread to resample and
// gets no intervals.
Draws Bootstrap(Analysis* analysis);

}  // namespace ablate::analysis
