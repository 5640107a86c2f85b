#include "worker/train/probes.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/run/metric_names.h"

namespace ablate::train {
namespace {

// The probe input, detached and widened to the reduction dtype on the device it lives on.
torch::Tensor Widen(const torch::Tensor& x) { return x.detach().to(ProbeReduceType(x.device())); }

}  // namespace

torch::ScalarType ProbeReduceType(const torch::Device& device) {
  // MPS has no float64 and CUDA's is slow on consumer cards, so a device reduces in float32
  // (relative error ~1e-6 on these sums, far below what a probe curve shows). On the CPU the
  // probes keep the float64 arithmetic they always had, so CPU results are unchanged.
  return device.is_cpu() ? torch::kDouble : torch::kFloat;  // float64-ok: is_cpu() only
}

double Rms(const torch::Tensor& x) { return Widen(x).pow(2).mean().sqrt().item<double>(); }

double MaxCausalLogit(const torch::Tensor& logits, const torch::Tensor& mask) {
  // Widening is exact, so the max is the same in any reduction dtype.
  return Widen(logits)
      .masked_fill(mask, -std::numeric_limits<double>::infinity())
      .max()
      .item<double>();
}

torch::Tensor NormalisedEntropyPerQuery(const torch::Tensor& probs) {
  TORCH_CHECK(probs.dim() == 4 && probs.size(2) == probs.size(3) && probs.size(3) >= 2,
              "attention entropy needs (B, H, T, T) probabilities with T >= 2, got ",
              probs.sizes());
  const int64_t t = probs.size(3);
  auto p = Widen(probs).slice(2, 1);  // queries 1..T-1
  // p * log(max(p, FLT_MIN)) is exactly 0 for p = 0 and equals p log p for every other value a
  // float softmax can produce; it uses only ops every backend has (xlogy is missing on MPS in
  // older LibTorch releases).
  auto plogp = p * p.clamp_min(std::numeric_limits<float>::min()).log();
  // Query t sees t + 1 keys: log(t + 1) for t = 1..T-1, made on the device in the probe dtype.
  auto uniform = torch::arange(2, t + 1, p.options()).log();
  return -plogp.sum(-1) / uniform;
}

std::vector<double> AttentionEntropyPerHead(const torch::Tensor& probs) {
  // One (H) copy to the host, never the (B, H, T, T) probabilities.
  auto per_head = NormalisedEntropyPerQuery(probs).mean(torch::IntArrayRef{0, 2}).to(torch::kCPU);
  std::vector<double> out(per_head.size(0));
  for (size_t h = 0; h < out.size(); ++h) out[h] = per_head[h].item<double>();
  return out;
}

double AttentionEntropy(const torch::Tensor& probs) {
  return NormalisedEntropyPerQuery(probs).mean().item<double>();
}

double Kurtosis(const torch::Tensor& x) {
  auto d = Widen(x);
  auto m2 = d.pow(2).mean(-1);
  auto m4 = d.pow(4).mean(-1);
  return (m4 / m2.pow(2)).mean().item<double>();
}

double ChannelKurtosis(const torch::Tensor& x) {
  auto d = Widen(x);
  auto ms = d.pow(2).reshape({-1, d.size(-1)}).mean(0);  // s_c^2 per channel
  return (ms.pow(2).mean() / ms.mean().pow(2)).item<double>();
}

double GlobalNorm(const std::vector<torch::Tensor>& tensors) {
  double sum = 0;
  for (const auto& t : tensors) {
    if (!t.defined()) continue;
    sum += Widen(t).pow(2).sum().item<double>();
  }
  return std::sqrt(sum);
}
std::map<std::string, double> RunProbes(GPT& model, const torch::Tensor& probe_x) {
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();  // no dropout: the probe draws nothing from the training RNG
  ProbeRecord record;
  auto logits = model->forward(probe_x, &record);
  if (was_training) model->train();

  std::map<std::string, double> out;
  double entropy_sum = 0, kurtosis_sum = 0, channel_kurtosis_sum = 0;
  double max_logit = -std::numeric_limits<double>::infinity();
  double min_head = std::numeric_limits<double>::infinity();
  size_t heads = 0;
  for (size_t i = 0; i < record.layers.size(); ++i) {
    const LayerProbe& l = record.layers[i];
    out[metric::LayerMetric(metric::kAttnEntropy, i)] = l.attn_entropy;
    for (size_t h = 0; h < l.attn_entropy_heads.size(); ++h) {
      const double v = l.attn_entropy_heads[h];
      out[metric::HeadMetric(metric::kAttnEntropy, i, h)] = v;
      // A NaN head (a diverged model) makes the minimum NaN rather than being skipped.
      min_head = std::isnan(v) || std::isnan(min_head) ? std::numeric_limits<double>::quiet_NaN()
                                                       : std::min(min_head, v);
      ++heads;
    }
    out[metric::LayerMetric(metric::kMaxAttnLogit, i)] = l.max_attn_logit;
    out[metric::LayerMetric(metric::kQRms, i)] = l.q_rms;
    out[metric::LayerMetric(metric::kKRms, i)] = l.k_rms;
    out[metric::LayerMetric(metric::kQRmsPre, i)] = l.q_rms_pre;
    out[metric::LayerMetric(metric::kKRmsPre, i)] = l.k_rms_pre;
    out[metric::LayerMetric(metric::kKurtosis, i)] = l.kurtosis;
    out[metric::LayerMetric(metric::kKurtosisChannel, i)] = l.kurtosis_channel;
    entropy_sum += l.attn_entropy;
    kurtosis_sum += l.kurtosis;
    channel_kurtosis_sum += l.kurtosis_channel;
    max_logit = std::max(max_logit, l.max_attn_logit);
  }
  const double layers = std::max<double>(1, static_cast<double>(record.layers.size()));
  out[metric::kAttnEntropy] = entropy_sum / layers;
  out[metric::kMaxAttnLogit] = max_logit;
  // The lowest head shows a collapse that the mean over a layer's heads averages away.
  if (heads > 0) out[metric::kAttnEntropyMinHead] = min_head;
  out[metric::kKurtosis] = kurtosis_sum / layers;
  out[metric::kKurtosisChannel] = channel_kurtosis_sum / layers;
  std::vector<torch::Tensor> params;
  for (const auto& [name, t] : model->NamedTensors()) params.push_back(t);
  out[metric::kParamNorm] = GlobalNorm(params);
  out[metric::kOutputLogitMax] = logits.detach().max().item<double>();
  return out;
}

}  // namespace ablate::train
