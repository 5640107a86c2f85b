// Sweep files and run files: parsing, every rejection path (message checked), expansion, order.
#include "common/sweep/sweep.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/sweep/run_config.h"
#include "google/protobuf/util/message_differencer.h"

namespace ablate::sweep {
namespace {

using ::testing::HasSubstr;

constexpr char kData[] = "data: {train: a.txt, val: b.txt}\n";

// A sweep file with `body` after name and data (so error lines are body lines + 2).
std::string Sweep(const std::string& body) { return std::string("name: t\n") + kData + body; }

std::string ErrorOf(const std::string& yaml) {
  auto s = ParseSweep(yaml, "s.yaml");
  return s.ok() ? "OK" : std::string(s.status().message());
}

std::string RunFileErrorOf(const std::string& yaml) {
  auto s = ParseRunFile(yaml, "r.yaml");
  return s.ok() ? "OK" : std::string(s.status().message());
}

TEST(ParseSweep, DesignExampleParsesAndExpands) {
  const std::string yaml = R"(name: qknorm-lr-depth
data: {train: tinystories_train.txt, val: tinystories_valid.txt, tokenizer: {type: bpe, vocab: 4096}}
fixed:  {n_embd: 256, n_head: 4, block_size: 256, batch_size: 32, steps: 5000, warmup: 500,
         weight_decay: 0.1, grad_clip: 1.0, eval_every: 250, probe_every: 100}
grid:
  qk_norm: [none, layernorm]
  lr: {logspace: {min: 1.0e-4, max: 3.0e-1, per_decade: 3}}
  n_layer: [2, 4, 8]
  seed: [0, 1]
order: coarse_to_fine
divergence: {loss_above_init_by: 1.0, patience: 50}
threshold: {train_loss: 2.0}
)";
  auto sweep = ParseSweep(yaml, "q.yaml");
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  EXPECT_EQ(sweep->name, "qknorm-lr-depth");
  EXPECT_EQ(sweep->order, Order::kCoarseToFine);
  ASSERT_EQ(sweep->grid.size(), 4u);
  EXPECT_EQ(sweep->grid[1].name, "lr");
  // 1e-4 * 10^(k/3) up to 0.3: k = 0..10 (k = 10 gives 0.215; k = 11 gives 0.464 > 0.3).
  EXPECT_EQ(sweep->grid[1].values,
            (std::vector<std::string>{"0.0001", "0.000215443", "0.000464159", "0.001", "0.00215443",
                                      "0.00464159", "0.01", "0.0215443", "0.0464159", "0.1",
                                      "0.215443"}));
  EXPECT_EQ(sweep->grid[1].line, 7);
  EXPECT_EQ(sweep->threshold.train_loss(), 2.0);
  EXPECT_EQ(sweep->data.tokenizer().vocab(), 4096);

  auto runs = Expand(*sweep);
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 2u * 11 * 3 * 2);
  const auto& first = (*runs)[0];
  EXPECT_EQ(first.sweep_name(), "qknorm-lr-depth");
  EXPECT_EQ(first.config().n_embd(), 256);
  EXPECT_EQ(first.config().steps(), 5000);
  EXPECT_EQ(first.config().beta2(), 0.95);  // default
  EXPECT_EQ(first.data().train(), "tinystories_train.txt");
  EXPECT_EQ(first.divergence().patience(), 50);
  EXPECT_EQ(first.threshold().train_loss(), 2.0);
  // Seeds outermost: the whole first half is seed 0.
  for (size_t i = 0; i < runs->size(); ++i) {
    EXPECT_EQ(runs->at(i).grid_values().at("seed"), i < runs->size() / 2 ? "0" : "1");
  }
  // Within seed 0: LR ends, then the middle, each over every (qk_norm, n_layer) cell.
  EXPECT_EQ(runs->at(0).grid_values().at("lr"), "0.0001");
  EXPECT_EQ(runs->at(5).grid_values().at("lr"), "0.0001");
  EXPECT_EQ(runs->at(6).grid_values().at("lr"), "0.215443");
  EXPECT_EQ(runs->at(12).grid_values().at("lr"), "0.00464159");
  EXPECT_EQ(runs->at(1).grid_values().at("n_layer"), "4");
  EXPECT_EQ(runs->at(3).grid_values().at("qk_norm"), "layernorm");
  // Every (cell, seed) pair is unique, and a run's config matches its grid values.
  std::set<std::string> keys;
  for (const auto& r : *runs) {
    EXPECT_TRUE(keys.insert(r.cell() + "|" + r.grid_values().at("seed")).second);
    EXPECT_EQ(r.config().qk_norm(), r.grid_values().at("qk_norm"));
    EXPECT_EQ(std::to_string(r.config().n_layer()), r.grid_values().at("n_layer"));
    EXPECT_NEAR(r.config().min_lr(), r.config().lr() * 0.1, 1e-15);
  }
  EXPECT_EQ(first.cell(), "lr=0.0001,n_layer=2,qk_norm=none");
}

TEST(Expand, GridOrderIsNestedLoopsInFileOrder) {
  auto sweep = ParseSweep(Sweep("grid:\n  n_layer: [1, 2]\n  lr: [0.1, 0.2, 0.3]\n"), "s.yaml");
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  auto runs = Expand(*sweep);
  ASSERT_TRUE(runs.ok());
  std::vector<std::string> seen;
  for (const auto& r : *runs) seen.push_back(r.cell());
  EXPECT_EQ(seen,
            (std::vector<std::string>{"lr=0.1,n_layer=1", "lr=0.2,n_layer=1", "lr=0.3,n_layer=1",
                                      "lr=0.1,n_layer=2", "lr=0.2,n_layer=2", "lr=0.3,n_layer=2"}));
  // No seed axis: the (default) seed still appears in grid_values, not in the cell key.
  EXPECT_EQ(runs->at(0).grid_values().at("seed"), "0");
  EXPECT_EQ(runs->at(0).config().seed(), 0);
}

TEST(Expand, FixedSeedWithoutSeedAxisIsRecorded) {
  auto sweep = ParseSweep(Sweep("fixed: {seed: 7}\ngrid: {lr: [0.01]}\n"), "s.yaml");
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  auto runs = Expand(*sweep);
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->at(0).grid_values().at("seed"), "7");
  EXPECT_EQ(runs->at(0).config().seed(), 7);
}

TEST(Expand, KeepFinalDefaultsToTrueAndReachesEveryRun) {
  auto by_default = ParseSweep(Sweep("grid: {lr: [0.01, 0.1]}\n"), "s.yaml");
  ASSERT_TRUE(by_default.ok()) << by_default.status();
  EXPECT_TRUE(by_default->keep_final);
  auto runs = Expand(*by_default);
  ASSERT_TRUE(runs.ok());
  for (const auto& r : *runs) EXPECT_TRUE(r.keep_final());

  auto off = ParseSweep(Sweep("keep_final: false\ngrid: {lr: [0.01, 0.1]}\n"), "s.yaml");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->keep_final);
  runs = Expand(*off);
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 2u);
  for (const auto& r : *runs) EXPECT_FALSE(r.keep_final());
  auto on = ParseSweep(Sweep("keep_final: yes\n"), "s.yaml");
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->keep_final);
}

TEST(Expand, CoarseToFineWithoutLrAxisPutsSeedsFirst) {
  auto sweep = ParseSweep(
      Sweep("grid:\n  n_layer: [1, 2]\n  seed: [0, 1]\norder: coarse_to_fine\n"), "s.yaml");
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  auto runs = Expand(*sweep);
  ASSERT_TRUE(runs.ok());
  std::vector<std::string> seen;
  for (const auto& r : *runs) seen.push_back(r.cell() + "/" + r.grid_values().at("seed"));
  EXPECT_EQ(seen,
            (std::vector<std::string>{"n_layer=1/0", "n_layer=2/0", "n_layer=1/1", "n_layer=2/1"}));
}

TEST(CoarseToFineOrder, EndsMiddleThenBisection) {
  EXPECT_EQ(CoarseToFineOrder(7), (std::vector<int>{0, 6, 3, 1, 5, 2, 4}));
  EXPECT_EQ(CoarseToFineOrder(1), (std::vector<int>{0}));
  EXPECT_EQ(CoarseToFineOrder(2), (std::vector<int>{0, 1}));
  EXPECT_EQ(CoarseToFineOrder(3), (std::vector<int>{0, 2, 1}));
  EXPECT_TRUE(CoarseToFineOrder(0).empty());
  for (int n = 1; n < 40; ++n) {
    auto order = CoarseToFineOrder(n);
    std::set<int> unique(order.begin(), order.end());
    EXPECT_EQ(static_cast<int>(order.size()), n);
    EXPECT_EQ(static_cast<int>(unique.size()), n);
    EXPECT_EQ(*unique.begin(), 0);
    EXPECT_EQ(*unique.rbegin(), n - 1);
  }
}

TEST(CellKey, SortedAndSeedless) {
  google::protobuf::Map<std::string, std::string> a, b;
  a["qk_norm"] = "none";
  a["lr"] = "0.001";
  a["seed"] = "3";
  b["lr"] = "0.001";
  b["qk_norm"] = "none";
  EXPECT_EQ(CellKey(a), "lr=0.001,qk_norm=none");
  EXPECT_EQ(CellKey(a), CellKey(b));
  // Axis order in the file does not change keys.
  auto s1 = ParseSweep(Sweep("grid: {lr: [0.1], n_layer: [2]}\n"), "s.yaml");
  auto s2 = ParseSweep(Sweep("grid: {n_layer: [2], lr: [0.1]}\n"), "s.yaml");
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(Expand(*s1)->at(0).cell(), Expand(*s2)->at(0).cell());
}

TEST(Axes, LogspaceNumLinspaceAndCanonicalText) {
  auto sweep = ParseSweep(Sweep("grid:\n"
                                "  lr: {logspace: {min: 0.001, max: 0.1, num: 3}}\n"
                                "  dropout: {linspace: {min: 0, max: 0.2, num: 3}}\n"
                                "  n_layer: {linspace: {min: 2, max: 6, num: 3}}\n"
                                "  beta2: [0.950, 9.9e-1]\n"),
                          "s.yaml");
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  EXPECT_EQ(sweep->grid[0].values, (std::vector<std::string>{"0.001", "0.01", "0.1"}));
  EXPECT_EQ(sweep->grid[1].values, (std::vector<std::string>{"0", "0.1", "0.2"}));
  EXPECT_EQ(sweep->grid[2].values, (std::vector<std::string>{"2", "4", "6"}));
  EXPECT_EQ(sweep->grid[3].values, (std::vector<std::string>{"0.95", "0.99"}));
}

TEST(Axes, LogspacePerDecadeIncludesMaxWithinRounding) {
  auto sweep =
      ParseSweep(Sweep("grid: {lr: {logspace: {min: 1e-4, max: 1e-2, per_decade: 2}}}\n"), "s");
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  EXPECT_EQ(sweep->grid[0].values,
            (std::vector<std::string>{"0.0001", "0.000316228", "0.001", "0.00316228", "0.01"}));
}

TEST(Rejections, EveryPathNamesFileLineAndField) {
  struct Case {
    std::string yaml;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Sweep("fixed: {fool: 1}\n"), "s.yaml:3: fixed.fool: unknown setting 'fool'"},
      {Sweep("fixed:\n  n_layers: 2\n"),
       "s.yaml:4: fixed.n_layers: unknown setting 'n_layers' (did you mean 'n_layer'?)"},
      {Sweep("grid:\n  qknorm: [none]\n"),
       "s.yaml:4: grid.qknorm: unknown setting 'qknorm' (did you mean 'qk_norm'?)"},
      {Sweep("colour: red\n"), "s.yaml:3: colour: unknown key 'colour'"},
      {Sweep("gird: {}\n"), "s.yaml:3: gird: unknown key 'gird' (did you mean 'grid'?)"},
      {Sweep("lr: 0.1\n"), "s.yaml:3: lr: 'lr' is a run setting: put it under fixed: or grid:"},
      {Sweep("grid:\n  lr: []\n"), "s.yaml:4: grid.lr: empty axis"},
      {Sweep("grid:\n  lr: [0.1, -0.1]\n"),
       "s.yaml:4: grid.lr: learning rates must be positive, got -0.1"},
      {Sweep("grid:\n  lr: [0, 0.1]\n"), "s.yaml:4: grid.lr: learning rates must be positive"},
      {Sweep("grid:\n  lr: [0.1, 0.10]\n"), "s.yaml:4: grid.lr: duplicate value 0.1"},
      {Sweep("fixed:\n  lr: 0.1\ngrid:\n  lr: [0.2]\n"),
       "s.yaml:6: grid.lr: also set under fixed: (line 4)"},
      {Sweep("grid:\n  n_head: [4, 3]\n"),
       "s.yaml:4: grid.n_head: n_embd (256) is not divisible by n_head (3)"},
      {Sweep("fixed:\n  n_embd: 100\ngrid:\n  n_head: [3]\n"),
       "s.yaml:6: grid.n_head: n_embd (100) is not divisible by n_head (3)"},
      {Sweep("fixed:\n  n_embd: 100\n  n_head: 3\n"),
       "s.yaml:5: fixed.n_head: n_embd (100) is not divisible by n_head (3)"},
      {Sweep("fixed:\n  n_embd: 12\n  n_head: 4\n  pos: rope\n"),
       "s.yaml:6: fixed.pos: rope needs an even head dimension, but n_embd/n_head = 3"},
      {Sweep("fixed: {warmup: 2000}\n"),
       "s.yaml:3: fixed.warmup: warmup (2000) is longer than steps (1000)"},
      {Sweep("fixed: {beta2: 1.0}\n"), "s.yaml:3: fixed.beta2: must be in [0, 1), got 1"},
      {Sweep("fixed: {min_lr_ratio: 1.5}\n"), "fixed.min_lr_ratio: must be in [0, 1], got 1.5"},
      {Sweep("fixed: {block_size: 1}\n"), "fixed.block_size: must be at least 2, got 1"},
      {Sweep("fixed: {eval_every: 0}\n"), "fixed.eval_every: must be at least 1, got 0"},
      {Sweep("fixed: {n_layer: 2.5}\n"), "s.yaml:3: fixed.n_layer: expected an integer, got '2.5'"},
      {Sweep("fixed: {lr: fast}\n"), "s.yaml:3: fixed.lr: expected a number, got 'fast'"},
      {Sweep("fixed: {bias: maybe}\n"), "fixed.bias: expected true or false, got 'maybe'"},
      {Sweep("fixed: {qk_norm: layrnorm}\n"),
       "fixed.qk_norm: 'layrnorm' is not one of none|layernorm|rmsnorm (did you mean "
       "'layernorm'?)"},
      {Sweep("fixed: {pos: alibi}\n"), "fixed.pos: 'alibi' is not one of learned|rope|none"},
      {Sweep("fixed: {init: xavier}\n"), "fixed.init: 'xavier' is not one of nanogpt|wortsman"},
      {Sweep("fixed: {weight_decay_mode: decoupled}\n"),
       "'decoupled' is not one of coupled|independent"},
      {Sweep("fixed: {device: tpu}\n"), "fixed.device: 'tpu' is not one of auto|cpu|cuda|mps"},
      {Sweep("fixed: {dtype: fp16}\n"), "fixed.dtype: 'fp16' is not one of float32|bfloat16"},
      {Sweep("fixed: {dtype: bfloat16, device: mps}\n"),
       "fixed.dtype: bfloat16 needs device cuda, cpu or auto, not mps"},
      {Sweep("fixed: {dtype: bfloat16}\n"),
       "fixed.dtype: bfloat16 in a sweep needs device: cuda or cpu (with device auto an MPS "
       "worker, which cannot run bfloat16, could lease the run)"},
      {Sweep("fixed: {lr: [0.1, 0.2]}\n"),
       "s.yaml:3: fixed.lr: expected a single value (lists belong under grid:)"},
      {Sweep("grid:\n  lr: 0.1\n"), "s.yaml:4: grid.lr: expected a list of values"},
      {Sweep("grid:\n  n_layer: {logspace: {min: 1, max: 10, num: 3}}\n"),
       "grid.n_layer: generates 3.16228, but n_layer takes integers"},
      {Sweep("grid:\n  qk_norm: {linspace: {min: 1, max: 2, num: 2}}\n"),
       "grid.qk_norm: logspace/linspace need a numeric setting"},
      {Sweep("grid:\n  lr: {logspace: {min: 0, max: 1, num: 3}}\n"),
       "s.yaml:4: grid.lr.logspace.min: logspace needs min > 0"},
      {Sweep("grid:\n  lr: {logspace: {min: 1, max: 0.1, num: 3}}\n"),
       "grid.lr.logspace.max: max (0.1) is below min (1)"},
      {Sweep("grid:\n  lr: {logspace: {min: 0.1, max: 1, num: 3, per_decade: 2}}\n"),
       "grid.lr.logspace: give per_decade or num, not both"},
      {Sweep("grid:\n  lr: {logspace: {min: 0.1, max: 1}}\n"),
       "grid.lr.logspace: needs num or per_decade"},
      {Sweep("grid:\n  lr: {logspace: {min: 0.1, max: 1, nmu: 3}}\n"),
       "grid.lr.logspace.nmu: unknown key 'nmu' (did you mean 'num'?)"},
      {Sweep("grid:\n  lr: {linspace: {min: 0.1, max: 1, per_decade: 3}}\n"),
       "grid.lr.linspace.per_decade: unknown key 'per_decade'"},
      {Sweep("grid:\n  lr: {linspace: {min: 0.1, max: 1, num: 0}}\n"),
       "grid.lr.linspace.num: must be between 1 and 100000"},
      {Sweep("grid:\n  lr: {range: [1, 2]}\n"),
       "grid.lr: expected a list of values, {logspace: {...}} or {linspace: {...}}"},
      {Sweep("order: random\n"), "s.yaml:3: order: 'random' is not one of grid|coarse_to_fine"},
      {Sweep("divergence: {patience: 0}\n"), "s.yaml:3: divergence.patience: must be at least 1"},
      {Sweep("divergence: {loss_above_init_by: -1}\n"),
       "divergence.loss_above_init_by: must be positive"},
      {Sweep("divergence: {patients: 3}\n"),
       "divergence.patients: unknown key 'patients' (did you mean 'patience'?)"},
      {Sweep("threshold: {train_loss: 0}\n"), "threshold.train_loss: must be positive"},
      {Sweep("threshold: {val_loss: 2}\n"), "threshold.val_loss: unknown key 'val_loss'"},
      {Sweep("max_attempts: 0\n"), "s.yaml:3: max_attempts: must be between 1 and 100"},
      {Sweep("priority: high\n"), "s.yaml:3: priority: expected an integer, got 'high'"},
      {Sweep("keep_final: sometimes\n"),
       "s.yaml:3: keep_final: expected true or false, got 'sometimes'"},
      {Sweep("keep_finals: false\n"),
       "s.yaml:3: keep_finals: unknown key 'keep_finals' (did you mean 'keep_final'?)"},
      {Sweep("fixed:\n  lr: 0.1\n  lr: 0.2\n"), "s.yaml:5: fixed.lr: duplicate key"},
      {Sweep("fixed: {lr: }\n"), "s.yaml:3: fixed.lr: missing value"},
      {std::string("name: bad name!\n") + kData, "s.yaml:1: name: 'bad name!' may only contain"},
      {std::string(kData) + "grid: {lr: [0.1]}\n", "s.yaml:1: name: missing"},
      {"name: t\ngrid: {lr: [0.1]}\n", "s.yaml:1: data: missing"},
      {"name: t\ndata: {train: a.txt}\n", "data.val: missing"},
      {"name: t\ndata: {train: a, val: b, tokenizer: {type: wordpiece}}\n",
       "s.yaml:2: data.tokenizer.type: 'wordpiece' is not one of bpe"},
      {"name: t\ndata: {train: a, val: b, tokenizer: {vocab: 70000}}\n",
       "s.yaml:2: data.tokenizer.vocab: must be between 260 and 65535, got 70000"},
      // The worker's limits (sweep::CheckVocab): refused at submit, not on every run.
      {"name: t\ndata: {train: a, val: b, tokenizer: {vocab: 256}}\n",
       "s.yaml:2: data.tokenizer.vocab: must be between 260 and 65535, got 256 (byte fallback "
       "needs 259 ids; token files are uint16)"},
      {"name: t\ndata: {train: a, val: b, tokenizer: {vocab: 65536}}\n",
       "s.yaml:2: data.tokenizer.vocab: must be between 260 and 65535, got 65536"},
      {"name: t\ndata: {train: a, val: b, test: c}\n", "s.yaml:2: data.test: unknown key 'test'"},
      {"name: t\ndata: [a, b]\n", "s.yaml:2: data: expected a mapping of keys"},
      {"name: t\n  data: {\n", "s.yaml:"},
      {"- just\n- a list\n", "s.yaml:1: a sweep file is a mapping"},
  };
  for (const auto& c : cases) {
    const std::string got = ErrorOf(c.yaml);
    EXPECT_THAT(got, HasSubstr(c.message)) << "for:\n" << c.yaml;
  }
}

TEST(Refine, ParsesWithDefaultsAndMarksLogAxes) {
  auto s = ParseSweep(Sweep("grid:\n"
                            "  qk_norm: [none, layernorm]\n"
                            "  lr: {logspace: {min: 1e-3, max: 1e-1, per_decade: 2}}\n"
                            "  seed: [0, 1]\n"
                            "refine: {axis: lr, until_ratio: 1.5, max_new_runs: 40}\n"
                            "prune: {above_divergence: true}\n"),
                      "s.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(s->refine.has_value());
  EXPECT_EQ(s->refine->axis(), "lr");
  EXPECT_THAT(s->refine->boundaries(),
              ::testing::ElementsAre("optimum", "max_stable", "max_good", "eta_dagger"));
  EXPECT_DOUBLE_EQ(s->refine->until_ratio(), 1.5);
  EXPECT_EQ(s->refine->max_new_runs(), 40);
  EXPECT_TRUE(s->prune_above_divergence);
  EXPECT_FALSE(s->grid[0].log_spaced);
  EXPECT_TRUE(s->grid[1].log_spaced);

  auto list = ParseSweep(Sweep("grid: {lr: [1e-3, 3e-3, 1e-2]}\n"
                               "refine: {axis: lr, boundaries: [max_good], max_new_runs: 0}\n"),
                         "s.yaml");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->grid[0].log_spaced);
  EXPECT_THAT(list->refine->boundaries(), ::testing::ElementsAre("max_good"));
  EXPECT_DOUBLE_EQ(list->refine->until_ratio(), 1.3);
  auto plain = ParseSweep(Sweep("grid: {lr: [1e-3, 1e-2]}\n"), "s.yaml");
  EXPECT_FALSE(plain->refine.has_value());
  EXPECT_FALSE(plain->prune_above_divergence);
}

TEST(Refine, PruningPutsEverySeedOfAnLrBeforeTheNextLr) {
  const std::string body =
      "grid:\n  lr: [0.001, 0.01, 0.1]\n  seed: [0, 1]\norder: coarse_to_fine\n";
  auto lrs_in_order = [](const std::string& yaml) {
    std::vector<std::string> out;
    auto s = ParseSweep(yaml, "s.yaml");
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return out;
    auto runs = Expand(*s);
    EXPECT_TRUE(runs.ok()) << runs.status();
    if (!runs.ok()) return out;
    for (const auto& r : *runs) {
      out.push_back(r.grid_values().at("lr") + "/" + r.grid_values().at("seed"));
    }
    return out;
  };
  EXPECT_THAT(lrs_in_order(Sweep(body)),
              ::testing::ElementsAre("0.001/0", "0.1/0", "0.01/0", "0.001/1", "0.1/1", "0.01/1"));
  EXPECT_THAT(lrs_in_order(Sweep(body + "prune: {above_divergence: true}\n")),
              ::testing::ElementsAre("0.001/0", "0.001/1", "0.1/0", "0.1/1", "0.01/0", "0.01/1"));
}

TEST(Refine, BadInputIsRefusedWithFileLineAndField) {
  const std::string grid =
      "grid:\n"
      "  lr: {logspace: {min: 1e-3, max: 1e-1, per_decade: 2}}\n"
      "  n_layer: [1, 2, 4]\n"
      "  seed: [0, 1]\n"
      "  beta2: {linspace: {min: 0.9, max: 0.99, num: 3}}\n";  // lines 3-7
  struct Case {
    std::string body;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"refine: {axis: n_layer, max_new_runs: 8}\n",
       "s.yaml:8: refine.axis: grid.n_layer (line 5) is not a log-spaced decimal axis"},
      {"refine: {axis: beta2, max_new_runs: 8}\n",
       "s.yaml:8: refine.axis: grid.beta2 (line 7) is not a log-spaced decimal axis"},
      {"refine: {axis: seed, max_new_runs: 8}\n",
       "s.yaml:8: refine.axis: the seed axis cannot be refined"},
      {"refine: {axis: warmup, max_new_runs: 8}\n",
       "s.yaml:8: refine.axis: 'warmup' is not a grid axis"},
      {"refine:\n  axis: lr\n  until_ratio: 1\n  max_new_runs: 8\n",
       "s.yaml:10: refine.until_ratio: must be a finite number > 1"},
      {"refine:\n  axis: lr\n  until_ratio: 0.5\n  max_new_runs: 8\n",
       "s.yaml:10: refine.until_ratio: must be a finite number > 1"},
      {"refine:\n  axis: lr\n  max_new_runs: -1\n", "s.yaml:10: refine.max_new_runs: must be >= 0"},
      {"refine:\n  axis: lr\n  max_new_runs: 8\n  boundaries: [max_stable, eta_daggr]\n",
       "s.yaml:11: refine.boundaries: unknown boundary 'eta_daggr': one of "
       "optimum|max_stable|max_good|eta_dagger (did you mean 'eta_dagger'?)"},
      {"refine:\n  axis: lr\n  max_new_runs: 8\n  boundaries: [max_good, max_good]\n",
       "s.yaml:11: refine.boundaries: 'max_good' listed twice"},
      {"refine: {axis: lr}\n", "s.yaml:8: refine.max_new_runs: missing"},
      {"refine: {max_new_runs: 3}\n", "s.yaml:8: refine.axis: missing"},
      {"refine: {axis: lr, max_new_runs: 3, untill_ratio: 2}\n",
       "s.yaml:8: refine.untill_ratio: unknown key 'untill_ratio' (did you mean 'until_ratio'?)"},
      {"refine: {axis: lr, max_new_runs: 8, seeds: {max: 1}}\n",
       "s.yaml:8: refine.seeds.max: 1 is below the 2 seeds grid.seed (line 6) already gives"},
      {"refine:\n  axis: lr\n  max_new_runs: 8\n  seeds: {max: 2.5}\n",
       "s.yaml:11: refine.seeds.max: expected an integer, got '2.5'"},
      {"refine:\n  axis: lr\n  max_new_runs: 8\n  seeds: {max: 0}\n",
       "s.yaml:11: refine.seeds.max: must be between 1 and"},
      {"refine:\n  axis: lr\n  max_new_runs: 8\n  seeds: {max: 4, min: 2}\n",
       "s.yaml:11: refine.seeds.min: unknown key 'min'"},
      {"refine:\n  axis: lr\n  max_new_runs: 8\n  seeds: {maxx: 4}\n",
       "s.yaml:11: refine.seeds.maxx: unknown key 'maxx' (did you mean 'max'?)"},
      {"refine:\n  axis: lr\n  max_new_runs: 8\n  seeds: {}\n",
       "s.yaml:11: refine.seeds.max: missing"},
      {"refine:\n  axis: lr\n  max_new_runs: 8\n  seeds: 5\n",
       "s.yaml:11: refine.seeds: expected a mapping"},
      {"refine:\n  axis: lr\n  max_new_runs: 8\n  seed: {max: 5}\n",
       "s.yaml:11: refine.seed: unknown key 'seed' (did you mean 'seeds'?)"},
      {"prune: {above_divergence: maybe}\n",
       "s.yaml:8: prune.above_divergence: 'maybe' is not true or false"},
      {"prune: {above: true}\n", "s.yaml:8: prune.above: unknown key 'above'"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(ErrorOf(Sweep(grid + c.body)), HasSubstr(c.message)) << c.body;
  }
  EXPECT_THAT(ErrorOf(Sweep("grid: {n_layer: [1, 2]}\nprune: {above_divergence: true}\n")),
              HasSubstr("s.yaml:4: prune.above_divergence: needs a learning-rate grid axis"));
  EXPECT_THAT(ErrorOf(Sweep("grid: {lr: [0.1, 0.2, 0.3]}\nrefine: {axis: lr, max_new_runs: 1}\n")),
              HasSubstr("s.yaml:4: refine.axis: grid.lr (line 3) is not a log-spaced"));
  // Extra seeds are new values of the seed axis: a sweep whose seed is fixed has none to add.
  EXPECT_THAT(ErrorOf(Sweep("fixed: {seed: 3}\ngrid: {lr: [0.001, 0.01]}\n"
                            "refine:\n  axis: lr\n  max_new_runs: 4\n  seeds:\n    max: 3\n")),
              HasSubstr("s.yaml:9: refine.seeds.max: needs a seed axis in the grid"));
}

TEST(Refine, SeedsMaxParsesAndMayEqualTheGridsSeeds) {
  const std::string grid = "grid: {lr: [0.001, 0.01], seed: [0, 1, 2]}\n";
  auto s =
      ParseSweep(Sweep(grid + "refine: {axis: lr, max_new_runs: 8, seeds: {max: 5}}\n"), "s.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->refine->seeds_max(), 5);
  auto same =
      ParseSweep(Sweep(grid + "refine: {axis: lr, max_new_runs: 8, seeds: {max: 3}}\n"), "s.yaml");
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->refine->seeds_max(), 3);
  auto off = ParseSweep(Sweep(grid + "refine: {axis: lr, max_new_runs: 8}\n"), "s.yaml");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->refine->seeds_max(), 0);
  // The stored file reads back the same (the server plans from it).
  auto stored = ParseStoredSweep(
      Sweep(grid + "refine: {axis: lr, max_new_runs: 8, seeds: {max: 5}}\n"), "s.yaml");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->refine->seeds_max(), 5);
}

// `analysis:` (docs/sweep-file.md#analysis-options): the options the server plans refinement
// and pruning with, and `ablate report`'s defaults.
TEST(AnalysisOptions, ParsedWhenGivenAndUnsetOtherwise) {
  auto s = ParseSweep(Sweep("grid:\n"
                            "  lr: [0.001, 0.01, 0.1]\n"
                            "  pos: [learned, rope]\n"
                            "  n_layer: [1, 2]\n"
                            "analysis: {tau: 0.3, delta: 0.05, lr_range: [0.001, 0.1], "
                            "variant: pos, by: n_layer}\n"),
                      "s.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(*s->analysis.tau, 0.3);
  EXPECT_DOUBLE_EQ(*s->analysis.delta, 0.05);
  EXPECT_DOUBLE_EQ(*s->analysis.lr_min, 0.001);
  EXPECT_DOUBLE_EQ(*s->analysis.lr_max, 0.1);
  EXPECT_EQ(*s->analysis.variant, "pos");
  EXPECT_EQ(*s->analysis.by, "n_layer");
  auto plain = ParseSweep(Sweep("grid: {lr: [0.001, 0.01]}\nanalysis: {tau: 0.1}\n"), "s.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_DOUBLE_EQ(*plain->analysis.tau, 0.1);
  EXPECT_FALSE(plain->analysis.delta.has_value());
  EXPECT_FALSE(plain->analysis.lr_min.has_value());
  EXPECT_FALSE(plain->analysis.variant.has_value());
  // The stored copy re-reads to the same options, without walking the grid.
  auto stored =
      ParseStoredSweep(Sweep("grid: {lr: [0.001, 0.01]}\nanalysis: {tau: 0.1}\n"), "s.yaml");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_DOUBLE_EQ(*stored->analysis.tau, 0.1);
}

// ExpandPoint is the grid walk's run at any point: derived settings follow the point's values.
TEST(ExpandPoint, GivesTheGridsRunAtAPointBetweenGridValues) {
  auto s = ParseSweep(Sweep("fixed: {min_lr_ratio: 0.2}\n"
                            "grid: {lr: [0.001, 0.1], n_layer: [1, 2], seed: [0, 1]}\n"),
                      "s.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  google::protobuf::Map<std::string, std::string> at;
  at["lr"] = "0.01";
  at["n_layer"] = "2";
  at["seed"] = "1";
  auto run = ExpandPoint(*s, at);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_DOUBLE_EQ(run->config().lr(), 0.01);
  EXPECT_DOUBLE_EQ(run->config().min_lr(), 0.002);  // 0.2 x its own lr, not a template's
  EXPECT_EQ(run->config().n_layer(), 2);
  EXPECT_EQ(run->config().seed(), 1);
  EXPECT_EQ(run->cell(), "lr=0.01,n_layer=2");
  // A grid point comes out exactly as the walk made it.
  auto grid = Expand(*s);
  ASSERT_TRUE(grid.ok());
  const ablate::v1::RunSpec& first = grid->front();
  auto same = ExpandPoint(*s, first.grid_values());
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*same, first));
  at.erase("n_layer");
  EXPECT_THAT(ExpandPoint(*s, at).status().message(),
              HasSubstr("s.yaml:4: grid.n_layer: no value given"));
  at["n_layer"] = "x";
  EXPECT_THAT(ExpandPoint(*s, at).status().message(), HasSubstr("s.yaml:4: grid.n_layer:"));
  at["n_layer"] = "2";
  at["pos"] = "rope";
  EXPECT_THAT(ExpandPoint(*s, at).status().message(), HasSubstr("'pos' is not a grid axis"));
}

// A seed beyond the grid's is a run only refine.seeds asks for.
TEST(ExpandPoint, TakesASeedBeyondTheGridsOnlyWithRefineSeeds) {
  const std::string grid =
      "fixed: {min_lr_ratio: 0.2}\ngrid: {lr: [0.001, 0.01, 0.1], n_layer: [1, 2], seed: [0, 1]}\n";
  auto plain = ParseSweep(Sweep(grid + "refine: {axis: lr, max_new_runs: 8}\n"), "s.yaml");
  auto seeded =
      ParseSweep(Sweep(grid + "refine: {axis: lr, max_new_runs: 8, seeds: {max: 4}}\n"), "s.yaml");
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(seeded.ok()) << seeded.status();
  google::protobuf::Map<std::string, std::string> at;
  at["lr"] = "0.01";
  at["n_layer"] = "2";
  at["seed"] = "2";
  EXPECT_THAT(ExpandPoint(*plain, at).status().message(),
              HasSubstr("s.yaml:4: grid.seed: 2 is not one of the grid's seeds"));
  auto extra = ExpandPoint(*seeded, at);
  ASSERT_TRUE(extra.ok()) << extra.status();
  // Exactly the grid's run at that point but for the seed.
  at["seed"] = "1";
  auto listed = ExpandPoint(*seeded, at);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(extra->config().seed(), 2);
  EXPECT_EQ(extra->grid_values().at("seed"), "2");
  EXPECT_EQ(extra->cell(), listed->cell());
  ablate::v1::RunSpec expected = *listed;
  expected.mutable_config()->set_seed(2);
  (*expected.mutable_grid_values())["seed"] = "2";
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*extra, expected));
  // refine.seeds lets seeds through, nothing else: an LR is still checked as before.
  at["n_layer"] = "x";
  EXPECT_THAT(ExpandPoint(*seeded, at).status().message(), HasSubstr("s.yaml:4: grid.n_layer:"));

  // Without a seed axis the config's seed is the only one.
  auto fixed = ParseSweep(Sweep("fixed: {seed: 3}\ngrid: {lr: [0.001, 0.01]}\n"), "s.yaml");
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  google::protobuf::Map<std::string, std::string> point;
  point["lr"] = "0.001";
  point["seed"] = "3";
  EXPECT_TRUE(ExpandPoint(*fixed, point).ok());
  point["seed"] = "4";
  EXPECT_THAT(ExpandPoint(*fixed, point).status().message(),
              HasSubstr("grid: no seed axis, so every run has seed 3, not 4"));
}

TEST(AnalysisOptions, BadInputIsRefusedWithFileLineAndField) {
  const std::string grid =
      "grid:\n"
      "  lr: {logspace: {min: 1e-3, max: 1e-1, per_decade: 2}}\n"
      "  n_layer: [1, 2, 4]\n"
      "  qk_norm: [none, layernorm]\n"
      "  seed: [0, 1]\n";  // lines 3-7
  struct Case {
    std::string body;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"analysis: {tua: 0.3}\n", "s.yaml:8: analysis.tua: unknown key 'tua' (did you mean 'tau'?)"},
      {"analysis:\n  tau: 0\n", "s.yaml:9: analysis.tau: must be a number in (0, 1)"},
      {"analysis:\n  tau: -0.2\n", "s.yaml:9: analysis.tau: must be a number in (0, 1)"},
      {"analysis:\n  tau: 1\n", "s.yaml:9: analysis.tau: must be a number in (0, 1)"},
      {"analysis:\n  tau: abc\n", "s.yaml:9: analysis.tau:"},
      {"analysis:\n  delta: -0.01\n", "s.yaml:9: analysis.delta: must be a finite number >= 0"},
      {"analysis:\n  lr_range: [0.01]\n",
       "s.yaml:9: analysis.lr_range: expected [min, max] with 0 < min < max"},
      {"analysis:\n  lr_range: [0.05, 0.01]\n",
       "s.yaml:9: analysis.lr_range: expected [min, max] with 0 < min < max"},
      {"analysis:\n  lr_range: [1e-4, 0.05]\n",
       "s.yaml:9: analysis.lr_range: 0.0001 is outside the grid's lr values [0.001, 0.1]"},
      {"analysis:\n  lr_range: [0.01, 0.3]\n",
       "s.yaml:9: analysis.lr_range: 0.3 is outside the grid's lr values [0.001, 0.1]"},
      {"analysis:\n  variant: pos\n",
       "s.yaml:9: analysis.variant: 'pos' is not a grid axis (the grid's axes: lr, n_layer, "
       "qk_norm, seed)"},
      {"analysis:\n  by: n_layers\n",
       "s.yaml:9: analysis.by: 'n_layers' is not a grid axis (did you mean 'n_layer'?)"},
      {"analysis:\n  by: seed\n", "s.yaml:9: analysis.by: the seed axis"},
      {"analysis:\n  variant: lr\n", "s.yaml:9: analysis.variant: the lr axis"},
      {"analysis:\n  variant: n_layer\n  by: n_layer\n",
       "s.yaml:10: analysis.by: 'n_layer' is the same axis as analysis.variant"},
      {"analysis: [0.2]\n", "s.yaml:8: analysis:"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(ErrorOf(Sweep(grid + c.body)), HasSubstr(c.message)) << c.body;
  }
  // The lr range is checked against refine.axis when the sweep refines another axis, and the
  // grid may come after analysis:.
  EXPECT_THAT(ErrorOf(Sweep("analysis: {lr_range: [0.001, 0.1]}\ngrid: {n_layer: [1, 2]}\n")),
              HasSubstr("s.yaml:3: analysis.lr_range: the grid has no lr axis"));
}

TEST(Rejections, MalformedDocumentsComeBackAsErrorsNotExceptions) {
  const std::vector<std::string> docs = {
      "",
      "\t- x",
      "name: [",
      "{{{{",
      std::string("\x00\xff\xfe", 3),
      "name: t\ndata: *nowhere\n",
      "name: t\ndata: {train: a, val: b}\ngrid: {lr: [[0.1]]}\n",
      "name: t\ndata: {train: a, val: b}\ngrid: {lr: {logspace: 3}}\n",
      "name: t\ndata: {train: a, val: b}\ngrid: [lr, n_layer]\n",
      "name: t\ndata: {train: a, val: b}\nfixed: [lr]\n",
      "name: {a: 1}\n",
      "? [complex, key]\n: value\n",
  };
  for (const auto& doc : docs) {
    EXPECT_FALSE(ParseSweep(doc, "s.yaml").ok()) << doc;
    EXPECT_FALSE(ParseRunFile(doc, "r.yaml").ok()) << doc;
  }
}

TEST(Rejections, GridOverTheLimit) {
  Limits limits;
  limits.max_runs = 10;
  auto sweep = ParseSweep(Sweep("grid:\n  lr: {logspace: {min: 1e-4, max: 1, num: 4}}\n"
                                "  seed: [0, 1, 2]\n"),
                          "s.yaml", limits);
  ASSERT_FALSE(sweep.ok());
  EXPECT_THAT(std::string(sweep.status().message()),
              HasSubstr("s.yaml:3: grid: expands to more than 10 runs"));
  // 4 * 2 = 8 fits.
  EXPECT_TRUE(ParseSweep(Sweep("grid:\n  lr: {logspace: {min: 1e-4, max: 1, num: 4}}\n"
                               "  seed: [0, 1]\n"),
                         "s.yaml", limits)
                  .ok());
}

TEST(Rejections, ExpandChecksHandBuiltSpecs) {
  SweepSpec spec;
  spec.name = "x";
  spec.file_name = "api";
  spec.grid.push_back({"lr", {}, 9});
  EXPECT_THAT(std::string(Expand(spec).status().message()), HasSubstr("api:9: grid.lr: empty"));
  spec.grid[0] = {"n_head", {"3"}, 4};
  EXPECT_THAT(std::string(Expand(spec).status().message()),
              HasSubstr("api:4: grid.n_head: n_embd (256) is not divisible by n_head (3)"));
}

TEST(ApplyDefaults, FillsEverySettingAndValidates) {
  ablate::v1::RunConfig c;
  c.set_lr(0.01);
  ApplyDefaults(&c);
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c);
  EXPECT_EQ(c.n_layer(), 4);
  EXPECT_EQ(c.n_head(), 4);
  EXPECT_EQ(c.n_embd(), 256);
  EXPECT_EQ(c.block_size(), 256);
  EXPECT_EQ(c.dropout(), 0.0);
  EXPECT_FALSE(c.bias());
  EXPECT_TRUE(c.tie_embeddings());
  EXPECT_EQ(c.qk_norm(), "none");
  EXPECT_EQ(c.pos(), "learned");
  EXPECT_EQ(c.init(), "nanogpt");
  EXPECT_EQ(c.qk_norm_eps(), 1e-6);
  EXPECT_EQ(c.norm_eps(), 1e-5);
  EXPECT_DOUBLE_EQ(c.min_lr(), 0.001);
  EXPECT_EQ(c.beta1(), 0.9);
  EXPECT_EQ(c.beta2(), 0.95);
  EXPECT_EQ(c.eps(), 1e-8);
  EXPECT_EQ(c.weight_decay(), 0.1);
  EXPECT_EQ(c.weight_decay_mode(), "coupled");
  EXPECT_EQ(c.warmup(), 100);
  EXPECT_EQ(c.steps(), 1000);
  EXPECT_EQ(c.grad_clip(), 1.0);
  EXPECT_EQ(c.batch_size(), 16);
  EXPECT_EQ(c.grad_accum(), 1);
  EXPECT_EQ(c.seed(), 0);
  EXPECT_EQ(c.eval_every(), 100);
  EXPECT_EQ(c.eval_batches(), 8);
  EXPECT_EQ(c.probe_every(), 50);
  EXPECT_EQ(c.log_every(), 10);
  EXPECT_EQ(c.checkpoint_every(), 250);
  EXPECT_EQ(c.device(), "auto");
  EXPECT_EQ(c.dtype(), "float32");
  // Explicit zero values are kept, not overwritten by defaults.
  ablate::v1::RunConfig z;
  z.set_weight_decay(0);
  z.set_tie_embeddings(false);
  ApplyDefaults(&z);
  EXPECT_EQ(z.weight_decay(), 0);
  EXPECT_FALSE(z.tie_embeddings());
}

TEST(ValidateConfig, NamesTheField) {
  ablate::v1::RunConfig c;
  EXPECT_THAT(std::string(ValidateConfig(c).message()), HasSubstr("n_layer: is not set"));
  ApplyDefaults(&c);
  c.set_n_head(5);
  EXPECT_EQ(ValidateConfig(c).message(), "n_head: n_embd (256) is not divisible by n_head (5)");
  c.set_n_head(4);
  c.set_qk_norm("bogus");
  EXPECT_THAT(std::string(ValidateConfig(c).message()), HasSubstr("qk_norm: 'bogus'"));
  c.set_qk_norm("rmsnorm");
  c.set_min_lr(1.0);
  EXPECT_THAT(std::string(ValidateConfig(c).message()), HasSubstr("min_lr: min_lr (1) is above"));
}

// Every rule the worker enforces on a DataSpec (it calls ValidateRunSpec before training).
TEST(ValidateData, NamesTheField) {
  ablate::v1::DataSpec d;
  EXPECT_EQ(ValidateData(d).message(), "data.train: missing (a text file or synthetic:N)");
  d.set_train("stories.txt");
  EXPECT_TRUE(ValidateData(d).ok()) << "val, type and vocab unset: train text, bpe, 4096";
  d.set_val("synthetic:0");
  EXPECT_EQ(ValidateData(d).message(),
            "data.val: expected synthetic:N with N a whole number from 1 to 1000000, got "
            "'synthetic:0'");
  d.set_val("synthetic:1000000");
  EXPECT_TRUE(ValidateData(d).ok());
  d.mutable_tokenizer()->set_type("wordpiece");
  EXPECT_EQ(ValidateData(d).message(), "data.tokenizer.type: 'wordpiece' is not one of bpe");
  d.mutable_tokenizer()->set_type("bpe");
  for (int vocab : {-1, 259, 65536}) {
    d.mutable_tokenizer()->set_vocab(vocab);
    EXPECT_THAT(std::string(ValidateData(d).message()),
                HasSubstr(absl::StrCat("data.tokenizer.vocab: must be between 260 and 65535, got ",
                                       vocab)));
  }
  for (int vocab : {260, 65535}) {
    d.mutable_tokenizer()->set_vocab(vocab);
    EXPECT_TRUE(ValidateData(d).ok()) << vocab;
  }
}

TEST(ValidateRunSpec, ChecksConfigAndData) {
  ablate::v1::RunSpec spec;
  ApplyDefaults(spec.mutable_config());
  spec.mutable_data()->set_train("synthetic:10");
  EXPECT_TRUE(ValidateRunSpec(spec).ok());
  spec.mutable_data()->mutable_tokenizer()->set_vocab(256);
  EXPECT_THAT(std::string(ValidateRunSpec(spec).message()),
              HasSubstr("data.tokenizer.vocab: must be between 260"));
  spec.mutable_data()->mutable_tokenizer()->set_vocab(512);
  spec.mutable_config()->set_n_head(5);
  EXPECT_EQ(ValidateRunSpec(spec).message(), "n_head: n_embd (256) is not divisible by n_head (5)");
}

// Every spec a sweep file expands to passes the worker's check.
TEST(ValidateRunSpec, AcceptsEveryExpandedRun) {
  auto sweep = ParseSweep(Sweep("grid: {lr: [0.001, 0.01], n_layer: [1, 2]}\n"), "s.yaml");
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  auto runs = Expand(*sweep);
  ASSERT_TRUE(runs.ok()) << runs.status();
  for (const auto& run : *runs) EXPECT_TRUE(ValidateRunSpec(run).ok()) << run.cell();
}

TEST(ParseRunFile, TopLevelSettingsWithDefaults) {
  auto run = ParseRunFile(R"(name: one
data: {train: synthetic:100, val: synthetic:20, tokenizer: {vocab: 512}}
lr: 3e-3
n_layer: 2
qk_norm: rmsnorm
steps: 5e2
threshold: {train_loss: 3.5}
)",
                          "r.yaml");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->sweep_name(), "one");
  EXPECT_EQ(run->config().lr(), 0.003);
  EXPECT_EQ(run->config().n_layer(), 2);
  EXPECT_EQ(run->config().steps(), 500);
  EXPECT_EQ(run->config().qk_norm(), "rmsnorm");
  EXPECT_EQ(run->config().n_embd(), 256);
  EXPECT_EQ(run->data().tokenizer().vocab(), 512);
  EXPECT_EQ(run->data().tokenizer().type(), "bpe");
  EXPECT_EQ(run->divergence().loss_above_init_by(), 1.0);
  EXPECT_EQ(run->threshold().train_loss(), 3.5);
  EXPECT_TRUE(ValidateConfig(run->config()).ok());
}

TEST(ParseRunFile, Rejections) {
  const std::string data = "data: {train: a, val: b}\n";
  EXPECT_THAT(RunFileErrorOf(data + "lr: [0.1, 0.2]\n"),
              HasSubstr("r.yaml:2: lr: a single-run file takes one value per setting"));
  EXPECT_THAT(RunFileErrorOf(data + "n_layr: 2\n"),
              HasSubstr("r.yaml:2: n_layr: unknown key 'n_layr' (did you mean 'n_layer'?)"));
  EXPECT_THAT(RunFileErrorOf(data + "n_head: 7\n"),
              HasSubstr("r.yaml:2: n_head: n_embd (256) is not divisible by n_head (7)"));
  EXPECT_THAT(RunFileErrorOf(data + "grid: {lr: [1]}\n"), HasSubstr("r.yaml:2: grid: unknown key"));
  EXPECT_THAT(RunFileErrorOf("lr: 0.1\n"), HasSubstr("r.yaml:1: data: missing"));
  EXPECT_THAT(RunFileErrorOf(data + "warmup: 5000\n"),
              HasSubstr("r.yaml:2: warmup: warmup (5000) is longer than steps (1000)"));
  EXPECT_THAT(RunFileErrorOf("data: {train: a, val: b, tokenizer: {vocab: 256}}\n"),
              HasSubstr("r.yaml:1: data.tokenizer.vocab: must be between 260 and 65535, got 256"));
}

// Hostile input: every case is refused with FILE:LINE and the field, cheaply, and the message
// never echoes more than a short prefix of the offending value.
TEST(Hostile, DeepNestingIsRefusedOnTheRawText) {
  // 800 KB of "[": yaml-cpp alone would allocate ~114 MB building the nodes.
  const std::string flow =
      Sweep("description: " + std::string(400000, '[') + std::string(400000, ']') + "\n");
  EXPECT_EQ(ErrorOf(flow), "s.yaml:3: nested more than 32 levels deep");
  std::string block = Sweep("grid:\n");
  for (int i = 0; i < 40; ++i) block += std::string(2 * (i + 1), ' ') + "k:\n";
  EXPECT_EQ(ErrorOf(block), "s.yaml:35: nested more than 32 levels deep");
  std::string dashes = Sweep("fixed:\n  x: ");
  for (int i = 0; i < 40; ++i) dashes += "- ";
  EXPECT_EQ(ErrorOf(dashes + "1\n"), "s.yaml:4: nested more than 32 levels deep");
  // The same characters as text of a block scalar, a quoted string or a comment are no nesting.
  const std::string brackets(100, '[');
  EXPECT_EQ(ErrorOf(Sweep("description: |\n  " + brackets + "\n  - - - - - - - - - - - -\n")),
            "OK");
  EXPECT_EQ(ErrorOf(Sweep("description: '" + brackets + " it''s'\n")), "OK");
  EXPECT_EQ(ErrorOf(Sweep("description: \"" + brackets + " \\\" \"\n")), "OK");
  EXPECT_EQ(ErrorOf(Sweep("# " + brackets + "\n")), "OK");
  EXPECT_EQ(ErrorOf(Sweep("description: it's " + brackets + "\n")), "OK");
}

TEST(Hostile, TooManyNodesAreRefusedOnTheRawText) {
  std::string seeds = "[0";
  for (int i = 1; i < 60000; ++i) absl::StrAppend(&seeds, ",", i);
  EXPECT_THAT(ErrorOf(Sweep("grid:\n  seed: " + seeds + "]\n")),
              HasSubstr("s.yaml:4: more than 50000 YAML nodes"));
}

TEST(Hostile, NulAndInvalidUtf8AreRefusedWithTheirLine) {
  EXPECT_EQ(ErrorOf(Sweep(std::string("description: a\0b\n", 17))),
            "s.yaml:3: text: contains a NUL byte at offset 14");
  EXPECT_EQ(ErrorOf(Sweep("description: \xff\n")), "s.yaml:3: text: not valid UTF-8 at offset 13");
  // A "\0" escape puts a NUL into the parsed value; PostgreSQL would cut the string there.
  EXPECT_EQ(ErrorOf("name: t\ndata: {train: \"a\\0b\", val: b}\n"),
            "s.yaml:2: data.train: contains a NUL byte at offset 1");
  EXPECT_EQ(ErrorOf("name: \"t\\0\"\n" + std::string(kData)),
            "s.yaml:1: name: contains a NUL byte at offset 1");
  EXPECT_EQ(ErrorOf(Sweep("description: \"x\\0\"\n")),
            "s.yaml:3: description: contains a NUL byte at offset 1");
}

TEST(Hostile, HugeValuesAreRefusedWithoutEchoingThem) {
  const std::string huge(1 << 20, 'n');
  std::string e = ErrorOf("name: " + huge + "\n" + kData);
  EXPECT_THAT(e, HasSubstr("s.yaml:1: name: 1048576 bytes is too long (at most 1024)"));
  EXPECT_LT(e.size(), 200u) << e.substr(0, 300);
  // Within the scalar cap but over the name cap, with a bad character: the prefix only.
  e = ErrorOf("name: " + std::string(1000, 'n') + "!\n" + kData);
  EXPECT_THAT(e, HasSubstr("s.yaml:1: name: 1001 bytes is too long (at most 128)"));
  EXPECT_LT(e.size(), 200u) << e;
  e = ErrorOf(Sweep("fixed: {qk_norm: " + huge + "}\n"));
  EXPECT_EQ(e, "s.yaml:3: fixed.qk_norm: 1048576 bytes is too long (at most 1024)");
  e = ErrorOf("name: t\ndata: {train: " + huge + ", val: b}\n");
  EXPECT_EQ(e, "s.yaml:2: data.train: 1048576 bytes is too long (at most 1024)");
  e = ErrorOf(Sweep(std::string(1000, 'k') + ": 1\n"));
  EXPECT_EQ(e, "s.yaml:3: key: 1000 bytes is too long (at most 128)");
  e = ErrorOf(Sweep("fixed: {" + std::string(200, 'k') + ": 1}\n"));
  EXPECT_EQ(e, "s.yaml:3: fixed key: 200 bytes is too long (at most 128)");
  EXPECT_EQ(ErrorOf(Sweep("description: " + std::string(70000, 'd') + "\n")),
            "s.yaml:3: description: 70000 bytes is too long (at most 65536)");
  EXPECT_EQ(ErrorOf(Sweep("description: " + std::string(60000, 'd') + "\n")), "OK");
}

TEST(Hostile, FileNameIsCheckedFirst) {
  auto s = ParseSweep(Sweep(""), std::string("a\0b.yaml", 8));
  EXPECT_EQ(s.status().message(), "file_name: contains a NUL byte at offset 1");
  s = ParseSweep(Sweep(""), std::string(2000, 'f'));
  EXPECT_EQ(s.status().message(), "file_name: 2000 bytes is too long (at most 1024)");
  EXPECT_EQ(ParseRunFile("lr: 0.1\n", std::string(2000, 'f')).status().message(),
            "file_name: 2000 bytes is too long (at most 1024)");
}

TEST(Hostile, GeneratedValuesMustBeFinite) {
  EXPECT_EQ(ErrorOf(Sweep("grid:\n  lr: {logspace: {min: 1e-300, max: 1e300, num: 2}}\n")),
            "s.yaml:4: grid.lr: generates inf; values must be finite (narrow min/max)");
  EXPECT_THAT(
      ErrorOf(Sweep("grid:\n  weight_decay: {linspace: {min: -1.7e308, max: 1.7e308, num: 3}}\n")),
      HasSubstr("s.yaml:4: grid.weight_decay: generates -nan; values must be finite"));
  // An integer setting far beyond int64 is refused before the conversion (undefined behaviour).
  EXPECT_EQ(ErrorOf(Sweep("grid:\n  steps: {linspace: {min: 1, max: 1e300, num: 2}}\n")),
            "s.yaml:4: grid.steps: generates 1e+300, too large for steps");
}

TEST(Hostile, GeneratorsStopAtTheGridLimit) {
  // Found by the fuzzer: a 100,000-value axis was generated in full before the grid limit refused
  // it (over a second under ASan). An axis longer than the limit is now refused before it exists.
  Limits limits;
  limits.max_runs = 10;
  auto s = ParseSweep(Sweep("grid:\n  seed: {linspace: {min: 0, max: 99999, num: 100000}}\n"),
                      "s.yaml", limits);
  EXPECT_EQ(s.status().message(),
            "s.yaml:4: grid.seed.linspace.num: must be between 1 and 10 (the grid limit)");
  s = ParseSweep(Sweep("grid:\n  lr: {logspace: {min: 1e-10, max: 1, per_decade: 2}}\n"), "s.yaml",
                 limits);
  EXPECT_EQ(s.status().message(),
            "s.yaml:4: grid.lr.logspace: generates more than 10 values (the grid limit); raise "
            "min or lower per_decade");
}

TEST(Hostile, SyntheticDataIsAPositiveCountWithinTheCap) {
  for (const std::string bad :
       {"synthetic:", "synthetic:0", "synthetic:-5", "synthetic:abc", "synthetic:1e3",
        "synthetic: 5", "synthetic:1000001", "synthetic:99999999999999999999"}) {
    EXPECT_EQ(ErrorOf("name: t\ndata: {train: \"" + bad + "\", val: b}\n"),
              "s.yaml:2: data.train: expected synthetic:N with N a whole number from 1 to "
              "1000000, got '" +
                  bad + "'")
        << bad;
  }
  EXPECT_THAT(ErrorOf("name: t\ndata: {train: a, val: \"synthetic:0\"}\n"),
              HasSubstr("s.yaml:2: data.val: expected synthetic:N"));
  EXPECT_EQ(ErrorOf("name: t\ndata: {train: synthetic:1000000, val: synthetic:1}\n"), "OK");
}

TEST(Expand, ForEachRunStreamsTheSameRunsAsExpand) {
  auto sweep = ParseSweep(Sweep("grid:\n  lr: [0.1, 0.01, 0.001]\n  seed: [0, 1]\n"
                                "order: coarse_to_fine\n"),
                          "s.yaml");
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  auto all = Expand(*sweep);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*CountRuns(*sweep), 6);
  std::vector<std::string> streamed;
  ASSERT_TRUE(ForEachRun(*sweep, {}, [&](ablate::v1::RunSpec&& run) {
                streamed.push_back(run.SerializeAsString());
                return absl::OkStatus();
              }).ok());
  ASSERT_EQ(streamed.size(), all->size());
  for (size_t i = 0; i < streamed.size(); ++i) {
    ablate::v1::RunSpec run;
    ASSERT_TRUE(run.ParseFromString(streamed[i]));
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(run, (*all)[i])) << i;
  }
  // The sink stops the walk.
  int seen = 0;
  auto stop = ForEachRun(*sweep, {}, [&](ablate::v1::RunSpec&&) {
    return ++seen == 2 ? absl::CancelledError("enough") : absl::OkStatus();
  });
  EXPECT_EQ(stop.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(seen, 2);
}

}  // namespace
}  // namespace ablate::sweep
