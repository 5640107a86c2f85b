// `ablate estimate --sigma/--pilot`'s seed plan (client/seed_plan.cc). The expected seed counts
// are worked out independently of analysis::SeedsForPower: the smallest n at which a two-sided
// two-sample t-test at alpha / comparisons, with 2(n - 1) dof, has power >= 0.8 under the normal
// shift effect / (sigma sqrt(2 / n)), from t tables (printed per n in the comments).
#include "client/seed_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sweep/sweep.h"

namespace ablate::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

sweep::SweepSpec Parse(const std::string& yaml) {
  auto spec = sweep::ParseSweep(yaml, "plan.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : sweep::SweepSpec{};
}

// 11 LRs x 3 depths x 2 seeds x 2 variants: the shape of the study this CLI exists for.
const char* kStudy = R"(name: study
data: {train: "synthetic:3000", val: "synthetic:300"}
fixed: {n_embd: 64, n_head: 2, steps: 100}
grid:
  qk_norm: [none, layernorm]
  lr: {logspace: {min: 1.0e-4, max: 1.0, num: 11}}
  n_layer: [2, 4, 8]
  seed: [0, 1]
)";

TEST(SeedPlan, TextbookCountForOneComparison) {
  // n ~ 2 (z_.975 + z_.8)^2 sigma^2 / delta^2 = 1.41 by the normal formula; with t's critical
  // value n = 2 gives power 0.22 (t_.975,2 = 4.30 against a shift of 3.33) and n = 3 gives
  // 0.87 (t_.975,4 = 2.78, shift 4.08): 3 seeds.
  SeedPlanFlags flags;
  GridCounts one;  // one LR, one depth, one seed
  SeedPlan p = PlanSeeds(0.03, flags, one);
  ASSERT_EQ(p.families.size(), 3u);
  EXPECT_EQ(p.families[0].name, "H1/eta-dagger");
  EXPECT_EQ(p.families[0].comparisons, 1);
  EXPECT_EQ(p.families[0].seeds, 3);
  // H2's three tests at alpha / 3: n = 3 gives 0.55 (t = 3.96 vs 4.08), n = 4 gives 0.90.
  EXPECT_EQ(p.families[1].comparisons, 3);
  EXPECT_EQ(p.families[1].seeds, 4);
  // A single depth has no trend to test.
  EXPECT_EQ(p.families[2].seeds, 0);
  EXPECT_EQ(p.seeds, 4);
  EXPECT_FALSE(p.at_cap);
  EXPECT_DOUBLE_EQ(p.cost_scale, 4.0);
}

TEST(SeedPlan, FamiliesFollowTheGrid) {
  const GridCounts g = CountGrid(Parse(kStudy));
  EXPECT_EQ(g.moderator_axis, "n_layer");
  EXPECT_EQ(g.lrs, 11);
  EXPECT_EQ(g.moderators, 3);
  EXPECT_EQ(g.seeds, 2);
  SeedPlan p = PlanSeeds(0.03, SeedPlanFlags{}, g);
  // H1/eta-dagger: Holm over 11 x 3 = 33 points, alpha / 33: n = 5 gives power 0.70 (t = 4.71
  // against a shift of 5.27), n = 6 gives 0.91 (t = 4.32, shift 5.77).
  EXPECT_EQ(p.families[0].comparisons, 33);
  EXPECT_EQ(p.families[0].seeds, 6);
  EXPECT_EQ(p.families[1].seeds, 4);  // H2, 3 tests
  EXPECT_EQ(p.families[2].comparisons, 3);
  EXPECT_EQ(p.families[2].seeds, 4);  // H3 over 3 depths
  EXPECT_EQ(p.seeds, 6);
  EXPECT_DOUBLE_EQ(p.cost_scale, 3.0);  // 6 seeds where the file has 2
}

TEST(SeedPlan, ModeratorFromTheFilesAnalysisAndMissingAxesCountOne) {
  const GridCounts g = CountGrid(Parse(R"(name: by-head
data: {train: "synthetic:3000", val: "synthetic:300"}
fixed: {n_embd: 64, n_layer: 2, steps: 100}
analysis: {by: n_head}
grid:
  qk_norm: [none, layernorm]
  n_head: [1, 2]
)"));
  EXPECT_EQ(g.moderator_axis, "n_head");
  EXPECT_EQ(g.moderators, 2);
  EXPECT_EQ(g.lrs, 1);
  EXPECT_EQ(g.seeds, 1);
}

TEST(SeedPlan, MoreNoiseOrASmallerEffectNeedsMoreSeeds) {
  SeedPlanFlags flags;
  GridCounts one;
  const int base = PlanSeeds(0.03, flags, one).families[0].seeds;
  EXPECT_GT(PlanSeeds(0.06, flags, one).families[0].seeds, base);
  flags.effect = 0.05;
  EXPECT_GT(PlanSeeds(0.03, flags, one).families[0].seeds, base);
  flags.effect = 1e-6;  // hopeless: the cap, said as such
  SeedPlan capped = PlanSeeds(0.03, flags, one);
  EXPECT_TRUE(capped.at_cap);
  EXPECT_EQ(capped.seeds, kSeedCap);
  EXPECT_THAT(SeedPlanText(capped, nullptr), HasSubstr("1000 or more seeds per cell"));
}

TEST(SeedPlan, PoolsCurvesByTheirDegreesOfFreedom) {
  std::vector<analysis::Curve> curves(3);
  curves[0].seed_sigma = 0.02;
  curves[0].seed_dof = 4;
  curves[1].seed_sigma = 0.04;
  curves[1].seed_dof = 12;
  // curves[2]: no cell with two seeds that trained, so nothing to pool.
  const analysis::PooledNoise pooled = analysis::PoolSeedNoise(curves);
  EXPECT_EQ(pooled.dof, 16);
  // sqrt((4 x 0.0004 + 12 x 0.0016) / 16) = sqrt(0.0013).
  EXPECT_NEAR(pooled.sigma, 0.0360555, 1e-6);
  EXPECT_EQ(PilotLine(12, pooled), "pilot sweep 12: sigma 0.036 nats from 16 dof");
  EXPECT_EQ(analysis::PoolSeedNoise({curves[2]}).dof, 0);
}

TEST(SeedPlan, BadFlagsAreNamed) {
  auto message = [](SeedPlanFlags f) { return std::string(CheckSeedPlanFlags(f).message()); };
  EXPECT_TRUE(CheckSeedPlanFlags(SeedPlanFlags{}).ok());
  SeedPlanFlags f;
  f.effect = 0;
  EXPECT_THAT(message(f), HasSubstr("--effect 0: must be"));
  f = {};
  f.power = 1;
  EXPECT_THAT(message(f), HasSubstr("--power 1: must be in (0, 1)"));
  f = {};
  f.alpha = 0.5;
  EXPECT_THAT(message(f), HasSubstr("--alpha 0.5: must be in (0, 0.5)"));
  f = {};
  f.alpha = std::nan("");
  EXPECT_THAT(message(f), HasSubstr("--alpha"));
  f = {};
  f.sigma = -0.01;
  EXPECT_THAT(message(f), HasSubstr("--sigma -0.01: must be"));
  f = {};
  f.sigma = 0.03;
  f.pilot = "12";
  EXPECT_THAT(message(f), HasSubstr("--sigma and --pilot"));
  EXPECT_EQ(CheckSeedPlanFlags(f).code(), absl::StatusCode::kInvalidArgument);
}

v1::SweepEstimate AnEstimate() {
  v1::SweepEstimate e;
  e.set_device_seconds_base(7.1 * 3600);
  e.set_device_seconds_max(7.1 * 3600);
  e.set_usd_base(4.95);
  e.set_usd_max(4.95);
  e.set_wall_seconds_base(5400);  // 1h30m
  e.set_wall_seconds_max(5400);
  return e;
}

TEST(SeedPlan, CostScalesWithTheSeeds) {
  // 4 seeds where the file has 2: the estimate doubles.
  GridCounts g;
  g.seeds = 2;
  g.lrs = 11;
  g.moderators = 1;
  SeedPlanFlags flags;
  SeedPlan p = PlanSeeds(0.02, flags, g);
  ASSERT_EQ(p.seeds, 4) << SeedPlanText(p, nullptr);
  const v1::SweepEstimate e = AnEstimate();
  const std::string text = SeedPlanText(p, &e);
  EXPECT_THAT(text, HasSubstr("seed plan (sigma 0.02 nats, effect 0.1, power 80%, alpha 0.05): "
                              "H1/eta-dagger 4 seeds (Holm over 11 comparisons), H2 "));
  EXPECT_THAT(text, HasSubstr("H3 n/a (one n_layer value)"));
  EXPECT_THAT(text, HasSubstr("-> 4 seeds per cell (the file has 2): 14.2 GPU-h, $9.90, ~3h00m "
                              "wall on the live fleet"));
  const auto j = SeedPlanJson(p, &e);
  EXPECT_EQ(j["seeds"], 4);
  EXPECT_EQ(j["file_seeds"], 2);
  EXPECT_DOUBLE_EQ(j["cost_scale"].get<double>(), 2.0);
  EXPECT_NEAR(j["device_hours_base"].get<double>(), 14.2, 1e-9);
  EXPECT_NEAR(j["usd_base"].get<double>(), 9.9, 1e-9);
  EXPECT_NEAR(j["wall_seconds_base"].get<double>(), 10800, 1e-9);
  EXPECT_EQ(j["families"][0]["comparisons"], 11);
  EXPECT_TRUE(j["families"][2]["seeds"].is_null());
  EXPECT_FALSE(j.contains("pilot_sweep"));
  // Unknown stays unknown, never a scaled -1.
  v1::SweepEstimate unpriced = e;
  unpriced.set_usd_base(-1);
  unpriced.set_usd_max(-1);
  EXPECT_EQ(SeedPlanJson(p, &unpriced)["usd_base"], -1);
  EXPECT_THAT(SeedPlanText(p, &unpriced), Not(HasSubstr("$")));
  // Without a server: the counts alone.
  const auto offline = SeedPlanJson(p, nullptr);
  EXPECT_FALSE(offline.contains("device_hours_base"));
  EXPECT_THAT(SeedPlanText(p, nullptr), Not(HasSubstr("GPU-h")));
}

TEST(SeedPlan, RefinementsMaximumShowsAsARange) {
  GridCounts g;
  g.seeds = 2;
  SeedPlan p = PlanSeeds(0.02, SeedPlanFlags{}, g);
  v1::SweepEstimate e = AnEstimate();
  e.set_device_seconds_max(2 * 7.1 * 3600);
  EXPECT_THAT(SeedPlanText(p, &e),
              HasSubstr(absl::StrCat(p.seeds, " seeds per cell (the file has 2): ")));
  EXPECT_THAT(SeedPlanText(p, &e), HasSubstr(" GPU-h–"));
}

}  // namespace
}  // namespace ablate::cli
