#include "common/analysis/uncertainty.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "common/analysis/curve_metrics.h"
#include "common/analysis/inference.h"

namespace ablate::analysis {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The curve's residual pool: every trained seed's distance from its cell's trained mean, scaled
// so the pool's variance estimates the seed noise.
std::vector<double> ResidualPool(const Curve& c) {
  std::vector<double> pool;
  for (const auto& p : c.points) {
    std::vector<double> trained;
    for (const auto& s : p.seed_values) {
      if (!s.diverged) trained.push_back(s.loss);
    }
    if (trained.size() < 2) continue;
    double mean = 0;
    for (double x : trained) mean += x;
    mean /= static_cast<double>(trained.size());
    const double k = static_cast<double>(trained.size());
    for (double x : trained) pool.push_back((x - mean) * std::sqrt(k / (k - 1)));
  }
  return pool;
}

Curve Resample(const Options& o, const Curve& c, const std::vector<double>& pool, Rng* rng) {
  Curve r;
  r.context = c.context;
  r.variant = c.variant;
  r.moderator = c.moderator;
  r.l0 = c.l0;
  r.points = c.points;
  for (size_t j = 0; j < c.points.size(); ++j) {
    const auto& src = c.points[j].seed_values;
    Point& p = r.points[j];
    if (src.empty()) continue;
    double mean = 0;
    int trained = 0;
    for (const auto& s : src) {
      if (!s.diverged) {
        mean += s.loss;
        ++trained;
      }
    }
    if (trained > 0) mean /= trained;
    p.seed_values.clear();
    const int n = static_cast<int>(src.size());
    for (int k = 0; k < n; ++k) {
      SeedValue v = src[rng->Below(n)];
      if (!v.diverged && !pool.empty()) {
        v.loss = mean + pool[rng->Below(static_cast<int>(pool.size()))];
        if (p.l0) {
          v.loss = std::min(v.loss, *p.l0);
          v.untrained = v.loss >= *p.l0 - o.untrained_margin;
        }
      }
      p.seed_values.push_back(v);
    }
    FoldSeeds(&p);
  }
  ComputeCurveMetrics(o, &r);
  return r;
}

std::optional<Interval> Percentiles(std::vector<double> xs, double alpha, int resamples) {
  xs.erase(std::remove_if(xs.begin(), xs.end(), [](double x) { return std::isnan(x); }), xs.end());
  // A figure undefined in more than alpha of the resamples has no interval that means anything.
  if (xs.empty() || static_cast<double>(xs.size()) < (1 - alpha) * resamples) return std::nullopt;
  Interval out;
  out.lo = Quantile(xs, alpha / 2);
  out.hi = Quantile(xs, 1 - alpha / 2);
  return out;
}

size_t CurveIndex(const Analysis& a, const std::string& context, const std::string& variant,
                  const std::string& moderator) {
  for (size_t i = 0; i < a.curves.size(); ++i) {
    const Curve& c = a.curves[i];
    if (c.context == context && c.variant == variant && c.moderator == moderator) return i;
  }
  return a.curves.size();
}

}  // namespace

Draws Bootstrap(Analysis* a) {
  const Options& o = a->options;
  Draws d;
  d.resamples = std::max(0, o.bootstrap_resamples);
  a->bootstrap_resamples = d.resamples;
  if (d.resamples == 0) return d;
  const size_t nc = a->curves.size();
  std::vector<std::vector<double>> pools(nc);
  for (size_t i = 0; i < nc; ++i) pools[i] = ResidualPool(a->curves[i]);
  std::vector<std::pair<size_t, size_t>> pairs;
  for (const auto& n : a->necessity) {
    pairs.emplace_back(CurveIndex(*a, n.context, n.baseline, n.moderator),
                       CurveIndex(*a, n.context, n.variant, n.moderator));
  }
  d.curves.resize(nc);
  d.necessity.resize(a->necessity.size());
  Rng rng(o.bootstrap_seed);
  std::vector<Curve> drawn(nc);
  for (int b = 0; b < d.resamples; ++b) {
    for (size_t i = 0; i < nc; ++i) {
      drawn[i] = Resample(o, a->curves[i], pools[i], &rng);
      const Curve& r = drawn[i];
      CurveDraws& cd = d.curves[i];
      cd.opt_lr.push_back(r.opt_lr.value_or(kNaN));
      cd.opt_loss.push_back(r.opt_loss.value_or(kNaN));
      cd.lr_sensitivity.push_back(r.lr_sensitivity.value_or(kNaN));
      cd.max_stable.push_back(r.max_stable_lr.value_or(0));
      cd.max_good.push_back(r.max_good_lr.value_or(0));
    }
    for (size_t k = 0; k < pairs.size(); ++k) {
      const auto [ib, iq] = pairs[k];
      double lo = 0, hi = kInf, bracket_lo = kInf, bracket_hi = kInf;
      if (ib < nc && iq < nc) {
        const Necessity n = ComputeNecessity(o, drawn[ib], drawn[iq]);
        if (n.eta_dagger) {
          lo = hi = bracket_lo = bracket_hi = *n.eta_dagger;
          if (n.bracket_lo && n.bracket_hi) {
            bracket_lo = *n.bracket_lo;
            bracket_hi = *n.bracket_hi;
          }
        } else if (!n.censored) {
          lo = kInf;
        } else if (n.censored_at) {
          lo = *n.censored_at;
        }
      }
      d.necessity[k].lo.push_back(lo);
      d.necessity[k].hi.push_back(hi);
      d.necessity[k].bracket_lo.push_back(bracket_lo);
      d.necessity[k].bracket_hi.push_back(bracket_hi);
    }
  }
  for (size_t i = 0; i < nc; ++i) {
    Curve& c = a->curves[i];
    if (c.seed_dof == 0) continue;  // no spread to resample: no interval
    const CurveDraws& cd = d.curves[i];
    const double alpha = o.alpha;
    if (c.opt_lr) c.opt_lr_ci = Percentiles(cd.opt_lr, alpha, d.resamples);
    if (c.opt_loss) c.opt_loss_ci = Percentiles(cd.opt_loss, alpha, d.resamples);
    if (c.lr_sensitivity) c.lr_sensitivity_ci = Percentiles(cd.lr_sensitivity, alpha, d.resamples);
    c.max_stable_ci = Percentiles(cd.max_stable, alpha, d.resamples);
    c.max_good_ci = Percentiles(cd.max_good, alpha, d.resamples);
  }
  for (size_t k = 0; k < pairs.size(); ++k) {
    const auto [ib, iq] = pairs[k];
    if (ib >= nc || iq >= nc) continue;
    if (a->curves[ib].seed_dof + a->curves[iq].seed_dof == 0) continue;
    Necessity& n = a->necessity[k];
    // η† per resample as the bracket it was interpolated in (a point where it is the smallest
    // compared LR), +infinity where it has none (never necessary, or not up to the censoring LR:
    // both lie above every η† the resample could give). The interval runs from the α/2 quantile
    // of the brackets' lower ends to the 1 - α/2 quantile of their upper ends: the interpolation
    // inside a bracket assumes a gap linear in log LR, and where the gap opens with a kink the
    // point alone missed the true crossing in half the resamples (calibration benchmark).
    const NecessityDraws& nd = d.necessity[k];
    int never = 0;
    for (size_t b = 0; b < nd.lo.size(); ++b) never += nd.lo[b] == nd.hi[b] ? 0 : 1;
    n.never_share = static_cast<double>(never) / d.resamples;
    const auto lo = Percentiles(nd.bracket_lo, o.alpha, d.resamples);
    const auto hi = Percentiles(nd.bracket_hi, o.alpha, d.resamples);
    if (lo && hi) n.eta_dagger_ci = Interval{lo->lo, hi->hi};
  }
  return d;
}

}  // namespace ablate::analysis
