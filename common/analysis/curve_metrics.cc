#include "common/analysis/curve_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/analysis/deciding.h"
#include "common/analysis/inference.h"
#include "common/analysis/stats.h"

namespace ablate::analysis {
namespace {

std::string Num(double x) { return absl::StrFormat("%.4g", x); }

std::string Signed(double x) { return absl::StrFormat("%+.4g", x); }

// ℓ* and η* on the curve rather than at a grid LR: the vertex of the parabola in log10 LR through
// the best measured point and its two neighbours, when all three trained stably (a diverged
// seed's ℓ0 is a cap, not a loss on the curve) and the parabola opens upwards; else the best
// point itself. A grid samples the curve's bottom at one of its LRs, so the best grid loss sits
// above the true minimum by an amount that depends on where the grid fell (up to ~0.1 nats on 2
// LRs per decade): every figure measured from ℓ* (max good LR's threshold, LR sensitivity) would
// then depend on the grid's density. A point added on the curve leaves the vertex where it was.
constexpr double kMaxSpacingRatio = 2.0;

// The standard error of a point's mean from the curve's pooled seed noise; 0 without one.
double StandardError(const Curve& c, const Point& p) {
  return c.seed_sigma && p.n > 0 ? *c.seed_sigma / std::sqrt(static_cast<double>(p.n)) : 0.0;
}

void FitOptimum(const std::vector<Point>& points, size_t best, Curve* curve) {
  curve->opt_lr = points[best].lr;
  curve->opt_loss = *points[best].loss;
  // The nearest LR on each side with a finished run.
  std::optional<size_t> lo, hi;
  for (size_t i = best; i-- > 0;) {
    if (points[i].loss) {
      lo = i;
      break;
    }
  }
  for (size_t i = best + 1; i < points.size(); ++i) {
    if (points[i].loss) {
      hi = i;
      break;
    }
  }
  if (lo) curve->best_below = points[*lo].lr;
  if (hi) curve->best_above = points[*hi].lr;
  auto stable = [&](size_t i) { return points[i].loss && points[i].n_diverged == 0; };
  if (!lo || !hi || !stable(best) || !stable(*lo) || !stable(*hi)) return;
  const double x0 = std::log10(points[*lo].lr), y0 = *points[*lo].loss;
  const double x1 = std::log10(points[best].lr), y1 = *points[best].loss;
  const double x2 = std::log10(points[*hi].lr), y2 = *points[*hi].loss;
  // Neighbours at very different distances (a refined point on one side, the grid's step on the
  // other) would extrapolate the near side's steepness across the far side: the vertex then
  // falls far below every measured loss (0.23 nats on the refine benchmark's none/2 curve). Only
  // points spaced alike, within a factor kMaxSpacingRatio in log LR, are fitted.
  if (std::max(x1 - x0, x2 - x1) > kMaxSpacingRatio * std::min(x1 - x0, x2 - x1)) return;
  const double d01 = (y1 - y0) / (x1 - x0);
  const double d12 = (y2 - y1) / (x2 - x1);
  const double curvature = (d12 - d01) / (x2 - x0);
  if (!(curvature > 0)) return;  // flat bottom: the best point is the minimum
  // y(x) = y1 + s (x - x1) + c (x - x1)^2, s the slope at x1; the vertex lies in [x0, x2]
  // because y1 is the smallest of the three.
  const double slope = d01 + curvature * (x1 - x0);
  const double xv = x1 - slope / (2 * curvature);
  curve->opt_lr = std::pow(10.0, xv);
  curve->opt_loss = y1 - slope * slope / (4 * curvature);
  curve->opt_fitted = true;
  // A steep side (the last stable LR before a wall) makes three points look like a narrow
  // parabola whose vertex sits far below a flat bottom: 0.165 nats below every measured mean on
  // the review's case, raising LR sensitivity by as much. The next finished point beyond the
  // gentler neighbour tells the two apart: on a parabola it lies on the curve, beside a flat
  // bottom far below it. When it lies below the parabola by more than noise (3 standard errors of
  // the difference) and a quarter of the predicted rise, the vertex is not trusted below the best
  // mean by more than its own uncertainty (2 standard errors).
  const bool gentle_low = y0 - y1 <= y2 - y1;
  std::optional<size_t> far;
  if (gentle_low) {
    for (size_t i = *lo; i-- > 0;) {
      if (points[i].loss) {
        far = i;
        break;
      }
    }
  } else {
    for (size_t i = *hi + 1; i < points.size(); ++i) {
      if (points[i].loss) {
        far = i;
        break;
      }
    }
  }
  if (!far || !stable(*far)) return;
  const double xf = std::log10(points[*far].lr);
  const double predicted = y1 + slope * (xf - x1) + curvature * (xf - x1) * (xf - x1);
  const double se_best = StandardError(*curve, points[best]);
  const double se_far = StandardError(*curve, points[*far]);
  const double noise = 3 * std::sqrt(se_best * se_best + se_far * se_far);
  const double measured = *points[*far].loss;
  if (measured < predicted - std::max(noise, 0.25 * (predicted - y1))) {
    const double floor = y1 - 2 * se_best;
    if (*curve->opt_loss < floor) {
      curve->opt_loss = floor;
      curve->opt_clamped = true;
    }
  }
}

// The pooled seed noise of the curve: non-diverged seeds about their cell's mean.
void PoolSeedNoise(Curve* curve) {
  double sum_sq = 0;
  int dof = 0;
  for (const auto& p : curve->points) {
    if (p.n_stable < 2 || !p.stable_loss_std) continue;
    sum_sq += (p.n_stable - 1) * *p.stable_loss_std * *p.stable_loss_std;
    dof += p.n_stable - 1;
  }
  curve->seed_dof = dof;
  if (dof > 0) curve->seed_sigma = std::sqrt(sum_sq / dof);
}

// The half-decade grid of Wortsman et al. (2023): 1e-k and 3e-k.
std::vector<double> PaperGrid(double lo, double hi) {
  std::vector<double> out;
  for (int e = -8; e <= 2; ++e) {
    for (double m : {1.0, 3.0}) {
      const double lr = m * std::pow(10.0, e);
      if (LessOrClose(lo, lr) && LessOrClose(lr, hi)) out.push_back(lr);
    }
  }
  return out;
}

void ComputeSensitivity(const Options& options, double opt, Curve* curve) {
  // LR sensitivity (Wortsman et al. 2023): the expectation over log-uniform η in [a, b] of
  // min(ℓ(η), ℓ0) - ℓ*, i.e. the area under the capped curve joined point to point in log10 LR
  // (trapezoids), divided by log10(b / a). The part of [a, b] beyond the finished LRs takes the
  // nearest end's value (coverage says how much that is). Every finished LR counts, refined ones
  // too: a point added between two others only refines the area's estimate, where a mean over
  // LRs would weigh each curve by where refinement put its points.
  std::vector<std::pair<double, double>> area;  // (log10 η, min(ℓ, ℓ0) - ℓ*)
  for (const auto& p : curve->points) {
    if (!p.loss || !p.l0) continue;
    if (!LessOrClose(options.lr_min, p.lr) || !LessOrClose(p.lr, options.lr_max)) continue;
    area.emplace_back(std::log10(p.lr), std::min(*p.loss, *p.l0) - opt);
    if (p.n_inferred > 0) ++curve->sensitivity_inferred;
  }
  curve->sensitivity_points = static_cast<int>(area.size());
  if (area.empty()) return;
  const double a = std::log10(options.lr_min), b = std::log10(options.lr_max);
  const double range = b - a;
  if (!(range > 0)) {
    curve->lr_sensitivity = area[0].second;
    curve->lr_sensitivity_coverage = 1;
  } else {
    double sum = (area.front().first - a) * area.front().second +
                 (b - area.back().first) * area.back().second;
    for (size_t i = 1; i < area.size(); ++i) {
      sum += (area[i].first - area[i - 1].first) * (area[i].second + area[i - 1].second) / 2;
    }
    curve->lr_sensitivity = sum / range;
    curve->lr_sensitivity_coverage =
        std::min(1.0, (area.back().first - area.front().first) / range);
  }
  // The paper's estimator: the plain mean over its half-decade grid, the curve read off at each
  // grid LR the finished LRs span.
  double sum = 0;
  int n = 0;
  for (double lr : PaperGrid(options.lr_min, options.lr_max)) {
    const double x = std::log10(lr);
    for (size_t i = 0; i < area.size(); ++i) {
      if (std::fabs(area[i].first - x) < 1e-9) {
        sum += area[i].second;
        ++n;
        break;
      }
      if (i + 1 < area.size() && area[i].first < x && x < area[i + 1].first) {
        const double t = (x - area[i].first) / (area[i + 1].first - area[i].first);
        sum += area[i].second + t * (area[i + 1].second - area[i].second);
        ++n;
        break;
      }
    }
  }
  curve->paper_points = n;
  if (n > 0) curve->lr_sensitivity_paper = sum / n;
}

}  // namespace

void FoldSeeds(Point* p) {
  std::vector<double> losses, stable;
  p->n = static_cast<int>(p->seed_values.size());
  p->n_diverged = 0;
  p->n_diverged_grid = 0;
  p->n_untrained = 0;
  for (const auto& s : p->seed_values) {
    losses.push_back(s.loss);
    if (s.diverged) {
      ++p->n_diverged;
      if (s.grid) ++p->n_diverged_grid;
    } else {
      stable.push_back(s.loss);
      if (s.untrained && s.grid) ++p->n_untrained;
    }
  }
  p->loss = Mean(losses);
  p->loss_std = SampleStd(losses);
  p->stable_loss_std = SampleStd(stable);
  p->n_stable = static_cast<int>(stable.size());
  p->perplexity.reset();
  if (p->loss) p->perplexity = std::exp(*p->loss);
}

void ComputeCurveMetrics(const Options& options, Curve* curve) {
  PoolSeedNoise(curve);
  std::optional<size_t> best;
  for (size_t i = 0; i < curve->points.size(); ++i) {
    Point& p = curve->points[i];
    curve->seeds = std::max(curve->seeds, p.n);
    if (p.n_pending + p.n_failed + p.n_absent > 0) curve->complete = false;
    // Seeds are averaged first, then minimised: the best LR has the best mean, never the
    // luckiest single seed. Ties go to the smaller LR. Every finished LR counts, refined ones
    // too: ℓ* is estimated on the curve (FitOptimum), so a point that lies on it moves nothing.
    if (p.loss && (!best || *p.loss < *curve->points[*best].loss)) best = i;
  }
  if (!best) return;
  curve->best_lr = curve->points[*best].lr;
  FitOptimum(curve->points, *best, curve);
  const double opt = *curve->opt_loss;
  ComputeSensitivity(options, opt, curve);

  // Max stable LR: walk up from the smallest LR; the first LR where a grid seed diverged ends it,
  // and so, above the best LR, does one that never trained (ended within untrained_margin of ℓ0:
  // a stalled run is no stable one; below the best LR it is only slow). Seeds refine.seeds added
  // are left out: more seeds at the deciding LRs would make "some seed diverged" likelier exactly
  // there. LRs without a finished run are skipped: absence of evidence is not a divergence (the
  // report marks such curves partial).
  for (const auto& p : curve->points) {
    if (p.n == 0) continue;
    if (p.n_diverged_grid > 0 || (p.lr > *curve->best_lr && p.n_untrained > 0)) {
      if (curve->max_stable_lr) curve->max_stable_above = p.lr;
      break;
    }
    curve->max_stable_lr = p.lr;
  }

  // Max good LR: the largest LR from the best LR up to the max stable LR whose loss keeps
  // (1 - τ) of the improvement over ℓ0. A bump above the limit below it (a noisy seed, a band
  // of LRs where one seed lands in a worse basin) does not end it: the question is up to which
  // LR the variant still trains a good model, and a walk that stopped at the first bad point
  // put the boundary wherever the noise first crossed a plateau at the limit (three dense steps
  // apart between a dense and a refined sweep on the refine benchmark). Its bracket's upper end
  // is the next finished LR above, bad or unstable by construction. It never exceeds the max
  // stable LR: with none, there is no good LR either. A curve that never improved on ℓ0 (every
  // run diverged or stalled) has no good LR at all, rather than "every LR is as good as the
  // best".
  if (curve->l0 && opt < *curve->l0 && curve->max_stable_lr) {
    const double limit = opt + options.tau * (*curve->l0 - opt);
    const double top = *curve->max_stable_lr;
    for (const auto& p : curve->points) {
      if (p.lr < *curve->best_lr || !p.loss) continue;
      if (curve->max_good_lr && !curve->max_good_above) curve->max_good_above = p.lr;
      if (!LessOrClose(p.lr, top)) continue;
      if (*p.loss <= limit) {
        curve->max_good_lr = p.lr;
        curve->max_good_above.reset();
      }
    }
  }
}

void PointIntervals(const Options& options, Curve* curve) {
  if (!curve->seed_sigma || curve->seed_dof == 0) return;
  const double t = StudentTQuantile(1 - options.alpha / 2, curve->seed_dof);
  for (auto& p : curve->points) {
    // A cell with a diverged seed averages caps (ℓ0), not measurements: no t-interval.
    if (!p.loss || p.n == 0 || p.n_diverged > 0) continue;
    const double half = t * *curve->seed_sigma / std::sqrt(static_cast<double>(p.n));
    p.loss_ci = Interval{*p.loss - half, *p.loss + half};
  }
}

double Delta(const Options& options, const Point& a, const Point& b) {
  // σ pooled over the two variants' seeds that did not diverge. With a diverged seed counted as
  // ℓ0 in the spread, σ ≈ |ℓ0 - ℓ|/√2 and δ would exceed any possible gap exactly where the
  // evidence that the variant is needed is clearest.
  double sum_sq = 0;
  int dof = 0;
  for (const Point* p : {&a, &b}) {
    if (p->stable_loss_std && p->n_stable >= 2) {
      sum_sq += (p->n_stable - 1) * *p->stable_loss_std * *p->stable_loss_std;
      dof += p->n_stable - 1;
    }
  }
  const double spread = dof > 0 ? std::sqrt(sum_sq / dof) : 0;
  return std::max(options.delta_floor, 2 * spread);
}

Necessity ComputeNecessity(const Options& options, const Curve& baseline, const Curve& treated) {
  Necessity n;
  n.context = treated.context;
  n.moderator = treated.moderator;
  n.baseline = baseline.variant;
  n.variant = treated.variant;
  // The comparison ends where the treated variant stops training a good model. Up to its max
  // stable LR instead, the top compared LRs sit at the edge of stability, where both variants'
  // seeds scatter and the gap shrinks to noise: one such point would erase a clear necessity
  // below it (+0.93 nats at 0.3, η† "none" for +0.05 at 1.687).
  n.cap = treated.max_good_lr;
  // The largest LR where both variants finished and not every seed of both diverged (where both
  // diverged alike, the baseline cannot be worse): "never necessary" means up to there.
  std::optional<double> both_top;
  for (const auto& q : treated.points) {
    const Point* b = baseline.PointAt(q.lr);
    if (!q.loss || b == nullptr || !b->loss) continue;
    if (q.n_diverged < q.n || b->n_diverged < b->n) both_top = q.lr;
  }
  if (!n.cap) {
    n.detail = absl::StrCat(treated.variant, " has no good LR to compare up to");
    n.censored = true;
    n.censor_reason = n.detail;
    return n;
  }
  // No η† below the cap, but both variants ran above it: the treated variant stopped training a
  // good model there, so the comparison is censored at the cap ("not necessary up to it"), which
  // is not "never necessary" (a baseline diverging from 0.03 while the variant trains badly).
  auto censor = [&]() {
    if (both_top && !LessOrClose(*both_top, *n.cap)) {
      n.censored = true;
      n.censored_at = n.cap;
      n.censor_reason =
          absl::StrCat(treated.variant, " is not good above lr=", Num(*n.cap),
                       " (its max good LR), where both variants ran up to lr=", Num(*both_top));
    }
  };
  // g(η) = (ℓ_baseline - ℓ_treated) - δ(η): positive where leaving the variant off costs more
  // than seed noise.
  struct Compared {
    double lr;
    Gap gap;
    bool holds() const { return gap.diff > gap.delta; }
  };
  std::vector<Compared> gaps;
  for (const auto& q : treated.points) {
    if (!q.loss || !LessOrClose(q.lr, *n.cap)) continue;
    if (auto gap = GapAt(options, baseline, treated, q.lr)) {
      gaps.push_back({q.lr, *gap});
      const Point* b = baseline.PointAt(q.lr);
      if (b->n_inferred > 0 || q.n_inferred > 0) ++n.inferred;
    }
  }
  if (gaps.empty()) {
    n.detail = "no LR where both variants finished";
    n.censored = true;
    n.censor_reason = n.detail;
    return n;
  }
  // One noisy point at the top is forgiven when the two compared LRs below it both hold (two of
  // the top three say "needed") and the gap there is within noise: a baseline better than the
  // variant by more than δ at the top is a result, not noise. Two failing at the top are a gap
  // that closed.
  size_t end = gaps.size();
  std::string forgiven;
  if (!gaps.back().holds()) {
    const Compared& top = gaps.back();
    const bool within_noise = top.gap.diff >= -top.gap.delta;
    if (end < 3 || !within_noise || !gaps[end - 2].holds() || !gaps[end - 3].holds()) {
      censor();
      n.detail = absl::StrCat("at lr=", Num(top.lr), " (", treated.variant,
                              "'s max good LR or the last compared), ", baseline.variant, "-",
                              treated.variant, " = ", Signed(top.gap.diff), " <= delta ",
                              Num(top.gap.delta));
      if (end >= 2) {
        const Compared& below = gaps[end - 2];
        absl::StrAppend(&n.detail, ", and at lr=", Num(below.lr), " ", Signed(below.gap.diff),
                        below.holds() ? " > " : " <= ", "delta ", Num(below.gap.delta));
      }
      // Decided by the top and the failing one of the two below it that kept it from being
      // forgiven.
      for (size_t i = end - 1; i-- > 0 && i + 3 > end - 1;) {
        if (!gaps[i].holds()) {
          n.deciding_lrs.push_back(gaps[i].lr);
          break;
        }
      }
      n.deciding_lrs.push_back(top.lr);
      return n;
    }
    --end;
    forgiven =
        absl::StrCat("; the top compared LR, lr=", Num(top.lr), " (", Signed(top.gap.diff),
                     " <= delta ", Num(top.gap.delta), "), is the one point allowed to fail");
  }
  size_t first = end - 1;
  while (first > 0 && gaps[first - 1].holds()) --first;
  if (first == 0) {
    n.eta_dagger = gaps[0].lr;
    n.detail = absl::StrCat(baseline.variant,
                            " is worse by more than delta from the smallest "
                            "compared LR on (lr=",
                            Num(gaps[0].lr), ": ", Signed(gaps[0].gap.diff), " > ",
                            Num(gaps[0].gap.delta), ")", forgiven);
    // Any gap that held could, failing, move η† up.
    for (size_t i = 0; i < end; ++i) n.deciding_lrs.push_back(gaps[i].lr);
    return n;
  }
  const Compared& lo = gaps[first - 1];
  const Compared& hi = gaps[first];
  n.eta_dagger =
      LogLinearRoot(lo.lr, lo.gap.diff - lo.gap.delta, hi.lr, hi.gap.diff - hi.gap.delta);
  n.interpolated = true;
  n.bracket_lo = lo.lr;
  n.bracket_hi = hi.lr;
  n.deciding_lrs = {lo.lr, hi.lr};
  n.detail =
      absl::StrCat("between lr=", Num(lo.lr), " (", baseline.variant, "-", treated.variant, " = ",
                   Signed(lo.gap.diff), ", delta ", Num(lo.gap.delta), ") and lr=", Num(hi.lr),
                   " (", Signed(hi.gap.diff), ", delta ", Num(hi.gap.delta), ")", forgiven);
  return n;
}

}  // namespace ablate::analysis
