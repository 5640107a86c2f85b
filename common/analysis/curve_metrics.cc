#include "common/analysis/curve_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/analysis/stats.h"

namespace ablate::analysis {
namespace {

std::string Num(double x) { return absl::StrFormat("%.4g", x); }

std::string Signed(double x) { return absl::StrFormat("%+.4g", x); }

}  // namespace

void ComputeCurveMetrics(const Options& options, Curve* curve) {
  // η*, ℓ* and LR sensitivity come from one set of points: the base grid's LRs (refine_round 0),
  // the same LRs for every curve. Refinement adds LRs where a boundary's bracket is wide and the
  // budget reaches, unevenly across curves: a refined midpoint near η* would lower ℓ* and raise
  // that curve's sensitivity alone, so a comparison would measure where the budget went. Refined
  // LRs only narrow boundaries (below). A curve with no base-grid LR finished falls back to all.
  bool on_grid = false;
  for (const auto& p : curve->points) {
    curve->seeds = std::max(curve->seeds, p.n);
    if (p.n_pending + p.n_failed + p.n_absent > 0) curve->complete = false;
    on_grid |= p.loss.has_value() && p.refine_round == 0;
  }
  const Point* best = nullptr;
  for (const auto& p : curve->points) {
    if (on_grid && p.refine_round > 0) continue;
    // Seeds are averaged first, then minimised: η* is the LR with the best mean, never the
    // luckiest single seed. Ties go to the smaller LR.
    if (p.loss && (best == nullptr || *p.loss < *best->loss)) best = &p;
  }
  if (best == nullptr) return;
  curve->opt_lr = best->lr;
  curve->opt_loss = *best->loss;
  const double opt = *best->loss;

  // LR sensitivity (Wortsman et al. 2023): mean over the grid's LRs in [a, b] of
  // min(ℓ(η), ℓ0) - ℓ*. Capping at ℓ0 keeps one catastrophic LR from dominating: a diverged run
  // is "as bad as not training". Base-grid LRs only, like ℓ* above.
  double sum = 0;
  int count = 0;
  for (const auto& p : curve->points) {
    if (!p.loss || !p.l0 || (on_grid && p.refine_round > 0)) continue;
    if (!LessOrClose(options.lr_min, p.lr) || !LessOrClose(p.lr, options.lr_max)) continue;
    sum += std::min(*p.loss, *p.l0) - opt;
    ++count;
    if (p.n_inferred > 0) ++curve->sensitivity_inferred;
  }
  curve->sensitivity_points = count;
  if (count > 0) curve->lr_sensitivity = sum / count;

  // Max stable LR: walk up from the smallest LR; the first LR where any seed diverged ends it.
  // LRs without a finished run are skipped: absence of evidence is not a divergence (the report
  // marks such curves partial).
  for (const auto& p : curve->points) {
    if (p.n == 0) continue;
    if (p.n_diverged > 0) {
      if (curve->max_stable_lr) curve->max_stable_above = p.lr;
      break;
    }
    curve->max_stable_lr = p.lr;
  }

  // Max good LR: from η* up, while the loss keeps (1 - τ) of the improvement over ℓ0.
  // A curve that never improved on ℓ0 (every run diverged or stalled) has no good LR at all,
  // rather than "every LR is as good as the best".
  if (curve->l0 && opt < *curve->l0) {
    const double limit = opt + options.tau * (*curve->l0 - opt);
    for (const auto& p : curve->points) {
      if (p.lr < best->lr || !p.loss) continue;
      if (*p.loss > limit) {
        curve->max_good_above = p.lr;
        break;
      }
      curve->max_good_lr = p.lr;
    }
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
  if (!n.cap) {
    n.detail = absl::StrCat(treated.variant, " has no good LR to compare up to");
    return n;
  }
  // g(η) = (ℓ_baseline - ℓ_treated) - δ(η): positive where leaving the variant off costs more
  // than seed noise.
  struct Gap {
    double lr, diff, delta;
    bool holds() const { return diff > delta; }
  };
  std::vector<Gap> gaps;
  for (const auto& q : treated.points) {
    if (!q.loss || !LessOrClose(q.lr, *n.cap)) continue;
    for (const auto& b : baseline.points) {
      if (b.loss && std::fabs(b.lr - q.lr) <= 1e-9 * q.lr) {
        gaps.push_back({q.lr, *b.loss - *q.loss, Delta(options, b, q)});
        if (b.n_inferred > 0 || q.n_inferred > 0) ++n.inferred;
      }
    }
  }
  if (gaps.empty()) {
    n.detail = "no LR where both variants finished";
    return n;
  }
  // One noisy point at the top is forgiven when the two compared LRs below it both hold: two of
  // the top three say "needed". Two failing at the top are a gap that closed, not noise.
  size_t end = gaps.size();
  std::string forgiven;
  if (!gaps.back().holds()) {
    const Gap& top = gaps.back();
    if (end < 3 || !gaps[end - 2].holds() || !gaps[end - 3].holds()) {
      n.detail =
          absl::StrCat("at lr=", Num(top.lr), " (", treated.variant,
                       "'s max good LR or the last compared), ", baseline.variant, "-",
                       treated.variant, " = ", Signed(top.diff), " <= delta ", Num(top.delta));
      if (end >= 2) {
        const Gap& below = gaps[end - 2];
        absl::StrAppend(&n.detail, ", and at lr=", Num(below.lr), " ", Signed(below.diff),
                        below.holds() ? " > " : " <= ", "delta ", Num(below.delta));
      }
      return n;
    }
    --end;
    forgiven = absl::StrCat("; the top compared LR, lr=", Num(top.lr), " (", Signed(top.diff),
                            " <= delta ", Num(top.delta), "), is the one point allowed to fail");
  }
  size_t first = end - 1;
  while (first > 0 && gaps[first - 1].holds()) --first;
  if (first == 0) {
    n.eta_dagger = gaps[0].lr;
    n.detail = absl::StrCat(baseline.variant,
                            " is worse by more than delta from the smallest "
                            "compared LR on (lr=",
                            Num(gaps[0].lr), ": ", Signed(gaps[0].diff), " > ", Num(gaps[0].delta),
                            ")", forgiven);
    return n;
  }
  const Gap& lo = gaps[first - 1];
  const Gap& hi = gaps[first];
  n.eta_dagger = LogLinearRoot(lo.lr, lo.diff - lo.delta, hi.lr, hi.diff - hi.delta);
  n.interpolated = true;
  n.bracket_lo = lo.lr;
  n.bracket_hi = hi.lr;
  n.detail =
      absl::StrCat("between lr=", Num(lo.lr), " (", baseline.variant, "-", treated.variant, " = ",
                   Signed(lo.diff), ", delta ", Num(lo.delta), ") and lr=", Num(hi.lr), " (",
                   Signed(hi.diff), ", delta ", Num(hi.delta), ")", forgiven);
  return n;
}

}  // namespace ablate::analysis
