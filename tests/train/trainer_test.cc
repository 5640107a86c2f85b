// End-to-end trainer checks on tiny models and the synthetic corpus (no shared data needed):
// exact resume, divergence, schedule, data preparation, run-file errors.
#include "worker/train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/sweep/run_config.h"
#include "common/sweep/sweep.h"
#include "common/util/file.h"
#include "common/util/sha256.h"
#include "tests/train/tiny_spec.h"
#include "worker/train/bpe_tokenizer.h"
#include "worker/train/commands.h"
#include "worker/train/dataset.h"
#include "worker/train/loss_tracker.h"
#include "worker/train/schedule.h"
#include "worker/train/synthetic_corpus.h"

namespace ablate::train {
namespace {

namespace fs = std::filesystem;

// One scratch directory per test, removed afterwards; the tokenizer cache is shared across the
// tests of this binary so the tokenizer trains once.
class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ablate-train-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static void TearDownTestSuite() { fs::remove_all(CacheDir()); }

  static std::string CacheDir() {
    static const std::string dir =
        (fs::temp_directory_path() / ("ablate-train-test-cache-" + std::to_string(getpid())))
            .string();
    return dir;
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// Records every metric point by (step, name) and can ask for a stop at a given step.
class Recorder : public TrainObserver {
 public:
  explicit Recorder(int64_t stop_at = -1) : stop_at_(stop_at) {}
  void OnMetrics(const std::vector<ablate::v1::MetricPoint>& points) override {
    for (const auto& p : points) {
      EXPECT_FALSE(values.contains({p.step(), p.name()})) << "duplicate " << p.name();
      values[{p.step(), p.name()}] = p.value();
      last_step = p.step();
    }
  }
  void OnCheckpoint(int64_t step, const std::string&) override { checkpoints.push_back(step); }
  bool ShouldStop() override { return stop_at_ >= 0 && last_step >= stop_at_; }

  std::map<std::pair<int64_t, std::string>, double> values;
  std::vector<int64_t> checkpoints;
  int64_t last_step = -1;

 private:
  int64_t stop_at_;
};

TrainOptions Options(const std::string& out, const std::string& cache) {
  TrainOptions o;
  o.device = "cpu";
  o.out_dir = out;
  o.cache_dir = cache;
  o.threads = 1;
  return o;
}

// A result says how much memory its attempt held (RunResult.peak_memory_bytes).
TEST_F(TrainerTest, TheResultCarriesThePeakMemory) {
  auto r = Train(TinySpec(), Options(Path("run"), CacheDir()), nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->result.peak_memory_bytes(), int64_t{1} << 20);
}

// A model too large for the machine: out of memory is the machine's fault (RESOURCE_EXHAUSTED,
// worker/failure_class.h), and the error names the peak held and the device's memory, so the
// server's estimate can be checked against it. The weight that fails is refused at once (it is
// larger than memory and swap), so nothing near it is ever touched.
TEST_F(TrainerTest, OutOfMemoryIsResourceExhaustedAndNamesThePeakAndTheDeviceMemory) {
  auto spec = TinySpec();
  spec.mutable_config()->set_n_embd(1 << 17);  // one attention weight alone: 192 GiB
  auto r = Train(spec, Options(Path("run"), CacheDir()), nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  const std::string message(r.status().message());
  EXPECT_EQ(message.rfind("out of memory on cpu: ", 0), 0u) << message;
  EXPECT_NE(message.find(" GiB held, device memory "), std::string::npos) << message;
  EXPECT_EQ(message.find("unknown"), std::string::npos) << message;
}

TEST_F(TrainerTest, KeepFinalWritesTheFinalWeightsAsACheckpoint) {
  auto spec = TinySpec();
  Recorder none;
  auto without = Train(spec, Options(Path("without"), CacheDir()), &none);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->final_checkpoint, "");  // run files and keep_final: false keep none
  EXPECT_FALSE(fs::exists(Path("without") + "/final.pt"));

  spec.set_keep_final(true);
  Recorder full;
  auto a = Train(spec, Options(Path("a"), CacheDir()), &full);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->final_checkpoint, Path("a") + "/final.pt");
  ASSERT_TRUE(fs::exists(a->final_checkpoint));
  // Not a resume point: NewestCheckpoint looks in checkpoints/ only.
  EXPECT_NE(NewestCheckpoint(Path("a")), a->final_checkpoint);
  // It is a complete checkpoint of the last step: the trainer loads it (weights, optimizer,
  // tracker), finds nothing left to train and reports the run's final result again.
  Recorder after;
  auto options = Options(Path("b"), CacheDir());
  options.resume_from = a->final_checkpoint;
  auto b = Train(spec, options, &after);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->last_step, a->last_step);
  EXPECT_EQ(b->result.final_val_loss(), a->result.final_val_loss());
}

TEST_F(TrainerTest, ResumedRunIsBitIdentical) {
  const auto spec = TinySpec();
  Recorder full;
  auto a = Train(spec, Options(Path("a"), CacheDir()), &full);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->outcome, Outcome::kSucceeded);
  EXPECT_EQ(a->last_step, 24);
  EXPECT_LT(a->result.final_train_loss(), a->result.initial_loss());

  Recorder first(/*stop_at=*/13);
  auto b = Train(spec, Options(Path("b"), CacheDir()), &first);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->outcome, Outcome::kStopped);
  EXPECT_EQ(b->last_step, 13);
  ASSERT_EQ(NewestCheckpoint(Path("b")), b->last_checkpoint);

  Recorder second;
  auto options = Options(Path("b"), CacheDir());
  options.resume_from = b->last_checkpoint;
  auto c = Train(spec, options, &second);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->outcome, Outcome::kSucceeded);

  int compared = 0;
  for (const auto& [key, value] : full.values) {
    const auto& [step, name] = key;
    if (name == "tokens_per_second") continue;
    const Recorder& part = step <= 13 ? first : second;
    auto it = part.values.find(key);
    ASSERT_NE(it, part.values.end()) << name << " at step " << step << " missing";
    EXPECT_EQ(it->second, value) << name << " at step " << step;  // bit for bit
    ++compared;
  }
  EXPECT_GT(compared, 24 * 3);
  EXPECT_EQ(c->result.final_train_loss(), a->result.final_train_loss());
  EXPECT_EQ(c->result.final_val_loss(), a->result.final_val_loss());
  EXPECT_EQ(c->result.initial_loss(), a->result.initial_loss());

  // The resumed run's metrics.jsonl has every step exactly once, like the uninterrupted one's.
  auto count_lines = [](const std::string& path) {
    std::ifstream in(path);
    std::map<std::pair<int64_t, std::string>, int> seen;
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      seen[{j["step"].get<int64_t>(), j["name"].get<std::string>()}]++;
    }
    return seen;
  };
  auto seen_a = count_lines(Path("a/metrics.jsonl"));
  auto seen_b = count_lines(Path("b/metrics.jsonl"));
  EXPECT_EQ(seen_a, seen_b);
  for (const auto& [key, n] : seen_b) EXPECT_EQ(n, 1) << key.second << " at " << key.first;
  EXPECT_TRUE(fs::exists(Path("b/result.json")));

  // The same checkpoint under other settings is refused, naming the setting.
  auto changed = spec;
  changed.mutable_config()->set_lr(1e-2);
  auto refused = Train(changed, options, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("lr"), std::string::npos) << refused.status();
}

// ablate-worker --slots trains several runs in one process, each on its own thread. A run's
// numbers must not depend on what trains beside it: torch's default generators are the
// process's, and init and dropout draw from them. Three runs (two with dropout, one without),
// each alone and then all three at once on one thread each: every metric bit for bit the same.
TEST_F(TrainerTest, RunsTrainingAtOnceMatchTheSameRunsAlone) {
  std::vector<ablate::v1::RunSpec> specs(3, TinySpec());
  specs[1].mutable_config()->set_seed(8);
  specs[1].mutable_config()->set_dropout(0.2);
  specs[2].mutable_config()->set_seed(9);
  specs[2].mutable_config()->set_dropout(0);
  auto train = [&](size_t i, const std::string& out, Recorder* rec) {
    // Its own thread, as in the daemon's slots (torch's thread count is per thread).
    absl::StatusOr<TrainResult> r = absl::UnknownError("not run");
    std::thread([&] { r = Train(specs[i], Options(Path(out), CacheDir()), rec); }).join();
    return r;
  };
  std::vector<Recorder> alone(3), together(3);
  for (size_t i = 0; i < 3; ++i) {
    auto r = train(i, "alone" + std::to_string(i), &alone[i]);
    ASSERT_TRUE(r.ok()) << r.status();
  }
  std::vector<absl::StatusOr<TrainResult>> results(3, absl::UnknownError("not run"));
  {
    std::vector<std::thread> slots;
    for (size_t i = 0; i < 3; ++i) {
      slots.emplace_back([&, i] {
        results[i] =
            Train(specs[i], Options(Path("slot" + std::to_string(i)), CacheDir()), &together[i]);
      });
    }
    for (auto& t : slots) t.join();
  }
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    int compared = 0;
    for (const auto& [key, value] : alone[i].values) {
      if (key.second == "tokens_per_second") continue;
      auto it = together[i].values.find(key);
      ASSERT_NE(it, together[i].values.end()) << "run " << i << ": " << key.second << " missing";
      EXPECT_EQ(it->second, value) << "run " << i << ": " << key.second << " at step " << key.first;
      ++compared;
    }
    EXPECT_GT(compared, 24 * 3) << "run " << i;
  }
  // The three differ from each other, so the comparison above could fail.
  EXPECT_NE(alone[0].values.at({24, "train_loss"}), alone[1].values.at({24, "train_loss"}));
  EXPECT_NE(alone[0].values.at({24, "train_loss"}), alone[2].values.at({24, "train_loss"}));
}

// On the CPU a step's batch is split over the run's threads (step.h, Sharding). Sharded runs
// must be as reproducible as unsharded ones, dropout included (each shard draws from a generator
// seeded from the run's stream): the same run twice, and a run stopped and resumed, give every
// metric bit for bit. Without dropout the sharded run computes the same function as the
// unsharded one, so their losses agree to fp32 rounding.
TEST_F(TrainerTest, ShardedStepsAreReproducibleAndMatchUnsharded) {
  auto spec = TinySpec();  // batch 4, dropout 0.1
  auto sharded = [&](const std::string& out) {
    auto o = Options(Path(out), CacheDir());
    o.threads = 2;
    return o;
  };
  auto same_metrics = [](const Recorder& x, const Recorder& y, const std::string& what) {
    int compared = 0;
    for (const auto& [key, value] : x.values) {
      if (key.second == "tokens_per_second") continue;
      auto it = y.values.find(key);
      ASSERT_NE(it, y.values.end()) << what << ": " << key.second << " missing";
      EXPECT_EQ(it->second, value) << what << ": " << key.second << " at step " << key.first;
      ++compared;
    }
    EXPECT_GT(compared, 24 * 3) << what;
  };
  Recorder first, again;
  auto a = Train(spec, sharded("a"), &first);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->outcome, Outcome::kSucceeded);
  EXPECT_LT(a->result.final_train_loss(), a->result.initial_loss());
  // With dropout the masks depend on the shard count: the result records it (provenance.h).
  EXPECT_EQ(a->result.shards(), 2);
  auto b = Train(spec, sharded("b"), &again);
  ASSERT_TRUE(b.ok()) << b.status();
  same_metrics(first, again, "sharded with dropout, twice");

  Recorder part1(/*stop_at=*/13), part2;
  auto c = Train(spec, sharded("c"), &part1);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->outcome, Outcome::kStopped);
  auto resume = sharded("c");
  resume.resume_from = c->last_checkpoint;
  auto d = Train(spec, resume, &part2);
  ASSERT_TRUE(d.ok()) << d.status();
  for (const auto& [key, value] : part2.values) part1.values[key] = value;
  same_metrics(first, part1, "sharded with dropout, stopped at 13 and resumed");

  // Dropout's masks differ from the unsharded run's (other generators), so compare without it.
  spec.mutable_config()->set_dropout(0);
  Recorder unsharded_rec, sharded_rec;
  auto u = Train(spec, Options(Path("u"), CacheDir()), &unsharded_rec);
  auto v = Train(spec, sharded("v"), &sharded_rec);
  ASSERT_TRUE(u.ok() && v.ok());
  EXPECT_EQ(u->result.shards(), 1);
  for (int64_t step : {0, 12, 24}) {
    const double x = unsharded_rec.values.at({step, "train_loss"});
    const double y = sharded_rec.values.at({step, "train_loss"});
    EXPECT_NEAR(y, x, 1e-5 * std::abs(x)) << "train_loss at step " << step;
  }
  EXPECT_NEAR(v->result.final_val_loss(), u->result.final_val_loss(),
              1e-5 * std::abs(u->result.final_val_loss()));
}

TEST_F(TrainerTest, HugeLearningRateDivergesWithItsStep) {
  auto spec = TinySpec();
  spec.mutable_config()->set_lr(30.0);
  spec.mutable_config()->set_grad_clip(0);
  spec.mutable_config()->set_warmup(0);
  spec.mutable_config()->set_dropout(0);
  spec.mutable_config()->set_steps(60);
  spec.mutable_divergence()->set_loss_above_init_by(1.0);
  spec.mutable_divergence()->set_patience(3);
  Recorder rec;
  auto r = Train(spec, Options(Path("out"), CacheDir()), &rec);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->outcome, Outcome::kDiverged);
  EXPECT_TRUE(r->result.diverged());
  const int64_t step = r->result.diverged_step();
  EXPECT_GE(step, 1);
  EXPECT_LT(step, 60);
  EXPECT_EQ(r->last_step, step);
  // The step is the one where the rule fired: a non-finite loss there, or `patience` losses in a
  // row above l0 + 1 ending there.
  const double l0 = r->result.initial_loss();
  const double loss_at = rec.values.at({step, "train_loss"});
  if (std::isfinite(loss_at)) {
    for (int64_t s = step - 2; s <= step; ++s) EXPECT_GT(rec.values.at({s, "train_loss"}), l0 + 1);
  }
  EXPECT_TRUE(std::isfinite(r->result.last_finite_loss()));
}

TEST(LossTrackerTest, FollowsTheRules) {
  ablate::v1::DivergenceSpec div;
  div.set_loss_above_init_by(1.0);
  div.set_patience(2);
  ablate::v1::ThresholdSpec threshold;
  threshold.set_train_loss(4.5);
  LossTracker t(div, threshold, /*warmup=*/2);
  EXPECT_FALSE(t.Observe(0, 5.0));  // l0
  EXPECT_FALSE(t.Observe(1, 9.0));  // above, but still in warmup
  EXPECT_FALSE(t.Observe(2, 9.0));
  EXPECT_EQ(t.state().steps_above, 0);
  EXPECT_FALSE(t.Observe(3, 6.5));  // above l0 + 1: 1 of 2
  EXPECT_FALSE(t.Observe(4, 1.0));  // back below: counter resets
  EXPECT_NEAR(t.state().ema,
              0.9 * (0.9 * (0.9 * (0.9 * 5 + 0.1 * 9) + 0.1 * 9) + 0.1 * 6.5) + 0.1 * 1.0, 1e-12);
  EXPECT_FALSE(t.Observe(5, 6.5));
  EXPECT_TRUE(t.Observe(6, 6.5));
  EXPECT_EQ(t.state().diverged_step, 6);

  LossTracker nan(div, threshold, 0);
  nan.Observe(0, 5.0);
  nan.Observe(1, 4.0);
  EXPECT_TRUE(nan.Observe(2, std::nan("")));
  EXPECT_EQ(nan.state().diverged_step, 2);
  EXPECT_EQ(nan.state().last_finite_loss, 4.0);

  // A NaN validation loss diverges the run even though every training loss was finite.
  LossTracker val(div, threshold, 0);
  EXPECT_FALSE(val.Observe(0, 5.0));
  EXPECT_FALSE(val.ObserveValidation(0, 5.1));
  EXPECT_FALSE(val.Observe(1, 4.0));
  EXPECT_TRUE(val.ObserveValidation(2, std::nan("")));
  EXPECT_TRUE(val.state().diverged);
  EXPECT_EQ(val.state().diverged_step, 2);
  EXPECT_TRUE(val.Observe(2, 4.0));  // stays diverged
  EXPECT_EQ(val.state().last_finite_loss, 4.0);

  LossTracker reach(ablate::v1::DivergenceSpec(), threshold, 0);
  int64_t s = 0;
  for (double loss : {5.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0}) reach.Observe(s++, loss);
  // EMA: 5, 4.9, 4.81, 4.729, 4.656, 4.590, 4.531, 4.478 -> first <= 4.5 at step 7
  EXPECT_EQ(reach.state().steps_to_threshold, 7);
}

TEST(ScheduleTest, WarmupThenCosineToMinLr) {
  ablate::v1::RunConfig c;
  c.set_lr(1e-3);
  c.set_warmup(10);
  c.set_steps(110);
  c.set_min_lr(1e-4);
  EXPECT_DOUBLE_EQ(LearningRate(c, 0), 1e-3 / 11);
  EXPECT_DOUBLE_EQ(LearningRate(c, 9), 1e-3 * 10 / 11);
  EXPECT_DOUBLE_EQ(LearningRate(c, 10), 1e-3);
  EXPECT_NEAR(LearningRate(c, 60), 5.5e-4, 1e-15);  // halfway through the cosine
  EXPECT_DOUBLE_EQ(LearningRate(c, 110), 1e-4);
  EXPECT_DOUBLE_EQ(LearningRate(c, 500), 1e-4);
  // Unset, the floor is RunConfig's derivation (lr x min_lr_ratio), not a fallback of its own.
  c.clear_min_lr();
  c.set_min_lr_ratio(0.2);
  EXPECT_DOUBLE_EQ(LearningRate(c, 110), 2e-4);
  EXPECT_DOUBLE_EQ(LearningRate(c, 110), ablate::sweep::EffectiveMinLr(c));
}

TEST(DeviceTest, ProbesCpuAndRefusesAbsentDevices) {
  auto cpu = ProbeDevice("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->kind, "cpu");
  EXPECT_GT(cpu->memory_bytes, 0);
  EXPECT_FALSE(cpu->torch_version.empty());
  auto any = ProbeDevice("auto");
  ASSERT_TRUE(any.ok()) << any.status();
  auto cuda = ProbeDevice("cuda");
  if (cuda.ok()) {
    EXPECT_EQ(cuda->kind, "cuda");  // a machine with a GPU
  } else {
    EXPECT_NE(any->kind, "cuda");
    EXPECT_NE(cuda.status().message().find("cuda"), std::string::npos);
  }
  EXPECT_FALSE(ProbeDevice("tpu").ok());
}

// Another SentencePiece release may train another model from the same text, so its version is
// part of the tokenizer's cache key.
TEST(TokenizerCacheKeyTest, IncludesTheSpmVersion) {
  auto version = SpmVersion();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_TRUE(version->starts_with("sentencepiece ")) << *version;
  EXPECT_EQ(version->find('\n'), std::string::npos);
  const std::vector<std::string> shas = {"ab", "cd"};
  EXPECT_NE(TokenizerCacheKey(320, shas, "sentencepiece 0.1.97"),
            TokenizerCacheKey(320, shas, "sentencepiece 0.2.0"));
  EXPECT_EQ(TokenizerCacheKey(320, shas, *version), TokenizerCacheKey(320, shas, *version));
}

// Two machines training the tokenizer on the same text, each in its own directories, must get the
// same model file: the tokenizer's SHA-256 is the provenance a report compares across a fleet.
// spm_train records its input and output paths in the model, so it must never see ours.
TEST(TokenizerTest, SameTextGivesTheSameModelFileWhereverItIsTrained) {
  const fs::path root = fs::temp_directory_path() / ("ablate-spm-" + std::to_string(getpid()));
  std::vector<std::string> shas;
  for (const char* machine : {"laptop/cache", "gpu-box/somewhere/else"}) {
    const fs::path dir = root / machine;
    fs::create_directories(dir);
    std::ofstream(dir / "text.txt") << SyntheticCorpus(300, 5);
    ASSERT_TRUE(TrainBpeModel((dir / "text.txt").string(), 320, (dir / "tok").string()).ok());
    ASSERT_TRUE(fs::exists(dir / "tok.vocab"));
    EXPECT_FALSE(fs::exists(dir / "tok.train")) << "the scratch directory is removed";
    shas.push_back(Sha256File((dir / "tok.model").string()).value_or(""));
  }
  EXPECT_FALSE(shas[0].empty());
  EXPECT_EQ(shas[0], shas[1]);
  fs::remove_all(root);
}

TEST(SyntheticCorpusTest, DeterministicAndParsed) {
  EXPECT_EQ(SyntheticCorpus(20, 1), SyntheticCorpus(20, 1));
  EXPECT_NE(SyntheticCorpus(20, 1), SyntheticCorpus(20, 2));
  EXPECT_EQ(ParseSyntheticPath("synthetic:12"), 12);
  EXPECT_EQ(ParseSyntheticPath("synthetic:0"), std::nullopt);
  EXPECT_EQ(ParseSyntheticPath("synthetic:x"), std::nullopt);
  EXPECT_EQ(ParseSyntheticPath("data.txt"), std::nullopt);
}

// The fleet shares exactly the files Train reads: PlanRunData names them without making them,
// PrepareRunData makes them there, and the key changes with anything they depend on.
TEST_F(TrainerTest, DataPlanNamesWhatPreparationMakes) {
  const std::string train = Path("train.txt");
  const std::string val = Path("val.txt");
  std::ofstream(train) << SyntheticCorpus(200, 3);
  std::ofstream(val) << SyntheticCorpus(40, 4);
  v1::DataSpec data;
  data.set_train(train);
  data.set_val(val);
  data.mutable_tokenizer()->set_type("bpe");
  data.mutable_tokenizer()->set_vocab(400);
  const std::string cache = Path("cache");
  auto plan = PlanRunData(data, cache);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->key.size(), 64u);
  ASSERT_EQ(plan->files.size(), 4u);
  EXPECT_EQ(plan->files.back().first, "tokenizer_model") << "the model is installed last";
  for (const auto& [role, path] : plan->files) EXPECT_FALSE(fs::exists(path)) << role;

  auto times = PrepareRunData(data, cache);
  ASSERT_TRUE(times.ok()) << times.status();
  EXPECT_GT(times->tokenizer_seconds, 0);
  EXPECT_EQ(times->encoded_bytes, static_cast<int64_t>(fs::file_size(train) + fs::file_size(val)));
  for (const auto& [role, path] : plan->files) EXPECT_TRUE(fs::exists(path)) << role;
  // Cached now: nothing is made again.
  auto again = PrepareRunData(data, cache);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tokenizer_seconds, 0);
  EXPECT_EQ(again->encoded_bytes, 0);

  // Same texts elsewhere: same key (it names content, not paths); other vocab or text: another.
  auto elsewhere = PlanRunData(data, Path("other-cache"));
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_EQ(elsewhere->key, plan->key);
  data.mutable_tokenizer()->set_vocab(500);
  EXPECT_NE(PlanRunData(data, cache)->key, plan->key);
  data.mutable_tokenizer()->set_vocab(400);
  data.set_val(train);
  EXPECT_NE(PlanRunData(data, cache)->key, plan->key);
  data.mutable_tokenizer()->set_type("wordpiece");
  auto bad = PlanRunData(data, cache);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("data.tokenizer.type"), std::string::npos);
  // The worker's rules are the sweep parser's (sweep::ValidateData): the same message at submit.
  data.mutable_tokenizer()->set_type("bpe");
  data.mutable_tokenizer()->set_vocab(256);
  EXPECT_EQ(PlanRunData(data, cache).status().message(),
            "data.tokenizer.vocab: must be between 260 and 65535, got 256 (byte fallback needs "
            "259 ids; token files are uint16)");
  data.mutable_tokenizer()->set_vocab(400);
  data.set_val("synthetic:2000000");
  EXPECT_EQ(PlanRunData(data, cache).status().message(),
            "data.val: expected synthetic:N with N a whole number from 1 to 1000000, got "
            "'synthetic:2000000'");
}

// Encoding is split across spm_encode processes on big texts: the token file must not depend on
// how many (EOS markers and empty lines around chunk boundaries included).
TEST_F(TrainerTest, ParallelEncodingGivesTheSameTokenFile) {
  const std::string text = Path("text.txt");
  {
    std::ofstream out(text);
    out << "<|endoftext|>\n\n" << SyntheticCorpus(300, 7) << "\n\n<|endoftext|>\n<|endoftext|>\n";
  }
  ASSERT_TRUE(TrainBpeModel(text, 400, Path("tok")).ok());
  std::string one;
  for (int processes : {1, 2, 5}) {
    const std::string out = Path("tokens-" + std::to_string(processes) + ".u16");
    auto s = EncodeTextFile(Path("tok.model"), text, out, processes);
    ASSERT_TRUE(s.ok()) << processes << ": " << s;
    auto bytes = util::ReadFile(out);
    ASSERT_TRUE(bytes.ok());
    if (processes == 1) {
      one = *bytes;
      EXPECT_GT(one.size(), 1000u);
    } else {
      EXPECT_EQ(*bytes, one) << processes << " processes";
    }
  }
  // Nothing is left behind but the token files.
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name.starts_with("tokens-") || name.starts_with("tok") || name == "text.txt")
        << name;
  }
}

TEST_F(TrainerTest, DataPrepareRoundTrip) {
  const std::string text_path = Path("stories.txt");
  std::ofstream(text_path) << SyntheticCorpus(200, 3);
  // Prefer real text when the shared data is present; the synthetic corpus covers the rest.
  std::vector<std::string> files = {text_path};
  const std::string shared = "/work/shared/data/tinystories_valid.txt";
  const char* src = std::getenv("ABLATE_SOURCE_DIR");
  const std::string rel =
      src != nullptr ? std::string(src) + "/../shared/data/tinystories_valid.txt" : shared;
  if (fs::exists(rel)) files.push_back(rel);

  DataPrepareArgs args;
  args.text_files = files;
  args.vocab = 400;
  args.cache_dir = Path("cache");
  args.out_dir = Path("out");
  ASSERT_EQ(RunDataPrepareCommand(args), 0);
  ASSERT_TRUE(fs::exists(Path("out/tokenizer.model")));
  ASSERT_TRUE(fs::exists(Path("out/stories.u16")));

  auto data = PrepareDataset(files, files, 400, Path("cache"));  // cached now
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->vocab_size, 400);
  auto tokens = TokenFile::Open(data->files[0].token_path);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  // Decode story by story (EOS-separated) and compare with the text's story lines.
  std::ifstream in(text_path);
  std::string line;
  std::vector<std::string> stories;
  while (std::getline(in, line)) {
    if (line != "<|endoftext|>") stories.push_back(line);
  }
  std::vector<std::vector<int>> ids(1);
  for (int64_t i = 0; i < tokens->size(); ++i) {
    if (tokens->data()[i] == kEosId) {
      ids.emplace_back();
    } else {
      ids.back().push_back(tokens->data()[i]);
    }
  }
  ids.pop_back();  // nothing follows the last EOS
  auto decoded = BpeDecode(data->tokenizer_model, ids);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, stories);
  EXPECT_EQ(data->files[0].tokens, tokens->size());
  EXPECT_LT(tokens->size(), static_cast<int64_t>(fs::file_size(text_path)) / 1.5);  // merges
}

std::string WriteRunFile(const fs::path& dir, const std::string& body) {
  const std::string path = (dir / "run.yaml").string();
  std::ofstream(path) << body;
  return path;
}

int RunCommand(const std::string& run_file, const std::string& out, const std::string& cache,
               std::string* err, int copies = 1, int threads = 1) {
  TrainCommandArgs args;
  args.run_file = run_file;
  args.out_dir = out;
  args.cache_dir = cache;
  args.device = "cpu";
  args.threads = threads;
  args.copies = copies;
  args.quiet = true;
  ::testing::internal::CaptureStderr();
  const int rc = RunTrainCommand(args);
  *err = ::testing::internal::GetCapturedStderr();
  return rc;
}

TEST_F(TrainerTest, BadRunFilesGiveClearErrors) {
  std::string err;
  const std::string data =
      "data: {train: stories.txt, val: synthetic:10, tokenizer: {vocab: 300}}\n";
  EXPECT_EQ(RunCommand(WriteRunFile(dir_, data + "n_layers: 2\n"), Path("o1"), CacheDir(), &err),
            1);
  EXPECT_NE(err.find("run.yaml:2"), std::string::npos) << err;
  EXPECT_NE(err.find("n_layers"), std::string::npos) << err;

  EXPECT_EQ(RunCommand(WriteRunFile(dir_, data + "n_embd: 30\nn_head: 4\n"), Path("o2"), CacheDir(),
                       &err),
            1);
  EXPECT_NE(err.find("n_head"), std::string::npos) << err;

  EXPECT_EQ(
      RunCommand(WriteRunFile(dir_, data + "steps: 2\nwarmup: 0\n"), Path("o3"), CacheDir(), &err),
      1);
  EXPECT_NE(err.find("data.train: file not found"), std::string::npos) << err;
  EXPECT_NE(err.find("stories.txt"), std::string::npos) << err;
}

TEST_F(TrainerTest, TrainCommandWritesResultAndRefusesAFinishedOut) {
  const std::string run = WriteRunFile(
      dir_,
      "data: {train: synthetic:300, val: synthetic:40, tokenizer: {vocab: 320}}\n"
      "n_layer: 1\nn_head: 2\nn_embd: 32\nblock_size: 32\nbatch_size: 4\nsteps: 6\nwarmup: 2\n"
      "eval_every: 3\nprobe_every: 3\nlog_every: 1\ncheckpoint_every: 3\n"
      "threshold: {train_loss: 100}\n");
  std::string err;
  ASSERT_EQ(RunCommand(run, Path("out"), CacheDir(), &err), 0) << err;
  std::ifstream in(Path("out/result.json"));
  auto result = nlohmann::json::parse(in);
  EXPECT_EQ(result["steps_done"], "6");  // proto3 JSON writes int64 as a string
  EXPECT_EQ(result["steps_to_threshold"], "0");
  EXPECT_TRUE(result["final_probes"].contains("max_attn_logit"));
  // Provenance: where it ran and with which tokenizer.
  EXPECT_EQ(result["device_kind"].get<std::string>(), "cpu");
  EXPECT_EQ(result["device_name"].get<std::string>(), ProbeDevice("cpu")->name);
  EXPECT_EQ(result["dtype"].get<std::string>(), "float32");
  EXPECT_FALSE(result["torch_version"].get<std::string>().empty());
  bool tokenizer_found = false;
  for (const auto& entry : fs::directory_iterator(fs::path(CacheDir()) / "tokenizers")) {
    if (entry.path().extension() == ".model" && Sha256File(entry.path().string()).value_or("") ==
                                                    result["tokenizer_sha256"].get<std::string>()) {
      tokenizer_found = true;
    }
  }
  EXPECT_TRUE(tokenizer_found) << result["tokenizer_sha256"];
  EXPECT_TRUE(fs::exists(Path("out/checkpoints/step-000000003.pt")));
  EXPECT_EQ(RunCommand(run, Path("out"), CacheDir(), &err), 1);
  EXPECT_NE(err.find("already holds a finished run"), std::string::npos) << err;
}

// `train --copies N` trains N copies at once as `--slots N` would (seed + k, DIR/copy-k, threads
// split): each copy is the run it would be alone, and each is resumable and refuses to rerun.
TEST_F(TrainerTest, TrainCommandCopiesAreTheRunsAlone) {
  const std::string body =
      "data: {train: synthetic:300, val: synthetic:40, tokenizer: {vocab: 320}}\n"
      "n_layer: 1\nn_head: 2\nn_embd: 32\nblock_size: 32\nbatch_size: 4\nsteps: 6\nwarmup: 2\n"
      "eval_every: 3\nprobe_every: 3\nlog_every: 1\ncheckpoint_every: 3\ndropout: 0.1\n";
  const std::string run = WriteRunFile(dir_, body + "seed: 5\n");
  std::string err;
  ASSERT_EQ(RunCommand(run, Path("copies"), CacheDir(), &err, /*copies=*/2, /*threads=*/2), 0)
      << err;
  auto result = [&](const std::string& dir) {
    std::ifstream in(Path(dir) + "/result.json");
    return nlohmann::json::parse(in);
  };
  const auto c0 = result("copies/copy-0"), c1 = result("copies/copy-1");
  EXPECT_EQ(c0["steps_done"], "6");
  EXPECT_EQ(c1["steps_done"], "6");
  EXPECT_NE(c0["final_val_loss"], c1["final_val_loss"]);  // seeds 5 and 6
  // Copy 1 is seed 6 trained alone with one thread (its share of --threads 2), bit for bit.
  fs::create_directories(dir_ / "alone-run");
  const std::string alone = WriteRunFile(dir_ / "alone-run", body + "seed: 6\n");
  ASSERT_EQ(RunCommand(alone, Path("alone"), CacheDir(), &err), 0) << err;
  EXPECT_EQ(result("alone")["final_val_loss"], c1["final_val_loss"]);
  EXPECT_EQ(result("alone")["final_train_loss"], c1["final_train_loss"]);

  EXPECT_EQ(RunCommand(run, Path("copies"), CacheDir(), &err, 2, 2), 1);
  EXPECT_NE(err.find("copy-0 already holds a finished run"), std::string::npos) << err;
  EXPECT_EQ(RunCommand(run, Path("few"), CacheDir(), &err, /*copies=*/3, /*threads=*/2), 2);
  EXPECT_NE(err.find("--threads 2 is below --copies 3"), std::string::npos) << err;
}

}  // namespace
}  // namespace ablate::train
