// Extra seeds where the verdict is uncertain (refine.seeds, common/analysis/refine.h
// PlanRefinement): a comparison within noise at an LR that decides η† or H1 gets one more seed
// per round in both variants' cells, up to seeds.max and within the shared budget, once the runs
// have settled. And the seeds count the report gives η† and each verdict (Necessity::seeds,
// Verdict::seeds). docs/sweep-file.md#extra-seeds-where-the-verdict-is-uncertain.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/analysis/deciding.h"
#include "common/analysis/refine.h"
#include "common/sweep/sweep.h"

namespace ablate::analysis {
namespace {

using ablate::v1::Run;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two or more variants of qk_norm at n_layer=2; ids count from 1 in the order added. Losses are
// given per (variant, lr) as a mean; seed k of the grid's three seeds lands at mean + (k - 1) x
// 0.01, so every cell's sample std is 0.01 and δ = max(0.02, 2 x 0.01) = 0.02.
struct Sweep {
  std::vector<Run> runs;

  Run& Add(const std::string& variant, const std::string& lr, int seed, double loss,
           ablate::v1::RunState state = ablate::v1::SUCCEEDED, int round = 0) {
    Run r;
    r.set_id(static_cast<int64_t>(runs.size()) + 1);
    r.mutable_grid_values()->insert(
        {{"qk_norm", variant}, {"n_layer", "2"}, {"lr", lr}, {"seed", std::to_string(seed)}});
    r.set_cell(sweep::CellKey(r.grid_values()));
    r.set_seed(seed);
    r.set_state(state);
    r.set_refine_round(round);
    if (state == ablate::v1::SUCCEEDED) {
      r.mutable_result()->set_initial_loss(8.0);
      r.mutable_result()->set_steps_to_threshold(-1);
      r.mutable_result()->set_final_val_loss(loss);
    }
    runs.push_back(r);
    return runs.back();
  }

  // The grid's seeds 0, 1, 2 of one variant: `means` per LR 0.001, 0.01, 0.1.
  void Curve(const std::string& variant, std::vector<double> means) {
    const std::vector<std::string> lrs = {"0.001", "0.01", "0.1"};
    for (int seed = 0; seed < 3; ++seed) {
      for (size_t i = 0; i < lrs.size(); ++i)
        Add(variant, lrs[i], seed, means[i] + 0.01 * (seed - 1));
    }
  }

  // An extra seed (refinement round `round`) in both cells at one LR.
  void Extra(const std::string& lr, int seed, double none, double qk, double offset,
             ablate::v1::RunState state = ablate::v1::SUCCEEDED, int round = 1) {
    Add("none", lr, seed, none + offset, state, round);
    Add("qk", lr, seed, qk + offset, state, round);
  }
};

// none vs qk: at 0.001 none is clearly better (-0.2), at 0.1 clearly worse (+0.5); at 0.01, where
// η† is crossed (bracket (0.001, 0.01)), none is worse by `gap`.
Sweep Crossing(double gap) {
  Sweep s;
  s.Curve("none", {2.8, 3.0 + gap, 3.5});
  s.Curve("qk", {3.0, 3.0, 3.0});
  return s;
}

// Seed refinement only: max_stable has no bracket here (nothing diverged).
ablate::v1::RefineStatus Rule(int seeds_max, int budget = 96) {
  ablate::v1::RefineStatus rule;
  rule.set_axis("lr");
  rule.add_boundaries("max_stable");
  rule.set_until_ratio(1.3);
  rule.set_max_new_runs(budget);
  rule.set_seeds_max(seeds_max);
  return rule;
}

std::vector<std::string> Planned(const RefinePlan& plan) {
  std::vector<std::string> out;
  for (const auto& r : plan.runs) out.push_back(r.cell + "/" + std::to_string(r.seed));
  return out;
}

TEST(RefineSeeds, AddsTheNextSeedToBothCellsWhereADecidingGapIsWithinNoise) {
  // 0.03 > δ 0.02, so η† is crossed at 0.01; but σ = sqrt(2 x 0.01² / 3) = 0.0082 and
  // |0.03 - 0.02| <= 2σ: the crossing could move with more seeds.
  Sweep s = Crossing(0.03);
  auto plan = PlanRefinement(s.runs, Rule(5));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(Planned(*plan),
              ElementsAre("lr=0.01,n_layer=2,qk_norm=none/3", "lr=0.01,n_layer=2,qk_norm=qk/3"));
  for (const auto& r : plan->runs) {
    EXPECT_EQ(r.grid_values.at("seed"), "3");
    EXPECT_EQ(r.grid_values.at("lr"), "0.01");
    EXPECT_EQ(r.axis_value, "0.01");
    EXPECT_EQ(r.round, 1);
    EXPECT_THAT(r.boundary, HasSubstr("extra seed: eta_dagger n_layer=2,qk_norm=qk at lr=0.01"));
    const ablate::v1::Run* t = nullptr;
    for (const auto& run : s.runs) t = run.id() == r.template_run_id ? &run : t;
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->cell(), r.cell);  // the same cell, another seed
    EXPECT_EQ(t->seed(), 0);
  }
  // Without seeds.max nothing is added: every cell keeps the grid's seeds.
  auto off = PlanRefinement(s.runs, Rule(0));
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_TRUE(off->runs.empty());
}

TEST(RefineSeeds, AddsNoneWhereEveryDecidingComparisonIsClear) {
  // 0.1 at the crossing: |0.1 - 0.02| is far beyond 2σ; H1 rests on -0.2 and +0.5, both clear.
  Sweep s = Crossing(0.1);
  auto plan = PlanRefinement(s.runs, Rule(5));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->runs.empty()) << ::testing::PrintToString(Planned(*plan));
  // At 0.001, H1's smallest gap: a tie (Δ = 0) lies 0.02 from both thresholds ±δ, beyond
  // 2σ = 2 x sqrt(0.01^2 / 3 x 2) = 0.016: decided, no seeds. At Δ = -0.01 it lies 0.01 from -δ,
  // within 2σ: H1's class there could flip, so both cells get seed 3.
  auto at_001 = [](double qk) {
    Sweep s = Crossing(0.1);
    for (auto& r : s.runs) {
      if (r.grid_values().at("lr") == "0.001" && r.grid_values().at("qk_norm") == "qk") {
        r.mutable_result()->set_final_val_loss(r.result().final_val_loss() - 3.0 + qk);
      }
    }
    auto plan = PlanRefinement(s.runs, Rule(5));
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? Planned(*plan) : std::vector<std::string>{};
  };
  EXPECT_THAT(at_001(2.8), ElementsAre());
  EXPECT_THAT(at_001(2.81),
              ElementsAre("lr=0.001,n_layer=2,qk_norm=none/3", "lr=0.001,n_layer=2,qk_norm=qk/3"));
}

TEST(RefineSeeds, StopsAtSeedsMaxAndOnceResolved) {
  // Seeds 3 and 4 added, as spread as the grid's: five seeds, still within noise.
  Sweep s = Crossing(0.03);
  s.Extra("0.01", 3, 3.03, 3.0, -0.01);
  s.Extra("0.01", 4, 3.03, 3.0, +0.01);
  auto at_max = PlanRefinement(s.runs, Rule(5));
  ASSERT_TRUE(at_max.ok()) << at_max.status();
  EXPECT_TRUE(at_max->runs.empty()) << ::testing::PrintToString(Planned(*at_max));
  auto more = PlanRefinement(s.runs, Rule(6));
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_THAT(Planned(*more),
              ElementsAre("lr=0.01,n_layer=2,qk_norm=none/5", "lr=0.01,n_layer=2,qk_norm=qk/5"));
  EXPECT_EQ(more->runs[0].round, 2);  // after the round-1 seeds there

  // Seeds that agree resolve it: σ shrinks below (0.03 - 0.02) / 2 before seeds.max.
  Sweep resolved = Crossing(0.03);
  for (int seed = 3; seed < 7; ++seed) resolved.Extra("0.01", seed, 3.03, 3.0, 0);
  auto done = PlanRefinement(resolved.runs, Rule(20));
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->runs.empty()) << ::testing::PrintToString(Planned(*done));
}

TEST(RefineSeeds, SharesTheBudgetWithTheBoundariesAndNeverExceedsIt) {
  Sweep s = Crossing(0.03);
  auto one = PlanRefinement(s.runs, Rule(5, 1));  // both cells or neither
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(one->runs.empty());
  EXPECT_EQ(one->seeds_unresolved_by_budget, 1);
  auto report = Analyze(s.runs);  // the report says so
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_TRUE(MarkUnresolvedByBudget(s.runs, Rule(5, 1), &*report).ok());
  EXPECT_THAT(report->notes, ::testing::Contains(HasSubstr(
                                 "1 comparisons within noise at a deciding LR got no extra seed")));
  auto two = PlanRefinement(s.runs, Rule(5, 2));
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->runs.size(), 2u);
  EXPECT_EQ(two->seeds_unresolved_by_budget, 0);

  // Runs refinement added before count: two extra seeds already, budget 3, one run left.
  Sweep used = Crossing(0.03);
  used.Extra("0.01", 3, 3.03, 3.0, -0.01);
  auto left = PlanRefinement(used.runs, Rule(5, 3));
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(left->used, 2);
  EXPECT_TRUE(left->runs.empty());

  // η†'s bracket (0.001, 0.01) is bisected first: 3 seeds x 2 variants at 0.00316228; what is
  // left of the same budget pays for the seeds.
  ablate::v1::RefineStatus rule = Rule(5, 7);
  rule.add_boundaries("eta_dagger");
  auto shared = PlanRefinement(s.runs, rule);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(shared->runs.size(), 6u);
  EXPECT_EQ(shared->seeds_unresolved_by_budget, 1);
  rule.set_max_new_runs(8);
  auto both = PlanRefinement(s.runs, rule);
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->runs.size(), 8u);
  EXPECT_EQ(both->runs[6].axis_value, "0.01");
  EXPECT_EQ(both->runs[6].seed, 3);
}

TEST(RefineSeeds, WaitsUntilEveryRunOfBothCurvesHasSettled) {
  Sweep s = Crossing(0.03);
  s.Extra("0.01", 3, 3.03, 3.0, -0.01);
  s.runs.back().set_state(ablate::v1::RUNNING);  // qk's seed 3 still training
  s.runs.back().clear_result();
  auto waiting = PlanRefinement(s.runs, Rule(6));
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_TRUE(waiting->runs.empty()) << ::testing::PrintToString(Planned(*waiting));
  s.runs.back().set_state(ablate::v1::SUCCEEDED);
  s.runs.back().mutable_result()->set_initial_loss(8.0);
  s.runs.back().mutable_result()->set_steps_to_threshold(-1);
  s.runs.back().mutable_result()->set_final_val_loss(2.99);
  auto settled = PlanRefinement(s.runs, Rule(6));
  ASSERT_TRUE(settled.ok()) << settled.status();
  EXPECT_THAT(Planned(*settled),
              ElementsAre("lr=0.01,n_layer=2,qk_norm=none/4", "lr=0.01,n_layer=2,qk_norm=qk/4"));
  // A queued run elsewhere on a curve (an LR the decision depends on) also holds it back.
  Sweep pending = Crossing(0.03);
  pending.Add("qk", "0.1", 3, 0, ablate::v1::QUEUED, 1);
  auto held = PlanRefinement(pending.runs, Rule(6));
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_TRUE(held->runs.empty());
}

TEST(RefineSeeds, APairKeepsTheSameSeedsWhenTheBaselineGotOneForAnotherVariant) {
  Sweep s = Crossing(0.03);
  s.Curve("rms", {3.0, 3.0, 3.0});  // the same comparison against none: also within noise
  auto plan = PlanRefinement(s.runs, Rule(5));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(Planned(*plan),
              ElementsAre("lr=0.01,n_layer=2,qk_norm=none/3", "lr=0.01,n_layer=2,qk_norm=qk/3",
                          "lr=0.01,n_layer=2,qk_norm=rms/3"));
}

TEST(RefineSeeds, PlanningIsDeterministic) {
  Sweep s = Crossing(0.03);
  s.Curve("rms", {3.0, 3.0, 3.0});
  ablate::v1::RefineStatus rule = Rule(5, 40);
  rule.add_boundaries("eta_dagger");
  auto first = PlanRefinement(s.runs, rule);
  std::vector<ablate::v1::Run> reversed(s.runs.rbegin(), s.runs.rend());
  auto again = PlanRefinement(reversed, rule);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(first->runs.size(), again->runs.size());
  EXPECT_GT(first->runs.size(), 3u);
  for (size_t i = 0; i < first->runs.size(); ++i) {
    const RefineRun& x = first->runs[i];
    const RefineRun& y = again->runs[i];
    EXPECT_EQ(x.cell, y.cell);
    EXPECT_EQ(x.seed, y.seed);
    EXPECT_EQ(x.template_run_id, y.template_run_id);
    EXPECT_EQ(x.round, y.round);
    EXPECT_EQ(x.boundary, y.boundary);
    using Values = std::map<std::string, std::string>;
    EXPECT_EQ(Values(x.grid_values.begin(), x.grid_values.end()),
              Values(y.grid_values.begin(), y.grid_values.end()));
  }
}

// Extra seeds are not the grid's: the cells without them are not partial, and a midpoint the
// boundaries add gets the grid's seeds only.
TEST(RefineSeeds, ExtraSeedsAreNotMissedElsewhereNorCopiedToMidpoints) {
  Sweep s = Crossing(0.03);
  s.Extra("0.01", 3, 3.03, 3.0, 0);
  auto a = Analyze(s.runs);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->absent, 0);
  EXPECT_FALSE(a->partial);
  ablate::v1::RefineStatus rule = Rule(0);
  rule.add_boundaries("eta_dagger");
  auto plan = PlanRefinement(s.runs, rule);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 6u);
  for (const auto& r : plan->runs) EXPECT_LT(r.seed, 3) << r.cell;
}

TEST(DecidingSeeds, EtaDaggerAndVerdictsCountTheFewestSeedsAtTheirDecidingLrs) {
  Sweep s = Crossing(0.03);
  s.Extra("0.01", 3, 3.03, 3.0, 0);
  auto a = Analyze(s.runs);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->necessity.size(), 1u);
  const Necessity& n = a->necessity[0];
  ASSERT_TRUE(n.interpolated) << n.detail;
  EXPECT_THAT(n.deciding_lrs, ElementsAre(0.001, 0.01));
  EXPECT_EQ(n.seeds, 3);  // 4 seeds at 0.01, 3 at 0.001
  std::map<std::string, int> seeds;
  for (const auto& v : a->verdicts) seeds[v.hypothesis] = v.seeds;
  EXPECT_EQ(seeds["H1"], 3);  // the smallest gap (0.001) and the largest (0.1)
  EXPECT_EQ(seeds["H3"], 3);

  // Seeds at 0.001 too: η† now rests on 4 seeds everywhere.
  s.Extra("0.001", 3, 2.8, 3.0, 0);
  auto b = Analyze(s.runs);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->necessity[0].seeds, 4);

  // none's loss `none_loss` at every LR against qk's 3.0: η†'s row.
  auto row = [](double none_loss) {
    Sweep flat;
    flat.Curve("none", {none_loss, none_loss, none_loss});
    flat.Curve("qk", {3.0, 3.0, 3.0});
    auto analysed = Analyze(flat.runs);
    EXPECT_TRUE(analysed.ok()) << analysed.status();
    return analysed.ok() ? analysed->necessity.at(0) : Necessity{};
  };
  // Never necessary (qk no better anywhere): the top compared LR and the failing one below it.
  const Necessity never = row(3.0);
  EXPECT_FALSE(never.eta_dagger.has_value());
  EXPECT_THAT(never.deciding_lrs, ElementsAre(0.01, 0.1));
  EXPECT_EQ(never.seeds, 3);
  // Needed from the smallest compared LR on: every compared LR whose gap held.
  const Necessity always = row(3.5);
  ASSERT_TRUE(always.eta_dagger.has_value());
  EXPECT_DOUBLE_EQ(*always.eta_dagger, 0.001);
  EXPECT_THAT(always.deciding_lrs, ElementsAre(0.001, 0.01, 0.1));
}

TEST(DecidingSeeds, WithinNoiseIsTheGapNearItsThresholdOrWithinDelta) {
  EXPECT_TRUE(WithinNoise({0.03, 0.02, 0.006}, false));        // |0.01| <= 0.012
  EXPECT_FALSE(WithinNoise({0.03, 0.02, 0.004}, false));       // |0.01| > 0.008
  EXPECT_FALSE(WithinNoise({0.0, 0.02, 0.0001}, false));       // a tie, δ far beyond 2σ
  EXPECT_TRUE(WithinNoise({0.01, 0.02, 0.006}, false));        // |Δ - δ| = 0.01 <= 0.012
  EXPECT_FALSE(WithinNoise({-0.03, 0.02, 0.004}, false));      // clearly worse: η† is one-sided
  EXPECT_TRUE(WithinNoise({-0.03, 0.02, 0.006}, true));        // H1: near -δ too
  EXPECT_TRUE(WithinNoise({0.5, 0.02, std::nullopt}, false));  // no spread yet
}

}  // namespace
}  // namespace ablate::analysis
