#include "common/cost/memory.h"

#include <algorithm>
#include <cmath>

#include "common/cost/flops.h"

namespace ablate::cost {
namespace {

// The trainer's fixed batches beside the training ones (worker/train/trainer.cc): the probe
// batch has at most this many sequences.
constexpr int64_t kMaxProbeSequences = 8;
// Rows per chunk of LmHeadCrossEntropy's logits (worker/train/kernels.cc).
constexpr int64_t kLmHeadChunkRows = 256;

}  // namespace

MemoryEstimate EstimateMemory(const v1::RunConfig& c, int64_t vocab, MemoryDevice device,
                              int shards, Attention attention) {
  MemoryEstimate m;
  const double b = std::max(1, c.batch_size());
  const double t = c.block_size();
  const double d = c.n_embd();
  const double h = std::max(1, c.n_head());
  const double layers = c.n_layer();
  const double v = static_cast<double>(vocab);
  const bool bf16 = c.dtype() == "bfloat16";
  const bool cpu = device == MemoryDevice::kCpu;
  const bool dropout = c.dropout() > 0;
  const bool qk_norm = !c.qk_norm().empty() && c.qk_norm() != "none";
  const bool rope = c.pos() == "rope";
  // The fused kernel runs only where nothing acts on the scores (worker/train/model.cc).
  const bool fused = attention == Attention::kFused && c.attn_softcap() <= 0 && !dropout;
  const double f = 4;                   // fp32
  const double a = bf16 ? 2 : 4;        // a GEMM's output under autocast
  const double mask = cpu ? 4 : 1;      // a dropout mask
  const double btc = b * t * d;         // one (B, T, C) tensor's elements
  const double scores = b * h * t * t;  // one (B, H, T, T) tensor's elements

  // ParamCount leaves the learned position embedding out, as nanoGPT's MFU does; the device
  // holds it.
  m.params = ParamCount(c, vocab) + (c.pos() == "learned" ? c.block_size() * c.n_embd() : 0);
  const double p = static_cast<double>(m.params);
  m.weights = static_cast<int64_t>(4 * p);
  m.gradients = static_cast<int64_t>(4 * p * (cpu && shards > 1 ? shards + 1 : 1));
  m.optimizer = static_cast<int64_t>(8 * p);
  // Autocast casts what goes into a GEMM: every block's four matrices and the lm head (wte when
  // tied); the embedding lookup reads the fp32 table.
  const double matrices = layers * 12 * d * d + v * d;
  if (bf16) m.autocast_copies = static_cast<int64_t>(2 * matrices);

  // The scores' fp32 softmax output (and under bf16 the bf16 logits the GEMM wrote), unless the
  // fused kernel keeps them out of memory.
  double per_layer_scores = fused ? 0 : scores * (f + (bf16 ? 2 : 0));
  double per_layer = btc * (2 * f + 14 * a) + per_layer_scores;
  if (qk_norm) per_layer += btc * 5 * f;
  if (rope) per_layer += btc * 3 * f;
  if (c.attn_softcap() > 0) {
    per_layer += scores * f;
    per_layer_scores += scores * f;
  }
  if (dropout) {
    per_layer += scores * (mask + f) + btc * 2 * mask;
    per_layer_scores += scores * (mask + f);
  }
  // The final norm's fp32 input and its output as the lm head takes it; the embedding's mask.
  double head = btc * (f + a) + (dropout ? btc * mask : 0);
  const bool fused_head = cpu && !bf16 && c.z_loss() == 0;
  const double logits = b * t * v;
  double head_transient = 0;
  if (fused_head) {
    // LmHeadCrossEntropy keeps the x and weight gradients it computed in the forward pass, and
    // scales them into new tensors in backward; its chunks of logits are short-lived.
    head += (btc + v * d) * f;
    head_transient = (btc + v * d) * f + 2 * kLmHeadChunkRows * v * f;
  } else {
    // Kept until the head's backward: log-softmax's output, and with z_loss the fp32 logits
    // logsumexp saved. Then the gradient of the log-probabilities and softmax backward's output
    // (and under bf16 the logits' bf16 gradient; with z_loss logsumexp's).
    const bool z = c.z_loss() > 0;
    head += logits * (f + (z ? f : 0));
    head_transient = logits * (2 * f + (bf16 ? 2 : 0) + (z ? f : 0));
  }
  m.activations = static_cast<int64_t>(layers * per_layer + head);
  m.attention_scores = static_cast<int64_t>(layers * per_layer_scores);

  // The largest tensor a step allocates beside the others, one at a time: the logits' or the
  // attention's backward, the MLP's hidden gradient, or (on a GPU, where AdamW is unfused) the
  // optimizer's temporaries for the largest parameter.
  const double largest_param = std::max({v * d, 4 * d * d, t * d});
  // Softmax backward's input gradient beside the probabilities' (and more with the softcap's
  // tanh and dropout's mask in the chain).
  const double attention_backward =
      fused ? 0 : scores * f * (2 + (c.attn_softcap() > 0 ? 2 : 0) + (dropout ? 1 : 0));
  const double mlp_backward = 2 * 4 * btc * f;
  const double optimizer_step = cpu ? 0 : 2 * largest_param * f;
  m.transient = static_cast<int64_t>(
      std::max({head_transient, attention_backward, mlp_backward, optimizer_step}));

  // Token batches (int64 inputs and targets): the step's micro-batches, the validation batches,
  // the probe batch; the causal mask (bool) and bias (fp32); RoPE's cos and sin tables.
  const double sequence = t * 2 * 8;
  const double sequences = b * std::max(1, c.grad_accum()) + b * std::max(0, c.eval_batches()) +
                           std::min<double>(b, kMaxProbeSequences);
  m.data =
      static_cast<int64_t>(sequences * sequence + t * t * (1 + f) + (rope ? t * d / h * f : 0));

  // The probe pass (no graph; at step 0 and the last step, gradients cleared): one layer's
  // scores at a time for at most kMaxProbeSequences sequences, widened for its reductions
  // (worker/train/probes.cc: float64 on the CPU), clamped, their log and p·log p beside the
  // probabilities.
  const double probe_scores = std::min<double>(b, kMaxProbeSequences) * h * t * t;
  m.probe = static_cast<int64_t>(probe_scores * (cpu ? 4 + 4 * 8 : 4 + 3 * f));

  const int64_t step = m.gradients + m.activations + m.transient;
  m.tensors = m.weights + m.optimizer + m.autocast_copies + m.data + std::max(step, m.probe);
  m.runtime = cpu ? kCpuRuntimeBytes : kGpuRuntimeBytes;
  m.margin = cpu ? kCpuMemoryMargin : kGpuMemoryMargin;
  m.total = static_cast<int64_t>(std::ceil(static_cast<double>(m.tensors) * m.margin)) + m.runtime;
  return m;
}

int64_t RunMemoryBytes(const v1::RunConfig& config, int64_t vocab) {
  const MemoryDevice device = config.device() == "cpu" ? MemoryDevice::kCpu : MemoryDevice::kGpu;
  return EstimateMemory(config, vocab, device).total;
}

}  // namespace ablate::cost
