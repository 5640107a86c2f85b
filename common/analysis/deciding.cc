#include "common/analysis/deciding.h"

#include <algorithm>
#include <cmath>

#include "common/analysis/curve_metrics.h"

namespace ablate::analysis {
namespace {

// The fewest seeds of either curve over `lrs`; 0 when none has a point at any of them.
int FewestOver(const std::vector<const Curve*>& curves, const std::vector<double>& lrs) {
  std::optional<int> fewest;
  for (double lr : lrs) {
    if (auto n = FewestSeeds(curves, lr)) fewest = std::min(fewest.value_or(*n), *n);
  }
  return fewest.value_or(0);
}

}  // namespace

std::optional<int> FewestSeeds(const std::vector<const Curve*>& curves, double lr) {
  std::optional<int> fewest;
  for (const Curve* c : curves) {
    const Point* p = c == nullptr ? nullptr : c->PointAt(lr);
    if (p != nullptr) fewest = std::min(fewest.value_or(p->n), p->n);
  }
  return fewest;
}

std::optional<Gap> GapAt(const Options& options, const Curve& baseline, const Curve& treated,
                         double lr) {
  const Point* b = baseline.PointAt(lr);
  const Point* q = treated.PointAt(lr);
  if (b == nullptr || q == nullptr || !b->loss || !q->loss) return std::nullopt;
  Gap g;
  g.diff = *b->loss - *q->loss;
  g.delta = Delta(options, *b, *q);
  if (b->loss_std && q->loss_std && b->n >= 2 && q->n >= 2) {
    g.sigma = std::sqrt(*b->loss_std * *b->loss_std / b->n + *q->loss_std * *q->loss_std / q->n);
  }
  return g;
}

bool WithinNoise(const Gap& gap, bool two_sided) {
  if (!gap.sigma) return true;
  const double band = 2 * *gap.sigma;
  if (std::fabs(gap.diff - gap.delta) <= band) return true;
  return two_sided && std::fabs(gap.diff + gap.delta) <= band;
}

void CountNecessitySeeds(Analysis* a) {
  for (auto& n : a->necessity) {
    const Curve* base = a->FindCurve(n.context, n.baseline, n.moderator);
    const Curve* treated = a->FindCurve(n.context, n.variant, n.moderator);
    if (base == nullptr || treated == nullptr) continue;
    n.seeds = FewestOver({base, treated}, n.deciding_lrs);
  }
}

void CountVerdictSeeds(Analysis* a) {
  for (auto& v : a->verdicts) {
    std::optional<int> fewest;
    for (const auto& [moderator, lr] : v.deciding) {
      const std::vector<const Curve*> curves = {a->FindCurve(v.context, a->baseline, moderator),
                                                a->FindCurve(v.context, v.variant, moderator)};
      if (auto n = FewestSeeds(curves, lr)) fewest = std::min(fewest.value_or(*n), *n);
    }
    v.seeds = fewest.value_or(0);
  }
}

}  // namespace ablate::analysis
