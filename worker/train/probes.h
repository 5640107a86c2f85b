// Probe statistics (docs/architecture.md#the-trainer), measured on a fixed probe batch every
// probe_every steps.
//
// The per-tensor functions are the definitions; GPT::forward calls them per layer when probing,
// and the tests check them against hand-computed values.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "worker/train/model.h"

namespace ablate::train {

// The dtype the probes reduce in on `device`: float64 on the CPU, float32 on a GPU (MPS has no
// float64). Every reduction runs where its tensor lives; only the scalar result crosses over.
torch::ScalarType ProbeReduceType(const torch::Device& device);

// sqrt(mean(x^2)) over every element.
double Rms(const torch::Tensor& x);

// Max of `logits` where `mask` (broadcast to it) is false, i.e. over causal pairs only.
double MaxCausalLogit(const torch::Tensor& logits, const torch::Tensor& mask);

// Normalised entropy of causal attention per query. `probs` is (B, H, T, T), T >= 2, with
// query t attending to keys 0..t. Query t's entropy -sum_j A_tj log A_tj (0 log 0 = 0) is divided
// by log(t + 1), the entropy of uniform attention over the t + 1 keys it sees, so 1 is uniform
// and 0 one-hot at every position. Query 0 sees one key (0/0) and is left out: the result is
// (B, H, T - 1), for queries 1..T-1, in the probe dtype on probs' device.
torch::Tensor NormalisedEntropyPerQuery(const torch::Tensor& probs);

// Per head: the mean of NormalisedEntropyPerQuery over the batch and queries 1..T-1 (size H).
std::vector<double> AttentionEntropyPerHead(const torch::Tensor& probs);

// The mean of NormalisedEntropyPerQuery over batch, heads and queries 1..T-1, in [0, 1].
double AttentionEntropy(const torch::Tensor& probs);

// Per token: mean over tokens of mean(x^4) / mean(x^2)^2, each over the token's channels (the
// last dim); 3 for a Gaussian, 1 for a constant-magnitude vector.
double Kurtosis(const torch::Tensor& x);

// Per channel (He et al. 2024, "Understanding and Minimising Outlier Features in Transformer
// Training"): s_c = the RMS of channel c (the last dim) over every token (all leading dims), then
// mean_c(s_c^4) / mean_c(s_c^2)^2. 1 when every channel has the same RMS, C when one channel
// carries everything: it grows with outlier features, which the per-token Kurtosis can miss.
double ChannelKurtosis(const torch::Tensor& x);

// sqrt of the sum of squared norms of `tensors` (their .grad() when `grads`).
double GlobalNorm(const std::vector<torch::Tensor>& tensors);

// Runs the model on `probe_x` in eval mode without autograd or any RNG draw and returns every
// probe by its metric name: attn_entropy.l{i} and attn_entropy.l{i}.h{j} (normalised),
// max_attn_logit.l{i}, q_rms.l{i}, k_rms.l{i}, q_rms_pre.l{i}, k_rms_pre.l{i} (before qk_norm and
// rope), kurtosis.l{i}, kurtosis_channel.l{i}, the aggregates attn_entropy (mean),
// attn_entropy_min_head (min over every layer's heads), max_attn_logit (max), kurtosis (mean),
// kurtosis_channel (mean), param_norm and output_logit_max.
std::map<std::string, double> RunProbes(GPT& model, const torch::Tensor& probe_x);

}  // namespace ablate::train
