// A 200-step training run against the loss curve the trainer produced before the speed work of
// issue 13 (tests/train/data/loss_curve_200.txt, written by this test's --write mode on commit
// 2c24e39). Faster kernels may sum in another order, so the curves agree to fp32 noise, not bit
// for bit. The curve is checked unsharded and with the batch split over 2 and 3 threads (step.h,
// Sharding; 3 splits the 8 sequences unevenly), each against the same recording.
//
//   train_loss_curve_test [--write FILE]   (--write: record the current trainer's curve)
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/sweep/run_config.h"
#include "worker/train/adamw.h"
#include "worker/train/batches.h"
#include "worker/train/model.h"
#include "worker/train/schedule.h"
#include "worker/train/step.h"

namespace {

using ablate::train::Batch;

constexpr int kSteps = 200;
constexpr int64_t kVocab = 512;
// Per-step tolerance on the train loss, relative. The fused kernels of issue 13 (kernels.h) stay
// within 2.5e-7 of the recorded curve on the machine that recorded it; the margin is for other
// BLAS builds and CPUs, whose GEMMs sum in yet another order, and the drift of 200 chaotic fp32
// updates.
constexpr double kTolerance = 1e-3;

ablate::v1::RunConfig Config() {
  ablate::v1::RunConfig c;
  c.set_n_layer(2);
  c.set_n_head(4);
  c.set_n_embd(64);
  c.set_block_size(64);
  c.set_batch_size(8);
  c.set_steps(kSteps);
  c.set_warmup(20);
  c.set_lr(3e-3);
  c.set_weight_decay(0.1);
  c.set_grad_clip(1.0);
  ablate::sweep::ApplyDefaults(&c);
  return c;
}

// A learnable token stream without a tokenizer: a fixed random successor for every token, kept
// with probability 0.75, else a uniform draw (std::mt19937_64 is the same on every platform).
std::vector<Batch> Batches(const ablate::v1::RunConfig& c) {
  std::mt19937_64 rng(13);
  std::vector<int64_t> next(kVocab);
  for (auto& n : next) n = static_cast<int64_t>(rng() % kVocab);
  const int64_t t = c.block_size(), b = c.batch_size();
  std::vector<Batch> out;
  for (int s = 0; s < kSteps; ++s) {
    auto seq = torch::empty({b, t + 1}, torch::kInt64);
    auto a = seq.accessor<int64_t, 2>();
    for (int64_t i = 0; i < b; ++i) {
      int64_t tok = static_cast<int64_t>(rng() % kVocab);
      for (int64_t j = 0; j <= t; ++j) {
        a[i][j] = tok;
        tok = rng() % 4 != 0 ? next[tok] : static_cast<int64_t>(rng() % kVocab);
      }
    }
    out.push_back({seq.slice(1, 0, t).contiguous(), seq.slice(1, 1).contiguous()});
  }
  return out;
}

// The trainer's step (trainer.cc): forward and backward, clipping, AdamW at the scheduled LR.
std::vector<double> Curve(int shards) {
  const auto config = Config();
  torch::manual_seed(config.seed());
  ablate::train::GPT model(config, kVocab);
  auto named = model->NamedTensors();
  ablate::train::AdamW optimizer(named, config);
  std::vector<torch::Tensor> params;
  for (auto& [name, p] : named) params.push_back(p);
  std::vector<double> losses;
  for (const Batch& batch : Batches(config)) {
    const int64_t s = static_cast<int64_t>(losses.size());
    ablate::train::Sharding sharding;
    sharding.shards = shards;
    losses.push_back(ablate::train::AccumulateGradients(model, {batch}, false, true, sharding));
    ablate::train::ClipGradients(params, config.grad_clip());
    optimizer.Step(ablate::train::LearningRate(config, s));
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
  }
  return losses;
}

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  if (argc == 3 && !std::strcmp(argv[1], "--write")) {
    const auto losses = Curve(1);
    std::ofstream out(argv[2]);
    out.precision(9);
    for (double l : losses) out << l << "\n";
    return out ? 0 : 1;
  }
  const std::string path = std::string(ABLATE_SOURCE_DIR) + "/tests/train/data/loss_curve_200.txt";
  std::ifstream in(path);
  std::vector<double> expected;
  for (double v; in >> v;) expected.push_back(v);
  int failures = 0;
  for (int shards : {1, 2, 3}) {
    const auto losses = Curve(shards);
    if (expected.size() != losses.size()) {
      std::fprintf(stderr, "%s: %zu losses, want %zu\n", path.c_str(), expected.size(),
                   losses.size());
      return 1;
    }
    double worst = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
      const double rel = std::abs(losses[i] - expected[i]) / std::abs(expected[i]);
      worst = std::max(worst, rel);
      if (!(rel <= kTolerance)) {
        if (++failures <= 10) {
          std::fprintf(stderr,
                       "%d shard(s), step %zu: loss %.7f, recorded %.7f (relative %.2e > %.0e)\n",
                       shards, i, losses[i], expected[i], rel, kTolerance);
        }
      }
    }
    std::printf(
        "200 steps, %d shard(s): loss %.4f -> %.4f (recorded %.4f -> %.4f), worst relative gap "
        "%.2e\n",
        shards, losses.front(), losses.back(), expected.front(), expected.back(), worst);
  }
  return failures == 0 ? 0 : 1;
}
