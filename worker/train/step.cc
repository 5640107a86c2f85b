#include "worker/train/step.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "worker/train/autocast.h"

namespace ablate::train {

double AccumulateGradients(GPT& model, const std::vector<Batch>& micro_batches, bool bf16,
                           bool backward) {
  const auto count = static_cast<double>(micro_batches.size());
  std::optional<torch::NoGradGuard> no_grad;
  if (!backward) no_grad.emplace();
  torch::Tensor total;
  for (const Batch& b : micro_batches) {
    torch::Tensor loss;
    {
      ScopedAutocast autocast(b.x.device(), bf16);
      loss = model->ForwardLoss(b.x, b.y);
    }
    if (backward) (loss / count).backward();
    total = total.defined() ? total + loss.detach() : loss.detach();
  }
  return total.item<double>() / count;
}

double EvaluateLoss(GPT& model, const std::vector<Batch>& batches, bool bf16) {
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  double sum = 0;
  for (const Batch& b : batches) {
    ScopedAutocast autocast(b.x.device(), bf16);
    sum += model->ForwardLoss(b.x, b.y).item<double>();
  }
  if (was_training) model->train();
  return sum / static_cast<double>(std::max<size_t>(1, batches.size()));
}

double ClipGradients(const std::vector<torch::Tensor>& params, double clip) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  for (const auto& p : params) {
    if (p.grad().defined()) norms.push_back(p.grad().norm(2).to(torch::kFloat));
  }
  if (norms.empty()) return 0;
  const double norm = torch::stack(norms).norm(2).item<double>();
  if (clip > 0 && std::isfinite(norm)) {
    const double scale = clip / (norm + 1e-6);
    if (scale < 1) {
      for (const auto& p : params) {
        if (p.grad().defined()) p.grad().mul_(scale);
      }
    }
  }
  return norm;
}

}  // namespace ablate::train
