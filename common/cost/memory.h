// Device memory one training attempt needs, from its config alone: what Run.memory_bytes stores,
// what a worker's device memory per slot is compared with before it leases a run, and what
// `ablate estimate` counts runs that fit no live worker by (docs/server.md#failures).
//
// The estimate is of the tensors worker/train holds at the peak of an attempt, times a margin,
// plus a fixed allowance for the runtime. With P the trainable parameters (position embedding
// included), B the micro-batch (batch_size), T block_size, C n_embd, H n_head, L n_layer, V the
// vocabulary, a the bytes of a GEMM output (4 under float32, 2 under bf16 autocast), m the bytes
// of a dropout mask (1 on a GPU, where native_dropout keeps a bool; 4 on the CPU, a float noise
// tensor), all in bytes:
//
//   weights, AdamW's two moments              4P + 8P                  (fp32)
//   autocast copies (bf16 only)               2 · (matrix parameters)  cached for each pass
//   token batches (grad_accum micro-batches, eval_batches, the probe batch; int64 x and y), the
//   causal mask and bias, the RoPE tables
//   + the larger of a training step and the probe pass:
//   step = gradients 4P (S + 1 sets when a CPU step runs in S > 1 shards)
//     + activations saved for backward, per layer:
//         B·T·C · (2·4 + 14·a)  the two norms' fp32 inputs (the residual stream), their outputs,
//                               q, k, v as bmm copies them, the attention output, the MLP's 4C
//                               hidden before and after GELU
//         + B·H·T² · (4, + 2 under bf16)  the softmax probabilities (fp32; bf16 copy for P·V)
//         + B·T·C · 5·4 with qk_norm, + 3·4 with rope (inputs the norm and rotation keep alive)
//         + B·H·T² · 4 with attn_softcap (tanh's output)
//         + B·H·T² · (m + 4) + B·T·C · 2m with dropout (masks and dropped probabilities)
//       plus the final norm's input and output, the embedding's dropout mask, and what the head
//       keeps for its backward (below)
//     + the largest transient, one at a time:
//         the head: on a GPU, or under bf16 or z_loss, the logits B·T·V · (8, + 2 under bf16,
//           + 4 with z_loss): the log-probabilities' gradient and softmax backward's output
//           (the log-softmax output, and with z_loss the fp32 logits, 4 + 4, count as
//           activations); on the CPU in fp32 without z_loss the fused LmHeadCrossEntropy instead
//           keeps the x and weight gradients it computed in the forward pass (activations) and
//           scales them in backward: (B·T·C + V·C) · 4, plus two 256-row chunks of logits
//         attention backward: B·H·T² · 4 · (2, + 2 with the softcap, + 1 with dropout)
//         the MLP's backward 2 · 4·B·T·C · 4; AdamW's temporaries on a GPU 2 · (largest) · 4
//   probe = min(B, 8)·H·T² · (16 on a GPU; 36 on the CPU, which widens to float64): one layer's
//     probabilities, their widened copy, its clamp, log and p·log p (worker/train/probes.cc)
//
//   total = ceil(tensors · margin) + runtime
//
// The activation terms are Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
// Transformer Models", §4.1: 34·s·b·h + 5·a·s²·b bytes per layer at 16 bits), recounted for
// this trainer: without dropout their count is 16·B·T·C + 2·B·H·T² elements, the same as ours
// in fp32 (64 bytes per B·T·C, 4 per score); under autocast our norms and softmax stay fp32 (see
// worker/train/model.cc), hence 8 + 28 bytes rather than 32.
//
// Left out, on purpose: LibTorch >= 2's fused attention, which never holds the B·H·T² scores
// (the estimate keeps them: it is an upper bound there); the shard count S on the CPU when the
// run is stored (RunMemoryBytes assumes 1: S is the worker's threads); the evaluation pass (no
// graph: below a training step); the allocator's rounding and fragmentation beyond the margin;
// the process itself (libtorch's code, the worker's own memory). Checked against the trainer on
// the CPU by train.memory (tests/train/memory_test.cc), which prints its figures.
//
// Pure arithmetic on a RunConfig with defaults applied; no torch.
#pragma once

#include <cstdint>
#include <string>

#include "ablate/v1/ablate.pb.h"
#include "absl/strings/str_format.h"

namespace ablate::cost {

// Where the attempt runs: the trainer takes different paths there (see above).
enum class MemoryDevice { kGpu, kCpu };

// How the worker's attention treats the (B, H, T, T) scores in a training step. kHeld: computed
// and kept for backward (LibTorch 1.x; on any LibTorch with a softcap or attention dropout).
// kFused: LibTorch >= 2's fused causal kernel (worker/train/model.cc), which never holds them, on
// runs without a softcap or dropout. The probe pass holds them either way. The server estimates
// with kHeld, since it does not know which worker will take the run: on a LibTorch 2 worker (CUDA,
// MPS, Debian 13) that over-counts a fused run by its attention_scores and the attention
// backward's transient, the safe side of the fit check.
enum class Attention { kHeld, kFused };

// The tensors are multiplied by this: the allocator's rounding and fragmentation. On a GPU,
// PyTorch's caching allocator reserves some 5-20 % above what is allocated at the peak (not
// measured here: the session that wrote this had no GPU). On the CPU glibc's heap keeps the holes
// a step's freed tensors leave (worker/train/device.cc raises its trim and mmap thresholds):
// train.memory measured peaks of 1.1x to 1.5x the tensors (the run's own data and metrics
// included; most at z_loss, L2 H4 C128 T256 B32).
inline constexpr double kGpuMemoryMargin = 1.2;
inline constexpr double kCpuMemoryMargin = 1.5;
// The runtime's own device memory: the CUDA context, cuBLAS workspaces and the allocator's first
// blocks (~300-500 MB on recent GPUs with lazy module loading; MPS is counted the same); on the
// CPU, what a run adds to the worker's process beside its tensors (its data, metrics, threads).
inline constexpr int64_t kGpuRuntimeBytes = int64_t{512} << 20;
inline constexpr int64_t kCpuRuntimeBytes = int64_t{128} << 20;

struct MemoryEstimate {
  int64_t params = 0;            // P: every trainable tensor once (tied embedding once)
  int64_t weights = 0;           // 4P
  int64_t gradients = 0;         // 4P per gradient set (S + 1 sets with S > 1 CPU shards)
  int64_t optimizer = 0;         // 8P: AdamW's exp_avg and exp_avg_sq
  int64_t autocast_copies = 0;   // bf16 copies of the matrices (0 under float32)
  int64_t activations = 0;       // saved for backward, every layer and the head's input
  int64_t attention_scores = 0;  // the part of activations that grows with T²
  int64_t transient = 0;         // the largest short-lived peak (logits, attention backward)
  int64_t probe = 0;             // the probe pass's peak (no graph, no gradients)
  int64_t data = 0;              // token batches, causal mask and bias, RoPE tables
  // weights + optimizer + autocast copies + data + the larger of gradients + activations +
  // transient (a step) and probe
  int64_t tensors = 0;
  int64_t runtime = 0;  // the fixed allowance for `device`
  double margin = 1;    // kGpuMemoryMargin or kCpuMemoryMargin
  int64_t total = 0;    // ceil(tensors · margin) + runtime
};

// The estimate for `config` (defaults applied) with a `vocab`-token vocabulary on `device`;
// `shards` is how many parts a CPU step splits its batch into (1 on a GPU); `attention` as above.
MemoryEstimate EstimateMemory(const v1::RunConfig& config, int64_t vocab,
                              MemoryDevice device = MemoryDevice::kGpu, int shards = 1,
                              Attention attention = Attention::kHeld);

// What a run stores (Run.memory_bytes): the CPU path when its config pins `device: cpu`, else the
// GPU path (`auto` may resolve to either; the GPU path holds the logits and the larger runtime,
// so it bounds both).
int64_t RunMemoryBytes(const v1::RunConfig& config, int64_t vocab);

// Bytes in binary units to 3 significant digits: "512 B", "1.50 KiB", "24.0 MiB", "0.977 GiB"
// (1000 MiB), "1.23 GiB".
// Inline so the CLI can show memory without linking the cost library.
inline std::string FormatBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  // Past 999.5 a unit's figure would need 4 digits: the next unit shows it as 0.977 to 1.00.
  while (v >= 999.5 && u < 5) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return absl::StrFormat("%d B", bytes);
  if (v >= 99.95) return absl::StrFormat("%.0f %s", v, units[u]);
  if (v >= 9.995) return absl::StrFormat("%.1f %s", v, units[u]);
  if (v >= 0.9995) return absl::StrFormat("%.2f %s", v, units[u]);
  return absl::StrFormat("%.3f %s", v, units[u]);
}

}  // namespace ablate::cost
