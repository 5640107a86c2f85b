#include "common/analysis/verdicts.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/analysis/curve_metrics.h"
#include "common/analysis/inference.h"
#include "common/analysis/stats.h"

namespace ablate::analysis {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string Num(const std::optional<double>& x) {
  return x ? absl::StrFormat("%.4g", *x) : std::string("none");
}

// "= 0.025" or "< 0.0001", after "p".
std::string P(double p) {
  return p < 1e-4 ? std::string("< 0.0001") : absl::StrFormat("= %.2g", p);
}

std::string Scope(const std::string& context) {
  return context.empty() ? "" : absl::StrCat(" [", context, "]");
}

// The curves a verdict about (context, variant) rests on: each moderator's baseline and treated.
std::vector<const Curve*> PairCurves(const Analysis& a, const std::string& context,
                                     const std::string& variant) {
  std::vector<const Curve*> out;
  for (const auto& m : a.moderators) {
    const Curve* b = a.FindCurve(context, a.baseline, m);
    const Curve* q = a.FindCurve(context, variant, m);
    if (b != nullptr && q != nullptr) {
      out.push_back(b);
      out.push_back(q);
    }
  }
  return out;
}

// "inconclusive (...; ~N seeds per cell would detect a 0.1-nat difference with 80% power)"; when
// the cells already have that many, what the verdict then says about the effect's size.
std::string SeedsAdvice(const Analysis& a, int seeds_needed) {
  const Options& o = a.options;
  if (seeds_needed <= 0) return "";
  if (seeds_needed <= a.max_seeds) {
    return absl::StrFormat(
        "; %d seeds per cell already detect a %.3g-nat difference with %.0f%% power: an effect, "
        "if any, is likely smaller",
        a.max_seeds, o.effect, 100 * o.power);
  }
  return absl::StrFormat(
      "; ~%d seeds per cell would detect a %.3g-nat difference with %.0f%% power", seeds_needed,
      o.effect, 100 * o.power);
}

struct Test {
  std::string label;
  double p = 1;
  int direction = 0;  // +1 favours the treated variant, -1 the baseline, 0 no direction
};

// Holm over `tests`: the adjusted p-values, in the same order.
std::vector<double> Adjusted(const std::vector<Test>& tests) {
  std::vector<double> p;
  for (const auto& t : tests) p.push_back(t.p);
  return HolmAdjust(p);
}

Verdict H1(const Analysis& a, const std::string& context, const std::string& variant) {
  const auto& o = a.options;
  int compared = 0, inferred = 0;
  bool informative_divergence = false, within_floor = true;
  std::string example;
  double widest = -1;
  std::vector<std::pair<std::string, double>> deciding;
  std::vector<Test> tests;
  std::vector<Stratum> divergence_strata;
  for (const auto& m : a.moderators) {
    const Curve* b = a.FindCurve(context, a.baseline, m);
    const Curve* q = a.FindCurve(context, variant, m);
    if (b == nullptr || q == nullptr) continue;
    const auto [sigma, dof] = PoolSeedNoise(std::vector<const Curve*>{b, q});
    struct Stable {
      double lr, diff, var_factor;
    };
    std::vector<Stable> stable;
    std::vector<Stratum> strata;
    std::optional<std::pair<double, double>> lo, hi;  // (lr, diff) at the min and max diff
    int common = 0;
    for (const auto& pq : q->points) {
      const Point* pb = b->PointAt(pq.lr);
      if (pb == nullptr || !pq.loss || !pb->loss) continue;
      const double diff = *pb->loss - *pq.loss;
      ++common;
      if (pb->n_inferred > 0 || pq.n_inferred > 0) ++inferred;
      if (!lo || diff < lo->second) lo = {{pq.lr, diff}};
      if (!hi || diff > hi->second) hi = {{pq.lr, diff}};
      if (pb->n_diverged == 0 && pq.n_diverged == 0) {
        stable.push_back({pq.lr, diff, 1.0 / pb->n + 1.0 / pq.n});
      } else {
        // Where a seed diverged the loss is a cap, not a measurement: the comparison there is
        // of divergence counts. Both variants diverging alike carries no information (the exact
        // test's margins fix the count).
        strata.push_back({pb->n, pq.n, pb->n_diverged + pq.n_diverged, pb->n_diverged});
      }
    }
    if (common < 2) continue;
    ++compared;
    deciding.emplace_back(m, lo->first);
    if (hi->first != lo->first) deciding.emplace_back(m, hi->first);
    if (hi->second - lo->second > widest) {
      widest = hi->second - lo->second;
      example =
          absl::StrFormat("%s=%s: %s-%s = %+.4g at lr=%.4g, %+.4g at lr=%.4g", o.moderator_axis, m,
                          a.baseline, variant, lo->second, lo->first, hi->second, hi->first);
    }
    // Heterogeneity of the gaps where every seed trained: F = Σ w (d - d̄)² / ((k - 1) σ²),
    // w = 1 / (1/n_b + 1/n_t), on (k - 1, dof) degrees of freedom.
    if (stable.size() >= 2 && dof > 0) {
      double sw = 0, swd = 0;
      for (const auto& s : stable) {
        sw += 1 / s.var_factor;
        swd += s.diff / s.var_factor;
      }
      const double mean = swd / sw;
      double q_stat = 0;
      for (const auto& s : stable) q_stat += (s.diff - mean) * (s.diff - mean) / s.var_factor;
      const double k1 = static_cast<double>(stable.size() - 1);
      double p = 1;
      if (sigma > 0) {
        p = 1 - FCdf(q_stat / (k1 * sigma * sigma), k1, dof);
      } else if (q_stat > 0) {
        p = 0;
      }
      tests.push_back({absl::StrFormat("%s=%s gaps differ across %d LRs (F test)", o.moderator_axis,
                                       m, static_cast<int>(stable.size())),
                       p, 0});
      // Equivalence: every gap within the δ floor of the mean gap at (1 - alpha) confidence.
      const double t = StudentTQuantile(1 - o.alpha / 2, dof);
      for (const auto& s : stable) {
        if (std::fabs(s.diff - mean) + t * sigma * std::sqrt(s.var_factor) > o.delta_floor) {
          within_floor = false;
        }
      }
    } else {
      within_floor = false;
    }
    // Divergence counts are pooled over the moderator values into one test: a wall that moves by
    // one LR shows 2 of 2 against 0 of 2 at one LR per depth, which no single depth can show.
    if (!stable.empty()) {
      divergence_strata.insert(divergence_strata.end(), strata.begin(), strata.end());
    }
    if (StratifiedExact(strata).informative > 0) informative_divergence = true;
  }
  const ExactTest exact = StratifiedExact(divergence_strata);
  if (exact.informative > 0) {
    tests.push_back(
        {absl::StrFormat("divergence counts differ (exact test over %d LRs)", exact.informative),
         exact.p_two_sided, 0});
  }
  Verdict v;
  v.deciding = std::move(deciding);
  v.hypothesis = "H1";
  v.alpha = o.alpha;
  const auto [sigma, dof] = PoolSeedNoise(PairCurves(a, context, variant));
  const std::vector<double> adjusted = Adjusted(tests);
  size_t best = 0;
  for (size_t i = 1; i < adjusted.size(); ++i) {
    if (adjusted[i] < adjusted[best]) best = i;
  }
  v.test = absl::StrCat("Holm over ", tests.size(),
                        " tests (F tests of equal gaps, exact tests of divergence counts)");
  std::string why;
  if (compared == 0) {
    v.outcome = "inconclusive";
    why = absl::StrCat("no ", o.moderator_axis, " value has 2+ LRs finished for both ", a.baseline,
                       " and ", variant);
  } else if (dof == 0 || tests.empty()) {
    v.outcome = "inconclusive";
    why = dof == 0 ? "no seed spread (1 seed per cell): nothing to test against"
                   : "no test possible (fewer than 2 LRs where every seed trained)";
  } else {
    v.p_value = adjusted[best];
    if (adjusted[best] <= o.alpha) {
      v.outcome = "supported";
      why = absl::StrCat(tests[best].label, ", adjusted p ", P(adjusted[best]), " <= alpha ",
                         o.alpha);
    } else if (within_floor && !informative_divergence) {
      v.outcome = "not supported";
      why = absl::StrCat("adjusted p ", P(adjusted[best]), "; every gap within ", o.delta_floor,
                         " of the mean gap at ", 100 * (1 - o.alpha), "% confidence");
    } else {
      v.outcome = "inconclusive";
      v.seeds_needed =
          dof > 0 ? SeedsForPower(sigma, o.effect, o.alpha, o.power, static_cast<int>(tests.size()))
                  : 0;
      why = absl::StrCat("smallest adjusted p ", P(adjusted[best]), " > alpha ", o.alpha,
                         SeedsAdvice(a, v.seeds_needed));
    }
  }
  v.line = absl::StrCat("H1 (the effect of ", o.variant_axis, "=", variant, " depends on ",
                        o.lr_axis, ")", Scope(context), ": ", v.outcome, " (", why, ")");
  if (!example.empty()) absl::StrAppend(&v.line, " - widest: ", example);
  // A skipped run counts as diverged at ℓ0 without having run: the comparisons it entered are
  // inferred, and the line says how many.
  if (inferred > 0) {
    absl::StrAppend(&v.line, " [", inferred, " compared LRs rest on skipped runs: inferred]");
  }
  v.inferred = inferred;
  return v;
}

// Per seed, whether it ended worse than the curve's good limit (diverged included).
int NotGood(const Curve& c, const Point& p, const Options& o) {
  if (!c.opt_loss || !c.l0) return 0;
  const double limit = *c.opt_loss + o.tau * (*c.l0 - *c.opt_loss);
  int n = 0;
  for (const auto& s : p.seed_values) {
    if (s.grid && (s.diverged || s.loss > limit)) ++n;
  }
  return n;
}

int GridSeeds(const Point& p) {
  int n = 0;
  for (const auto& s : p.seed_values) n += s.grid ? 1 : 0;
  return n;
}

Verdict H2(const Analysis& a, const std::string& context, const std::string& variant,
           const Draws& draws) {
  const auto& o = a.options;
  int compared = 0;
  std::vector<std::string> parts;
  std::vector<std::pair<std::string, double>> deciding;
  std::vector<Stratum> diverged, not_good;
  std::vector<std::pair<size_t, size_t>> sensitivity;  // curve indices (baseline, treated)
  double sens_diff = 0;
  auto index = [&](const Curve* c) { return static_cast<size_t>(c - a.curves.data()); };
  for (const auto& m : a.moderators) {
    const Curve* b = a.FindCurve(context, a.baseline, m);
    const Curve* q = a.FindCurve(context, variant, m);
    if (b == nullptr || q == nullptr || !b->opt_lr || !q->opt_lr) continue;
    ++compared;
    for (const Curve* c : {b, q}) {
      for (const auto& lr :
           {c->max_stable_lr, c->max_stable_above, c->max_good_lr, c->max_good_above}) {
        if (lr) deciding.emplace_back(m, *lr);
      }
    }
    const double from = std::min(*b->best_lr, *q->best_lr);
    for (const auto& pq : q->points) {
      const Point* pb = b->PointAt(pq.lr);
      if (pb == nullptr || GridSeeds(*pb) == 0 || GridSeeds(pq) == 0) continue;
      const int nb = GridSeeds(*pb), nq = GridSeeds(pq);
      diverged.push_back({nb, nq, pb->n_diverged_grid + pq.n_diverged_grid, pb->n_diverged_grid});
      if (pq.lr >= from * (1 - 1e-9)) {
        const int gb = NotGood(*b, *pb, o), gq = NotGood(*q, pq, o);
        not_good.push_back({nb, nq, gb + gq, gb});
      }
    }
    if (b->lr_sensitivity && q->lr_sensitivity) {
      sensitivity.emplace_back(index(b), index(q));
      sens_diff += *b->lr_sensitivity - *q->lr_sensitivity;
    }
    parts.push_back(absl::StrCat(o.moderator_axis, "=", m, ": stable ", Num(b->max_stable_lr),
                                 IntervalText(b->max_stable_ci, true), "->", Num(q->max_stable_lr),
                                 IntervalText(q->max_stable_ci, true), ", good ",
                                 Num(b->max_good_lr), IntervalText(b->max_good_ci, true), "->",
                                 Num(q->max_good_lr), IntervalText(q->max_good_ci, true),
                                 ", sensitivity ", Num(b->lr_sensitivity),
                                 IntervalText(b->lr_sensitivity_ci), "->", Num(q->lr_sensitivity),
                                 IntervalText(q->lr_sensitivity_ci)));
  }
  std::vector<Test> tests;
  auto direction = [](const ExactTest& e) { return e.p_greater < e.p_less ? 1 : -1; };
  const ExactTest div = StratifiedExact(diverged);
  if (div.informative > 0) {
    tests.push_back({absl::StrCat("divergences (exact test over ", div.informative, " LRs)"),
                     div.p_two_sided, direction(div)});
  }
  const ExactTest good = StratifiedExact(not_good);
  if (good.informative > 0) {
    tests.push_back(
        {absl::StrCat("seeds above the good limit (exact test over ", good.informative, " LRs)"),
         good.p_two_sided, direction(good)});
  }
  const auto [sigma, dof] = PoolSeedNoise(PairCurves(a, context, variant));
  if (!sensitivity.empty() && draws.resamples > 1 && dof > 0) {
    // The mean over moderator values of LRS(baseline) - LRS(variant), its standard error the
    // bootstrap's.
    const double mean = sens_diff / static_cast<double>(sensitivity.size());
    std::vector<double> resampled;
    for (int r = 0; r < draws.resamples; ++r) {
      double sum = 0;
      bool ok = true;
      for (const auto& [ib, iq] : sensitivity) {
        const double x = draws.curves[ib].lr_sensitivity[r] - draws.curves[iq].lr_sensitivity[r];
        ok &= !std::isnan(x);
        sum += x;
      }
      if (ok) resampled.push_back(sum / static_cast<double>(sensitivity.size()));
    }
    if (resampled.size() > 1) {
      const double rmean = *Mean(resampled);
      double sq = 0;
      for (double x : resampled) sq += (x - rmean) * (x - rmean);
      const double se = std::sqrt(sq / static_cast<double>(resampled.size() - 1));
      const double p = se > 0 ? TwoSidedP(mean / se, dof) : (mean != 0 ? 0.0 : 1.0);
      tests.push_back(
          {absl::StrFormat("LR sensitivity lower by %+.3g (t test, bootstrap SE %.2g)", mean, se),
           p, mean > 0 ? 1 : -1});
    }
  }
  Verdict v;
  v.deciding = std::move(deciding);
  v.hypothesis = "H2";
  v.alpha = o.alpha;
  v.test = absl::StrCat("Holm over ", tests.size(),
                        " tests (exact tests of divergences and of seeds above the good limit, "
                        "t test of LR sensitivity)");
  const std::vector<double> adjusted = Adjusted(tests);
  std::vector<std::string> favour_treated, favour_base;
  double smallest = 1;
  for (size_t i = 0; i < tests.size(); ++i) {
    smallest = std::min(smallest, adjusted[i]);
    if (adjusted[i] > o.alpha) continue;
    (tests[i].direction > 0 ? favour_treated : favour_base)
        .push_back(absl::StrCat(tests[i].label, ", adjusted p ", P(adjusted[i])));
  }
  std::string why;
  if (compared == 0) {
    v.outcome = "inconclusive";
    why = absl::StrCat("no ", o.moderator_axis, " value has both variants finished");
  } else if (dof == 0 || tests.empty()) {
    v.outcome = "inconclusive";
    why = dof == 0 ? "no seed spread (1 seed per cell): nothing to test against"
                   : "nothing to test (no divergence, no bootstrap)";
  } else {
    v.p_value = smallest;
    if (!favour_base.empty()) {
      v.outcome = "not supported";
      why = absl::StrCat(a.baseline, " is better: ", absl::StrJoin(favour_base, "; "));
    } else if (!favour_treated.empty()) {
      v.outcome = "supported";
      why = absl::StrJoin(favour_treated, "; ");
    } else {
      v.outcome = "inconclusive";
      v.seeds_needed =
          dof > 0 ? SeedsForPower(sigma, o.effect, o.alpha, o.power, static_cast<int>(tests.size()))
                  : 0;
      why = absl::StrCat("smallest adjusted p ", P(smallest), " > alpha ", o.alpha,
                         SeedsAdvice(a, v.seeds_needed));
    }
  }
  v.line = absl::StrCat("H2 (", o.variant_axis, "=", variant,
                        " raises max stable/good LR, lowers LR sensitivity; ", a.baseline, "->",
                        variant, ")", Scope(context), ": ", v.outcome, " (", why, ")");
  if (!parts.empty()) absl::StrAppend(&v.line, " - ", absl::StrJoin(parts, "; "));
  return v;
}

// Kendall's S over a sequence of intervals: each later-earlier pair adds -1 when the later one
// lies wholly below, +1 wholly above; overlapping ones (and never vs never) add 0.
int TrendS(const std::vector<std::pair<double, double>>& spans) {
  int s = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    for (size_t j = i + 1; j < spans.size(); ++j) {
      const auto& from = spans[i];
      const auto& to = spans[j];
      if (std::isinf(from.first) && std::isinf(to.first)) continue;
      if (to.second < from.first) {
        --s;
      } else if (from.second < to.first) {
        ++s;
      }
    }
  }
  return s;
}

Verdict H3(const Analysis& a, const std::string& context, const std::string& variant,
           const Draws& draws) {
  const auto& o = a.options;
  std::vector<size_t> seq;
  std::vector<std::pair<std::string, double>> deciding;
  std::vector<std::string> parts;
  int defined = 0;
  for (const auto& m : a.moderators) {
    for (size_t k = 0; k < a.necessity.size(); ++k) {
      const Necessity& n = a.necessity[k];
      if (n.context != context || n.variant != variant || n.moderator != m) continue;
      for (double lr : n.deciding_lrs) deciding.emplace_back(m, lr);
      seq.push_back(k);
      defined += n.eta_dagger ? 1 : 0;
      std::string value = n.eta_dagger ? Num(n.eta_dagger)
                          : n.censored ? (n.censored_at ? absl::StrCat("> ", Num(n.censored_at))
                                                        : std::string("no comparison"))
                                       : std::string("never");
      parts.push_back(absl::StrCat(m, ": ", value, IntervalText(n.eta_dagger_ci)));
    }
  }
  const auto [sigma, dof] = PoolSeedNoise(PairCurves(a, context, variant));
  Verdict v;
  v.deciding = std::move(deciding);
  v.hypothesis = "H3";
  v.alpha = o.alpha;
  v.test = absl::StrCat("Kendall's trend of eta-dagger over ", o.moderator_axis, " in ",
                        draws.resamples, " bootstrap resamples");
  v.outcome = "inconclusive";
  std::string why;
  if (seq.size() < 2) {
    why = "needs 2+ values";
  } else if (draws.resamples == 0 || dof == 0) {
    why = dof == 0 ? "no seed spread (1 seed per cell): nothing to test against"
                   : "no bootstrap resamples";
  } else {
    int falls = 0, not_falls = 0, all_never = 0;
    for (int r = 0; r < draws.resamples; ++r) {
      std::vector<std::pair<double, double>> spans;
      bool never = true;
      for (size_t k : seq) {
        spans.emplace_back(draws.necessity[k].lo[r], draws.necessity[k].hi[r]);
        never &= std::isinf(draws.necessity[k].lo[r]);
      }
      const int s = TrendS(spans);
      (s < 0 ? falls : not_falls) += 1;
      all_never += never ? 1 : 0;
    }
    const double fall_share = static_cast<double>(falls) / draws.resamples;
    v.p_value = 1 - fall_share;
    const std::string share = absl::StrFormat("eta-dagger falls in %.1f%% of %d resamples",
                                              100 * fall_share, draws.resamples);
    if (fall_share >= 1 - o.alpha) {
      v.outcome = "supported";
      why = absl::StrCat(share, ", >= ", 100 * (1 - o.alpha), "%");
    } else if (defined == 0 && all_never >= (1 - o.alpha) * draws.resamples) {
      why = absl::StrCat("never necessary at any value, in ",
                         absl::StrFormat("%.1f%%", 100.0 * all_never / draws.resamples),
                         " of resamples");
    } else if (1 - fall_share >= 1 - o.alpha) {
      v.outcome = "not supported";
      why = absl::StrCat(share, ", does not fall in >= ", 100 * (1 - o.alpha), "%");
    } else {
      v.seeds_needed =
          SeedsForPower(sigma, o.effect, o.alpha, o.power, static_cast<int>(seq.size()));
      why = absl::StrCat(share, SeedsAdvice(a, v.seeds_needed));
    }
  }
  v.line = absl::StrCat("H3 (eta-dagger of ", variant, " falls as ", o.moderator_axis, " grows)",
                        Scope(context), ": ", v.outcome, " (", why, ") - ", o.moderator_axis, " ",
                        parts.empty() ? "(no comparison)" : absl::StrJoin(parts, ", "));
  return v;
}

}  // namespace

std::vector<Verdict> ComputeVerdicts(const Analysis& a, const Draws& draws) {
  std::vector<Verdict> out;
  for (const auto& context : a.contexts) {
    for (const auto& variant : a.variants) {
      if (variant == a.baseline) continue;
      for (auto v : {H1(a, context, variant), H2(a, context, variant, draws),
                     H3(a, context, variant, draws)}) {
        v.context = context;
        v.variant = variant;
        out.push_back(std::move(v));
      }
    }
  }
  return out;
}

}  // namespace ablate::analysis
