#include "worker/train/kernels.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ablate::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Rows of logits per chunk: 256 × vocab 4096 × 4 bytes = 4 MiB for the logits and as much for
// their log-probabilities, which stay in L3 between the GEMM that writes them and the two that
// read their gradient, where the whole (N, vocab) tensors (64 MiB each at batch 16 × block 256)
// went to memory and back several times.
constexpr int64_t kRowsPerChunk = 256;

struct HeadLoss {
  at::Tensor loss, dx, dw;  // dx, dw: gradients of the loss (not yet scaled by the incoming one)
};

HeadLoss LmHeadLoss(const at::Tensor& x, const at::Tensor& w, const at::Tensor& targets,
                    bool grad) {
  const int64_t n = x.size(0), vocab = w.size(0);
  const int64_t rows = std::min(n, kRowsPerChunk);
  auto logits = at::empty({rows, vocab}, x.options());
  auto logp = at::empty({rows, vocab}, x.options());
  auto row_loss = at::empty({n}, x.options());
  const double inv_n = 1.0 / static_cast<double>(n);
  HeadLoss out;
  at::Tensor neg_inv_n;
  if (grad) {
    out.dx = at::empty_like(x);
    out.dw = at::zeros_like(w);
    neg_inv_n = at::full({rows, 1}, -inv_n, x.options());
  }
  const auto wt = w.t();
  for (int64_t s = 0; s < n; s += rows) {
    const int64_t e = std::min(n, s + rows), m = e - s;
    const auto xs = x.slice(0, s, e);
    auto l = logits.slice(0, 0, m);
    auto lp = logp.slice(0, 0, m);
    at::mm_out(l, xs, wt);
    at::_log_softmax_out(lp, l, 1, false);
    const auto tgt = targets.slice(0, s, e).unsqueeze(1);
    auto loss_rows = row_loss.slice(0, s, e);
    at::neg_out(loss_rows, lp.gather(1, tgt).squeeze(1));
    if (!grad) continue;
    // d(loss)/d(logits) = (softmax - onehot(target)) / N.
    auto p = lp.exp_().mul_(inv_n);
    p.scatter_add_(1, tgt, neg_inv_n.slice(0, 0, m));
    auto dx_rows = out.dx.slice(0, s, e);
    at::mm_out(dx_rows, p, w);
    out.dw.addmm_(p.t(), xs);
  }
  out.loss = row_loss.mean();
  return out;
}

class LmHeadCrossEntropyFunction : public torch::autograd::Function<LmHeadCrossEntropyFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const at::Tensor& targets) {
    auto r = LmHeadLoss(x, w, targets, /*grad=*/true);
    ctx->saved_data["dx"] = r.dx;
    ctx->saved_data["dw"] = r.dw;
    return r.loss;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const at::Tensor& g = grads[0];
    return {ctx->saved_data["dx"].toTensor().mul_(g), ctx->saved_data["dw"].toTensor().mul_(g),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor LmHeadCrossEntropy(const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& targets) {
  if (at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad())) {
    return LmHeadCrossEntropyFunction::apply(x, weight, targets);
  }
  return LmHeadLoss(x, weight, targets, /*grad=*/false).loss;
}

void AdamWUpdate(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, float decay,
                 float beta1, float beta2, float step, float bias2_sqrt, float eps) {
  float* pp = p.data_ptr<float>();
  const float* gp = g.data_ptr<float>();
  float* mp = m.data_ptr<float>();
  float* vp = v.data_ptr<float>();
  const float one_minus_beta1 = 1 - beta1, one_minus_beta2 = 1 - beta2;
  // 32 Ki elements per task: below that, waking a second thread costs more than it saves.
  at::parallel_for(0, p.numel(), 32768, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float gi = gp[i];
      const float mi = mp[i] * beta1 + one_minus_beta1 * gi;
      const float vi = vp[i] * beta2 + one_minus_beta2 * gi * gi;
      mp[i] = mi;
      vp[i] = vi;
      pp[i] = pp[i] * decay + step * (mi / (std::sqrt(vi) / bias2_sqrt + eps));
    }
  });
}

}  // namespace ablate::train
