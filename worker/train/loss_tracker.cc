#include "worker/train/loss_tracker.h"

#include <cmath>

namespace ablate::train {
namespace {
constexpr double kEmaDecay = 0.9;
}  // namespace

LossTracker::LossTracker(const ablate::v1::DivergenceSpec& divergence,
                         const ablate::v1::ThresholdSpec& threshold, int64_t warmup)
    : divergence_(divergence), threshold_(threshold), warmup_(warmup) {}

bool LossTracker::Observe(int64_t step, double loss) {
  if (state_.diverged) return true;
  if (!std::isfinite(loss)) {
    state_.diverged = true;
    state_.diverged_step = step;
    return true;
  }
  state_.last_finite_loss = loss;
  if (!state_.has_initial) {
    // The EMA starts at l0 rather than 0, so it carries no start-up bias to correct.
    state_.has_initial = true;
    state_.initial_loss = loss;
    state_.ema = loss;
  } else {
    state_.ema = kEmaDecay * state_.ema + (1 - kEmaDecay) * loss;
  }
  if (state_.steps_to_threshold < 0 && threshold_.train_loss() > 0 &&
      state_.ema <= threshold_.train_loss()) {
    state_.steps_to_threshold = step;
  }
  if (divergence_.patience() > 0 && step > warmup_ &&
      loss > state_.initial_loss + divergence_.loss_above_init_by()) {
    if (++state_.steps_above >= divergence_.patience()) {
      state_.diverged = true;
      state_.diverged_step = step;
    }
  } else {
    state_.steps_above = 0;
  }
  return state_.diverged;
}

bool LossTracker::ObserveValidation(int64_t step, double val_loss) {
  if (state_.diverged) return true;
  if (!std::isfinite(val_loss)) {
    state_.diverged = true;
    state_.diverged_step = step;
  }
  return state_.diverged;
}

}  // namespace ablate::train
