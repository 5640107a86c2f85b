// AdamW with weight decay on tensors of rank >= 2 only (matrices and embeddings; never biases or
// norm gains), as nanoGPT's configure_optimizers splits them, and two decay conventions:
//   coupled      p *= 1 - lr_t * wd            (torch.optim.AdamW, nanoGPT)
//   independent  p *= 1 - (lr_t / lr) * wd     (Wortsman et al. 2023: decay follows the schedule
//                                                but not the peak LR, so an LR sweep does not also
//                                                sweep the effective decay)
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ablate/v1/ablate.pb.h"

namespace ablate::train {

class AdamW {
 public:
  AdamW(const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
        const ablate::v1::RunConfig& config);

  // One update from the tensors' .grad() at learning rate `lr` (this step's scheduled value).
  void Step(double lr);

  bool decays(size_t index) const { return decay_[index]; }
  int64_t steps() const { return steps_; }

  // Everything that must survive a checkpoint: step count, first and second moments.
  struct State {
    int64_t steps = 0;
    std::vector<torch::Tensor> exp_avg, exp_avg_sq;
  };
  State state() const { return {steps_, exp_avg_, exp_avg_sq_}; }
  // Copies `state` into the existing buffers; shapes must match (checked by the caller).
  void LoadState(const State& state);

 private:
  std::vector<torch::Tensor> params_;
  std::vector<bool> decay_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  double peak_lr_, beta1_, beta2_, eps_, weight_decay_;
  bool independent_;
  int64_t steps_ = 0;
};

}  // namespace ablate::train
