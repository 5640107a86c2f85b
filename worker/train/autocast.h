// bf16 autocast, scoped to one forward pass: the only code in worker/train that switches autocast
// on (tests/train/device_rules.py enforces it).
//
// Why per pass and not per run: autocast caches the bf16 copy of each fp32 weight until its cache
// is cleared. A copy made under NoGradGuard (validation, probes) has no autograd history, and
// every later forward pass that reused it gave the weights no gradient: they stayed frozen. A copy
// made in a training pass is also stale after the optimizer updates the weight in place. Each
// guard therefore clears the cache when it ends, so no cast outlives the pass that made it.
#pragma once

#include <torch/torch.h>

namespace ablate::train {

class ScopedAutocast {
 public:
  // When `enable`, turns on bf16 autocast for `device`'s type (CPU or CUDA) until destruction;
  // otherwise does nothing.
  ScopedAutocast(const torch::Device& device, bool enable);
  // Clears the cast cache and restores the previous autocast state for that device type.
  ~ScopedAutocast();
  ScopedAutocast(const ScopedAutocast&) = delete;
  ScopedAutocast& operator=(const ScopedAutocast&) = delete;

 private:
  c10::DeviceType type_;
  bool enabled_;
  bool previous_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
};

}  // namespace ablate::train
