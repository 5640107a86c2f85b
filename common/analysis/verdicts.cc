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
#include "common/analysis/stats.h"

namespace ablate::analysis {
namespace {

std::string Num(const std::optional<double>& x) {
  return x ? absl::StrFormat("%.4g", *x) : std::string("none");
}

std::string Scope(const std::string& context) {
  return context.empty() ? "" : absl::StrCat(" [", context, "]");
}

std::string Outcome(int total, int positive, int negative) {
  if (total == 0) return "inconclusive";
  if (positive == total) return "supported";
  if (positive == 0 || negative == total) return "not supported";
  return "mixed";
}

Verdict H1(const Analysis& a, const std::string& context, const std::string& variant) {
  const auto& o = a.options;
  int compared = 0, depends = 0, inferred = 0;
  std::string example;
  double widest = -1;
  std::vector<std::pair<std::string, double>> deciding;
  for (const auto& m : a.moderators) {
    const Curve* b = a.FindCurve(context, a.baseline, m);
    const Curve* q = a.FindCurve(context, variant, m);
    if (b == nullptr || q == nullptr) continue;
    // Class of each common LR: -1 variant worse, 0 within δ, +1 variant better.
    std::set<int> classes;
    std::optional<std::pair<double, double>> lo, hi;  // (lr, diff) at the min and max diff
    double delta_at_hi = 0;
    int common = 0;
    for (const auto& pq : q->points) {
      for (const auto& pb : b->points) {
        if (!pq.loss || !pb.loss || std::fabs(pq.lr - pb.lr) > 1e-9 * pq.lr) continue;
        const double diff = *pb.loss - *pq.loss;
        const double delta = Delta(o, pb, pq);
        classes.insert(diff > delta ? 1 : (diff < -delta ? -1 : 0));
        ++common;
        if (pb.n_inferred > 0 || pq.n_inferred > 0) ++inferred;
        if (!lo || diff < lo->second) lo = {{pq.lr, diff}};
        if (!hi || diff > hi->second) {
          hi = {{pq.lr, diff}};
          delta_at_hi = delta;
        }
      }
    }
    if (common < 2) continue;
    ++compared;
    if (classes.size() > 1) ++depends;
    // The smallest and largest gap: whether their classes differ is what this value says.
    deciding.emplace_back(m, lo->first);
    if (hi->first != lo->first) deciding.emplace_back(m, hi->first);
    if (hi->second - lo->second > widest) {
      widest = hi->second - lo->second;
      example = absl::StrFormat("%s=%s: %s-%s = %+.4g at lr=%.4g, %+.4g at lr=%.4g (delta %.4g)",
                                o.moderator_axis, m, a.baseline, variant, lo->second, lo->first,
                                hi->second, hi->first, delta_at_hi);
    }
  }
  Verdict v;
  v.deciding = std::move(deciding);
  v.hypothesis = "H1";
  v.outcome = Outcome(compared, depends, compared - depends);
  v.line = absl::StrCat("H1 (the effect of ", o.variant_axis, "=", variant, " depends on ",
                        o.lr_axis, ")", Scope(context), ": ", v.outcome);
  if (compared == 0) {
    absl::StrAppend(&v.line, " - no ", o.moderator_axis, " value has 2+ LRs finished for both ",
                    a.baseline, " and ", variant);
  } else {
    absl::StrAppend(&v.line, " at ", depends, " of ", compared, " ", o.moderator_axis,
                    " values; widest: ", example);
  }
  // A skipped run counts as diverged at ℓ0 without having run: the classes it entered are
  // inferred, and the line says how many.
  if (inferred > 0) {
    absl::StrAppend(&v.line, " [", inferred, " compared LRs rest on skipped runs: inferred]");
  }
  v.inferred = inferred;
  return v;
}

// -1 / 0 / +1: is `treated` worse / equal / better than `base`; higher is better unless `lower`.
// Differences within `tolerance` (absolute) are ties.
int Compare(const std::optional<double>& base, const std::optional<double>& treated, bool lower,
            double tolerance = 0) {
  // "none" (no stable or good LR at all) ranks below every LR.
  const double b = base.value_or(lower ? std::numeric_limits<double>::infinity() : 0);
  const double t = treated.value_or(lower ? std::numeric_limits<double>::infinity() : 0);
  const double tol = std::max(tolerance, 1e-9 * std::max(std::fabs(b), std::fabs(t)));
  if (std::fabs(b - t) <= tol) return 0;
  return (lower ? t < b : t > b) ? 1 : -1;
}

// Where a boundary lies, as far as the runs say: in [lo, hi), lo the boundary itself (the last
// LR that still held), hi the next LR tried above it (infinity when none was). "none" (the
// smallest LR tried already failed) lies in [0, that LR).
struct Span {
  double lo = 0;
  double hi = std::numeric_limits<double>::infinity();
};

Span BoundarySpan(const Curve& c, const std::optional<double>& value,
                  const std::optional<double>& above) {
  if (value) return {*value, above.value_or(std::numeric_limits<double>::infinity())};
  for (const auto& p : c.points) {
    if (p.n > 0) return {0, p.lr};
  }
  return {};
}

// -1 / 0 / +1: the treated boundary lies below / indistinguishably from / above the baseline's.
// Boundaries are compared as brackets, not values: under a budget one curve's bracket may be
// refined and the other's not, and a difference within a bracket is not a measured difference.
// Only brackets that do not overlap decide.
int CompareSpans(const Span& base, const Span& treated) {
  if (LessOrClose(base.hi, treated.lo)) return 1;
  if (LessOrClose(treated.hi, base.lo)) return -1;
  return 0;
}

Verdict H2(const Analysis& a, const std::string& context, const std::string& variant) {
  const auto& o = a.options;
  int compared = 0, better = 0, worse = 0;
  std::vector<std::string> parts;
  std::vector<std::pair<std::string, double>> deciding;
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
    const int stable = CompareSpans(BoundarySpan(*b, b->max_stable_lr, b->max_stable_above),
                                    BoundarySpan(*q, q->max_stable_lr, q->max_stable_above));
    const int good = CompareSpans(BoundarySpan(*b, b->max_good_lr, b->max_good_above),
                                  BoundarySpan(*q, q->max_good_lr, q->max_good_above));
    const int sens = (b->lr_sensitivity && q->lr_sensitivity)
                         // Sensitivities are losses: closer than the δ floor is a tie.
                         ? Compare(b->lr_sensitivity, q->lr_sensitivity, true, o.delta_floor)
                         : 0;
    const bool any_worse = stable < 0 || good < 0 || sens < 0;
    const bool any_better = stable > 0 || good > 0 || sens > 0;
    if (any_worse) ++worse;
    if (any_better && !any_worse) ++better;
    parts.push_back(absl::StrCat(o.moderator_axis, "=", m, ": stable ", Num(b->max_stable_lr), "->",
                                 Num(q->max_stable_lr), ", good ", Num(b->max_good_lr), "->",
                                 Num(q->max_good_lr), ", sensitivity ", Num(b->lr_sensitivity),
                                 "->", Num(q->lr_sensitivity)));
  }
  Verdict v;
  v.deciding = std::move(deciding);
  v.hypothesis = "H2";
  v.outcome = Outcome(compared, better, worse);
  v.line = absl::StrCat("H2 (", o.variant_axis, "=", variant,
                        " raises max stable/good LR, lowers LR sensitivity; ", a.baseline, "->",
                        variant, ")", Scope(context), ": ", v.outcome);
  if (compared == 0) {
    absl::StrAppend(&v.line, " - no ", o.moderator_axis, " value has both variants finished");
  } else {
    absl::StrAppend(&v.line, " at ", better, " of ", compared, " - ", absl::StrJoin(parts, "; "));
  }
  return v;
}

Verdict H3(const Analysis& a, const std::string& context, const std::string& variant) {
  const auto& o = a.options;
  struct Entry {
    std::string moderator;
    std::optional<double> eta;
    Span span;  // where η† lies as far as the runs say; "none" = (inf, inf)
  };
  std::vector<Entry> seq;
  std::vector<std::pair<std::string, double>> deciding;
  for (const auto& m : a.moderators) {
    for (const auto& n : a.necessity) {
      if (n.context != context || n.variant != variant || n.moderator != m) continue;
      for (double lr : n.deciding_lrs) deciding.emplace_back(m, lr);
      Entry e{m, n.eta_dagger, {}};
      if (!n.eta_dagger) {
        e.span = {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
      } else if (n.bracket_lo && n.bracket_hi) {
        e.span = {*n.bracket_lo, *n.bracket_hi};  // interpolated: in (lo, hi]
      } else {
        e.span = {0, *n.eta_dagger};  // worse from the smallest compared LR on: at or below it
      }
      seq.push_back(std::move(e));
    }
  }
  int defined = 0;
  for (const auto& e : seq) defined += e.eta ? 1 : 0;
  std::vector<std::string> parts;
  for (const auto& e : seq) parts.push_back(absl::StrCat(e.moderator, ": ", Num(e.eta)));
  Verdict v;
  v.deciding = std::move(deciding);
  v.hypothesis = "H3";
  v.outcome = "inconclusive";
  if (seq.size() >= 2 && defined >= 1) {
    // Each η† is known only to its bracket (the two compared LRs it lies between): a step is a
    // fall or a rise only when the two brackets are disjoint, so 0.00132 -> 0.00126 within one
    // bracket is no trend, and 0.0012 in (1e-3, 3e-3] -> 0.0009 in (3e-4, 1e-3] is a fall
    // (at 1e-3 the baseline was not worse at one depth and was at the other). Each η†'s own
    // bracket, not a sweep-wide grid step: refining another group's LRs changes nothing here.
    // "none" = never needed = +infinity, so none -> 0.05 -> 0.01 is a falling threshold.
    auto step = [](const Span& from, const Span& to) {  // -1 falls, 0 flat, +1 rises
      if (std::isinf(from.lo) && std::isinf(to.lo)) return 0;
      if (LessOrClose(to.hi, from.lo)) return -1;
      if (LessOrClose(from.hi, to.lo)) return 1;
      return 0;
    };
    bool rises = false, falls = false;
    for (size_t i = 1; i < seq.size(); ++i) {
      const int s = step(seq[i - 1].span, seq[i].span);
      rises |= s > 0;
      falls |= s < 0;
    }
    const int overall = step(seq.front().span, seq.back().span);
    if (!rises && overall < 0) {
      v.outcome = "supported";
    } else if (!falls || overall >= 0) {
      v.outcome = rises && falls ? "mixed" : "not supported";
    } else {
      v.outcome = "mixed";
    }
  }
  v.line = absl::StrCat("H3 (eta-dagger of ", variant, " falls as ", o.moderator_axis, " grows)",
                        Scope(context), ": ", v.outcome, " - ", o.moderator_axis, " ",
                        parts.empty() ? "(no comparison)" : absl::StrJoin(parts, ", "));
  if (v.outcome == "inconclusive" && !parts.empty()) {
    absl::StrAppend(&v.line,
                    defined == 0 ? " (never necessary at any value)" : " (needs 2+ values)");
  }
  return v;
}

}  // namespace

std::vector<Verdict> ComputeVerdicts(const Analysis& a) {
  std::vector<Verdict> out;
  for (const auto& context : a.contexts) {
    for (const auto& variant : a.variants) {
      if (variant == a.baseline) continue;
      for (auto v : {H1(a, context, variant), H2(a, context, variant), H3(a, context, variant)}) {
        v.context = context;
        v.variant = variant;
        out.push_back(std::move(v));
      }
    }
  }
  return out;
}

}  // namespace ablate::analysis
