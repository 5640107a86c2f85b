// The analysis's figures per curve (docs/architecture.md#the-analysis) on hand-built run sets:
// diverged and skipped runs, seed means, LR sensitivity, max stable and max good LR, eta-dagger,
// the fitted optimum, points added by refinement. Every expected number is worked out in the
// comments.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/analysis/analysis.h"
#include "common/analysis/refine.h"
#include "tests/unit/analysis_run_set.h"

namespace ablate::analysis {
namespace {

using ::testing::HasSubstr;

TEST(Analysis, DivergedRunsCountAsInitialLoss) {
  RunSet s;
  s.Add("none", "2", "0.1", 0, -1);   // diverged -> 8.0
  s.Add("none", "2", "0.1", 1, 5.0);  // -> mean (8 + 5) / 2 = 6.5
  s.Add("none", "2", "0.01", 0, 4.0);
  s.Add("none", "2", "0.01", 1, 4.0);
  const auto a = s.Analyse();
  const Point& p = At(*CurveOf(a, "none", "2"), 0.1);
  EXPECT_DOUBLE_EQ(*p.loss, 6.5);
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.n_diverged, 1);
  EXPECT_NEAR(*p.loss_std, std::sqrt(4.5), 1e-12);  // (1.5^2 * 2) / 1
  EXPECT_NEAR(*p.perplexity, std::exp(6.5), 1e-9);
  EXPECT_EQ(a.diverged, 1);
  EXPECT_FALSE(a.partial);
}

TEST(Analysis, SeedsAveragedBeforeTheMinimum) {
  RunSet s;
  s.Add("none", "2", "0.001", 0, 3.0);  // best single seed, but mean 4.0
  s.Add("none", "2", "0.001", 1, 5.0);
  s.Add("none", "2", "0.01", 0, 3.5);  // mean 3.6 -> η*
  s.Add("none", "2", "0.01", 1, 3.7);
  const auto a = s.Analyse();
  const Curve& c = *CurveOf(a, "none", "2");
  EXPECT_DOUBLE_EQ(*c.opt_lr, 0.01);
  EXPECT_DOUBLE_EQ(*c.opt_loss, 3.6);
  EXPECT_EQ(c.seeds, 2);
}

TEST(Analysis, LrSensitivityOverSubRange) {
  RunSet s;
  s.Add("none", "2", "0.0001", 0, 5.0);
  s.Add("none", "2", "0.001", 0, 4.0);
  s.Add("none", "2", "0.01", 0, 3.0);  // the best LR
  s.Add("none", "2", "0.1", 0, 6.0);
  s.Add("none", "2", "1", 0, 9.0);  // worse than ℓ0 = 8: capped at 8
  // The parabola through (-3, 4), (-2, 3), (-1, 6) in log10 LR (slopes -1 and 3, curvature 2,
  // slope at -2: 1) has its vertex 2.875 at log10 η* = -2.25. But it predicts 3 - 2 + 8 = 9 at
  // -4, the next point beyond the gentler side, where 5 was measured: the curve is no parabola
  // (a gentle side and a steep one), and the vertex may not sit below the best mean by more than
  // its own uncertainty, here none (one seed): ℓ* = 3.
  const auto a = s.Analyse();
  const Curve& c = *CurveOf(a, "none", "2");
  EXPECT_DOUBLE_EQ(*c.opt_loss, 3.0);
  EXPECT_TRUE(c.opt_clamped);
  EXPECT_NEAR(*c.opt_lr, std::pow(10.0, -2.25), 1e-12);
  EXPECT_TRUE(c.opt_fitted);
  EXPECT_DOUBLE_EQ(*c.best_lr, 0.01);
  // Default [3e-4, 0.3] holds 1e-3, 1e-2, 1e-1, at 1, 0, 3 above ℓ*; the area between them in
  // log LR, ((1 + 0) / 2 + (0 + 3) / 2), plus the ends carried flat to log10 3e-4 (1 x 0.52288)
  // and to log10 0.3 (3 x 0.47712), over the range's 3 decades; they cover 2 of the 3.
  const double area = 2 + 1 * (-3 - std::log10(3e-4)) + 3 * (std::log10(0.3) + 1);
  EXPECT_NEAR(*c.lr_sensitivity, area / 3, 1e-12);
  EXPECT_NEAR(*c.lr_sensitivity_coverage, 2.0 / 3, 1e-12);
  EXPECT_EQ(c.sensitivity_points, 3);
  // Wortsman et al.'s estimator: the plain mean over 3e-4 ... 3e-1 where the curve is measured:
  // 1e-3 (1), 3e-3 (0.5229 of the way from 1 to 0: 0.4771), 1e-2 (0), 3e-2 (1.4314), 1e-1 (3).
  EXPECT_EQ(c.paper_points, 5);
  EXPECT_NEAR(*c.lr_sensitivity_paper,
              (1 + (1 - std::log10(3.0)) + 0 + 3 * std::log10(3.0) + 3) / 5, 1e-12);
  // [1e-3, 1e-2]: one decade, (1 + 0) / 2 = 0.5.
  Options sub;
  sub.lr_min = 1e-3;
  sub.lr_max = 1e-2;
  EXPECT_NEAR(*CurveOf(s.Analyse(sub), "none", "2")->lr_sensitivity, 0.5, 1e-12);
  // [0.1, 1]: (min(6, 8) - ℓ* + min(9, 8) - ℓ*) / 2 = (3 + 5) / 2 = 4.
  Options top;
  top.lr_min = 0.1;
  top.lr_max = 1;
  EXPECT_NEAR(*CurveOf(s.Analyse(top), "none", "2")->lr_sensitivity, 4.0, 1e-12);
  // A range with no grid LR in it: no figure.
  Options empty;
  empty.lr_min = 2;
  empty.lr_max = 3;
  EXPECT_FALSE(CurveOf(s.Analyse(empty), "none", "2")->lr_sensitivity.has_value());
}

TEST(Analysis, MaxStableLrStopsAtAMiddleLrWhereOneSeedDiverged) {
  RunSet s;
  for (int seed : {0, 1}) {
    s.Add("none", "2", "0.001", seed, 4.0);
    s.Add("none", "2", "0.1", seed, 3.5);  // stable again above, but too late
  }
  s.Add("none", "2", "0.01", 0, 3.0);
  s.Add("none", "2", "0.01", 1, -1);  // one seed diverged in the middle
  const auto a = s.Analyse();
  const Curve& c = *CurveOf(a, "none", "2");
  EXPECT_DOUBLE_EQ(*c.max_stable_lr, 0.001);
  // ℓ(0.01) = (3 + 8) / 2 = 5.5, so η* = 0.1 (3.5).
  EXPECT_DOUBLE_EQ(*c.opt_lr, 0.1);
}

TEST(Analysis, MaxGoodLrKeepsEightyPercentOfTheImprovement) {
  RunSet s;
  s.Add("none", "2", "0.001", 0, 4.0);
  s.Add("none", "2", "0.01", 0, 3.0);  // best; ℓ* = 2.9993 (fitted), limit ~ 3 + 0.2 * (8 - 3)
  s.Add("none", "2", "0.1", 0, 3.9);   // <= 4: good
  s.Add("none", "2", "1", 0, 4.5);     // > 4: a bump
  s.Add("none", "2", "10", 0, 3.5);    // good again: the bump below does not end it
  s.Add("none", "2", "100", 0, 4.2);   // > 4
  const auto a = s.Analyse();
  const Curve& c = *CurveOf(a, "none", "2");
  EXPECT_DOUBLE_EQ(*c.max_good_lr, 10);
  EXPECT_DOUBLE_EQ(*c.max_good_above, 100);
  EXPECT_DOUBLE_EQ(*c.max_stable_lr, 100);  // nothing diverged: silent failure only
  Options tight;
  tight.tau = 0.11;  // limit 3.549: 3.9 fails, 3.5 passes
  EXPECT_DOUBLE_EQ(*CurveOf(s.Analyse(tight), "none", "2")->max_good_lr, 10);
  tight.tau = 0.08;  // limit 3.399: nothing above the best LR passes
  const Curve& t = *CurveOf(s.Analyse(tight), "none", "2");
  EXPECT_DOUBLE_EQ(*t.max_good_lr, 0.01);
  EXPECT_DOUBLE_EQ(*t.max_good_above, 0.1);
}

TEST(Analysis, MaxGoodLrEndsAtTheMaxStableLr) {
  RunSet s;
  s.Add("none", "2", "0.001", 0, 3.0);  // η*; limit 4
  s.Add("none", "2", "0.01", 0, 3.5);
  s.Add("none", "2", "0.1", 0, -1);  // diverged: the wall
  s.Add("none", "2", "1", 0, 3.5);   // trained above the wall: not a good LR to recommend
  const Curve& c = *CurveOf(s.Analyse(), "none", "2");
  EXPECT_DOUBLE_EQ(*c.max_stable_lr, 0.01);
  EXPECT_DOUBLE_EQ(*c.max_good_lr, 0.01);
  EXPECT_DOUBLE_EQ(*c.max_good_above, 0.1);
}

TEST(Analysis, MaxGoodLrDoesNotDependOnWhereRefinementPutItsPoints) {
  // A plateau at the limit with seed noise on it, as on the refine benchmark's none/2 curve.
  // ℓ* = 2.976 (the vertex through 1e-4, 1e-3, 1e-2), limit 2.976 + 0.2 (8 - 2.976) = 3.98.
  // The grid sees 3.9 at 0.01 and 3.95 at 0.1, good, and 5.0 at 1; refinement adds 0.0316
  // (4.05: a noisy point just above the limit) and 0.316 (4.3). A walk that stopped at the first
  // point above the limit said 0.01 on the refined curve, two grid steps below the grid's 0.1;
  // the largest good LR is 0.1 on both, its bracket narrowed from (0.1, 1) to (0.1, 0.316).
  RunSet s;
  s.Add("none", "2", "0.0001", 0, 3.4);
  s.Add("none", "2", "0.001", 0, 3.0);
  s.Add("none", "2", "0.01", 0, 3.9);
  s.Add("none", "2", "0.1", 0, 3.95);
  s.Add("none", "2", "1", 0, 5.0);
  const Curve base = *CurveOf(s.Analyse(), "none", "2");
  s.Add("none", "2", "0.0316228", 0, 4.05).set_refine_round(1);
  s.Add("none", "2", "0.316228", 0, 4.3).set_refine_round(1);
  const Curve refined = *CurveOf(s.Analyse(), "none", "2");
  EXPECT_NEAR(*base.opt_loss, 2.976, 1e-3);
  EXPECT_NEAR(*refined.opt_loss, *base.opt_loss, 1e-12);
  EXPECT_DOUBLE_EQ(*base.max_good_lr, 0.1);
  EXPECT_DOUBLE_EQ(*base.max_good_above, 1);
  EXPECT_DOUBLE_EQ(*refined.max_good_lr, 0.1);
  EXPECT_DOUBLE_EQ(*refined.max_good_above, 0.316228);
}

TEST(Analysis, EtaDaggerInterpolatesLogLinearly) {
  RunSet s;
  // One seed: δ = 0.02. d = none - layernorm: 0, 0.10, 1.0; g = d - δ: -0.02, 0.08, 0.98.
  // Crossing between 1e-3 and 1e-2 at t = 0.02 / 0.10 = 0.2: η† = 10^(-3 + 0.2).
  const double none[] = {3.0, 3.1, 4.0};
  const char* lrs[] = {"0.001", "0.01", "0.1"};
  for (int i = 0; i < 3; ++i) {
    s.Add("none", "2", lrs[i], 0, none[i]);
    s.Add("layernorm", "2", lrs[i], 0, 3.0);
  }
  const auto a = s.Analyse();
  ASSERT_EQ(a.necessity.size(), 1u);
  const Necessity& n = a.necessity[0];
  EXPECT_EQ(n.baseline, "none");
  EXPECT_EQ(n.variant, "layernorm");
  ASSERT_TRUE(n.eta_dagger.has_value()) << n.detail;
  EXPECT_NEAR(*n.eta_dagger, std::pow(10.0, -2.8), 1e-12);
  EXPECT_TRUE(n.interpolated);
  EXPECT_DOUBLE_EQ(*n.cap, 0.1);
  EXPECT_EQ(a.variants, (std::vector<std::string>{"none", "layernorm"}));
  EXPECT_THAT(a.notes, testing::Contains(HasSubstr("no spread available")));
}

TEST(Analysis, EtaDaggerUsesTwiceTheSeedStd) {
  RunSet s;
  // layernorm 3.0 everywhere (std 0). none at 1e-2: 3.0, 3.2 -> mean 3.1, std sqrt(0.02);
  // pooled over both variants' seeds sqrt((0.02 + 0) / (1 + 1)) = 0.1, δ = 0.2 > d = 0.1, so
  // the crossing moves to (1e-2, 1e-1).
  const char* lrs[] = {"0.001", "0.01", "0.1"};
  const double none0[] = {3.0, 3.0, 4.0}, none1[] = {3.0, 3.2, 4.0};
  for (int i = 0; i < 3; ++i) {
    for (int seed : {0, 1}) s.Add("layernorm", "2", lrs[i], seed, 3.0);
    s.Add("none", "2", lrs[i], 0, none0[i]);
    s.Add("none", "2", lrs[i], 1, none1[i]);
  }
  const double g0 = 0.1 - 2 * 0.1, g1 = 1.0 - 0.02;
  const double t = g0 / (g0 - g1);
  const auto a = s.Analyse();
  ASSERT_TRUE(a.necessity[0].eta_dagger.has_value()) << a.necessity[0].detail;
  EXPECT_NEAR(*a.necessity[0].eta_dagger, std::pow(10.0, -2 + t), 1e-12);
  // A larger floor than every gap below 1e-1 changes nothing above it; a floor above 1.0 makes
  // η† disappear.
  Options wide;
  wide.delta_floor = 1.5;
  EXPECT_FALSE(s.Analyse(wide).necessity[0].eta_dagger.has_value());
}

TEST(Analysis, EtaDaggerEdgeCases) {
  const char* lrs[] = {"0.001", "0.01", "0.1"};
  {  // none is worse everywhere: η† = the smallest LR, not extrapolated below the grid.
    RunSet s;
    for (const char* lr : lrs) {
      s.Add("none", "2", lr, 0, 4.0);
      s.Add("layernorm", "2", lr, 0, 3.0);
    }
    const auto a = s.Analyse();
    const auto& n = a.necessity[0];
    EXPECT_DOUBLE_EQ(*n.eta_dagger, 0.001);
    EXPECT_FALSE(n.interpolated);
  }
  {  // Never necessary: "none".
    RunSet s;
    for (const char* lr : lrs) {
      s.Add("none", "2", lr, 0, 3.0);
      s.Add("layernorm", "2", lr, 0, 3.01);
    }
    const auto a = s.Analyse();
    const auto& n = a.necessity[0];
    EXPECT_FALSE(n.eta_dagger.has_value());
    EXPECT_THAT(n.detail, HasSubstr("<= delta"));
  }
  {  // Only compared up to the treated variant's max good LR: the gap at 0.1 is past it.
    RunSet s;
    s.Add("none", "2", "0.001", 0, 3.0);
    s.Add("none", "2", "0.01", 0, 3.0);
    s.Add("none", "2", "0.1", 0, -1);
    s.Add("layernorm", "2", "0.001", 0, 3.0);
    s.Add("layernorm", "2", "0.01", 0, 3.0);
    s.Add("layernorm", "2", "0.1", 0, -1);
    const auto a = s.Analyse();
    EXPECT_DOUBLE_EQ(*a.necessity[0].cap, 0.01);
    EXPECT_FALSE(a.necessity[0].eta_dagger.has_value());
  }
  {  // All diverged: no stable LR, no good LR, no η†.
    RunSet s;
    for (const char* lr : lrs) {
      s.Add("none", "2", lr, 0, -1);
      s.Add("layernorm", "2", lr, 0, -1);
    }
    const auto a = s.Analyse();
    const Curve& c = *CurveOf(a, "layernorm", "2");
    EXPECT_FALSE(c.max_stable_lr.has_value());
    EXPECT_FALSE(c.max_good_lr.has_value());
    EXPECT_DOUBLE_EQ(*c.opt_loss, kL0);
    EXPECT_DOUBLE_EQ(*c.opt_lr, 0.001);  // ties go to the smaller LR
    EXPECT_DOUBLE_EQ(*c.lr_sensitivity, 0.0);
    EXPECT_FALSE(a.necessity[0].eta_dagger.has_value());
    EXPECT_THAT(a.necessity[0].detail, HasSubstr("no good LR"));
  }
  {  // A single LR: figures exist, H1 cannot be judged.
    RunSet s;
    s.Add("none", "2", "0.01", 0, 4.0);
    s.Add("layernorm", "2", "0.01", 0, 3.0);
    const auto a = s.Analyse();
    const Curve& c = *CurveOf(a, "none", "2");
    EXPECT_DOUBLE_EQ(*c.opt_lr, 0.01);
    EXPECT_DOUBLE_EQ(*c.max_stable_lr, 0.01);
    EXPECT_DOUBLE_EQ(*c.max_good_lr, 0.01);
    EXPECT_DOUBLE_EQ(*c.lr_sensitivity, 0.0);
    EXPECT_DOUBLE_EQ(*a.necessity[0].eta_dagger, 0.01);
    EXPECT_EQ(a.verdicts[0].hypothesis, "H1");
    EXPECT_EQ(a.verdicts[0].outcome, "inconclusive");
  }
}

TEST(Analysis, OneSeedHasNoSpread) {
  RunSet s;
  s.Add("none", "2", "0.01", 0, 4.0);
  const auto a = s.Analyse();
  EXPECT_FALSE(At(*CurveOf(a, "none", "2"), 0.01).loss_std.has_value());
  EXPECT_EQ(a.max_seeds, 1);
  EXPECT_THAT(a.notes, testing::Contains(HasSubstr("no spread available")));
  EXPECT_THAT(a.notes, testing::Contains(HasSubstr("only one value of 'qk_norm'")));
  EXPECT_TRUE(a.necessity.empty());
}

TEST(Analysis, PartialSweepCountsMissingAndFailedRunsPerCell) {
  RunSet s;
  s.Add("none", "2", "0.01", 0, 4.0);
  s.Add("none", "2", "0.01", 1, 0, ablate::v1::QUEUED);
  s.Add("none", "2", "0.01", 2, 0, ablate::v1::FAILED);
  s.Add("none", "2", "0.1", 0, 4.0);  // seeds 1 and 2 absent here
  const auto a = s.Analyse();
  const Curve& c = *CurveOf(a, "none", "2");
  const Point& p = At(c, 0.01);
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.n_pending, 1);
  EXPECT_EQ(p.n_failed, 1);
  EXPECT_EQ(p.n_absent, 0);
  EXPECT_EQ(At(c, 0.1).n_absent, 2);
  EXPECT_DOUBLE_EQ(*p.loss, 4.0);  // only the finished seed
  EXPECT_FALSE(c.complete);
  EXPECT_TRUE(a.partial);
  EXPECT_EQ(a.finished, 2);
  EXPECT_EQ(a.pending, 1);
  EXPECT_EQ(a.failed, 1);
  EXPECT_EQ(a.absent, 2);
  EXPECT_THAT(a.notes, testing::Contains(HasSubstr("partial: 2 of 6 runs finished")));
}

TEST(Analysis, StepsToThresholdIsTheMedianWithNeverAsInfinite) {
  RunSet s;
  s.Add("none", "2", "0.01", 0, 3.0).mutable_result()->set_steps_to_threshold(100);
  s.Add("none", "2", "0.01", 1, 3.0).mutable_result()->set_steps_to_threshold(200);
  s.Add("none", "2", "0.01", 2, 3.0);  // never (-1): median of 100, 200, inf = 200
  s.Add("none", "2", "0.1", 0, 3.0).mutable_result()->set_steps_to_threshold(50);
  s.Add("none", "2", "0.1", 1, 3.0);  // (50 + inf) / 2: never
  s.Add("none", "2", "0.1", 2, -1);   // diverged: never
  const auto a = s.Analyse();
  const Curve& c = *CurveOf(a, "none", "2");
  EXPECT_DOUBLE_EQ(*At(c, 0.01).steps_to_threshold, 200);
  EXPECT_FALSE(At(c, 0.1).steps_to_threshold.has_value());
}

TEST(Analysis, ProbesAveragedOverFiniteValues) {
  RunSet s;
  (*s.Add("none", "2", "0.01", 0, 3.0).mutable_result()->mutable_final_probes())["max_attn_logit"] =
      10;
  (*s.Add("none", "2", "0.01", 1, 3.0).mutable_result()->mutable_final_probes())["max_attn_logit"] =
      30;
  (*s.Add("none", "2", "0.01", 2, -1).mutable_result()->mutable_final_probes())["max_attn_logit"] =
      std::numeric_limits<double>::infinity();
  const auto a = s.Analyse();
  const Point& p = At(*CurveOf(a, "none", "2"), 0.01);
  EXPECT_DOUBLE_EQ(p.probes.at("max_attn_logit"), 20);
  EXPECT_NEAR(p.probe_std.at("max_attn_logit"), std::sqrt(200.0), 1e-12);
}

TEST(Analysis, InitialLossFallsBackToLnVocab) {
  RunSet s;
  s.Add("none", "2", "0.01", 0, 3.0);
  s.Add("none", "2", "0.1", 0, -1);
  for (auto& r : s.runs) r.mutable_result()->set_initial_loss(0);  // never reported
  Options o;
  o.vocab = 4096;
  const auto a = s.Analyse(o);
  const Curve& c = *CurveOf(a, "none", "2");
  EXPECT_NEAR(*At(c, 0.1).loss, std::log(4096.0), 1e-12);
  // Without a vocab the diverged run cannot be valued: counted as failed, not invented.
  const auto a2 = s.Analyse();
  const Curve& c2 = *CurveOf(a2, "none", "2");
  EXPECT_FALSE(At(c2, 0.1).loss.has_value());
  EXPECT_EQ(At(c2, 0.1).n_failed, 1);
}

TEST(Analysis, EtaDaggerSpreadIgnoresDivergedSeeds) {
  // At 1e-1 one seed of none diverged (counted as l0 = 8) and one reached 4.0: mean 6.0. Over
  // all seeds its std would be |8 - 4|/sqrt(2) = 2.83, δ = 5.66 > the gap 6.0 - 3.01 = 2.99, and
  // η† would be "none" though none is clearly worse. δ takes σ from the seeds that did not
  // diverge, pooled over both variants: none has one (no spread), layernorm 3.0, 3.02 (std
  // 0.01414, 1 degree of freedom), so σ = 0.01414 and δ = max(0.02, 0.02828) = 0.02828.
  RunSet s;
  for (const char* lr : {"0.001", "0.01"}) {
    for (int seed : {0, 1}) {
      s.Add("none", "2", lr, seed, 3.0);
      s.Add("layernorm", "2", lr, seed, 3.0);
    }
  }
  s.Add("none", "2", "0.1", 0, -1);
  s.Add("none", "2", "0.1", 1, 4.0);
  s.Add("layernorm", "2", "0.1", 0, 3.0);
  s.Add("layernorm", "2", "0.1", 1, 3.02);
  const auto a = s.Analyse();
  const auto& n = a.necessity[0];
  ASSERT_TRUE(n.eta_dagger.has_value()) << n.detail;
  const double sigma = std::sqrt(0.0002);  // sample std of 3.0, 3.02
  const double g0 = 0 - 0.02, g1 = (6.0 - 3.01) - std::max(0.02, 2 * sigma);
  EXPECT_NEAR(*n.eta_dagger, std::pow(10.0, -2 + g0 / (g0 - g1)), 1e-12);
  EXPECT_TRUE(n.interpolated);
  EXPECT_DOUBLE_EQ(*n.bracket_lo, 0.01);
  EXPECT_DOUBLE_EQ(*n.bracket_hi, 0.1);
  const Point& p = At(*CurveOf(a, "none", "2"), 0.1);
  EXPECT_EQ(p.n_stable, 1);
  EXPECT_FALSE(p.stable_loss_std.has_value());
  EXPECT_NEAR(*p.loss_std, 4 / std::sqrt(2.0), 1e-12);  // the cell's own spread is unchanged
}

TEST(Analysis, SkippedRunsCountAsDivergedAndAreInferred) {
  RunSet s;
  for (int seed : {0, 1}) {
    s.Add("none", "2", "0.001", seed, 3.0);
    s.Add("none", "2", "0.01", seed, -1);
    s.Add("none", "2", "0.1", seed, 0, ablate::v1::SKIPPED).clear_result();
  }
  const auto a = s.Analyse();
  const Curve& c = *CurveOf(a, "none", "2");
  const Point& p = At(c, 0.1);
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.n_diverged, 2);
  EXPECT_EQ(p.n_inferred, 2);
  EXPECT_EQ(p.n_pending, 0);
  EXPECT_DOUBLE_EQ(*p.loss, kL0);  // the curve's l0: a skipped run has no result of its own
  EXPECT_TRUE(p.provenance.empty());
  EXPECT_EQ(a.inferred, 2);
  EXPECT_FALSE(a.partial);
  EXPECT_DOUBLE_EQ(*c.max_stable_lr, 0.001);
  EXPECT_DOUBLE_EQ(*c.max_stable_above, 0.01);
  bool noted = false;
  for (const auto& note : a.notes) noted |= note.find("2 runs were skipped") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Analysis, FiguresRestingOnSkippedRunsCountTheirInferredLrs) {
  // none diverged at 0.01 (every seed) and was skipped at 0.1, where layernorm still trains
  // well: the gap there, and none's LR sensitivity, rest on an inferred l0.
  RunSet s;
  for (int seed : {0, 1}) {
    s.Add("none", "2", "0.001", seed, 3.0);
    s.Add("none", "2", "0.01", seed, -1);
    s.Add("none", "2", "0.1", seed, 0, ablate::v1::SKIPPED).clear_result();
    for (const char* lr : {"0.001", "0.01", "0.1"}) s.Add("layernorm", "2", lr, seed, 3.0);
  }
  const auto a = s.Analyse();
  EXPECT_EQ(CurveOf(a, "none", "2")->sensitivity_inferred, 1);
  EXPECT_EQ(CurveOf(a, "layernorm", "2")->sensitivity_inferred, 0);
  ASSERT_EQ(a.necessity.size(), 1u);
  EXPECT_EQ(a.necessity[0].inferred, 1);
  EXPECT_DOUBLE_EQ(*a.necessity[0].bracket_hi, 0.01);
  // H1 compares at all three LRs; the one at 0.1 rests on none's skipped runs.
  const Verdict* h1 = nullptr;
  for (const auto& v : a.verdicts) h1 = v.hypothesis == "H1" ? &v : h1;
  ASSERT_NE(h1, nullptr);
  EXPECT_EQ(h1->inferred, 1);
  EXPECT_THAT(h1->line, HasSubstr("[1 compared LRs rest on skipped runs: inferred]"));
}

TEST(Analysis, RefinedLrsNarrowBoundaries) {
  RunSet s;
  for (const char* lr : {"0.001", "0.01", "0.1"}) s.Add("none", "2", lr, 0, 3.0);
  s.Add("none", "2", "1", 0, -1);
  const auto base = s.Analyse();
  // A refined LR between 0.1 and 1 that diverged: max stable LR stays 0.1 with a narrower
  // bracket; LR sensitivity is unchanged, the LR lying outside its range [3e-4, 0.3].
  s.Add("none", "2", "0.316228", 0, -1).set_refine_round(1);
  const auto refined = s.Analyse();
  const Curve& b = *CurveOf(base, "none", "2");
  const Curve& r = *CurveOf(refined, "none", "2");
  EXPECT_DOUBLE_EQ(*b.max_stable_above, 1.0);
  EXPECT_DOUBLE_EQ(*r.max_stable_lr, 0.1);
  EXPECT_DOUBLE_EQ(*r.max_stable_above, 0.316228);
  EXPECT_DOUBLE_EQ(*r.lr_sensitivity, *b.lr_sensitivity);
  EXPECT_EQ(r.sensitivity_points, b.sensitivity_points);
  EXPECT_EQ(At(r, 0.316228).refine_round, 1);
  EXPECT_EQ(refined.refined, 1);
}

// ℓ(η) = 3 + 0.5 (log10 η + 1.5)^2, a parabola in log LR with its minimum 3.0 at 10^-1.5, and
// its exact LR sensitivity over [10^x0, 10^x1]: the mean of 0.5 (x + 1.5)^2 over [x0, x1].
double ParabolaLoss(double lr) { return 3 + 0.5 * std::pow(std::log10(lr) + 1.5, 2); }
double ParabolaSensitivity(double x0, double x1) {
  return (std::pow(x1 + 1.5, 3) - std::pow(x0 + 1.5, 3)) / 6 / (x1 - x0);
}

TEST(Analysis, ARefinedPointOnTheCurveLeavesLrSensitivityUnchanged) {
  // Grid: 3 LRs per decade from 1e-3 to 1; [3e-4, 0.3] holds 10^-3 ... 10^-2/3. The refined
  // midpoint 10^-1.5 lies on the curve. ℓ* is the curve's vertex from the grid's points and again
  // from the midpoint's, and LR sensitivity, the area under the curve joined point to point in
  // log LR, moves by less than 0.01 and only towards the exact area. (With ℓ* the lowest point
  // measured, the midpoint lowered ℓ* by 0.014 and raised this curve's sensitivity alone by as
  // much; averaged over all LRs it weighed the curve's bottom by where refinement went.)
  RunSet s;
  for (int k = 0; k <= 9; ++k) {
    const std::string lr = absl::StrFormat("%.6g", std::pow(10.0, -3 + k / 3.0));
    s.Add("none", "2", lr, 0, ParabolaLoss(std::stod(lr)));
  }
  Options span;  // the grid's span: LR sensitivity's range fully covered
  span.lr_min = 1e-3;
  span.lr_max = 0.215443;
  const Curve b = *CurveOf(s.Analyse(span), "none", "2");
  s.Add("none", "2", "0.0316228", 0, ParabolaLoss(0.0316228)).set_refine_round(1);
  const Curve r = *CurveOf(s.Analyse(span), "none", "2");
  const double exact = ParabolaSensitivity(-3, std::log10(0.215443));
  EXPECT_NEAR(*b.lr_sensitivity, exact, 0.01);
  EXPECT_NEAR(*r.lr_sensitivity, *b.lr_sensitivity, 0.01);
  EXPECT_LT(std::fabs(*r.lr_sensitivity - exact), std::fabs(*b.lr_sensitivity - exact));
  EXPECT_EQ(r.sensitivity_points, b.sensitivity_points + 1);
  for (const Curve* c : {&b, &r}) {
    EXPECT_NEAR(*c->opt_loss, 3.0, 1e-6);
    EXPECT_NEAR(std::log10(*c->opt_lr), -1.5, 1e-5);
  }
  EXPECT_DOUBLE_EQ(*r.best_lr, 0.0316228);
}

TEST(Analysis, RefinedPointsOnACoarseGridOnlyRefineLrSensitivity) {
  // The same curve on a decade grid: 4.125, 3.125, 3.125 at 1e-3, 1e-2, 1e-1 join to an area of
  // 0.375 over the exact 0.2917; the midpoint 10^-1.5 (3.0) cuts it to 0.34375. A mean over the
  // grid's LRs said 0.458 and could not use the midpoint.
  RunSet s;
  for (const char* lr : {"0.001", "0.01", "0.1", "1"}) {
    s.Add("none", "2", lr, 0, ParabolaLoss(std::stod(lr)));
  }
  Options span;  // [1e-3, 1e-1]: covered by the grid
  span.lr_min = 1e-3;
  span.lr_max = 0.1;
  const Curve b = *CurveOf(s.Analyse(span), "none", "2");
  s.Add("none", "2", "0.0316228", 0, ParabolaLoss(0.0316228)).set_refine_round(1);
  const Curve r = *CurveOf(s.Analyse(span), "none", "2");
  EXPECT_NEAR(*b.lr_sensitivity, 0.375, 1e-9);
  EXPECT_NEAR(*r.lr_sensitivity, 0.34375, 1e-6);
  EXPECT_NEAR(ParabolaSensitivity(-3, -1), 0.2917, 1e-4);
  for (const Curve* c : {&b, &r}) EXPECT_NEAR(*c->opt_loss, 3.0, 1e-6);
}

TEST(Analysis, LossStarIsNotFittedAcrossUnevenlySpacedNeighbours) {
  // The refine benchmark's none/2 curve: 0.0003 (5.53), 0.003 (4.127), and a refined 0.00533
  // (4.718) a quarter decade away. Fitted, the near side's steepness extrapolated over the far
  // decade put ℓ* at 3.91, below every measured loss (the dense grid's minimum is 4.14); the
  // neighbours' distances differ by 4x, so ℓ* is the best measured loss. The optimum bracket
  // then bisects the wider side, so the next round's neighbours are spaced alike.
  RunSet s;
  s.Add("none", "2", "0.0003", 0, 5.53);
  s.Add("none", "2", "0.003", 0, 4.127);
  s.Add("none", "2", "0.00533", 0, 4.718).set_refine_round(1);
  s.Add("none", "2", "0.03", 0, 4.968);
  const auto a = s.Analyse();
  const Curve& c = *CurveOf(a, "none", "2");
  EXPECT_FALSE(c.opt_fitted);
  EXPECT_DOUBLE_EQ(*c.opt_loss, 4.127);
  auto bracket = OptimumBracket(a.options, c);
  ASSERT_TRUE(bracket.has_value());
  EXPECT_DOUBLE_EQ(bracket->first, 0.0003);
  EXPECT_DOUBLE_EQ(bracket->second, 0.003);
}

TEST(Analysis, LossStarDoesNotDependOnTheGridsDensity) {
  // One curve, ℓ(η) = 3 + 2 (log10 η + 1.75)^2 below a wall at 1, sampled at 2 LRs per decade
  // (the grid's bottom two LRs sit a quarter decade from the minimum: 3.125) and at 8 per decade
  // (which holds the minimum itself: 3.0). The best point's loss differs by 0.125 nats between
  // the two grids, which moved max good LR's threshold by 0.8 x as much; ℓ* is the curve's
  // minimum from both.
  auto loss = [](double x) { return 3 + 2 * std::pow(x + 1.75, 2); };
  std::optional<double> stars[2];
  std::optional<double> bests[2];
  int i = 0;
  for (int per_decade : {2, 8}) {
    RunSet s;
    for (int k = -3 * per_decade; k <= 0; ++k) {
      const double x = static_cast<double>(k) / per_decade;
      char text[32];
      std::snprintf(text, sizeof(text), "%.6g", std::pow(10.0, x));
      s.Add("none", "2", text, 0, x < 0 ? loss(x) : -1);
    }
    const auto a = s.Analyse();
    const Curve& c = *CurveOf(a, "none", "2");
    stars[i] = c.opt_loss;
    bests[i++] = c.PointAt(*c.best_lr)->loss;
  }
  EXPECT_NEAR(*bests[0] - *bests[1], 0.125, 1e-9);
  EXPECT_NEAR(*stars[0], 3.0, 1e-4);
  EXPECT_NEAR(*stars[1], 3.0, 1e-4);
}

TEST(Analysis, TheTopLrIsForgivenOnlyWithinNoise) {
  // The baseline is worse by 0.3 at 0.01 and 0.03, and better by 0.5 at the top compared LR 0.1:
  // not one noisy point but a result. η† is "never necessary" there, not an interpolation below.
  RunSet s;
  const char* lrs[] = {"0.001", "0.003", "0.01", "0.03", "0.1"};
  const double base[] = {3.0, 3.0, 3.3, 3.3, 2.5};
  for (int i = 0; i < 5; ++i) {
    AddSeeds(&s, "layernorm", "2", lrs[i], 3.0, 2, 0.005);
    AddSeeds(&s, "none", "2", lrs[i], base[i], 2, 0.005);
  }
  const auto a = s.Analyse();
  ASSERT_EQ(a.necessity.size(), 1u);
  EXPECT_FALSE(a.necessity[0].eta_dagger.has_value()) << a.necessity[0].detail;
  EXPECT_FALSE(a.necessity[0].censored);
  // Within noise (+0.01 at the top) the top is forgiven as before.
  for (auto& r : s.runs) {
    if (r.grid_values().at("qk_norm") == "none" && r.grid_values().at("lr") == "0.1") {
      r.mutable_result()->set_final_val_loss(3.01);
    }
  }
  EXPECT_TRUE(s.Analyse().necessity[0].eta_dagger.has_value());
}

TEST(Analysis, EtaDaggerIsCensoredWhereTheVariantStopsBeingGood) {
  // The baseline diverges from 0.03 to 0.3 while layernorm trains there, but badly (6.0, above
  // its good limit 3 + 0.2 x 5 = 4): compared only up to layernorm's max good LR 0.01, the
  // baseline is never worse. That is "not necessary up to 0.01", not "never necessary".
  RunSet s;
  const char* lrs[] = {"0.001", "0.003", "0.01", "0.03", "0.1", "0.3"};
  for (int i = 0; i < 6; ++i) {
    AddSeeds(&s, "layernorm", "2", lrs[i], i < 3 ? 3.0 : 6.0, 2, 0.01);
    AddSeeds(&s, "none", "2", lrs[i], i < 3 ? 3.0 : -1, 2, 0.01);
  }
  const auto a = s.Analyse();
  const Necessity& n = a.necessity[0];
  EXPECT_FALSE(n.eta_dagger.has_value());
  EXPECT_TRUE(n.censored);
  EXPECT_DOUBLE_EQ(*n.censored_at, 0.01);
  EXPECT_THAT(n.censor_reason, HasSubstr("not good above lr=0.01"));
  // Identical variants over the whole range: never necessary, uncensored.
  RunSet same;
  for (int i = 0; i < 6; ++i) {
    AddSeeds(&same, "layernorm", "2", lrs[i], 3.0 + 0.1 * i, 2, 0.01);
    AddSeeds(&same, "none", "2", lrs[i], 3.0 + 0.1 * i, 2, 0.01);
  }
  const auto b = same.Analyse();
  EXPECT_FALSE(b.necessity[0].eta_dagger.has_value());
  EXPECT_FALSE(b.necessity[0].censored);
}

TEST(Analysis, TheVertexNextToAWallIsNotBelowEveryMeanByMoreThanItsUncertainty) {
  // 10^-3 .. 10^-1.5 at 2 per decade: 3.10, 3.01, 3.00, 4.30 (the last stable LR before a wall).
  // The parabola through the best three dips 0.159 below 3.00, yet predicts 4.33 at 10^-3 where
  // 3.10 was measured: a flat bottom beside a steep side. ℓ* stays within 2 standard errors (σ
  // 0.01414 from seeds ±0.01, n 2: 0.01 each) of the best mean.
  RunSet s;
  const char* lrs[] = {"0.001", "0.00316228", "0.01", "0.0316228", "0.1"};
  const double loss[] = {3.10, 3.01, 3.00, 4.30, -1};
  for (int i = 0; i < 5; ++i) AddSeeds(&s, "none", "2", lrs[i], loss[i], 2, 0.01);
  const Curve& c = *CurveOf(s.Analyse(), "none", "2");
  EXPECT_TRUE(c.opt_fitted);
  EXPECT_TRUE(c.opt_clamped);
  EXPECT_NEAR(*c.opt_loss, 3.00 - 2 * 0.01, 1e-9);
}

TEST(Analysis, EachSeedIsCappedAtL0BeforeAveraging) {
  RunSet s;
  s.Add("none", "2", "0.01", 0, 3.0);
  s.Add("none", "2", "0.01", 1, 9.0);  // worse than ℓ0 = 8 without diverging: counts as 8
  EXPECT_DOUBLE_EQ(*At(*CurveOf(s.Analyse(), "none", "2"), 0.01).loss, 5.5);
}

TEST(Analysis, ARunThatNeverTrainedEndsTheStableRangeAboveTheBestLr) {
  RunSet s;
  AddSeeds(&s, "none", "2", "0.001", 3.2, 2, 0.01);
  AddSeeds(&s, "none", "2", "0.01", 3.0, 2, 0.01);
  s.Add("none", "2", "0.1", 0, 3.5);
  s.Add("none", "2", "0.1", 1, 7.95);  // within untrained_margin 0.1 of ℓ0 = 8: stalled
  AddSeeds(&s, "none", "2", "0.3", 3.6, 2, 0.01);
  const Curve& c = *CurveOf(s.Analyse(), "none", "2");
  EXPECT_DOUBLE_EQ(*c.max_stable_lr, 0.01);
  EXPECT_DOUBLE_EQ(*c.max_stable_above, 0.1);
  // Below the best LR a slow run is only slow.
  RunSet slow;
  slow.Add("none", "2", "0.0001", 0, 7.95);
  AddSeeds(&slow, "none", "2", "0.01", 3.0, 2, 0.01);
  EXPECT_DOUBLE_EQ(*CurveOf(slow.Analyse(), "none", "2")->max_stable_lr, 0.01);
}

TEST(Analysis, MaxGoodLrNeverExceedsMaxStableLr) {
  // A seed diverged at the smallest LR: no max stable LR, so no max good LR either (it had been
  // the best LR, 0.01, above a divergence).
  RunSet s;
  s.Add("none", "2", "0.001", 0, 3.0);
  s.Add("none", "2", "0.001", 1, -1);
  AddSeeds(&s, "none", "2", "0.01", 3.0, 2, 0.01);
  const Curve& c = *CurveOf(s.Analyse(), "none", "2");
  EXPECT_FALSE(c.max_stable_lr.has_value());
  EXPECT_FALSE(c.max_good_lr.has_value());
}

TEST(Analysis, ExtraSeedsStayOutOfMaxStableLrAndAreListed) {
  // refine.seeds added seed 2 at 0.01 (round 1 at a grid LR), and it diverged: more seeds at a
  // deciding LR make "some seed diverged" likelier exactly there, so max stable LR counts the
  // grid's seeds; the cell is listed with its extra seed.
  RunSet s;
  AddSeeds(&s, "none", "2", "0.001", 3.2, 2, 0.01);
  AddSeeds(&s, "none", "2", "0.01", 3.0, 2, 0.01);
  s.Add("none", "2", "0.01", 2, -1).set_refine_round(1);
  AddSeeds(&s, "none", "2", "0.1", -1, 2, 0);
  const auto a = s.Analyse();
  const Curve& c = *CurveOf(a, "none", "2");
  EXPECT_DOUBLE_EQ(*c.max_stable_lr, 0.01);
  EXPECT_EQ(At(c, 0.01).n_extra_seeds, 1);
  EXPECT_EQ(At(c, 0.01).n_diverged, 1);
  ASSERT_EQ(a.adaptive_seed_cells.size(), 1u);
  EXPECT_EQ(a.adaptive_seed_cells[0], "qk_norm=none,n_layer=2,lr=0.01 +1");
  EXPECT_THAT(absl::StrJoin(a.notes, "\n"), HasSubstr("adaptive seeds (refine.seeds)"));
}

TEST(Analysis, ADivergedSeedNeverReachedTheThreshold) {
  // The seed that diverged had passed the threshold at step 50 before blowing up: it did not end
  // trained, so it counts as never; the median of 80, 100 and never is 100.
  RunSet s;
  s.Add("none", "2", "0.01", 0, 3.0).mutable_result()->set_steps_to_threshold(80);
  s.Add("none", "2", "0.01", 1, 3.0).mutable_result()->set_steps_to_threshold(100);
  s.Add("none", "2", "0.01", 2, -1).mutable_result()->set_steps_to_threshold(50);
  EXPECT_DOUBLE_EQ(*At(*CurveOf(s.Analyse(), "none", "2"), 0.01).steps_to_threshold, 100);
}

}  // namespace
}  // namespace ablate::analysis
