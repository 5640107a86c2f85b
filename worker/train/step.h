// The numerical pieces of one training step, shared by the trainer and tests/train's parity tool,
// so the parity test checks the code that trains rather than a copy of it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "worker/train/batches.h"
#include "worker/train/model.h"

namespace ablate::train {

// How a CPU step spreads over cores (docs/trainer.md, "Sharded steps"). With shards > 1 each
// micro-batch's sequences are split into that many equal parts, each trained on a thread of its
// own with one BLAS thread and one torch thread, and their gradients are summed in shard order,
// so the result depends on the shard count (at fp32 rounding) but never on thread timing. Whole
// GEMMs per thread replace BLAS splitting each small GEMM across cores, which at these model
// sizes leaves the second core mostly waiting.
struct Sharding {
  int shards = 1;
  // With dropout on the CPU: one seed per (micro-batch, shard), micro-batch major. Each shard's
  // dropout then draws from a generator of its own instead of torch's process-wide one, so runs
  // and shards never wait for each other's draws. Empty: torch's default generator (shards must
  // then be 1; parity tests and other devices).
  std::vector<uint64_t> dropout_seeds;
};

// Runs body(s) for s in [0, shards): shard 0 on the calling thread, every other on a thread of its
// own. Each runs with torch's intra-op threads at 1 (a shard is one core's work) and the caller's
// thread-local torch state (grad mode, autocast, the profiler). The first exception is rethrown
// here once every shard has finished, so no thread outlives the tensors it uses.
void OnShardThreads(int shards, const std::function<void(int)>& body);

// The shard count a step of `batch_size` sequences uses with `threads` CPU threads: one part per
// thread, never more parts than sequences.
int ShardsFor(int threads, int64_t batch_size);

// For a CPU run: ShardsFor(threads, batch_size), and when that is above 1, the calling (training)
// thread's torch intra-op threads set to 1. The shards are the parallelism; the ops between them
// (clipping, AdamW, probes) run on the training thread alone, since an OpenMP team there would
// spin-wait after each of its parallel regions on the cores the shards need (a tiny model's
// sharded step ran 14 % slower than one thread with it, 1.4x faster without).
int ConfigureShardedThread(int threads, int64_t batch_size);

// Forward (and, when `backward`, backward) over the micro-batches of one step, each loss scaled
// by 1 / count so the accumulated gradient is that of the mean loss. Each forward pass runs in
// its own bf16 autocast scope when `bf16`; backward runs outside it, as torch.autocast advises.
// Without `backward` no graph is built. Returns the mean loss.
double AccumulateGradients(GPT& model, const std::vector<Batch>& micro_batches, bool bf16,
                           bool backward, const Sharding& sharding = {});

// Mean loss over `batches` in eval mode (no dropout) without autograd, each forward pass in its
// own autocast scope when `bf16`, each batch split into `shards` parts as above; restores train
// mode afterwards.
double EvaluateLoss(GPT& model, const std::vector<Batch>& batches, bool bf16, int shards = 1);

// The global L2 norm of the gradients (before clipping); then, when clip > 0 and the norm is
// finite, torch.nn.utils.clip_grad_norm_'s rule: scale by clip / (norm + 1e-6) when that is < 1.
double ClipGradients(const std::vector<torch::Tensor>& params, double clip);

}  // namespace ablate::train
