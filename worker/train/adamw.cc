#include "worker/train/adamw.h"

#include <cmath>

#include "worker/train/kernels.h"

namespace ablate::train {

AdamW::AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
             const ablate::v1::RunConfig& config)
    : peak_lr_(config.lr()),
      beta1_(config.beta1()),
      beta2_(config.beta2()),
      eps_(config.eps()),
      weight_decay_(config.weight_decay()),
      independent_(config.weight_decay_mode() == "independent") {
  for (const auto& [name, p] : named_params) {
    params_.push_back(p);
    decay_.push_back(p.dim() >= 2);
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
}

void AdamW::Step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const double bias1 = 1 - std::pow(beta1_, static_cast<double>(steps_));
  const double bias2 = 1 - std::pow(beta2_, static_cast<double>(steps_));
  const double decay_factor = 1 - (independent_ ? lr / peak_lr_ : lr) * weight_decay_;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    const torch::Tensor& g = p.grad();
    if (!g.defined()) continue;
    const bool decays = decay_[i] && weight_decay_ != 0;
    if (p.device().is_cpu() && p.scalar_type() == torch::kFloat && p.is_contiguous() &&
        g.is_contiguous() && g.scalar_type() == torch::kFloat) {
      // One pass over p, g and both moments instead of eight (kernels.h).
      AdamWUpdate(p, g, exp_avg_[i], exp_avg_sq_[i], decays ? static_cast<float>(decay_factor) : 1,
                  static_cast<float>(beta1_), static_cast<float>(beta2_),
                  static_cast<float>(-lr / bias1), static_cast<float>(std::sqrt(bias2)),
                  static_cast<float>(eps_));
      continue;
    }
    if (decays) p.mul_(decay_factor);
    // Same arithmetic, in the same order, as torch.optim.AdamW's single-tensor path.
    exp_avg_[i].mul_(beta1_).add_(g, 1 - beta1_);
    exp_avg_sq_[i].mul_(beta2_).addcmul_(g, g, 1 - beta2_);
    auto denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bias2)).add_(eps_);
    p.addcdiv_(exp_avg_[i], denom, -lr / bias1);
  }
}

void AdamW::LoadState(const State& state) {
  torch::NoGradGuard no_grad;
  steps_ = state.steps;
  for (size_t i = 0; i < params_.size(); ++i) {
    exp_avg_[i].copy_(state.exp_avg[i]);
    exp_avg_sq_[i].copy_(state.exp_avg_sq[i]);
  }
}

}  // namespace ablate::train
