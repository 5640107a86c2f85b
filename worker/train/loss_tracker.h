// What the trainer concludes from the stream of training losses: the initial loss l0, the
// EMA(0.9) loss, steps-to-threshold and divergence (docs/architecture.md#the-trainer). Pure, so a
// checkpoint can hold its whole state and tests can drive it with made-up losses.
#pragma once

#include <cstdint>

#include "ablate/v1/ablate.pb.h"

namespace ablate::train {

struct LossTrackerState {
  bool has_initial = false;
  double initial_loss = 0;
  double ema = 0;
  double last_finite_loss = 0;
  int64_t steps_above = 0;  // consecutive post-warmup steps above l0 + margin
  int64_t steps_to_threshold = -1;
  bool diverged = false;
  int64_t diverged_step = -1;
};

class LossTracker {
 public:
  LossTracker(const ablate::v1::DivergenceSpec& divergence,
              const ablate::v1::ThresholdSpec& threshold, int64_t warmup);

  // Records the training loss measured at `step` (the first call is l0). Returns true when the
  // run has diverged: the loss is not finite, or it stayed above l0 + margin for `patience`
  // consecutive steps after warmup. patience <= 0 turns the margin rule off.
  bool Observe(int64_t step, double loss);

  // Records the validation loss evaluated at `step`. A non-finite one is a divergence (the model
  // produces NaN/inf on held-out data even if the last training loss was finite), never a
  // "finished" run whose loss silently reads as l0. Returns true when the run has diverged.
  bool ObserveValidation(int64_t step, double val_loss);

  const LossTrackerState& state() const { return state_; }
  void set_state(const LossTrackerState& state) { state_ = state; }

 private:
  ablate::v1::DivergenceSpec divergence_;
  ablate::v1::ThresholdSpec threshold_;
  int64_t warmup_;
  LossTrackerState state_;
};

}  // namespace ablate::train
