#include "worker/train/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/sweep/run_config.h"

namespace ablate::train {

double LearningRate(const ablate::v1::RunConfig& config, int64_t step) {
  const double peak = config.lr();
  const int64_t warmup = std::max<int64_t>(config.warmup(), 0);
  if (step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup + 1);
  const double min_lr = ablate::sweep::EffectiveMinLr(config);
  const int64_t decay_steps = config.steps() - warmup;
  if (decay_steps <= 0 || step >= config.steps()) return min_lr;
  const double ratio = static_cast<double>(step - warmup) / static_cast<double>(decay_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return min_lr + coeff * (peak - min_lr);
}

}  // namespace ablate::train
