#include "worker/train/kernels.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>

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

// Runs fn(b, h, i) for every (batch, head) pair, whole pairs per thread. The tensors fn touches
// are detached: grad mode is thread-local and OpenMP's workers do not inherit the caller's, so an
// out= op on a tensor that requires grad would be refused there.
template <typename Fn>
void ForEachHead(int64_t batch, int64_t heads, const Fn& fn) {
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(i / heads, i % heads, i);
  });
}

// (B, T, H, hd) -> the (T, hd) matrix of one (batch, head), a strided view (row stride T's).
at::Tensor HeadOf(const at::Tensor& x, int64_t b, int64_t h) { return x.select(0, b).select(1, h); }

class CausalAttentionFunction : public torch::autograd::Function<CausalAttentionFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q_in, const at::Tensor& k_in,
                            const at::Tensor& v_in, double scale, const at::Tensor& bias) {
    const auto q = q_in.detach(), k = k_in.detach(), v = v_in.detach();
    const int64_t batch = q.size(0), t = q.size(1), heads = q.size(2), hd = q.size(3);
    auto y = at::empty({batch, t, heads, hd}, q.options());
    auto probs = at::empty({batch, heads, t, t}, q.options());
    ForEachHead(batch, heads, [&](int64_t b, int64_t h, int64_t) {
      auto scores = at::empty({t, t}, q.options());
      at::addmm_out(scores, bias, HeadOf(q, b, h), HeadOf(k, b, h).t(), 1, scale);
      auto p = probs.select(0, b).select(0, h);
      at::_softmax_out(p, scores, 1, false);
      auto yh = HeadOf(y, b, h);
      at::mm_out(yh, p, HeadOf(v, b, h));
    });
    ctx->save_for_backward({q, k, v, probs});
    ctx->saved_data["scale"] = scale;
    return y.view({batch, t, heads * hd});
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &probs = saved[3];
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t batch = q.size(0), t = q.size(1), heads = q.size(2), hd = q.size(3);
    const auto dy = grads[0].detach().contiguous().view({batch, t, heads, hd});
    auto dq = at::empty({batch, t, heads, hd}, q.options());
    auto dk = at::empty_like(dq), dv = at::empty_like(dq);
    ForEachHead(batch, heads, [&](int64_t b, int64_t h, int64_t) {
      const auto p = probs.select(0, b).select(0, h);
      const auto dyh = HeadOf(dy, b, h);
      auto dp = at::mm(dyh, HeadOf(v, b, h).t());
      auto dvh = HeadOf(dv, b, h);
      at::mm_out(dvh, p.t(), dyh);
      auto ds = at::empty({t, t}, q.options());
      at::_softmax_backward_data_out(ds, dp, p, 1, at::kFloat);
      ds.mul_(scale);
      auto dqh = HeadOf(dq, b, h), dkh = HeadOf(dk, b, h);
      at::mm_out(dqh, ds, HeadOf(k, b, h));
      at::mm_out(dkh, ds.t(), HeadOf(q, b, h));
    });
    return {dq, dk, dv, at::Tensor(), at::Tensor()};
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

at::Tensor CausalAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           double scale, const at::Tensor& causal_bias) {
  return CausalAttentionFunction::apply(q, k, v, scale, causal_bias);
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
