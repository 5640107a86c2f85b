// Trainer throughput on CPU: tokens/s, ms/step, MFU against the measured torch::mm peak,
// karpathy/nanoGPT's tokens/s on the same config (its own model.py, from the checkout named by
// NANOGPT_DIR, run by nanogpt_bench.py), and the cost of probes and metric output.
//
//   NANOGPT_DIR=... trainer_bench [--threads N] [--steps K] [--rounds R] [--no-python]
//                                 [--profile TRACE.json] [--unsharded]
// --unsharded trains the way the trainer did before sharded steps (step.h): the whole batch on
// one thread, BLIS splitting each GEMM over the N cores.
// Config (issue 3): 4 layers, 4 heads, n_embd 256, block 256, batch 16, vocab 4096, fp32.
// Step times are the best of R rounds of K steps (the least disturbed by other load).
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/sweep/run_config.h"
#include "common/util/threads.h"
#include "worker/train/adamw.h"
#include "worker/train/device.h"
#include "worker/train/metrics_log.h"
#include "worker/train/model.h"
#include "worker/train/probes.h"
#include "worker/train/step.h"

namespace {

using ablate::train::AdamW;
using ablate::train::GPT;
using Clock = std::chrono::steady_clock;

// The 1-minute load average: figures from a shared machine mean little without it.
double Load() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : NAN;
}

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The machine's fp32 GEMM peak as `threads` cores reach it: best-of-5 of a 1024³ `torch::mm` (a
// size where BLIS reaches its plateau) running on every thread at once, one BLIS thread each,
// summed. That is how the trainer uses the cores (one shard per thread, step.h); BLIS splitting
// one GEMM over the same cores (what --unsharded measures) reaches about the same figure.
double MatmulPeakFlops(int threads) {
  const int64_t n = 1024;
  std::vector<double> best(static_cast<size_t>(threads), 1e30);
  // The trainer's own shard threads: one torch thread each, shard 0 on this thread.
  ablate::train::OnShardThreads(threads, [&](int i) {
    auto a = torch::randn({n, n});
    auto b = torch::randn({n, n});
    auto c = torch::mm(a, b);
    for (int r = 0; r < 5; ++r) {
      const auto t = Clock::now();
      c = torch::mm(a, b);
      best[static_cast<size_t>(i)] = std::min(best[static_cast<size_t>(i)], Since(t));
    }
  });
  double flops = 0;
  for (double b : best) flops += 2.0 * n * n * n / b;
  return flops;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, steps = 3, rounds = 3;
  bool python = true, unsharded = false;
  std::string profile;  // chrome-trace file of one profiled step, for finding the slow ops
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--no-python")) python = false;
    if (!std::strcmp(argv[i], "--unsharded")) unsharded = true;
    if (!std::strcmp(argv[i], "--profile") && i + 1 < argc) profile = argv[++i];
  }
  threads = ablate::util::ThreadsOrAll(threads);
  ablate::train::ConfigureThreads(threads);
  // BLIS reads its variable at its first GEMM, which has not happened yet.
  if (unsharded) setenv("BLIS_NUM_THREADS", std::to_string(threads).c_str(), 1);
  // The peak the way the step uses the cores: unsharded, one GEMM that BLIS splits.
  const int peak_threads = unsharded ? 1 : threads;

  ablate::v1::RunConfig c;
  c.set_n_layer(4);
  c.set_n_head(4);
  c.set_n_embd(256);
  c.set_block_size(256);
  c.set_batch_size(16);
  ablate::sweep::ApplyDefaults(&c);
  const int64_t vocab = 4096, batch = c.batch_size(), t = c.block_size();
  torch::manual_seed(0);
  GPT model(c, vocab);
  auto named = model->NamedTensors();
  AdamW opt(named, c);
  std::vector<torch::Tensor> params;
  int64_t n_params = 0;
  for (auto& [name, p] : named) {
    params.push_back(p);
    if (name != "wpe.weight") n_params += p.numel();  // nanoGPT's N: no position embedding
  }
  auto x = torch::randint(vocab, {batch, t}, torch::kInt64);
  auto y = torch::randint(vocab, {batch, t}, torch::kInt64);

  // The trainer's own step code (trainer.cc): forward and backward, clipping at 1.0, AdamW.
  const std::vector<ablate::train::Batch> batches = {{x, y}};
  ablate::train::Sharding sharding;
  // As the trainer sets up a CPU run (trainer.cc).
  sharding.shards = unsharded ? 1 : ablate::train::ConfigureShardedThread(threads, batch);
  auto step = [&] {
    const double loss = ablate::train::AccumulateGradients(model, batches, false, true, sharding);
    ablate::train::ClipGradients(params, 1.0);
    opt.Step(6e-4);
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    return loss;
  };

  const std::string mode =
      unsharded ? std::string("unsharded: BLIS splits each GEMM")
                : std::to_string(sharding.shards) + " shards of the batch, one BLIS thread each";
  std::printf(
      "trainer_bench: 4 layers, 4 heads, n_embd 256, block 256, batch 16, vocab 4096, "
      "fp32, CPU, %d threads (%s), torch %s, load average %.2f\n",
      threads, mode.c_str(), ablate::train::TorchVersion().c_str(), Load());
  double peak = MatmulPeakFlops(peak_threads);
  for (int i = 0; i < 2; ++i) step();  // warm-up: allocator, BLIS buffers
  if (!profile.empty()) {
    torch::autograd::profiler::RecordProfile guard(profile);
    step();
  }
  auto best_step = [&] {
    double best = 1e30;
    for (int i = 0; i < steps; ++i) {
      const auto s = Clock::now();
      step();
      best = std::min(best, Since(s));
    }
    return best;
  };
  // On a shared machine the load drifts: alternate C++ and nanoGPT rounds and keep the best of
  // each, so neither side profits from a quiet spell the other missed. nanoGPT runs as PyTorch
  // does: BLIS and torch both at `threads` (each GEMM split over the cores).
  const char* nanogpt_dir = std::getenv("NANOGPT_DIR");
  if (python && (nanogpt_dir == nullptr ||
                 !std::filesystem::exists(std::filesystem::path(nanogpt_dir) / "model.py"))) {
    std::printf("nanoGPT: set NANOGPT_DIR to a karpathy/nanoGPT checkout to compare with it\n");
    python = false;
  }
  const char* src = std::getenv("ABLATE_SOURCE_DIR");
  const std::string dir = src != nullptr ? std::string(src) : std::string(ABLATE_SOURCE_DIR);
  const std::string cmd = "BLIS_NUM_THREADS=" + std::to_string(threads) + " /usr/bin/python3 " +
                          dir + "/bench/trainer/nanogpt_bench.py " + std::to_string(threads) + " " +
                          std::to_string(steps);
  const double tokens = static_cast<double>(batch * t);
  double best = 1e30, py = 0;
  for (int round = 0; round < rounds; ++round) {
    const double round_best = best_step();
    best = std::min(best, round_best);
    peak = std::max(peak, MatmulPeakFlops(peak_threads));
    double round_py = 0;
    if (python) {
      if (FILE* p = popen(cmd.c_str(), "r"); p != nullptr) {
        char line[256];
        while (std::fgets(line, sizeof line, p) != nullptr) {
          std::sscanf(line, "nanogpt_tokens_per_second %lf", &round_py);
        }
        pclose(p);
      }
      py = std::max(py, round_py);
    }
    std::printf("round %d: ablate %.0f tokens/s, nanoGPT %.0f tokens/s, load average %.2f\n",
                round + 1, tokens / round_best, round_py, Load());
  }
  if (python && py <= 0) std::printf("nanoGPT: could not run %s\n", cmd.c_str());
  const double tokens_per_s = tokens / best;
  const double flops_per_token =
      6.0 * static_cast<double>(n_params) +
      12.0 * c.n_layer() * c.n_head() * (c.n_embd() / c.n_head()) * static_cast<double>(t);
  const double mfu = flops_per_token * tokens_per_s / peak;
  std::printf("params (N, without wpe)     %.2fM\n", n_params / 1e6);
  std::printf("torch::mm fp32 peak         %.1f GFLOP/s\n", peak / 1e9);
  std::printf("step time (best of %d)      %.1f ms\n", rounds * steps, best * 1e3);
  std::printf("tokens/s                    %.0f\n", tokens_per_s);
  std::printf("MFU                         %.1f %%\n", 100 * mfu);

  // Probes: one probe pass (what the trainer runs every probe_every steps) plus writing its
  // metric points to a metrics.jsonl, amortised over the default probe_every (50).
  const std::string log_path =
      (std::filesystem::temp_directory_path() / "trainer_bench_metrics.jsonl").string();
  auto log = ablate::train::MetricsLog::Open(log_path, -1);
  auto probe_x = x.slice(0, 0, 8);
  ablate::train::RunProbes(model, probe_x);
  double probe_best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto s = Clock::now();
    std::vector<ablate::v1::MetricPoint> points;
    for (const auto& [name, value] : ablate::train::RunProbes(model, probe_x)) {
      auto& point = points.emplace_back();
      point.set_step(i);
      point.set_name(name);
      point.set_value(value);
    }
    if (log.ok()) log->Append(points).IgnoreError();
    probe_best = std::min(probe_best, Since(s));
  }
  std::filesystem::remove(log_path);
  if (py > 0) {
    std::printf("nanoGPT tokens/s            %.0f (MFU %.1f %%)\n", py,
                100 * flops_per_token * py / peak);
    std::printf("ablate / nanoGPT            %.2fx\n", tokens_per_s / py);
  }

  std::printf("probe pass                  %.1f ms = %.2f %% of step time at probe_every=50\n",
              probe_best * 1e3, 100 * probe_best / (50 * best));
  std::printf("load average at the end      %.2f\n", Load());

  return 0;
}
