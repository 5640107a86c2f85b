#include "common/analysis/refine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/analysis/deciding.h"
#include "common/sweep/run_config.h"
#include "common/sweep/sweep.h"

namespace ablate::analysis {
namespace {

using ablate::v1::Run;

std::string CurveLabel(const Options& o, const Curve& c) {
  std::vector<std::string> parts;
  if (!c.context.empty()) parts.push_back(c.context);
  parts.push_back(absl::StrCat(o.variant_axis, "=", c.variant));
  parts.push_back(absl::StrCat(o.moderator_axis, "=", c.moderator));
  return absl::StrJoin(parts, ",");
}

bool Settled(const Curve& c) {
  for (const auto& p : c.points) {
    if (p.n_pending > 0) return false;
  }
  return true;
}

std::string SeedKey(const Run& r) {
  auto it = r.grid_values().find("seed");
  return it != r.grid_values().end() ? it->second : absl::StrCat(r.seed());
}

// The grid's seeds: those of the base grid's runs (refine_round 0). Seeds refine.seeds added to
// some cells are not the curve's seeds: a new midpoint or a wall does not ask for them.
std::set<std::string> GridSeeds(const std::vector<Run>& runs) {
  std::set<std::string> out;
  for (const auto& r : runs) {
    if (r.refine_round() == 0) out.insert(SeedKey(r));
  }
  return out;
}

// A bracket to bisect and the curves whose seeds get the midpoint.
struct Candidate {
  Bracket bracket;
  std::vector<const Curve*> curves;
  size_t index = 0;  // in RefinePlan::brackets
};

// Where refine.seeds adds seeds: the two variants compared at an LR that decides η† or H1, the
// comparison within noise.
struct Noisy {
  const Curve* baseline = nullptr;
  const Curve* treated = nullptr;
  double lr = 0;
  std::string why;  // for the runs' event
};

// The comparisons within noise at the LRs deciding η† (every row) and H1 (every verdict), in the
// analysis' order, each (pair of curves, LR) once. Only settled curves: like a boundary, η† and
// H1 depend on every LR of both curves, so a seed is added only once every run of both has
// finished (in particular every seed of the two cells).
std::vector<Noisy> NoisyComparisons(const Analysis& a) {
  const Options& o = a.options;
  std::vector<Noisy> out;
  std::set<std::tuple<std::string, std::string, std::string, double>> seen;
  auto consider = [&](const Curve* b, const Curve* q, double lr, bool two_sided,
                      const std::string& what) {
    if (b == nullptr || q == nullptr || !Settled(*b) || !Settled(*q)) return;
    const std::optional<Gap> gap = GapAt(o, *b, *q, lr);
    if (!gap || !WithinNoise(*gap, two_sided)) return;
    if (!seen.insert({q->context, q->variant, q->moderator, lr}).second) return;
    std::vector<std::string> parts;
    if (!q->context.empty()) parts.push_back(q->context);
    parts.push_back(absl::StrCat(o.moderator_axis, "=", q->moderator));
    parts.push_back(absl::StrCat(o.variant_axis, "=", q->variant));
    out.push_back(
        {b, q, lr,
         absl::StrCat("extra seed: ", what, " ", absl::StrJoin(parts, ","), " at ", o.lr_axis, "=",
                      sweep::FormatDouble(lr), " within noise (", b->variant, "-", q->variant, " ",
                      sweep::FormatDouble(gap->diff), ", delta ", sweep::FormatDouble(gap->delta),
                      ", sigma ", gap->sigma ? sweep::FormatDouble(*gap->sigma) : "unknown", ")")});
  };
  for (const auto& n : a.necessity) {
    for (double lr : n.deciding_lrs) {
      consider(a.FindCurve(n.context, n.baseline, n.moderator),
               a.FindCurve(n.context, n.variant, n.moderator), lr, false, std::string(kEtaDagger));
    }
  }
  for (const auto& v : a.verdicts) {
    if (v.hypothesis != "H1") continue;
    for (const auto& [moderator, lr] : v.deciding) {
      consider(a.FindCurve(v.context, a.baseline, moderator),
               a.FindCurve(v.context, v.variant, moderator), lr, true, "H1");
    }
  }
  return out;
}

// How many seeds (any state) a cell has, planned ones included.
int SeedCount(const std::set<std::pair<std::string, int64_t>>& existing, const std::string& cell) {
  int n = 0;
  for (auto it = existing.lower_bound({cell, std::numeric_limits<int64_t>::min()});
       it != existing.end() && it->first == cell; ++it) {
    ++n;
  }
  return n;
}

// refine.seeds: one more seed, per round, for both cells of every comparison within noise at a
// deciding LR, up to seeds.max per cell and within what is left of the shared budget. The seed
// is the smallest value above the grid's largest seed that either cell lacks, so the two cells
// keep the same seeds even when one of them (a baseline compared with two variants) got extra
// seeds for another comparison.
void PlanSeeds(const ablate::v1::RefineStatus& rule, const Analysis& a,
               const std::map<int64_t, const Run*>& by_id, const std::set<std::string>& grid_seeds,
               std::set<std::pair<std::string, int64_t>>* existing, int* left, RefinePlan* plan) {
  int64_t largest = std::numeric_limits<int64_t>::min();
  for (const auto& text : grid_seeds) {
    int64_t seed = 0;
    if (absl::SimpleAtoi(text, &seed)) largest = std::max(largest, seed);
  }
  if (largest == std::numeric_limits<int64_t>::min()) return;
  for (const Noisy& noisy : NoisyComparisons(a)) {
    // Each cell's run with the smallest seed: the new run is its cell with another seed.
    std::vector<const Run*> cells;
    int round = 1;
    for (const Curve* c : {noisy.baseline, noisy.treated}) {
      const Run* smallest = nullptr;
      for (int64_t id : c->PointAt(noisy.lr)->run_ids) {
        const Run* r = by_id.at(id);
        if (smallest == nullptr || r->seed() < smallest->seed()) smallest = r;
        round = std::max(round, r->refine_round() + 1);
      }
      if (smallest != nullptr) cells.push_back(smallest);
    }
    if (cells.size() != 2) continue;
    auto has = [&](const Run* cell, int64_t seed) {
      return existing->count({cell->cell(), seed}) > 0;
    };
    int64_t seed = largest + 1;
    while (has(cells[0], seed) && has(cells[1], seed)) ++seed;
    std::vector<RefineRun> adds;
    for (const Run* t : cells) {
      if (has(t, seed) || SeedCount(*existing, t->cell()) >= rule.seeds_max()) continue;
      RefineRun add;
      add.template_run_id = t->id();
      add.axis_value = noisy.baseline->PointAt(noisy.lr)->lr_text;
      add.grid_values = t->grid_values();
      add.grid_values["seed"] = absl::StrCat(seed);
      add.cell = sweep::CellKey(add.grid_values);
      add.seed = seed;
      add.round = round;
      add.boundary = noisy.why;
      adds.push_back(std::move(add));
    }
    if (adds.empty()) continue;  // both cells at seeds.max
    if (static_cast<int>(adds.size()) > *left) {
      ++plan->seeds_unresolved_by_budget;
      continue;
    }
    *left -= static_cast<int>(adds.size());
    for (auto& add : adds) {
      existing->insert({add.cell, add.seed});
      plan->runs.push_back(std::move(add));
    }
  }
}

}  // namespace

bool IsBoundaryName(std::string_view name) {
  return name == kOptimum || name == kMaxStable || name == kMaxGood || name == kEtaDagger;
}

std::optional<std::pair<double, double>> OptimumBracket(const Options& options, const Curve& c) {
  if (!c.best_lr || !c.best_below || !c.best_above) return std::nullopt;
  const Point* best = c.PointAt(*c.best_lr);
  const Point* below = c.PointAt(*c.best_below);
  const Point* above = c.PointAt(*c.best_above);
  if (best == nullptr || below == nullptr || above == nullptr) return std::nullopt;
  const double lr = *c.best_lr;
  if (c.opt_fitted) {
    if (*best->loss - *c.opt_loss < options.delta_floor) return std::nullopt;
    return *c.opt_lr >= lr ? std::make_pair(lr, above->lr) : std::make_pair(below->lr, lr);
  }
  if (above->n_diverged > 0) return std::make_pair(lr, above->lr);
  if (below->n_diverged > 0) return std::make_pair(below->lr, lr);
  // Both neighbours stable but no fit: collinear, or spaced too unevenly to fit. Unevenly: the
  // wider side, so the spacing evens out and the next round can fit; evenly: nothing.
  const double wide_below = std::log(lr / below->lr), wide_above = std::log(above->lr / lr);
  if (std::fabs(wide_below - wide_above) < 1e-9 * (wide_below + wide_above)) return std::nullopt;
  return wide_above > wide_below ? std::make_pair(lr, above->lr) : std::make_pair(below->lr, lr);
}

absl::StatusOr<RefinePlan> PlanRefinement(const std::vector<Run>& runs,
                                          const ablate::v1::RefineStatus& rule, Options options) {
  if (!(rule.until_ratio() > 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("refine.until_ratio must be > 1, not ", rule.until_ratio()));
  }
  for (const auto& b : rule.boundaries()) {
    if (!IsBoundaryName(b)) {
      return absl::InvalidArgumentError(absl::StrCat("refine.boundaries: unknown boundary '", b,
                                                     "' (optimum|max_stable|max_good|eta_dagger)"));
    }
  }
  options.lr_axis = rule.axis();
  RefinePlan plan;
  for (const auto& r : runs) plan.used += r.refine_round() > 0 ? 1 : 0;
  options.bootstrap_resamples = 0;  // planning reads the point figures only
  absl::StatusOr<Analysis> analysed = Analyze(runs, options);
  if (!analysed.ok()) return analysed.status();
  const Analysis& a = *analysed;
  auto wants = [&](std::string_view name) {
    return std::find(rule.boundaries().begin(), rule.boundaries().end(), name) !=
           rule.boundaries().end();
  };

  std::vector<Candidate> candidates;
  for (const auto& c : a.curves) {
    const std::string where = CurveLabel(options, c);
    if (wants(kOptimum)) {
      if (auto b = OptimumBracket(options, c)) {
        candidates.push_back(
            {{std::string(kOptimum), where, b->first, b->second, c.context, c.variant, c.moderator},
             {&c}});
      }
    }
    if (wants(kMaxStable) && c.max_stable_lr && c.max_stable_above) {
      candidates.push_back({{std::string(kMaxStable), where, *c.max_stable_lr, *c.max_stable_above,
                             c.context, c.variant, c.moderator},
                            {&c}});
    }
    if (wants(kMaxGood) && c.max_good_lr && c.max_good_above) {
      candidates.push_back({{std::string(kMaxGood), where, *c.max_good_lr, *c.max_good_above,
                             c.context, c.variant, c.moderator},
                            {&c}});
    }
  }
  if (wants(kEtaDagger)) {
    for (const auto& n : a.necessity) {
      if (!n.bracket_lo || !n.bracket_hi) continue;
      const Curve* base = a.FindCurve(n.context, n.baseline, n.moderator);
      const Curve* treated = a.FindCurve(n.context, n.variant, n.moderator);
      if (base == nullptr || treated == nullptr) continue;
      std::vector<std::string> parts;
      if (!n.context.empty()) parts.push_back(n.context);
      parts.push_back(absl::StrCat(options.moderator_axis, "=", n.moderator));
      parts.push_back(absl::StrCat(options.variant_axis, "=", n.variant));
      candidates.push_back({{std::string(kEtaDagger), absl::StrJoin(parts, ","), *n.bracket_lo,
                             *n.bracket_hi, n.context, n.variant, n.moderator},
                            {base, treated}});
    }
  }
  for (auto& cand : candidates) {
    cand.index = plan.brackets.size();
    plan.brackets.push_back(cand.bracket);
  }

  // Widest first, so a budget that cannot cover everything goes where the answer is vaguest;
  // ties keep the curve order (stable sort), so every replica plans the same runs.
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [](const Candidate& x, const Candidate& y) { return x.bracket.ratio() > y.bracket.ratio(); });

  std::map<int64_t, const Run*> by_id;
  std::set<std::pair<std::string, int64_t>> existing;  // (cell, seed)
  for (const auto& r : runs) {
    by_id[r.id()] = &r;
    existing.insert({r.cell(), r.seed()});
  }
  const std::set<std::string> grid_seeds = GridSeeds(runs);
  int left = rule.max_new_runs() - plan.used;
  for (const auto& cand : candidates) {
    const Bracket& b = cand.bracket;
    if (!(b.lo > 0) || b.ratio() <= rule.until_ratio() * (1 + 1e-9)) continue;
    bool settled = true;
    for (const Curve* c : cand.curves) settled &= Settled(*c);
    if (!settled) continue;
    const std::string text = sweep::FormatDouble(std::sqrt(b.lo * b.hi));
    double mid = 0;
    // %.6g cannot separate LRs closer than 1e-6 relative: such a bracket is as narrow as the
    // grid's text can say.
    if (!absl::SimpleAtod(text, &mid) || !(mid > b.lo) || !(mid < b.hi)) continue;

    std::vector<RefineRun> adds;
    for (const Curve* c : cand.curves) {
      const Point* lo = c->PointAt(b.lo);
      const Point* hi = c->PointAt(b.hi);
      int round = 1;
      for (const Point* p : {lo, hi}) {
        if (p == nullptr) continue;
        for (int64_t id : p->run_ids) round = std::max(round, by_id.at(id)->refine_round() + 1);
      }
      // One template per seed: the seed's run at the lower end, else any run of the curve.
      std::map<std::string, const Run*> templates;
      for (const Point* p : {lo, hi}) {
        if (p == nullptr) continue;
        for (int64_t id : p->run_ids) templates.emplace(SeedKey(*by_id.at(id)), by_id.at(id));
      }
      for (const auto& p : c->points) {
        for (int64_t id : p.run_ids) templates.emplace(SeedKey(*by_id.at(id)), by_id.at(id));
      }
      for (const auto& [seed, t] : templates) {
        if (grid_seeds.count(seed) == 0) continue;
        RefineRun add;
        add.template_run_id = t->id();
        add.axis_value = text;
        add.grid_values = t->grid_values();
        add.grid_values[rule.axis()] = text;
        add.cell = sweep::CellKey(add.grid_values);
        add.seed = t->seed();
        add.round = round;
        add.boundary = absl::StrCat(b.boundary, " ", b.where, ": (", sweep::FormatDouble(b.lo),
                                    ", ", sweep::FormatDouble(b.hi), ")");
        if (existing.count({add.cell, add.seed}) > 0) continue;
        adds.push_back(std::move(add));
      }
    }
    if (adds.empty()) continue;
    if (static_cast<int>(adds.size()) > left) {
      plan.budget_exhausted = true;
      plan.brackets[cand.index].unresolved_by_budget = true;
      continue;
    }
    left -= static_cast<int>(adds.size());
    for (auto& add : adds) {
      existing.insert({add.cell, add.seed});
      plan.runs.push_back(std::move(add));
    }
  }
  if (rule.seeds_max() > 0) {
    PlanSeeds(rule, a, by_id, grid_seeds, &existing, &left, &plan);
  }
  return plan;
}

absl::Status MarkUnresolvedByBudget(const std::vector<Run>& runs,
                                    const ablate::v1::RefineStatus& rule, Analysis* analysis) {
  absl::StatusOr<RefinePlan> plan = PlanRefinement(runs, rule, analysis->options);
  if (!plan.ok()) return plan.status();
  int marked = 0;
  for (const auto& b : plan->brackets) {
    if (!b.unresolved_by_budget) continue;
    for (auto& c : analysis->curves) {
      if (c.context != b.context || c.variant != b.variant || c.moderator != b.moderator) continue;
      bool& flag = b.boundary == kMaxStable ? c.max_stable_unresolved_by_budget
                   : b.boundary == kOptimum ? c.opt_unresolved_by_budget
                                            : c.max_good_unresolved_by_budget;
      if (b.boundary != kEtaDagger && !flag) {
        flag = true;
        ++marked;
      }
    }
    for (auto& n : analysis->necessity) {
      if (b.boundary == kEtaDagger && n.context == b.context && n.variant == b.variant &&
          n.moderator == b.moderator && !n.unresolved_by_budget) {
        n.unresolved_by_budget = true;
        ++marked;
      }
    }
  }
  if (plan->seeds_unresolved_by_budget > 0) {
    analysis->notes.push_back(absl::StrCat(
        plan->seeds_unresolved_by_budget,
        " comparisons within noise at a deciding LR got no extra seed: the refinement budget (",
        plan->used, " of ", rule.max_new_runs(), " new runs used) could not pay for both cells"));
  }
  analysis->unresolved_by_budget += marked;
  if (marked > 0) {
    analysis->notes.push_back(absl::StrCat(marked, marked == 1 ? " boundary" : " boundaries",
                                           " left unresolved by the refinement budget (",
                                           plan->used, " of ", rule.max_new_runs(),
                                           " new runs used): bracket still wider than until_ratio ",
                                           rule.until_ratio(), ", marked [unresolved by budget]"));
  }
  return absl::OkStatus();
}

namespace {

// One curve's evidence per point, for the pruning rules.
struct PointEvidence {
  const Point* point = nullptr;
  int succeeded = 0;  // finished and not diverged
  int measured = 0;   // diverged runs that ran (not skipped)
  int pending = 0;    // queued, leased or running
  bool success_above = false;
};

std::vector<PointEvidence> Evidence(const Curve& c) {
  std::vector<PointEvidence> out;
  for (const auto& p : c.points) {
    PointEvidence e;
    e.point = &p;
    e.succeeded = p.n - p.n_diverged;
    e.measured = p.n_diverged - p.n_inferred;
    e.pending = p.n_pending;
    out.push_back(e);
  }
  bool above = false;
  for (size_t i = out.size(); i-- > 0;) {
    out[i].success_above = above;
    above |= out[i].succeeded > 0;
  }
  return out;
}

// The smallest LR at which every seed of the curve ran and diverged and above which nothing
// succeeded; null when there is none.
const PointEvidence* Wall(const std::vector<PointEvidence>& points, size_t seeds) {
  for (const auto& e : points) {
    const Point& p = *e.point;
    // Every grid seed is there (n_absent) and ran; an LR may hold extra seeds (refine.seeds).
    if (p.n_pending == 0 && p.n_failed == 0 && p.n_absent == 0 && p.n > 0 && e.measured == p.n &&
        p.n >= static_cast<int>(seeds) && !e.success_above) {
      return &e;
    }
  }
  return nullptr;
}

// Whether this LR keeps the runs skipped above it skipped: it is a wall, or may yet become one.
bool Holds(const PointEvidence& e) {
  return e.succeeded == 0 && !e.success_above && (e.measured > 0 || e.pending > 0);
}

}  // namespace

absl::StatusOr<std::vector<PruneRun>> PlanPruning(const std::vector<Run>& runs, Options options) {
  options.bootstrap_resamples = 0;  // planning reads the point figures only
  absl::StatusOr<Analysis> analysed = Analyze(runs, options);
  if (!analysed.ok()) return analysed.status();
  std::map<int64_t, const Run*> by_id;
  for (const auto& r : runs) by_id[r.id()] = &r;
  const std::set<std::string> grid_seeds = GridSeeds(runs);
  std::vector<PruneRun> out;
  for (const auto& c : analysed->curves) {
    std::set<std::string> seeds;
    for (const auto& p : c.points) {
      for (int64_t id : p.run_ids) {
        if (grid_seeds.count(SeedKey(*by_id.at(id))) > 0) seeds.insert(SeedKey(*by_id.at(id)));
      }
    }
    const std::vector<PointEvidence> evidence = Evidence(c);
    const PointEvidence* wall = Wall(evidence, seeds.size());
    if (wall == nullptr) continue;
    const std::string reason =
        absl::StrCat("every seed (", seeds.size(), ") of ", CurveLabel(options, c), " diverged at ",
                     options.lr_axis, "=", wall->point->lr_text);
    for (const auto& p : c.points) {
      if (!(p.lr > wall->point->lr)) continue;
      for (int64_t id : p.run_ids) {
        if (by_id.at(id)->state() == ablate::v1::QUEUED) out.push_back({id, reason});
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<PruneRun>> PlanRequeue(const std::vector<Run>& runs, Options options) {
  bool any_skipped = false;
  for (const auto& r : runs) any_skipped |= r.state() == ablate::v1::SKIPPED;
  if (!any_skipped) return std::vector<PruneRun>{};
  options.bootstrap_resamples = 0;  // planning reads the point figures only
  absl::StatusOr<Analysis> analysed = Analyze(runs, options);
  if (!analysed.ok()) return analysed.status();
  std::map<int64_t, const Run*> by_id;
  for (const auto& r : runs) by_id[r.id()] = &r;
  std::vector<PruneRun> out;
  for (const auto& c : analysed->curves) {
    const std::vector<PointEvidence> evidence = Evidence(c);
    const PointEvidence* held_by = nullptr;  // the lowest LR that holds, if any
    const Point* success = nullptr;          // the highest LR with a success
    for (const auto& e : evidence) {
      if (held_by == nullptr && Holds(e)) held_by = &e;
      if (e.succeeded > 0) success = e.point;
    }
    for (const auto& e : evidence) {
      if (held_by != nullptr && e.point->lr > held_by->point->lr) break;
      if (held_by == &e) continue;  // a wall's own runs are never skipped by it
      for (int64_t id : e.point->run_ids) {
        if (by_id.at(id)->state() != ablate::v1::SKIPPED) continue;
        out.push_back(
            {id, absl::StrCat("requeued: no wall below ", options.lr_axis, "=", e.point->lr_text,
                              " in ", CurveLabel(options, c), " any more",
                              success != nullptr
                                  ? absl::StrCat(" (a run succeeded at ", options.lr_axis, "=",
                                                 success->lr_text, ")")
                                  : std::string())});
      }
    }
  }
  return out;
}

Options PlanningOptions(const sweep::SweepSpec& sweep) {
  Options o;
  const sweep::AnalysisSettings& a = sweep.analysis;
  if (a.tau) o.tau = *a.tau;
  if (a.delta) o.delta_floor = *a.delta;
  if (a.lr_min) o.lr_min = *a.lr_min;
  if (a.lr_max) o.lr_max = *a.lr_max;
  if (a.variant) o.variant_axis = *a.variant;
  if (a.by) o.moderator_axis = *a.by;
  if (sweep.refine) o.lr_axis = sweep.refine->axis();
  return o;
}

std::vector<std::string> OptionDifferences(const Options& used, const Options& planned) {
  std::vector<std::string> out;
  auto number = [&](const char* name, double u, double p) {
    if (std::fabs(u - p) > 1e-12 * std::max(std::fabs(u), std::fabs(p))) {
      out.push_back(absl::StrCat(name, " ", sweep::FormatDouble(u), " (refined for ",
                                 sweep::FormatDouble(p), ")"));
    }
  };
  auto text = [&](const char* name, const std::string& u, const std::string& p) {
    if (u != p) out.push_back(absl::StrCat(name, " ", u, " (refined for ", p, ")"));
  };
  number("tau", used.tau, planned.tau);
  number("delta", used.delta_floor, planned.delta_floor);
  if (std::fabs(used.lr_min - planned.lr_min) > 1e-12 * planned.lr_min ||
      std::fabs(used.lr_max - planned.lr_max) > 1e-12 * planned.lr_max) {
    out.push_back(absl::StrCat("lr range ", sweep::FormatDouble(used.lr_min), ":",
                               sweep::FormatDouble(used.lr_max), " (refined for ",
                               sweep::FormatDouble(planned.lr_min), ":",
                               sweep::FormatDouble(planned.lr_max), ")"));
  }
  text("variant", used.variant_axis, planned.variant_axis);
  text("by", used.moderator_axis, planned.moderator_axis);
  return out;
}

}  // namespace ablate::analysis
