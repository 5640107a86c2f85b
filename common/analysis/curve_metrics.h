// Per-curve figures (docs/architecture.md#the-analysis) from a curve's points, and η†
// between two curves.
#pragma once

#include "common/analysis/analysis.h"

namespace ablate::analysis {

// A point's summary (n, n_diverged, loss, spreads, ...) from its seed_values.
void FoldSeeds(Point* point);

// Fills opt_lr/opt_loss, lr_sensitivity, max_stable_lr, max_good_lr, seeds and complete.
void ComputeCurveMetrics(const Options& options, Curve* curve);

// Each point's loss_ci: the mean's (1 - alpha) t-interval from the curve's pooled seed noise;
// none where a seed diverged (the mean then averages caps).
void PointIntervals(const Options& options, Curve* curve);

// η† of `treated` against `baseline` (same context and moderator).
Necessity ComputeNecessity(const Options& options, const Curve& baseline, const Curve& treated);

// The margin a loss difference must exceed at one LR: max(delta_floor, 2 x the seed std pooled
// over both points' seeds that did not diverge).
double Delta(const Options& options, const Point& a, const Point& b);

}  // namespace ablate::analysis
