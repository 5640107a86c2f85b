// common/cost: the FLOP count, the speed model, the estimate and the budget keeper's decision.
#include <cmath>
#include <string>
#include <vector>

#include "common/cost/estimate.h"
#include "common/cost/flops.h"
#include "common/sweep/run_config.h"
#include "common/sweep/sweep.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ablate::cost {
namespace {

using ::testing::HasSubstr;

v1::RunConfig Config(int n_layer, int n_embd, int n_head, int block) {
  v1::RunConfig c;
  sweep::ApplyDefaults(&c);
  c.set_n_layer(n_layer);
  c.set_n_embd(n_embd);
  c.set_n_head(n_head);
  c.set_block_size(block);
  return c;
}

TEST(Flops, ParamCountIsNanoGptsForGpt2Small) {
  // nanoGPT prints "number of parameters: 123.69M" for GPT-2 small with vocab 50304 (biases,
  // tied embeddings, position embeddings left out).
  v1::RunConfig c = Config(12, 768, 12, 1024);
  c.set_bias(true);
  c.set_tie_embeddings(true);
  c.set_qk_norm("none");
  EXPECT_EQ(ParamCount(c, 50304), 123689472);
  // An untied head adds vocab x n_embd; QK-norm two head-sized gains per layer.
  c.set_tie_embeddings(false);
  EXPECT_EQ(ParamCount(c, 50304), 123689472 + 50304 * 768);
  c.set_tie_embeddings(true);
  c.set_qk_norm("rmsnorm");
  EXPECT_EQ(ParamCount(c, 50304), 123689472 + 12 * 2 * 64);
  c.set_qk_norm("layernorm");  // with biases, a shift too
  EXPECT_EQ(ParamCount(c, 50304), 123689472 + 12 * 2 * 128);
}

TEST(Flops, PerTokenIsSixNPlusAttention) {
  v1::RunConfig c = Config(4, 256, 8, 256);
  const double n = static_cast<double>(ParamCount(c, 4096));
  EXPECT_DOUBLE_EQ(FlopsPerToken(c, 4096), 6 * n + 12.0 * 4 * 8 * 32 * 256);
  EXPECT_EQ(TokensPerStep(c), int64_t{c.batch_size()} * c.grad_accum() * 256);
  EXPECT_DOUBLE_EQ(RunFlops(c, 4096),
                   FlopsPerToken(c, 4096) * TokensPerStep(c) * static_cast<double>(c.steps()));
  v1::DataSpec data;
  EXPECT_EQ(VocabOf(data), sweep::kDefaultVocab);
  data.mutable_tokenizer()->set_vocab(512);
  EXPECT_EQ(VocabOf(data), 512);
}

SpeedSample Sample(const std::string& cls, double fpt, double flops_per_device_second) {
  SpeedSample s;
  s.device_class = cls;
  s.dtype = "float32";
  s.flops_per_token = fpt;
  s.flops = flops_per_device_second * 100;
  s.device_seconds = 100;
  return s;
}

FleetWorker Worker(const std::string& kind, const std::string& name, int slots, double price,
                   double bench_flops = 0) {
  FleetWorker w;
  w.device_kind = kind;
  w.device_class = DeviceClass(kind, name);
  w.slots = slots;
  w.price_per_hour = price;
  if (bench_flops > 0) {
    v1::DeviceBenchmark b;
    b.set_dtype("float32");
    b.set_flops_per_second(bench_flops);
    w.benchmarks.push_back(b);
  }
  return w;
}

TEST(SpeedModel, FinishedRunsOfSimilarSizeFirstThenTheBenchmark) {
  SpeedModel m({Worker("cuda", "RTX 4090", 2, 0.35, 5e12)},
               {Sample("cuda RTX 4090", 1e8, 2e13), Sample("cuda RTX 4090", 1.5e8, 4e13),
                Sample("cuda RTX 4090", 1.2e8, 3e13), Sample("cuda RTX 4090", 1e10, 9e13)});
  Speed s = m.For("cuda RTX 4090", "float32", 1e8);
  EXPECT_DOUBLE_EQ(s.flops_per_device_second, 3e13);  // median of the three within 2x
  EXPECT_EQ(s.source, "3 finished runs of similar size");
  // Nothing within 2x of 1e12 FLOPs/token: the benchmark, one slot's speed times the slots.
  s = m.For("cuda RTX 4090", "float32", 1e12);
  EXPECT_DOUBLE_EQ(s.flops_per_device_second, 1e13);
  EXPECT_EQ(s.source, "startup benchmark");
  // bf16 has no sample and no bf16 benchmark: float32's benchmark stands in.
  EXPECT_DOUBLE_EQ(m.For("cuda RTX 4090", "bfloat16", 1e8).flops_per_device_second, 1e13);
  EXPECT_EQ(m.For("cpu Xeon", "float32", 1e8).flops_per_device_second, 0);
  ASSERT_EQ(m.classes().size(), 1u);
  EXPECT_TRUE(m.classes()[0].priced);
  EXPECT_DOUBLE_EQ(m.classes()[0].usd_per_device_hour, 0.35);
}

WorkShape Shape(double fpt, double flops_per_run, double runs, const std::string& device = "auto") {
  WorkShape s;
  s.device = device;
  s.flops_per_token = fpt;
  s.flops_per_run = flops_per_run;
  s.runs = runs;
  return s;
}

TEST(SpeedModel, TheFleetSharesTheWorkInProportionToSpeed) {
  // Two GPUs at 1e13 FLOP/s each ($0.36/h each) and a CPU at 1e11 (no price).
  SpeedModel m(
      {Worker("cuda", "A", 1, 0.36), Worker("cuda", "A", 1, 0.36), Worker("cpu", "X", 1, 0)},
      {Sample("cuda A", 1e8, 1e13), Sample("cpu X", 1e8, 1e11)});
  const double rate = 2e13 + 1e11;
  SpeedModel::FleetTime t = m.OnFleet({Shape(1e8, 1e16, 10)});
  EXPECT_NEAR(t.seconds, 1e17 / rate, 1e-6);
  EXPECT_NEAR(t.device_seconds, 1e17 / rate * 3, 1e-3);
  EXPECT_EQ(t.usd, -1);  // the CPU does part of it and has no price
  // Pinned to CUDA: the CPU takes no share, and the cost is known.
  t = m.OnFleet({Shape(1e8, 1e16, 10, "cuda")});
  EXPECT_NEAR(t.seconds, 1e17 / 2e13, 1e-6);
  EXPECT_NEAR(t.usd, 1e17 / 1e13 * 0.36 / 3600, 1e-9);
  // One run cannot go faster than one slot of the fastest class.
  t = m.OnFleet({Shape(1e8, 1e16, 0.5, "cuda")});
  EXPECT_NEAR(t.seconds, 0.5 * 1e16 / 1e13, 1e-6);
  // No class can run an MPS run: unknown.
  EXPECT_EQ(m.OnFleet({Shape(1e8, 1e16, 1, "mps")}).seconds, -1);
}

TEST(Estimate, PerClassHoursAndMoneyForTheGridAndItsMaximum) {
  SpeedModel m({Worker("cuda", "A", 2, 0.5), Worker("cpu", "X", 1, 0, 1e10)},
               {Sample("cuda A", 1e8, 1e13)});
  const v1::SweepEstimate e = Estimate({Shape(1e8, 3.6e16, 4)}, 4, 2, m);
  EXPECT_EQ(e.base_runs(), 4);
  EXPECT_EQ(e.max_runs(), 6);
  ASSERT_EQ(e.classes_size(), 2);
  const auto& gpu = e.classes(0).device_class() == "cuda A" ? e.classes(0) : e.classes(1);
  const auto& cpu = e.classes(0).device_class() == "cuda A" ? e.classes(1) : e.classes(0);
  EXPECT_NEAR(gpu.device_hours_base(), 4 * 3.6e16 / 1e13 / 3600, 1e-9);  // 4 h
  EXPECT_NEAR(gpu.device_hours_max(), 6.0, 1e-9);
  EXPECT_NEAR(gpu.usd_base(), 2.0, 1e-9);
  EXPECT_NEAR(gpu.tokens_per_second(), 1e13 / 1e8, 1e-6);
  EXPECT_EQ(gpu.source(), "1 finished run of similar size");
  EXPECT_EQ(cpu.source(), "startup benchmark");
  EXPECT_EQ(cpu.usd_base(), -1);
  EXPECT_LT(e.wall_seconds_base(), e.wall_seconds_max());
  EXPECT_THAT(e.notes(0), HasSubstr("every run trains all its steps"));
}

TEST(Budget, SpentPlusRunningPlusTheNextRunMustFit) {
  // One GPU class at 1e13 FLOP/s per device, $3.60 an hour ($0.001 a second).
  SpeedModel m({Worker("cuda", "A", 1, 3.6)}, {Sample("cuda A", 1e8, 1e13)});
  BudgetRound round;
  round.budget.set_usd(1.0);
  round.spent.set_usd(0.5);
  round.spent.set_device_seconds(500);
  RunningRun r;
  r.device_class = "cuda A";
  r.share = 1;
  r.usd_per_slot_hour = 3.6;
  r.tokens_per_second = 1000;
  r.remaining_tokens = 100000;  // 100 s left: $0.10
  round.running.push_back(r);
  for (int i = 0; i < 5; ++i) round.queued.push_back(Shape(1e8, 1e15, 1));  // 100 s: $0.10
  DecideBudget(m, &round);
  EXPECT_NEAR(round.budget.spent(), 0.5, 1e-12);
  EXPECT_NEAR(round.budget.committed(), 0.1, 1e-12);
  EXPECT_NEAR(round.budget.per_run(), 0.1, 1e-12);
  EXPECT_EQ(round.runs_left, 4);  // 0.5 + 0.1 + 4 x 0.1 = 1.0
  EXPECT_FALSE(round.budget.reached());
  // Spent more: nothing fits, and the budget says so.
  round.spent.set_usd(0.85);
  DecideBudget(m, &round);
  EXPECT_EQ(round.runs_left, 0);
  EXPECT_TRUE(round.budget.reached());
  // A device-hour budget counts device time whatever the price.
  round.budget.Clear();
  round.budget.set_gpu_hours(1.0);
  round.spent.set_device_seconds(3600 - 250);
  DecideBudget(m, &round);
  EXPECT_EQ(round.runs_left, 1);  // 3350 + 100 running + 100 = 3550 <= 3600; a second passes
}

TEST(Budget, UnknownCostStartsOneRunAtATimeWhileMoneyIsLeft) {
  SpeedModel m({Worker("cuda", "A", 1, 1.0)}, {});  // no sample, no benchmark
  BudgetRound round;
  round.budget.set_gpu_hours(1);
  for (int i = 0; i < 3; ++i) round.queued.push_back(Shape(1e8, 1e15, 1));
  DecideBudget(m, &round);
  EXPECT_EQ(round.runs_left, 1);
  round.spent.set_device_seconds(3600);
  DecideBudget(m, &round);
  EXPECT_EQ(round.runs_left, 0);
  EXPECT_TRUE(round.budget.reached());
}

TEST(Budget, RemainderFromTheClassSpeedBeforeTheFirstHeartbeat) {
  SpeedModel m({Worker("cuda", "A", 2, 2.0)}, {Sample("cuda A", 1e8, 1e13)});
  RunningRun r;
  r.device_class = "cuda A";
  r.share = 0.5;
  r.usd_per_slot_hour = 1.0;
  r.shape = Shape(1e8, 1e15, 1);
  r.remaining_fraction = 0.5;
  const SpeedModel::RunCost c = Remainder(r, m);
  EXPECT_NEAR(c.device_seconds, 50, 1e-9);      // half of 100 device-seconds
  EXPECT_NEAR(c.usd, 100 * 1.0 / 3600, 1e-12);  // 100 s of wall on a $1/h slot
}

std::string Sweep(const std::string& budget) {
  return "name: s\ndata: {train: a.txt, val: b.txt}\ngrid:\n  lr: [0.001, 0.002]\n" + budget;
}

TEST(SweepFile, BudgetTakesOneLimitAboveZero) {
  auto ok = sweep::ParseSweep(Sweep("budget: {gpu_hours: 40}\n"), "s.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_TRUE(ok->budget.has_value());
  EXPECT_EQ(ok->budget->gpu_hours(), 40);
  ok = sweep::ParseSweep(Sweep("budget:\n  usd: 60\n"), "s.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->budget->usd(), 60);
  EXPECT_FALSE(sweep::ParseSweep(Sweep(""), "s.yaml")->budget.has_value());

  auto bad = sweep::ParseSweep(Sweep("budget: {usd: -5}\n"), "s.yaml");
  EXPECT_THAT(bad.status().message(), HasSubstr("s.yaml:5: budget.usd: must be a finite number"));
  bad = sweep::ParseSweep(Sweep("budget: {eur: 50}\n"), "s.yaml");
  EXPECT_THAT(bad.status().message(), HasSubstr("s.yaml:5: budget.eur: unknown key"));
  bad = sweep::ParseSweep(Sweep("budget: {gpu_hours: 4, usd: 6}\n"), "s.yaml");
  EXPECT_THAT(bad.status().message(), HasSubstr("budget.usd: a budget has one limit"));
  bad = sweep::ParseSweep(Sweep("budget: {gpu_hour: 4}\n"), "s.yaml");
  EXPECT_THAT(bad.status().message(), HasSubstr("did you mean 'gpu_hours'"));
  bad = sweep::ParseSweep(Sweep("budget: {usd: 0}\n"), "s.yaml");
  EXPECT_THAT(bad.status().message(), HasSubstr("above 0 and at most 1e9, not 0"));
}

}  // namespace
}  // namespace ablate::cost
