// Grouping runs into curves and points; then the figures (curve_metrics) and verdicts.
#include "common/analysis/analysis.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/analysis/curve_metrics.h"
#include "common/analysis/deciding.h"
#include "common/analysis/stats.h"
#include "common/analysis/uncertainty.h"
#include "common/analysis/verdicts.h"
#include "common/run/run_state.h"
#include "common/sweep/run_config.h"

namespace ablate::analysis {
namespace {

using ablate::v1::Run;
using ablate::v1::RunState;

constexpr double kNever = std::numeric_limits<double>::infinity();

// A run's value on an axis: its grid value, else the setting in its config (a variant the sweep
// fixed rather than varied), else "-".
std::string AxisValue(const Run& run, const std::string& axis) {
  auto it = run.grid_values().find(axis);
  if (it != run.grid_values().end()) return it->second;
  const auto* field = sweep::FindSetting(axis);
  if (field != nullptr && run.config().GetReflection()->HasField(run.config(), field)) {
    return sweep::SettingText(run.config(), field);
  }
  return "-";
}

std::string SeedOf(const Run& run) {
  auto it = run.grid_values().find("seed");
  return it != run.grid_values().end() ? it->second : absl::StrCat(run.seed());
}

std::string ContextOf(const Run& run, const Options& o) {
  std::vector<std::string> parts;
  for (const auto& [axis, value] : run.grid_values()) {
    if (axis != o.variant_axis && axis != o.moderator_axis && axis != o.lr_axis && axis != "seed") {
      parts.push_back(absl::StrCat(axis, "=", value));
    }
  }
  std::sort(parts.begin(), parts.end());
  return absl::StrJoin(parts, ",");
}

// A skipped run (pruned above divergence) stands for a divergence: it counts as finished here,
// though util::HasOutcome says it was never measured.
bool Finished(const Run& r) {
  return util::HasOutcome(r.state()) || r.state() == ablate::v1::SKIPPED;
}

// Diverged: the state says so (skipped: inferred), or the trainer finished with a non-finite
// loss.
bool DivergedRun(const Run& r) {
  return r.state() == ablate::v1::DIVERGED || r.state() == ablate::v1::SKIPPED ||
         r.result().diverged() ||
         (r.state() == ablate::v1::SUCCEEDED && !std::isfinite(r.result().final_val_loss()));
}

std::optional<double> MeanInitialLoss(const std::vector<const Run*>& runs) {
  std::vector<double> xs;
  for (const Run* r : runs) {
    const double l0 = r->result().initial_loss();
    if (std::isfinite(l0) && l0 > 0) xs.push_back(l0);
  }
  return Mean(xs);
}

// Numeric order when every value is a number ("2" < "10"), else text order.
void SortValues(std::vector<std::string>* values) {
  auto numeric = [](const std::string& s, double* d) { return absl::SimpleAtod(s, d); };
  bool all_numeric = true;
  double d = 0;
  for (const auto& v : *values) all_numeric &= numeric(v, &d);
  std::sort(values->begin(), values->end(), [&](const std::string& a, const std::string& b) {
    if (!all_numeric) return a < b;
    double x = 0, y = 0;
    numeric(a, &x);
    numeric(b, &y);
    return x < y;
  });
}

std::string PickBaseline(const Options& o, const std::vector<std::string>& variants) {
  if (!o.baseline.empty()) return o.baseline;
  for (const char* off : {"none", "0", "false"}) {
    if (std::find(variants.begin(), variants.end(), off) != variants.end()) return off;
  }
  return variants.empty() ? "" : variants.front();
}

Point SummarisePoint(const std::vector<const Run*>& runs, double lr, const std::string& lr_text,
                     std::optional<double> fallback_l0, const std::set<std::string>& all_seeds,
                     bool has_threshold, const Options& options) {
  Point p;
  p.lr = lr;
  p.lr_text = lr_text;
  p.l0 = MeanInitialLoss(runs);
  if (!p.l0) p.l0 = fallback_l0;
  std::vector<double> train, steps;
  std::map<std::string, std::vector<double>> probes;
  std::set<std::string> seeds;
  p.refine_round = runs.empty() ? 0 : runs.front()->refine_round();
  for (const Run* r : runs) p.refine_round = std::min(p.refine_round, r->refine_round());
  for (const Run* r : runs) {
    seeds.insert(SeedOf(*r));
    p.run_ids.push_back(r->id());
    if (!Finished(*r)) {
      if (util::IsTerminal(r->state())) {
        ++p.n_failed;
        if (r->state() == ablate::v1::CANCELLED) ++p.n_cancelled;
      } else {
        ++p.n_pending;
      }
      continue;
    }
    const bool diverged = DivergedRun(*r);
    if (diverged && !p.l0) {
      // A diverged run is worth ℓ0, and no ℓ0 is known for it: it cannot be placed on the
      // curve; count it as failed rather than invent a number.
      ++p.n_failed;
      continue;
    }
    // A seed refine.seeds added at a grid LR: a later round than the point's own.
    const bool grid = r->refine_round() <= p.refine_round;
    if (!grid) ++p.n_extra_seeds;
    SeedValue v;
    v.grid = grid;
    if (r->state() == ablate::v1::SKIPPED) {
      // Never ran: no provenance, no probes, no steps; it stands for a divergence at ℓ0.
      ++p.n_inferred;
      v.diverged = true;
      v.loss = *p.l0;
      p.seed_values.push_back(v);
      if (has_threshold) steps.push_back(kNever);
      continue;
    }
    ++p.provenance[ProvenanceOf(*r)];
    if (diverged) {
      v.diverged = true;
      v.loss = *p.l0;
    } else {
      // Each seed is capped at ℓ0 before averaging: a run that ended worse than it started is
      // as bad as not training, and no worse.
      const double final_loss = r->result().final_val_loss();
      v.loss = p.l0 ? std::min(final_loss, *p.l0) : final_loss;
      v.untrained = p.l0 && final_loss >= *p.l0 - options.untrained_margin;
      train.push_back(r->result().final_train_loss());
    }
    p.seed_values.push_back(v);
    if (has_threshold) {
      // A diverged seed counts as never reaching the target, even if it had passed it before it
      // blew up: the run did not end trained.
      const int64_t s = r->result().steps_to_threshold();
      steps.push_back(!diverged && s >= 0 ? static_cast<double>(s) : kNever);
    }
    for (const auto& [name, value] : r->result().final_probes()) {
      if (std::isfinite(value)) probes[name].push_back(value);
    }
  }
  for (const auto& seed : all_seeds) p.n_absent += seeds.count(seed) == 0 ? 1 : 0;
  FoldSeeds(&p);
  p.train_loss = Mean(train);
  p.steps_to_threshold = MedianOrNever(steps);
  for (const auto& [name, xs] : probes) {
    p.probes[name] = *Mean(xs);
    if (auto sd = SampleStd(xs)) p.probe_std[name] = *sd;
  }
  return p;
}

}  // namespace

const Point* Curve::PointAt(double lr) const {
  for (const auto& p : points) {
    if (std::fabs(p.lr - lr) <= 1e-9 * p.lr) return &p;
  }
  return nullptr;
}

const Curve* Analysis::FindCurve(const std::string& context, const std::string& variant,
                                 const std::string& moderator) const {
  for (const auto& c : curves) {
    if (c.context == context && c.variant == variant && c.moderator == moderator) return &c;
  }
  return nullptr;
}

PooledNoise PoolSeedNoise(const std::vector<const Curve*>& curves) {
  double sum_sq = 0;
  PooledNoise out;
  for (const Curve* c : curves) {
    if (c == nullptr || !c->seed_sigma || c->seed_dof <= 0) continue;
    sum_sq += c->seed_dof * *c->seed_sigma * *c->seed_sigma;
    out.dof += c->seed_dof;
  }
  if (out.dof > 0) out.sigma = std::sqrt(sum_sq / out.dof);
  return out;
}

PooledNoise PoolSeedNoise(const std::vector<Curve>& curves) {
  std::vector<const Curve*> all;
  all.reserve(curves.size());
  for (const Curve& c : curves) all.push_back(&c);
  return PoolSeedNoise(all);
}

absl::StatusOr<Analysis> Analyze(const std::vector<Run>& runs, const Options& options) {
  if (options.variant_axis == options.moderator_axis) {
    return absl::InvalidArgumentError(
        absl::StrCat("the variant and the moderator are both '", options.variant_axis, "'"));
  }
  if (!(options.lr_min > 0) || !(options.lr_max >= options.lr_min)) {
    return absl::InvalidArgumentError(absl::StrCat("LR range [", options.lr_min, ", ",
                                                   options.lr_max, "] is not a positive range"));
  }
  if (!(options.tau > 0 && options.tau < 1) || !(options.delta_floor >= 0)) {
    return absl::InvalidArgumentError("tau must lie in (0, 1) and the delta floor be >= 0");
  }
  Analysis a;
  a.options = options;
  if (runs.empty()) return absl::InvalidArgumentError("no runs to analyse");

  // (context, variant, moderator) -> lr -> runs.
  using CurveKey = std::tuple<std::string, std::string, std::string>;
  std::map<CurveKey, std::map<double, std::pair<std::string, std::vector<const Run*>>>> groups;
  std::set<std::string> contexts, variants, moderators, seeds;
  bool has_threshold = false;
  int unplaced = 0;
  for (const auto& r : runs) {
    double lr = 0;
    const std::string lr_text = AxisValue(r, options.lr_axis);
    if (!absl::SimpleAtod(lr_text, &lr) || !(lr > 0)) {
      ++unplaced;
      continue;
    }
    CurveKey key{ContextOf(r, options), AxisValue(r, options.variant_axis),
                 AxisValue(r, options.moderator_axis)};
    contexts.insert(std::get<0>(key));
    variants.insert(std::get<1>(key));
    moderators.insert(std::get<2>(key));
    // The grid's seeds: a cell missing one of them is partial. Seeds that refinement added
    // (refine.seeds, at comparisons within noise) go to some cells only and are missed by none.
    if (r.refine_round() == 0) seeds.insert(SeedOf(r));
    auto& slot = groups[key][lr];
    slot.first = lr_text;
    slot.second.push_back(&r);
    has_threshold |= r.result().steps_to_threshold() > 0;
  }
  if (groups.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no run has a positive value for the LR axis '", options.lr_axis, "'"));
  }

  a.contexts.assign(contexts.begin(), contexts.end());
  a.moderators.assign(moderators.begin(), moderators.end());
  SortValues(&a.moderators);
  std::vector<std::string> sorted_variants(variants.begin(), variants.end());
  SortValues(&sorted_variants);
  a.baseline = PickBaseline(options, sorted_variants);
  a.variants.push_back(a.baseline);
  for (const auto& v : sorted_variants) {
    if (v != a.baseline) a.variants.push_back(v);
  }
  const std::optional<double> vocab_l0 =
      options.vocab > 0 ? std::optional<double>(std::log(static_cast<double>(options.vocab)))
                        : std::nullopt;

  for (const auto& context : a.contexts) {
    for (const auto& variant : a.variants) {
      for (const auto& moderator : a.moderators) {
        auto it = groups.find({context, variant, moderator});
        if (it == groups.end()) continue;
        Curve c;
        c.context = context;
        c.variant = variant;
        c.moderator = moderator;
        std::vector<const Run*> all;
        for (const auto& [lr, slot] : it->second) {
          all.insert(all.end(), slot.second.begin(), slot.second.end());
        }
        c.l0 = MeanInitialLoss(all);
        if (!c.l0) c.l0 = vocab_l0;
        for (const auto& [lr, slot] : it->second) {
          c.points.push_back(
              SummarisePoint(slot.second, lr, slot.first, c.l0, seeds, has_threshold, options));
        }
        ComputeCurveMetrics(options, &c);
        PointIntervals(options, &c);
        a.curves.push_back(std::move(c));
      }
    }
  }

  for (const auto& context : a.contexts) {
    for (const auto& variant : a.variants) {
      if (variant == a.baseline) continue;
      for (const auto& moderator : a.moderators) {
        const Curve* base = a.FindCurve(context, a.baseline, moderator);
        const Curve* treated = a.FindCurve(context, variant, moderator);
        if (base != nullptr && treated != nullptr) {
          a.necessity.push_back(ComputeNecessity(options, *base, *treated));
        }
      }
    }
  }
  CountNecessitySeeds(&a);

  a.runs = static_cast<int>(runs.size());
  for (const auto& c : a.curves) {
    for (const auto& p : c.points) {
      a.finished += p.n;
      a.diverged += p.n_diverged;
      a.pending += p.n_pending;
      a.failed += p.n_failed;
      a.cancelled += p.n_cancelled;
      a.absent += p.n_absent;
      a.inferred += p.n_inferred;
      if (p.refine_round > 0) a.refined += static_cast<int>(p.run_ids.size());
      a.max_seeds = std::max(a.max_seeds, p.n);
    }
  }
  a.failed += unplaced;
  a.has_threshold = has_threshold;
  a.partial = a.pending + a.failed + a.absent > 0;
  if (a.partial) {
    a.notes.push_back(absl::StrCat("partial: ", a.finished, " of ", a.runs + a.absent,
                                   " runs finished (", a.pending, " pending, ",
                                   a.failed - a.cancelled, " failed, ", a.cancelled, " cancelled, ",
                                   a.absent, " missing); figures use the finished runs only"));
  }
  if (a.inferred > 0) {
    a.notes.push_back(absl::StrCat(
        a.inferred,
        " runs were skipped above divergence (prune) and counted as diverged at l0: inferred, "
        "not measured (hollow markers in the figures)"));
  }
  if (unplaced > 0) {
    a.notes.push_back(absl::StrCat(unplaced, " runs have no usable '", options.lr_axis,
                                   "' value and were left out"));
  }
  if (a.max_seeds < 2) {
    a.notes.push_back(
        "no spread available: fewer than 2 finished seeds per cell, so differences are judged "
        "against the delta floor alone");
  }
  if (a.variants.size() < 2) {
    a.notes.push_back(absl::StrCat("only one value of '", options.variant_axis,
                                   "' in the runs: nothing to compare, no eta-dagger"));
  }
  // Cells refine.seeds gave extra seeds: they enter every figure but max stable LR.
  for (const auto& c : a.curves) {
    for (const auto& p : c.points) {
      if (p.n_extra_seeds == 0) continue;
      std::vector<std::string> key;
      if (!c.context.empty()) key.push_back(c.context);
      key.push_back(absl::StrCat(options.variant_axis, "=", c.variant));
      key.push_back(absl::StrCat(options.moderator_axis, "=", c.moderator));
      key.push_back(absl::StrCat(options.lr_axis, "=", p.lr_text));
      a.adaptive_seed_cells.push_back(absl::StrCat(absl::StrJoin(key, ","), " +", p.n_extra_seeds));
    }
  }
  if (!a.adaptive_seed_cells.empty()) {
    a.notes.push_back(absl::StrCat(
        "adaptive seeds (refine.seeds) where a deciding comparison was within noise: ",
        absl::StrJoin(a.adaptive_seed_cells, "; "),
        "; they enter every figure except max stable LR, which counts the grid's seeds only"));
  }
  const Draws draws = Bootstrap(&a);
  a.verdicts = ComputeVerdicts(a, draws);
  CountVerdictSeeds(&a);
  FlagMixedRuns(&a);
  return a;
}

}  // namespace ablate::analysis
