// Refinement (common/analysis/refine.h): the runs PlanRefinement adds between the LRs that
// bracket a boundary (max stable, optimum, eta-dagger), within the budget and until_ratio; and
// pruning above divergence.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "common/analysis/analysis.h"
#include "common/analysis/refine.h"
#include "tests/unit/analysis_run_set.h"

namespace ablate::analysis {
namespace {

using ::testing::HasSubstr;

ablate::v1::RefineStatus Rule(std::vector<std::string> boundaries, double until = 1.3,
                              int budget = 96) {
  ablate::v1::RefineStatus rule;
  rule.set_axis("lr");
  for (auto& b : boundaries) rule.add_boundaries(b);
  rule.set_until_ratio(until);
  rule.set_max_new_runs(budget);
  return rule;
}

// none at 2 layers: stable at 0.001 and 0.01, seed 0 diverged at 0.1: max stable bracket
// (0.01, 0.1), ratio 10.
RunSet StableBracketSet() {
  RunSet s;
  for (int seed : {0, 1}) {
    s.Add("none", "2", "0.001", seed, 3.0);
    s.Add("none", "2", "0.01", seed, 2.9);
    s.Add("none", "2", "0.1", seed, seed == 0 ? -1 : 3.5);
  }
  return s;
}

TEST(Refine, AddsTheGeometricMidpointForEverySeed) {
  RunSet s = StableBracketSet();
  auto plan = PlanRefinement(s.runs, Rule({"max_stable"}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const RefineRun& r = plan->runs[i];
    EXPECT_EQ(r.axis_value, "0.0316228");  // sqrt(0.01 x 0.1), %.6g, round-trips
    EXPECT_EQ(r.grid_values.at("lr"), "0.0316228");
    EXPECT_EQ(r.cell, "lr=0.0316228,n_layer=2,qk_norm=none");
    EXPECT_EQ(r.seed, i);
    EXPECT_EQ(r.round, 1);
    const ablate::v1::Run& t = s.runs[r.template_run_id - 1];
    EXPECT_EQ(t.seed(), i);
    EXPECT_EQ(t.grid_values().at("lr"), "0.01");  // the seed's run at the lower end
    EXPECT_THAT(r.boundary, HasSubstr("max_stable qk_norm=none,n_layer=2: (0.01, 0.1)"));
  }
  ASSERT_EQ(plan->brackets.size(), 1u);
  EXPECT_DOUBLE_EQ(plan->brackets[0].ratio(), 10);
  EXPECT_EQ(plan->used, 0);
  // The same runs give the same plan: replicas agree on what to add.
  auto again = PlanRefinement(s.runs, Rule({"max_stable"}));
  ASSERT_EQ(again->runs.size(), 2u);
  EXPECT_EQ(again->runs[1].template_run_id, plan->runs[1].template_run_id);
}

// OptimumBracket of s's none/2 curve is (lo, hi), and ℓ* was (not) a fitted vertex.
void ExpectOptimumBracket(const RunSet& s, bool fitted, double lo, double hi) {
  const auto a = s.Analyse();
  const Curve& c = *CurveOf(a, "none", "2");
  EXPECT_EQ(c.opt_fitted, fitted);
  auto bracket = OptimumBracket(a.options, c);
  ASSERT_TRUE(bracket.has_value());
  EXPECT_DOUBLE_EQ(bracket->first, lo);
  EXPECT_DOUBLE_EQ(bracket->second, hi);
}

TEST(Refine, OptimumBisectsTowardsTheFittedMinimum) {
  // ℓ = 3 + 2 (log10 η + 1.6)^2 at 1e-3 .. 1, 2 LRs per decade: the best LR is 0.0316 (x = -1.5,
  // ℓ 3.02; the fitted vertex is 3.0, 0.02 lower: not yet within delta_floor), its neighbours
  // 0.01 (3.32) and 0.1 (3.72); the vertex at x = -1.6 lies below 0.0316, so the bracket is
  // (0.01, 0.0316) and its midpoint 0.0177828.
  auto loss = [](double x) { return 3 + 2 * std::pow(x + 1.6, 2); };
  RunSet s;
  for (const char* lr : {"0.001", "0.00316228", "0.01", "0.0316228", "0.1", "0.316228", "1"}) {
    for (int seed : {0, 1}) s.Add("none", "2", lr, seed, loss(std::log10(std::stod(lr))));
  }
  ExpectOptimumBracket(s, /*fitted=*/true, 0.01, 0.0316228);
  auto plan = PlanRefinement(s.runs, Rule({"optimum"}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 2u);
  EXPECT_EQ(plan->runs[0].axis_value, "0.0177828");
  EXPECT_THAT(plan->runs[0].boundary, HasSubstr("optimum qk_norm=none,n_layer=2"));
  // Round 2: 0.0177828 (x = -1.75, 3.045) is in; 0.0316 (3.02) is still the best, the vertex
  // still below it: bracket (0.0177828, 0.0316228), ratio 1.78 > 1.3, midpoint 0.0237137.
  auto add = [&](const char* lr, int round) {
    for (int seed : {0, 1}) {
      s.Add("none", "2", lr, seed, loss(std::log10(std::stod(lr)))).set_refine_round(round);
    }
  };
  add("0.0177828", 1);
  auto second = PlanRefinement(s.runs, Rule({"optimum"}));
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->runs.size(), 2u);
  EXPECT_EQ(second->runs[0].axis_value, "0.0237137");
  EXPECT_EQ(second->runs[0].round, 2);
  // Then the best LR, 0.0237137 (x = -1.625, 3.00125), is within delta_floor (0.02) of the
  // vertex: the grid resolves ℓ*, and nothing more is added, though the bracket is 1.33 wide.
  add("0.0237137", 2);
  auto after = PlanRefinement(s.runs, Rule({"optimum"}));
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->runs.empty());
  EXPECT_NEAR(*CurveOf(s.Analyse(), "none", "2")->opt_loss, 3.0, 1e-4);
}

TEST(Refine, OptimumNextToADivergedLrBisectsTowardsIt) {
  // The best LR's upper neighbour diverged (no fit): the minimum may sit just below the edge.
  RunSet s;
  for (int seed : {0, 1}) {
    s.Add("none", "2", "0.001", seed, 4.0);
    s.Add("none", "2", "0.01", seed, 3.0);
    s.Add("none", "2", "0.1", seed, -1);
  }
  ExpectOptimumBracket(s, /*fitted=*/false, 0.01, 0.1);
  // A best LR at the grid's edge has nothing to bracket it.
  RunSet edge;
  for (const char* lr : {"0.001", "0.01"}) edge.Add("none", "2", lr, 0, lr[3] == '1' ? 3.0 : 4.0);
  const auto e = edge.Analyse();
  EXPECT_FALSE(OptimumBracket(e.options, *CurveOf(e, "none", "2")).has_value());
}

TEST(Refine, NothingUntilBothBracketingLrsHaveEverySeedFinished) {
  for (const char* lr : {"0.01", "0.1"}) {
    RunSet s = StableBracketSet();
    for (auto& r : s.runs) {
      if (r.seed() == 1 && r.grid_values().at("lr") == lr) r.set_state(ablate::v1::RUNNING);
    }
    // With seed 1 at 0.1 running, the bracket is still (0.01, 0.1) from seed 0's divergence.
    auto plan = PlanRefinement(s.runs, Rule({"max_stable"}));
    ASSERT_TRUE(plan.ok());
    EXPECT_TRUE(plan->runs.empty()) << lr;
  }
}

TEST(Refine, AddedRunsAreNeverPlannedTwiceAndTheNextRoundFollows) {
  RunSet s = StableBracketSet();
  auto plan = PlanRefinement(s.runs, Rule({"max_stable"}));
  ASSERT_EQ(plan->runs.size(), 2u);
  for (const auto& add : plan->runs) {
    ablate::v1::Run& r =
        s.Add("none", "2", add.axis_value, static_cast<int>(add.seed), 0, ablate::v1::QUEUED);
    r.clear_result();
    r.set_refine_round(add.round);
  }
  // Queued midpoints: the curve is not settled, nothing more (a second replica adds nothing).
  EXPECT_TRUE(PlanRefinement(s.runs, Rule({"max_stable"}))->runs.empty());
  // Both seeds diverge at the midpoint: the bracket is (0.01, 0.0316228), round 2 bisects it.
  for (auto& r : s.runs) {
    if (r.state() == ablate::v1::QUEUED) {
      r.set_state(ablate::v1::DIVERGED);
      r.mutable_result()->set_initial_loss(kL0);
      r.mutable_result()->set_diverged(true);
    }
  }
  auto next = PlanRefinement(s.runs, Rule({"max_stable"}));
  ASSERT_EQ(next->runs.size(), 2u);
  EXPECT_EQ(next->runs[0].axis_value, "0.0177828");
  EXPECT_EQ(next->runs[0].round, 2);
  EXPECT_EQ(next->used, 2);
}

TEST(Refine, StopsWhenTheBracketIsWithinUntilRatio) {
  RunSet s;
  for (int seed : {0, 1}) {
    s.Add("none", "2", "0.01", seed, 3.0);
    s.Add("none", "2", "0.012", seed, -1);
  }
  // 0.012 / 0.01 = 1.2 <= 1.3: done.
  auto plan = PlanRefinement(s.runs, Rule({"max_stable"}, 1.3));
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->runs.empty());
  EXPECT_FALSE(plan->budget_exhausted);
  // 1.2 > 1.1: bisect at sqrt(0.01 x 0.012) = 0.0109545.
  plan = PlanRefinement(s.runs, Rule({"max_stable"}, 1.1));
  ASSERT_EQ(plan->runs.size(), 2u);
  EXPECT_EQ(plan->runs[0].axis_value, "0.0109545");
}

TEST(Refine, ABracketThatDoesNotFitTheBudgetIsLeftWhole) {
  RunSet s = StableBracketSet();
  s.Add("none", "2", "0.0001", 0, 3.2).set_refine_round(1);  // one refined run already
  auto plan = PlanRefinement(s.runs, Rule({"max_stable"}, 1.3, /*budget=*/2));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->used, 1);
  EXPECT_TRUE(plan->runs.empty());  // 2 seeds needed, 1 left: no half-refined point
  EXPECT_TRUE(plan->budget_exhausted);
  plan = PlanRefinement(s.runs, Rule({"max_stable"}, 1.3, /*budget=*/3));
  EXPECT_EQ(plan->runs.size(), 2u);
  EXPECT_FALSE(plan->budget_exhausted);
}

TEST(Refine, BoundariesTheBudgetLeftUnresolvedAreMarked) {
  RunSet s = StableBracketSet();
  s.Add("none", "2", "0.0001", 0, 3.2).set_refine_round(1);  // one refined run already
  const auto rule = Rule({"max_stable"}, 1.3, /*budget=*/2);
  auto plan = PlanRefinement(s.runs, rule);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->brackets.size(), 1u);
  EXPECT_TRUE(plan->brackets[0].unresolved_by_budget);
  EXPECT_EQ(plan->brackets[0].variant, "none");
  EXPECT_EQ(plan->brackets[0].moderator, "2");
  Analysis a = s.Analyse();
  ASSERT_TRUE(MarkUnresolvedByBudget(s.runs, rule, &a).ok());
  const Curve& c = *CurveOf(a, "none", "2");
  EXPECT_TRUE(c.max_stable_unresolved_by_budget);
  EXPECT_FALSE(c.max_good_unresolved_by_budget);  // not a boundary the rule refines
  EXPECT_EQ(a.unresolved_by_budget, 1);
  EXPECT_THAT(a.notes, testing::Contains(HasSubstr("1 boundary left unresolved")));
  // With the budget for it, the bracket is being refined, not left unresolved.
  Analysis b = s.Analyse();
  ASSERT_TRUE(MarkUnresolvedByBudget(s.runs, Rule({"max_stable"}, 1.3, 3), &b).ok());
  EXPECT_FALSE(CurveOf(b, "none", "2")->max_stable_unresolved_by_budget);
  EXPECT_EQ(b.unresolved_by_budget, 0);
}

TEST(Refine, EtaDaggerAddsTheMidpointForBothVariants) {
  RunSet s;
  for (int seed : {0, 1}) {
    for (const char* lr : {"0.001", "0.01"}) {
      s.Add("none", "2", lr, seed, 3.0);
      s.Add("layernorm", "2", lr, seed, 3.0);
    }
    s.Add("none", "2", "0.1", seed, 4.0);
    s.Add("layernorm", "2", "0.1", seed, 3.0);
  }
  auto plan = PlanRefinement(s.runs, Rule({"eta_dagger"}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 4u);
  std::set<std::string> cells;
  for (const auto& r : plan->runs) cells.insert(r.cell + " seed " + std::to_string(r.seed));
  EXPECT_THAT(cells, ::testing::ElementsAre("lr=0.0316228,n_layer=2,qk_norm=layernorm seed 0",
                                            "lr=0.0316228,n_layer=2,qk_norm=layernorm seed 1",
                                            "lr=0.0316228,n_layer=2,qk_norm=none seed 0",
                                            "lr=0.0316228,n_layer=2,qk_norm=none seed 1"));
  // A pending run of either curve holds η† back.
  s.runs[0].set_state(ablate::v1::QUEUED);
  EXPECT_TRUE(PlanRefinement(s.runs, Rule({"eta_dagger"}))->runs.empty());
}

TEST(Refine, RefusesABadRule) {
  RunSet s = StableBracketSet();
  EXPECT_THAT(PlanRefinement(s.runs, Rule({"max_stable"}, 1.0)).status().message(),
              HasSubstr("until_ratio must be > 1"));
  EXPECT_THAT(PlanRefinement(s.runs, Rule({"max_stabel"})).status().message(),
              HasSubstr("unknown boundary 'max_stabel'"));
}

TEST(Prune, SkipsQueuedRunsAboveTheLrWhereEverySeedDiverged) {
  RunSet s;
  for (int seed : {0, 1}) {
    s.Add("none", "2", "0.01", seed, 3.0);
    s.Add("none", "2", "0.1", seed, -1);
    s.Add("none", "2", "0.3", seed, 0, ablate::v1::QUEUED).clear_result();
    s.Add("layernorm", "2", "0.01", seed, 3.0);
    s.Add("layernorm", "2", "0.1", seed, seed == 0 ? -1 : 3.0);  // one seed only: no wall
    s.Add("layernorm", "2", "0.3", seed, 0, ablate::v1::QUEUED).clear_result();
  }
  s.Add("none", "2", "1", 0, 0, ablate::v1::LEASED).clear_result();  // already leased: left
  s.Add("none", "2", "1", 1, 0, ablate::v1::QUEUED).clear_result();
  auto pruned = PlanPruning(s.runs);
  ASSERT_TRUE(pruned.ok()) << pruned.status();
  std::vector<int64_t> ids;
  for (const auto& p : *pruned) {
    ids.push_back(p.run_id);
    EXPECT_EQ(p.reason, "every seed (2) of qk_norm=none,n_layer=2 diverged at lr=0.1");
  }
  EXPECT_THAT(ids, ::testing::UnorderedElementsAre(3, 9, 14));
  // Until the second seed has diverged, nothing is skipped.
  s.runs[7].set_state(ablate::v1::RUNNING);
  EXPECT_EQ(PlanPruning(s.runs)->size(), 0u);
}

}  // namespace
}  // namespace ablate::analysis
