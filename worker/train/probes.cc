#include "worker/train/probes.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/util/metric_names.h"

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

double AttentionEntropy(const torch::Tensor& probs) {
  auto p = Widen(probs);
  // p * log(max(p, FLT_MIN)) is exactly 0 for p = 0 and equals p log p for every other value a
  // float softmax can produce; it uses only ops every backend has (xlogy is missing on MPS in
  // older LibTorch releases).
  auto plogp = p * p.clamp_min(std::numeric_limits<float>::min()).log();
  return (-plogp.sum(-1)).mean().item<double>();
}

double Kurtosis(const torch::Tensor& x) {
  auto d = Widen(x);
  auto m2 = d.pow(2).mean(-1);
  auto m4 = d.pow(4).mean(-1);
  return (m4 / m2.pow(2)).mean().item<double>();
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
  double entropy_sum = 0, kurtosis_sum = 0;
  double max_logit = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < record.layers.size(); ++i) {
    const LayerProbe& l = record.layers[i];
    out[metric::LayerMetric(metric::kAttnEntropy, i)] = l.attn_entropy;
    out[metric::LayerMetric(metric::kMaxAttnLogit, i)] = l.max_attn_logit;
    out[metric::LayerMetric(metric::kQRms, i)] = l.q_rms;
    out[metric::LayerMetric(metric::kKRms, i)] = l.k_rms;
    out[metric::LayerMetric(metric::kQRmsPre, i)] = l.q_rms_pre;
    out[metric::LayerMetric(metric::kKRmsPre, i)] = l.k_rms_pre;
    out[metric::LayerMetric(metric::kKurtosis, i)] = l.kurtosis;
    entropy_sum += l.attn_entropy;
    kurtosis_sum += l.kurtosis;
    max_logit = std::max(max_logit, l.max_attn_logit);
  }
  const double layers = std::max<double>(1, static_cast<double>(record.layers.size()));
  out[metric::kAttnEntropy] = entropy_sum / layers;
  out[metric::kMaxAttnLogit] = max_logit;
  out[metric::kKurtosis] = kurtosis_sum / layers;
  std::vector<torch::Tensor> params;
  for (const auto& [name, t] : model->NamedTensors()) params.push_back(t);
  out[metric::kParamNorm] = GlobalNorm(params);
  out[metric::kOutputLogitMax] = logits.detach().max().item<double>();
  return out;
}

}  // namespace ablate::train
