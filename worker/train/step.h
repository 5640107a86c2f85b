// The numerical pieces of one training step, shared by the trainer and tests/train's parity tool,
// so the parity test checks the code that trains rather than a copy of it.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "worker/train/batches.h"
#include "worker/train/model.h"

namespace ablate::train {

// Forward (and, when `backward`, backward) over the micro-batches of one step, each loss scaled
// by 1 / count so the accumulated gradient is that of the mean loss. Each forward pass runs in
// its own bf16 autocast scope when `bf16`; backward runs outside it, as torch.autocast advises.
// Without `backward` no graph is built. Returns the mean loss.
double AccumulateGradients(GPT& model, const std::vector<Batch>& micro_batches, bool bf16,
                           bool backward);

// Mean loss over `batches` in eval mode (no dropout) without autograd, each forward pass in its
// own autocast scope when `bf16`; restores train mode afterwards.
double EvaluateLoss(GPT& model, const std::vector<Batch>& batches, bool bf16);

// The global L2 norm of the gradients (before clipping); then, when clip > 0 and the norm is
// finite, torch.nn.utils.clip_grad_norm_'s rule: scale by clip / (norm + 1e-6) when that is < 1.
double ClipGradients(const std::vector<torch::Tensor>& params, double clip);

}  // namespace ablate::train
