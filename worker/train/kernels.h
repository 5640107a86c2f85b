// Fused CPU kernels for the fp32 training step (issue 13). Each replaces a chain of ATen ops whose
// intermediate tensors cost more memory traffic than arithmetic on a CPU; each computes the same
// function as the chain it replaces, up to fp32 summation order (train.parity, train.loss_curve).
// Internal to worker/train; only ATen headers, so including it does not pull in torch/torch.h.
#pragma once

#include <ATen/core/Tensor.h>

namespace ablate::train {

// Mean cross entropy of the logits x · weightᵀ against `targets`: the value of
// cross_entropy(linear(x, weight), targets), computed over chunks of rows so the full (N, vocab)
// logits, log-probabilities and their gradient never exist. When autograd needs them, the
// gradients for x and weight are computed in the same pass over each chunk and only scaled in
// backward. x (N, C) float, weight (vocab, C) float, targets (N) int64.
at::Tensor LmHeadCrossEntropy(const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& targets);

// One AdamW update of a contiguous CPU float tensor in a single pass over p, g, m and v (threaded
// over elements), with torch.optim.AdamW's arithmetic in its order: p *= decay; m = β1 m + (1-β1)
// g; v = β2 v + (1-β2) g²; p += step · m / (√v / bias2_sqrt + eps).
void AdamWUpdate(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, float decay,
                 float beta1, float beta2, float step, float bias2_sqrt, float eps);

}  // namespace ablate::train
