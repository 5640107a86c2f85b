// GPT as in nanoGPT's model.py (pre-LN blocks, causal self-attention, 4x GELU MLP, learned
// positions, optional bias, weight tying, scaled init of residual projections), plus the study's
// switches: qk_norm, pos, attn_softcap, z_loss, init. Internal to worker/train (torch-typed).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ablate/v1/ablate.pb.h"

namespace ablate::train {

// Scalar statistics one forward pass records when probing (docs/architecture.md#the-trainer);
// filled only when a ProbeRecord is passed to forward(), so training steps pay nothing for them.
struct LayerProbe {
  // Normalised attention entropy (probes.h, NormalisedEntropyPerQuery): the mean over batch,
  // heads and queries 1..T-1, and per head the mean over batch and queries.
  double attn_entropy = 0;
  std::vector<double> attn_entropy_heads;
  double max_attn_logit = 0;  // max of q.k/sqrt(d_h) over causal pairs, before any softcap
  double q_rms = 0;           // of q and k as they enter the dot product (after qk_norm, rope)
  double k_rms = 0;
  // Of q and k as projected, before qk_norm and rope. After QK-norm q_rms mostly reports the
  // norm's gain, so only these compare across variants (is the projection itself growing?).
  double q_rms_pre = 0;
  double k_rms_pre = 0;
  // Of the residual stream after the block: per token (mean over tokens of m4/m2^2 over the
  // channels) and per channel (He et al. 2024: of the channels' RMS over the tokens).
  double kurtosis = 0;
  double kurtosis_channel = 0;
};
struct ProbeRecord {
  std::vector<LayerProbe> layers;
};

// While one lives, dropout on this thread draws from `generator` (when not null) instead of
// torch's process-wide default generator: what lets the shards of a step (step.h) train at once
// with dropout and still draw the same masks every time.
class ScopedDropoutGenerator {
 public:
  explicit ScopedDropoutGenerator(at::Generator* generator);
  ~ScopedDropoutGenerator();
  ScopedDropoutGenerator(const ScopedDropoutGenerator&) = delete;
  ScopedDropoutGenerator& operator=(const ScopedDropoutGenerator&) = delete;

 private:
  at::Generator* previous_;
};

class GPTImpl : public torch::nn::Module {
 public:
  // `config` must be complete (defaults applied); the init is drawn from torch's default CPU
  // generator, which the caller seeds.
  GPTImpl(const ablate::v1::RunConfig& config, int64_t vocab_size);

  // idx (B, T) int64 -> logits (B, T, vocab).
  torch::Tensor forward(const torch::Tensor& idx, ProbeRecord* probes = nullptr);

  // Loss(forward(idx), targets). In float32 on the CPU without z_loss, the lm head and the cross
  // entropy run as one chunked kernel (LmHeadCrossEntropy in kernels.h) that never holds the
  // full logits.
  torch::Tensor ForwardLoss(const torch::Tensor& idx, const torch::Tensor& targets);

  // Mean cross entropy over all positions, plus z_loss * mean(logsumexp(logits)^2) when set.
  torch::Tensor Loss(const torch::Tensor& logits, const torch::Tensor& targets) const;

  // Every trainable tensor once (a tied embedding appears once, as wte.weight), in a fixed order
  // with names that match tests/train/reference_model.py's state_dict.
  std::vector<std::pair<std::string, torch::Tensor>> NamedTensors() const;

  int64_t vocab_size() const { return vocab_size_; }
  const ablate::v1::RunConfig& config() const { return config_; }

 private:
  struct Linear {
    torch::Tensor weight, bias;  // bias undefined when config.bias is false
    torch::Tensor operator()(const torch::Tensor& x) const;
  };
  struct Norm {
    torch::Tensor weight, bias;
    torch::Tensor operator()(const torch::Tensor& x, double eps) const;  // layer norm
  };
  struct Block {
    Norm ln_1, ln_2, q_norm, k_norm;
    Linear c_attn, attn_proj, c_fc, mlp_proj;
  };

  Linear MakeLinear(const std::string& prefix, int64_t in, int64_t out, bool bias);
  Norm MakeNorm(const std::string& prefix, int64_t dim, bool bias);
  torch::Tensor NormalizeHead(const Norm& norm, const torch::Tensor& x) const;
  // torch::dropout with config.dropout while training, drawing from the thread's
  // ScopedDropoutGenerator when one is set.
  torch::Tensor Dropout(const torch::Tensor& x) const;
  torch::Tensor ApplyRope(const torch::Tensor& x) const;
  torch::Tensor Attention(const Block& block, const torch::Tensor& x, LayerProbe* probe);
  // The residual stream after ln_f, (B, T, n_embd): everything but the lm head.
  torch::Tensor Hidden(const torch::Tensor& idx, ProbeRecord* probes);
  void Initialize();

  ablate::v1::RunConfig config_;
  int64_t vocab_size_;
  torch::Tensor wte_, wpe_, lm_head_;
  std::vector<Block> blocks_;
  Norm ln_f_;
  void RecordQk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& logits,
                const torch::Tensor& mask, LayerProbe* probe) const;

  torch::Tensor causal_bias_;          // (block, block) float: -inf above the diagonal, else 0
  torch::Tensor causal_mask_;          // (block, block) bool, true above the diagonal
  torch::Tensor rope_cos_, rope_sin_;  // (block, head_dim / 2)
  std::vector<std::pair<std::string, torch::Tensor>> named_;
};
TORCH_MODULE(GPT);

}  // namespace ablate::train
