// Pruning above divergence (common/analysis/refine.h, PlanPruning and PlanRequeue): a wall needs
// consistent evidence, and runs skipped on evidence that no longer holds come back.
// docs/sweep-file.md#refinement-and-pruning.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "common/analysis/refine.h"

namespace ablate::analysis {
namespace {

using ablate::v1::Run;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

// One curve (qk_norm=none, n_layer=2) by default; ids count from 1 in the order added.
struct Curve1 {
  std::vector<Run> runs;

  int64_t Add(const std::string& lr, int seed, ablate::v1::RunState state,
              const std::string& variant = "none") {
    Run r;
    r.set_id(static_cast<int64_t>(runs.size()) + 1);
    (*r.mutable_grid_values())["qk_norm"] = variant;
    (*r.mutable_grid_values())["n_layer"] = "2";
    (*r.mutable_grid_values())["lr"] = lr;
    (*r.mutable_grid_values())["seed"] = std::to_string(seed);
    r.set_cell("lr=" + lr + ",n_layer=2,qk_norm=" + variant);
    r.set_seed(seed);
    r.set_state(state);
    if (state == ablate::v1::SUCCEEDED || state == ablate::v1::DIVERGED) {
      r.mutable_result()->set_initial_loss(8.0);
      r.mutable_result()->set_steps_to_threshold(-1);
      r.mutable_result()->set_diverged(state == ablate::v1::DIVERGED);
      r.mutable_result()->set_final_val_loss(
          state == ablate::v1::DIVERGED ? std::numeric_limits<double>::quiet_NaN() : 3.0);
    }
    runs.push_back(r);
    return r.id();
  }

  std::vector<int64_t> Pruned() const {
    auto plan = PlanPruning(runs);
    EXPECT_TRUE(plan.ok()) << plan.status();
    std::vector<int64_t> ids;
    if (plan.ok()) {
      for (const auto& p : *plan) ids.push_back(p.run_id);
    }
    return ids;
  }

  std::vector<int64_t> Requeued() const {
    auto plan = PlanRequeue(runs);
    EXPECT_TRUE(plan.ok()) << plan.status();
    std::vector<int64_t> ids;
    if (plan.ok()) {
      for (const auto& p : *plan) ids.push_back(p.run_id);
    }
    return ids;
  }
};

using ablate::v1::DIVERGED;
using ablate::v1::FAILED;
using ablate::v1::LEASED;
using ablate::v1::QUEUED;
using ablate::v1::SKIPPED;
using ablate::v1::SUCCEEDED;

TEST(PruneRule, OneSeedOneDivergenceIsAWallOnlyWithNoSuccessAbove) {
  Curve1 c;
  c.Add("0.001", 0, SUCCEEDED);
  c.Add("0.01", 0, DIVERGED);
  const int64_t queued = c.Add("0.1", 0, QUEUED);
  const int64_t above = c.Add("1", 0, LEASED);
  // Nothing above has succeeded (1 is still leased): the one seed's divergence is the wall.
  EXPECT_THAT(c.Pruned(), ElementsAre(queued));
  // A success above it says the divergence at 0.01 was no wall: nothing is pruned.
  c.runs[above - 1].set_state(SUCCEEDED);
  c.runs[above - 1].mutable_result()->set_initial_loss(8.0);
  c.runs[above - 1].mutable_result()->set_final_val_loss(3.0);
  EXPECT_THAT(c.Pruned(), IsEmpty());
}

TEST(PruneRule, EverySeedDivergedIsNoWallWhenARunAboveItSucceeded) {
  Curve1 c;
  for (int seed : {0, 1}) {
    c.Add("0.001", seed, SUCCEEDED);
    c.Add("0.01", seed, DIVERGED);
  }
  const int64_t q0 = c.Add("0.1", 0, QUEUED);
  const int64_t q1 = c.Add("0.1", 1, QUEUED);
  c.Add("1", 0, SUCCEEDED);  // one seed trains at 1: the curve is not walled at 0.01
  c.Add("1", 1, DIVERGED);
  EXPECT_THAT(c.Pruned(), IsEmpty());
  // A wall higher up with nothing succeeding above it still prunes what is above it.
  const int64_t q3 = c.Add("3", 0, QUEUED);
  c.Add("2", 0, DIVERGED);
  c.Add("2", 1, DIVERGED);
  EXPECT_THAT(c.Pruned(), ElementsAre(q3));
  (void)q0;
  (void)q1;
}

TEST(PruneRule, SkippedRunsAreNoEvidenceOfAWall) {
  Curve1 c;
  c.Add("0.001", 0, SUCCEEDED);
  c.Add("0.1", 0, SKIPPED);  // inferred, never measured
  const int64_t queued = c.Add("1", 0, QUEUED);
  EXPECT_THAT(c.Pruned(), IsEmpty());
  (void)queued;
}

TEST(PruneRule, AWallNeedsEverySeedFinishedAndDiverged) {
  Curve1 c;
  c.Add("0.01", 0, DIVERGED);
  const int64_t pending = c.Add("0.01", 1, LEASED);
  const int64_t queued = c.Add("0.1", 0, QUEUED);
  EXPECT_THAT(c.Pruned(), IsEmpty());
  c.runs[pending - 1].set_state(FAILED);  // a failed seed is no divergence either
  EXPECT_THAT(c.Pruned(), IsEmpty());
  c.runs[pending - 1].set_state(DIVERGED);
  c.runs[pending - 1].mutable_result()->set_diverged(true);
  c.runs[pending - 1].mutable_result()->set_initial_loss(8.0);
  auto plan = PlanPruning(c.runs);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 1u);
  EXPECT_EQ((*plan)[0].run_id, queued);
  EXPECT_EQ((*plan)[0].reason, "every seed (2) of qk_norm=none,n_layer=2 diverged at lr=0.01");
}

TEST(RequeueRule, ASuccessAboveTheWallBringsItsSkippedRunsBack) {
  Curve1 c;
  c.Add("0.001", 0, SUCCEEDED);
  c.Add("0.01", 0, DIVERGED);
  const int64_t s1 = c.Add("0.1", 0, SKIPPED);
  const int64_t s2 = c.Add("0.3", 0, SKIPPED);
  const int64_t above = c.Add("1", 0, LEASED);
  // While the wall stands, its skipped runs stay skipped.
  EXPECT_THAT(c.Requeued(), IsEmpty());
  c.runs[above - 1].set_state(SUCCEEDED);
  c.runs[above - 1].mutable_result()->set_initial_loss(8.0);
  c.runs[above - 1].mutable_result()->set_final_val_loss(3.0);
  EXPECT_THAT(c.Requeued(), UnorderedElementsAre(s1, s2));
  auto plan = PlanRequeue(c.runs);
  ASSERT_TRUE(plan.ok());
  ASSERT_FALSE(plan->empty());
  EXPECT_THAT((*plan)[0].reason, HasSubstr("qk_norm=none,n_layer=2"));
  EXPECT_THAT((*plan)[0].reason, HasSubstr("succeeded at lr=1"));
}

TEST(RequeueRule, ARetriedWallBringsItsSkippedRunsBackOnlyWhenItSucceeds) {
  Curve1 c;
  c.Add("0.001", 0, SUCCEEDED);
  const int64_t wall = c.Add("0.01", 0, DIVERGED);
  const int64_t skipped = c.Add("0.1", 0, SKIPPED);
  EXPECT_THAT(c.Requeued(), IsEmpty());
  // `ablate retry` of the wall: until it has a result, the skipped run waits.
  c.runs[wall - 1].set_state(QUEUED);
  c.runs[wall - 1].clear_result();
  EXPECT_THAT(c.Requeued(), IsEmpty());
  // It diverges again: still a wall.
  c.runs[wall - 1].set_state(DIVERGED);
  c.runs[wall - 1].mutable_result()->set_diverged(true);
  c.runs[wall - 1].mutable_result()->set_initial_loss(8.0);
  EXPECT_THAT(c.Requeued(), IsEmpty());
  // It succeeds: the skipped run comes back.
  c.runs[wall - 1].set_state(SUCCEEDED);
  c.runs[wall - 1].mutable_result()->set_diverged(false);
  c.runs[wall - 1].mutable_result()->set_final_val_loss(3.0);
  EXPECT_THAT(c.Requeued(), ElementsAre(skipped));
}

TEST(RequeueRule, AnotherWallBelowKeepsARunSkipped) {
  Curve1 c;
  for (int seed : {0, 1}) {
    c.Add("0.001", seed, SUCCEEDED);
    c.Add("0.01", seed, DIVERGED);  // the wall
  }
  const int64_t skipped = c.Add("0.1", 0, SKIPPED);
  c.Add("0.1", 1, SKIPPED);
  EXPECT_THAT(c.Requeued(), IsEmpty());
  // Only the other variant succeeds above: its curve is not this one.
  c.Add("1", 0, SUCCEEDED, "layernorm");
  EXPECT_THAT(c.Requeued(), IsEmpty());
  (void)skipped;
}

TEST(RequeueRule, PlanningIsStable) {
  // What PlanPruning skips, PlanRequeue never brings back on the same evidence.
  Curve1 c;
  for (int seed : {0, 1}) {
    c.Add("0.001", seed, SUCCEEDED);
    c.Add("0.01", seed, DIVERGED);
    c.Add("0.1", seed, QUEUED);
  }
  const auto pruned = c.Pruned();
  ASSERT_EQ(pruned.size(), 2u);
  for (int64_t id : pruned) c.runs[id - 1].set_state(SKIPPED);
  EXPECT_THAT(c.Requeued(), IsEmpty());
  EXPECT_THAT(c.Pruned(), IsEmpty());
}

// `analysis:` in the sweep file is what the server plans with and what the report defaults to.
TEST(PlanningOptions, MapTheSweepFilesAnalysisOntoOptions) {
  auto s = sweep::ParseSweep(
      "name: t\ndata: {train: a, val: b}\n"
      "grid: {lr: [0.001, 0.01, 0.1], pos: [learned, rope], n_embd: [64, 128]}\n"
      "analysis: {tau: 0.3, delta: 0.05, lr_range: [0.001, 0.01], variant: pos, by: n_embd}\n",
      "s.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  const Options o = PlanningOptions(*s);
  EXPECT_DOUBLE_EQ(o.tau, 0.3);
  EXPECT_DOUBLE_EQ(o.delta_floor, 0.05);
  EXPECT_DOUBLE_EQ(o.lr_min, 0.001);
  EXPECT_DOUBLE_EQ(o.lr_max, 0.01);
  EXPECT_EQ(o.variant_axis, "pos");
  EXPECT_EQ(o.moderator_axis, "n_embd");
  EXPECT_EQ(o.lr_axis, "lr");
  EXPECT_THAT(OptionDifferences(o, o), IsEmpty());
  Options asked = o;
  asked.tau = 0.2;
  asked.moderator_axis = "n_layer";
  EXPECT_THAT(OptionDifferences(asked, o),
              ElementsAre("tau 0.2 (refined for 0.3)", "by n_layer (refined for n_embd)"));
  // Nothing given: the defaults, as `ablate report` has them.
  auto plain =
      sweep::ParseSweep("name: t\ndata: {train: a, val: b}\ngrid: {lr: [0.001, 0.01]}\n", "s.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(OptionDifferences(PlanningOptions(*plain), Options{}), IsEmpty());
}

}  // namespace
}  // namespace ablate::analysis
