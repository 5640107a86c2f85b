// The CLI's terminal rendering (client/render.cc): `ablate ls` and `ablate watch` at 80 columns.
#include "client/render.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ablate::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::Sweep ASweep(int64_t id, const std::string& name) {
  v1::Sweep s;
  s.set_id(id);
  s.set_name(name);
  s.set_state("active");
  s.set_eta_seconds(3725);
  s.set_created_at(Now() - 7200);
  auto* c = s.mutable_counts();
  c->set_total(1000);
  c->set_queued(613);
  c->set_leased(2);
  c->set_running(14);
  c->set_succeeded(300);
  c->set_diverged(41);
  c->set_failed(17);
  c->set_cancelled(9);
  c->set_skipped(4);
  c->set_refined(120);
  return s;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out = absl::StrSplit(text, '\n', absl::SkipEmpty());
  return out;
}

TEST(SweepsTable, CompactFitsEightyColumnsAndWideHasEverything) {
  const std::vector<v1::Sweep> sweeps = {
      ASweep(12345, "qk-norm-ablation-across-depths-and-learning-rates"), ASweep(7, "tiny")};
  const std::string compact = SweepsTable(sweeps, /*wide=*/false);
  for (const auto& l : Lines(compact)) EXPECT_LE(VisibleWidth(l), 80) << l;
  EXPECT_THAT(compact,
              HasSubstr("371/1000"));  // done: succeeded + diverged + failed + cancelled + skipped
  EXPECT_THAT(compact, HasSubstr("qk-norm-ablati~"));
  EXPECT_THAT(compact, HasSubstr("1h02m"));
  const std::string wide = SweepsTable(sweeps, /*wide=*/true);
  EXPECT_THAT(wide, HasSubstr("qk-norm-ablation-across-depths-and-learning-rates"));
  for (const char* count : {"613 queued", "14 running", "2 leased", "300 succeeded", "41 diverged",
                            "17 failed", "9 cancelled", "4 skipped"}) {
    EXPECT_THAT(wide, HasSubstr(count));
  }
  EXPECT_GT(VisibleWidth(Lines(wide)[1]), 80);
}

// Issue #39: `ls` showed `active ... ETA 16s` while the budget held the sweep. A sweep the
// server says is held (eta_basis "held: <why>") reads as why, with no ETA, in both layouts.
TEST(SweepsTable, AHeldSweepSaysWhyAndHasNoEta) {
  v1::Sweep budget = ASweep(4, "budgeted");
  budget.set_eta_basis("held: budget reached");
  v1::Sweep fit = ASweep(5, "huge");
  fit.set_eta_basis("held: 12 runs fit no live worker's device memory");
  const std::vector<v1::Sweep> sweeps = {budget, fit};
  for (bool wide : {false, true}) {
    const std::string table = SweepsTable(sweeps, wide);
    const std::vector<std::string> lines = Lines(table);
    ASSERT_EQ(lines.size(), 3u) << table;
    EXPECT_THAT(lines[1], HasSubstr("budget reached"));
    EXPECT_THAT(lines[1], Not(HasSubstr("active")));
    EXPECT_THAT(lines[1], Not(HasSubstr("1h02m")));
    EXPECT_THAT(lines[2],
                HasSubstr(wide ? "12 runs fit no live worker's device memory" : "fits no worker"));
    if (!wide) {
      for (const auto& l : lines) EXPECT_LE(VisibleWidth(l), 80) << l;
    }
  }
  EXPECT_EQ(HeldReason(ASweep(6, "free")), "");
  v1::Sweep finished = budget;
  finished.set_state("finished");
  EXPECT_EQ(SweepStateLabel(finished, true), "finished");
}

v1::SweepUpdate AnUpdate(int first_id, int runs) {
  v1::SweepUpdate u;
  *u.mutable_sweep() = ASweep(3, "e2e-watch-with-a-long-sweep-name");
  for (int i = 0; i < runs; ++i) {
    v1::Run* r = u.add_runs();
    r->set_id(first_id + i);
    r->set_state(i < 3 ? v1::RUNNING : v1::QUEUED);
    r->set_seed(40 + i);
    r->set_step(i == 0 ? 7 : 123);
    r->set_total_steps(800);
    r->set_latest_train_loss(i == 1 ? 0 : 3.14159);
    r->set_worker("a-worker-with-a-rather-long-name");
    r->set_cell("lr=0.001,n_embd=16,n_head=2,n_layer=1,qk_norm=layernorm,block_size=16");
  }
  return u;
}

TEST(WatchFrame, EightyColumnsKeepEveryCountTheSeedAndStableColumns) {
  const auto frame = WatchFrame(AnUpdate(9, 12), "ETA 1h02m", 80, 24, /*color=*/false);
  for (const auto& l : frame) EXPECT_LE(VisibleWidth(l), 79) << l;
  // The summary wraps: every count shows, none is cut.
  const std::string all = absl::StrJoin(frame, "\n");
  for (const char* count :
       {"371/1000 done", "14 running", "2 leased", "613 queued", "300 succeeded", "41 diverged",
        "17 failed", "9 cancelled", "4 skipped", "120 added by refinement"}) {
    EXPECT_THAT(all, HasSubstr(count));
  }
  EXPECT_THAT(all, HasSubstr("ETA 1h02m"));
  // Run lines: ids 9, 10, 11 in one column (padded to the sweep's widest id, 20), each with
  // its seed; only the cell is cut.
  std::vector<std::string> runs;
  for (const auto& l : frame) {
    if (absl::StrContains(l, " running ")) runs.push_back(l);
  }
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_TRUE(absl::StartsWith(runs[0], "   9 running ")) << runs[0];
  EXPECT_TRUE(absl::StartsWith(runs[1], "  10 running ")) << runs[1];
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_THAT(runs[i], HasSubstr(absl::StrCat(" seed=", 40 + i, " "))) << runs[i];
    // Every column starts where the first line's does.
    EXPECT_EQ(runs[i].find(" loss "), runs[0].find(" loss ")) << runs[i];
    EXPECT_EQ(runs[i].find(" seed="), runs[0].find(" seed=")) << runs[i];
  }
  for (const auto& l : frame) {
    if (absl::EndsWith(l, "~")) {
      EXPECT_THAT(l, HasSubstr(" seed=")) << "only run lines are cut";
    }
  }
  // Colour takes no column.
  const auto colored = WatchFrame(AnUpdate(9, 12), "ETA 1h02m", 80, 24, /*color=*/true);
  ASSERT_EQ(colored.size(), frame.size());
  for (const auto& l : colored) EXPECT_LE(VisibleWidth(l), 79) << l;
  // Wide enough: one summary line, nothing cut.
  const auto wide = WatchFrame(AnUpdate(9, 12), "ETA 1h02m", 250, 24, /*color=*/false);
  for (const auto& l : wide) EXPECT_THAT(l, Not(testing::EndsWith("~"))) << l;
  EXPECT_LT(wide.size(), frame.size());
}

// Issue #39 item 4: a sweep over lr (logspace) x qk_norm with n_layer and n_embd fixed as
// one-value axes, a worker with a long name. At 80 columns the cell read
// "lr=0.0316228,n_layer=1,~": the axis under study was cut off.
v1::SweepUpdate AQkNormUpdate() {
  v1::SweepUpdate u;
  *u.mutable_sweep() = ASweep(3, "qk-norm");
  for (const char* axis : {"lr", "n_layer", "n_embd", "qk_norm", "seed"}) {
    u.mutable_sweep()->add_axes(axis);
  }
  int id = 0;
  for (const char* lr : {"0.01", "0.0316228", "0.1"}) {
    for (const char* qk : {"none", "layernorm"}) {
      for (int seed = 0; seed < 2; ++seed) {
        v1::Run* r = u.add_runs();
        r->set_id(++id);
        r->set_state(id <= 8 ? v1::RUNNING : v1::QUEUED);
        r->set_seed(seed);
        r->set_step(50);
        r->set_total_steps(800);
        r->set_latest_train_loss(3.2);
        r->set_worker("a-worker-with-a-rather-long-name");
        auto& g = *r->mutable_grid_values();
        g["lr"] = lr;
        g["n_layer"] = "1";
        g["n_embd"] = "64";
        g["qk_norm"] = qk;
        g["seed"] = std::to_string(seed);
        r->set_cell(absl::StrCat("lr=", lr, ",n_embd=64,n_layer=1,qk_norm=", qk));
      }
    }
  }
  return u;
}

TEST(WatchFrame, EightyColumnsShowTheAxesThatVaryNotWhatEveryRowShares) {
  const v1::SweepUpdate u = AQkNormUpdate();
  const auto frame = WatchFrame(u, "", 80, 24, /*color=*/false);
  std::vector<std::string> runs;
  for (const auto& l : frame) {
    EXPECT_LE(VisibleWidth(l), 79) << l;
    if (absl::StrContains(l, " running ")) runs.push_back(l);
  }
  ASSERT_EQ(runs.size(), 8u);
  for (const auto& l : runs) {
    // The varied axes whole, the LR at 3 significant digits; the shared ones and the seed axis
    // (shown as seed=) left out.
    EXPECT_THAT(l, testing::ContainsRegex(" lr=0\\.(01|0316|1),qk_norm=(none|layernorm)[ ~]")) << l;
    EXPECT_THAT(l, Not(HasSubstr("n_layer"))) << l;
    EXPECT_THAT(l, Not(HasSubstr("n_embd"))) << l;
    EXPECT_THAT(l, Not(HasSubstr("0.0316228"))) << l;
    EXPECT_THAT(l, Not(HasSubstr(",seed="))) << l;
    // The worker comes after the cell, so it is what the width cuts.
    EXPECT_LT(l.find("qk_norm="), l.find("a-worker")) << l;
    // Every run's worker starts in one column, whatever its label's length.
    EXPECT_EQ(l.find("  a-worker"), runs[0].find("  a-worker")) << l;
  }
  EXPECT_THAT(runs[4], HasSubstr(" lr=0.0316,qk_norm=none "));
  EXPECT_THAT(runs[6], HasSubstr(" lr=0.0316,qk_norm=layernorm"));
  // A worker name too long for the room left is cut in the middle: names that share a prefix
  // ("gpu-box-worker-1", "-2") differ at their end.
  for (const auto& l : WatchFrame(u, "", 100, 24, /*color=*/false)) {
    if (!absl::StrContains(l, " running ")) continue;
    EXPECT_LE(VisibleWidth(l), 99) << l;
    EXPECT_TRUE(absl::EndsWith(l, "~ong-name")) << l;
  }
  // Wide enough, the progress bar is back.
  for (const auto& l : WatchFrame(u, "", 120, 24, /*color=*/false)) {
    if (absl::StrContains(l, " running ")) {
      EXPECT_THAT(l, HasSubstr(" [#.........] ")) << l;
    }
  }
}

TEST(CellLabels, SharedAxesDropAndNumbersKeepEnoughDigitsToDiffer) {
  const v1::SweepUpdate u = AQkNormUpdate();
  const auto labels = CellLabels(u.runs(), u.sweep().axes());
  ASSERT_EQ(labels.size(), 12u);
  EXPECT_EQ(labels[0], "lr=0.01,qk_norm=none");
  EXPECT_EQ(labels[2], "lr=0.01,qk_norm=layernorm");
  EXPECT_EQ(labels[4], "lr=0.0316,qk_norm=none");
  // Two LRs that 3 digits would print alike keep the digits that tell them apart.
  v1::SweepUpdate close = u;
  (*close.mutable_runs(0)->mutable_grid_values())["lr"] = "0.0100123";
  const auto apart = CellLabels(close.runs(), close.sweep().axes());
  EXPECT_EQ(apart[0], "lr=0.01001,qk_norm=none");
  EXPECT_EQ(apart[4], "lr=0.03162,qk_norm=none");
  // Every run in one cell: nothing tells them apart, so the whole cell is the label.
  v1::SweepUpdate one;
  *one.add_runs() = u.runs(0);
  *one.add_runs() = u.runs(1);
  EXPECT_EQ(CellLabels(one.runs(), u.sweep().axes())[0], u.runs(0).cell());
  // Values: integers and names as written, long decimals cut to 3 digits.
  EXPECT_EQ(ShortValue("0.000316228"), "0.000316");
  EXPECT_EQ(ShortValue("1024"), "1024");
  EXPECT_EQ(ShortValue("0.001"), "0.001");
  EXPECT_EQ(ShortValue("layernorm"), "layernorm");
}

TEST(FleetLines, UnfittableRunsPreemptionsAndWorkerFaultsOnlyWhenThereAreAny) {
  v1::SweepCounts c;
  EXPECT_THAT(FleetLines(c), testing::IsEmpty());
  c.set_unfittable(3);
  c.set_preemptions(2);
  c.set_worker_faults(5);
  EXPECT_THAT(FleetLines(c), testing::ElementsAre(HasSubstr("3 queued runs fit no live worker"),
                                                  "preempted 2, worker faults 5 (requeued)"));
  c.set_unfittable(0);
  c.set_preemptions(0);
  EXPECT_THAT(FleetLines(c), testing::ElementsAre("worker faults 5 (requeued)"));
  // Watch shows them, wrapped like the rest of its summary.
  v1::SweepUpdate u = AQkNormUpdate();
  u.mutable_sweep()->mutable_counts()->set_unfittable(1);
  u.mutable_sweep()->mutable_counts()->set_preemptions(2);
  const std::string all = absl::StrJoin(WatchFrame(u, "", 80, 24, false), "\n");
  EXPECT_THAT(all, HasSubstr("1 queued run fits no live worker"));
  EXPECT_THAT(all, HasSubstr("preempted 2 (requeued)"));
}

// A worker's device name or an error text (a bench reason) reaches the tables: its control
// characters are shown escaped, once, and cannot forge a row or drive the terminal.
TEST(Table, EscapesControlCharactersInEveryCell) {
  Table t({"ID", "NAME", "DEVICE"});
  t.Add({"1", "w1", "cpu (\x1b]0;owned\x07\x1b[2J)\n2  forged  row"});
  t.Add({"2", "w2",
         "cpu (\xc2\x9b"
         "31mCSI)"});
  const std::string out = t.Render();
  EXPECT_EQ(Lines(out).size(), 3u) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_EQ(out.find('\x07'), std::string::npos) << out;
  EXPECT_EQ(out.find("\xc2\x9b"), std::string::npos) << out;
  EXPECT_THAT(out, HasSubstr("cpu (\\x1b]0;owned\\x07\\x1b[2J)\\n2  forged  row"));
  EXPECT_THAT(out, HasSubstr("cpu (\\u009b31mCSI)"));
}

TEST(FleetLines, ARunHeldForItsFaultsSaysSoAndForHowLong) {
  v1::SweepCounts c;
  c.set_fault_held(2);
  c.set_fault_held_until(Now() + 590);
  EXPECT_THAT(FleetLines(c),
              testing::ElementsAre(testing::MatchesRegex(
                  "held: 2 queued runs wait for a worker they have not failed on \\(at most "
                  "9m[45][0-9]s more\\)")));
}

TEST(WatchFrame, NeverTallerThanTheScreen) {
  const auto frame = WatchFrame(AnUpdate(1, 3), "", 80, 6, /*color=*/false);
  EXPECT_LE(frame.size(), 6u);
  EXPECT_THAT(absl::StrJoin(frame, "\n"), HasSubstr("more"));
}

TEST(Cost, HoursMoneyAndTheBudgetLine) {
  EXPECT_EQ(GpuHours(1800), "0.50 GPU-h");
  EXPECT_EQ(GpuHours(3600 * 123.4), "123 GPU-h");
  EXPECT_EQ(Usd(0.4321), "$0.43");
  EXPECT_EQ(Usd(12345), "$12,345");
  EXPECT_EQ(Usd(-1), "-");
  v1::SweepCost cost;
  EXPECT_TRUE(CostLines(cost, true).empty());
  auto* a = cost.add_classes();
  a->set_device_class("cuda RTX 4090");
  a->set_runs(3);
  a->set_running(1);
  a->set_device_seconds(3600);
  a->set_usd(0.35);
  a->set_priced(true);
  auto* b = cost.add_classes();
  b->set_device_class("cpu Xeon");
  b->set_runs(2);
  b->set_device_seconds(1800);
  cost.set_device_seconds(5400);
  cost.set_usd(0.35);
  const auto lines = CostLines(cost, true);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "spent 1.50 GPU-h, $0.35 (priced workers only)");
  EXPECT_EQ(lines[1], "  cuda RTX 4090  3 runs (1 running)  1.00 GPU-h  $0.35");
  EXPECT_EQ(lines[2], "  cpu Xeon  2 runs  0.50 GPU-h  unpriced");
  EXPECT_EQ(CostLines(cost, false)[0],
            "spent 1.50 GPU-h, $0.35 (priced workers only) (cuda RTX 4090 1.00; cpu Xeon 0.50)");

  v1::Budget budget;
  budget.set_usd(60);
  budget.set_spent(40);
  budget.set_committed(5);
  budget.set_per_run(2);
  budget.set_runs_left(7);
  EXPECT_EQ(BudgetLine(budget, "12"),
            "budget $60.00: spent $40.00, running runs ~$5.00 more, next run ~$2.00; 7 may start "
            "now");
  budget.set_reached(true);
  EXPECT_THAT(BudgetLine(budget, "12"), HasSubstr("budget reached ($60.00)"));
  EXPECT_THAT(BudgetLine(budget, "12"), HasSubstr("ablate budget 12 --raise N"));
  budget.Clear();
  budget.set_gpu_hours(40);
  budget.set_spent(1.234);
  EXPECT_EQ(BudgetLine(budget, "12"), "budget 40.0 GPU-h: spent 1.23");
}

// A figure that would round to 0 (or to its last digit's one step) keeps 3 significant digits:
// a 0.003 GPU-h budget, a 4-second sweep's estimate, a run costing a fraction of a cent.
TEST(Cost, SmallFiguresKeepSignificantDigits) {
  EXPECT_EQ(Fixed(1.234, 2), "1.23");
  EXPECT_EQ(Fixed(0.01, 2), "0.01");
  EXPECT_EQ(Fixed(0, 2), "0.00");
  EXPECT_EQ(Fixed(0.003, 2), "0.003");
  EXPECT_EQ(Fixed(0.0074, 2), "0.0074");
  EXPECT_EQ(Fixed(0.00312345, 2), "0.00312");
  EXPECT_EQ(Fixed(0.0000123456, 2), "0.0000123");
  EXPECT_EQ(Fixed(0.009996, 2), "0.01");
  EXPECT_EQ(Fixed(-0.003, 2), "-0.003");
  EXPECT_EQ(Fixed(0.4, 0), "0.4");
  EXPECT_EQ(Fixed(1e-15, 2), "0");

  EXPECT_EQ(GpuHours(3.9), "0.00108 GPU-h");
  EXPECT_EQ(GpuHours(0), "0.00 GPU-h");
  EXPECT_EQ(Usd(0.0042), "$0.0042");
  EXPECT_EQ(Duration(0.3), "0.3s");
  EXPECT_EQ(Duration(0.456), "0.456s");
  EXPECT_EQ(Duration(3.9), "4s");
  EXPECT_EQ(Duration(0), "0s");

  v1::Budget budget;
  budget.set_gpu_hours(0.003);
  budget.set_spent(0.0021);
  budget.set_per_run(0.00125);
  budget.set_reached(true);
  EXPECT_THAT(BudgetLine(budget, "7"),
              HasSubstr("budget reached (0.003 GPU-h): spent 0.0021, next run ~0.00125;"));
  budget.set_gpu_hours(0.005);
  budget.set_reached(false);
  budget.set_runs_left(2);
  EXPECT_EQ(BudgetLine(budget, "7"),
            "budget 0.005 GPU-h: spent 0.0021, next run ~0.00125; 2 may start now");

  v1::SweepEstimate e;
  e.set_base_runs(4);
  e.set_max_runs(4);
  e.set_wall_seconds_base(0.4);
  e.set_wall_seconds_max(0.4);
  e.set_device_seconds_base(3.9);
  e.set_device_seconds_max(3.9);
  e.set_usd_base(0.0004);
  e.set_usd_max(0.0004);
  e.mutable_budget()->set_gpu_hours(0.003);
  const std::string text = EstimateText("tiny", e);
  EXPECT_THAT(text, HasSubstr("0.4s wall, 0.00108 GPU-h, $0.0004"));
  EXPECT_THAT(text, HasSubstr("budget 0.003 GPU-h: the whole sweep fits"));
}

TEST(Cost, TheEstimateSaysWhereEachSpeedComesFromAndWhetherTheBudgetFits) {
  v1::SweepEstimate e;
  e.set_base_runs(32);
  e.set_max_runs(48);
  e.set_tokens_per_run(205000);
  e.set_flops_per_run(1.87e11);
  e.set_flops_per_run_min(1.51e11);
  e.set_flops_per_run_max(2.22e11);
  auto* c = e.add_classes();
  c->set_device_class("cpu Xeon");
  c->set_workers(2);
  c->set_slots(2);
  c->set_can_run(true);
  c->set_tokens_per_second(5300);
  c->set_source("startup benchmark");
  c->set_device_hours_base(0.5);
  c->set_device_hours_max(0.75);
  c->set_usd_per_hour(0.1);
  c->set_usd_base(0.05);
  c->set_usd_max(0.075);
  e.set_wall_seconds_base(900);
  e.set_wall_seconds_max(1350);
  e.set_device_seconds_base(1800);
  e.set_device_seconds_max(2700);
  e.set_usd_base(0.05);
  e.set_usd_max(0.075);
  e.mutable_budget()->set_gpu_hours(0.6);
  e.add_notes("assumes every run trains all its steps");
  const std::string text = EstimateText("smoke", e);
  EXPECT_THAT(text, HasSubstr("sweep 'smoke': 32 runs, up to 48 with refinement"));
  EXPECT_THAT(text, HasSubstr("205k tokens, 187 GFLOP (151 GFLOP to 222 GFLOP across the grid)"));
  EXPECT_THAT(text, HasSubstr("startup benchmark"));
  EXPECT_THAT(text, HasSubstr("0.50–0.75"));
  EXPECT_THAT(text, HasSubstr("15m00s–22m30s wall"));
  EXPECT_THAT(text, HasSubstr("budget 0.60 GPU-h: the grid fits; refinement stops"));
  EXPECT_THAT(text, HasSubstr("note: assumes every run"));
}

}  // namespace
}  // namespace ablate::cli
