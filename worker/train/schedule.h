// Learning-rate schedule: linear warmup, then cosine decay to min_lr at the last step
// (nanoGPT's get_lr with lr_decay_iters = steps).
#pragma once

#include <cstdint>

#include "ablate/v1/ablate.pb.h"

namespace ablate::train {

// The rate of the update that takes the model from `step` to step + 1 optimizer steps.
// Warmup starts at lr / (warmup + 1), not 0, so the first update already moves the weights.
// The floor is sweep::EffectiveMinLr: min_lr as set, else RunConfig's own derivation of it.
double LearningRate(const ablate::v1::RunConfig& config, int64_t step);

}  // namespace ablate::train
