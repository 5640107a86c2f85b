#include "common/analysis/inference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace ablate::analysis {
namespace {

// The continued fraction of I_x(a, b) (modified Lentz), converging fast for x < (a+1)/(a+b+2).
double BetaFraction(double x, double a, double b) {
  constexpr double kTiny = 1e-300;
  constexpr double kEps = 1e-15;
  double c = 1;
  double d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double f = d;
  for (int m = 1; m <= 500; ++m) {
    const double m2 = 2.0 * m;
    // Even step.
    double num = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 + num * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + num / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    f *= d * c;
    // Odd step.
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 + num * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + num / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double step = d * c;
    f *= step;
    if (std::fabs(step - 1) < kEps) break;
  }
  return f;
}

// log C(n, k).
double LogChoose(int n, int k) {
  return std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0);
}

// Bisection for the p-quantile of an increasing CDF on [lo, hi].
template <typename Cdf>
double Invert(Cdf cdf, double p, double lo, double hi) {
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    if (cdf(mid) < p) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return (lo + hi) / 2;
}

}  // namespace

double RegularizedBeta(double x, double a, double b) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double log_front =
      a * std::log(x) + b * std::log1p(-x) - (std::lgamma(a) + std::lgamma(b) - std::lgamma(a + b));
  const double front = std::exp(log_front);
  if (x < (a + 1) / (a + b + 2)) return front * BetaFraction(x, a, b) / a;
  return 1 - front * BetaFraction(1 - x, b, a) / b;
}

double StudentTCdf(double t, double dof) {
  if (std::isinf(t)) return t > 0 ? 1 : 0;
  const double tail = 0.5 * RegularizedBeta(dof / (dof + t * t), dof / 2, 0.5);
  return t > 0 ? 1 - tail : tail;
}

double TwoSidedP(double t, double dof) {
  if (std::isnan(t)) return 1;
  if (std::isinf(t)) return 0;
  return std::min(1.0, RegularizedBeta(dof / (dof + t * t), dof / 2, 0.5));
}

double FCdf(double f, double d1, double d2) {
  if (!(f > 0)) return 0;
  if (std::isinf(f)) return 1;
  return RegularizedBeta(d1 * f / (d1 * f + d2), d1 / 2, d2 / 2);
}

double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

double NormalQuantile(double p) { return Invert(NormalCdf, p, -40, 40); }

double StudentTQuantile(double p, double dof) {
  return Invert([dof](double t) { return StudentTCdf(t, dof); }, p, -1e6, 1e6);
}

std::vector<double> HolmAdjust(const std::vector<double>& p) {
  const size_t m = p.size();
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> adjusted(m);
  double running = 0;
  for (size_t rank = 0; rank < m; ++rank) {
    const size_t i = order[rank];
    running = std::max(running, std::min(1.0, static_cast<double>(m - rank) * p[i]));
    adjusted[i] = running;
  }
  return adjusted;
}

ExactTest StratifiedExact(const std::vector<Stratum>& strata) {
  // law[k] = P(sum of the baseline's counts = k) under "no difference", built stratum by stratum.
  std::vector<double> law = {1.0};
  int observed = 0;
  ExactTest out;
  for (const auto& s : strata) {
    const int total = s.n_base + s.n_treated;
    if (s.n_base <= 0 || s.n_treated <= 0 || s.events <= 0 || s.events >= total) {
      observed += s.base_events;
      // Margins fix the count: shift the law by it.
      std::vector<double> shifted(law.size() + std::max(0, s.base_events), 0.0);
      for (size_t k = 0; k < law.size(); ++k) shifted[k + std::max(0, s.base_events)] = law[k];
      law = std::move(shifted);
      continue;
    }
    ++out.informative;
    observed += s.base_events;
    const int lo = std::max(0, s.n_base - (total - s.events));
    const int hi = std::min(s.events, s.n_base);
    std::vector<double> pmf(hi + 1, 0.0);
    for (int x = lo; x <= hi; ++x) {
      pmf[x] = std::exp(LogChoose(s.events, x) + LogChoose(total - s.events, s.n_base - x) -
                        LogChoose(total, s.n_base));
    }
    std::vector<double> next(law.size() + hi, 0.0);
    for (size_t k = 0; k < law.size(); ++k) {
      if (law[k] == 0) continue;
      for (int x = lo; x <= hi; ++x) next[k + x] += law[k] * pmf[x];
    }
    law = std::move(next);
  }
  double greater = 0, less = 0;
  for (size_t k = 0; k < law.size(); ++k) {
    if (static_cast<int>(k) >= observed) greater += law[k];
    if (static_cast<int>(k) <= observed) less += law[k];
  }
  out.p_greater = std::min(1.0, greater);
  out.p_less = std::min(1.0, less);
  out.p_two_sided = std::min(1.0, 2 * std::min(out.p_greater, out.p_less));
  return out;
}

int SeedsForPower(double sigma, double effect, double alpha, double power, int comparisons,
                  int cap) {
  if (!(effect > 0)) return cap;
  if (!(sigma > 0)) return 2;
  const double level = alpha / std::max(1, comparisons);
  for (int n = 2; n < cap; ++n) {
    const double dof = 2.0 * (n - 1);
    const double crit = StudentTQuantile(1 - level / 2, dof);
    const double shift = effect / (sigma * std::sqrt(2.0 / n));
    if (1 - StudentTCdf(crit - shift, dof) >= power) return n;
  }
  return cap;
}

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

int Rng::Below(int n) {
  // Rejection keeps every value equally likely.
  const uint64_t range = static_cast<uint64_t>(n);
  const uint64_t limit =
      std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % range;
  uint64_t x = Next();
  while (x >= limit) x = Next();
  return static_cast<int>(x % range);
}

double Quantile(std::vector<double>& xs, double q) {
  std::sort(xs.begin(), xs.end());
  const double pos = q * static_cast<double>(xs.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(pos));
  const double frac = pos - static_cast<double>(i);
  if (i + 1 >= xs.size() || frac == 0) return xs[i];
  if (std::isinf(xs[i + 1]) || std::isinf(xs[i])) return xs[i + 1];
  return xs[i] + frac * (xs[i + 1] - xs[i]);
}

}  // namespace ablate::analysis
