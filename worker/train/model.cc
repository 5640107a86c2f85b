#include "worker/train/model.h"

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "worker/train/kernels.h"
#include "worker/train/probes.h"

namespace ablate::train {
namespace {

namespace F = torch::nn::functional;

// Truncated normal on [-3 std, 3 std] by inverting the normal CDF of a uniform draw (as
// torch.nn.init.trunc_normal_ does), so out-of-range values are never clamped onto the bounds.
void TruncNormal(torch::Tensor& t, double std) {
  const double lo = 0.5 * (1 + std::erf(-3 / std::sqrt(2.0)));
  const double hi = 0.5 * (1 + std::erf(3 / std::sqrt(2.0)));
  t.uniform_(2 * lo - 1, 2 * hi - 1).erfinv_().mul_(std * std::sqrt(2.0));
}

// torch::nn::Module refuses '.' in parameter names (it reserves it for submodules); the dotted
// names live in named_, and the module registration only needs to be unique.
std::string RegisteredName(std::string name) {
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

}  // namespace

torch::Tensor GPTImpl::Linear::operator()(const torch::Tensor& x) const {
  return torch::linear(x, weight, bias);
}

// Precision under bf16 autocast is explicit here, not left to the device's autocast op lists
// (CPU autocast in LibTorch 1.13 runs layer_norm in its input's dtype, CUDA's in fp32; the lists
// also change between releases): every norm, the softcap, the softmax and the loss take fp32 in
// and give fp32 out, and only the GEMMs run in bf16. CPU and CUDA then run the same numerics.
// In fp32 runs every cast below is a no-op that returns its input.
torch::Tensor GPTImpl::Norm::operator()(const torch::Tensor& x, double eps) const {
  return torch::layer_norm(x.to(torch::kFloat), {weight.size(0)}, weight, bias, eps);
}

GPTImpl::GPTImpl(const ablate::v1::RunConfig& config, int64_t vocab_size)
    : config_(config), vocab_size_(vocab_size) {
  const int64_t c = config.n_embd();
  const int64_t head_dim = c / config.n_head();
  const bool bias = config.bias();
  auto add = [this](const std::string& name, torch::Tensor t) {
    named_.emplace_back(name, register_parameter(RegisteredName(name), std::move(t)));
    return named_.back().second;
  };
  wte_ = add("wte.weight", torch::empty({vocab_size, c}));
  if (config.pos() == "learned") wpe_ = add("wpe.weight", torch::empty({config.block_size(), c}));
  for (int i = 0; i < config.n_layer(); ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    Block b;
    b.ln_1 = MakeNorm(p + "ln_1", c, bias);
    b.c_attn = MakeLinear(p + "attn.c_attn", c, 3 * c, bias);
    if (config.qk_norm() != "none") {
      // One head_dim-sized gain for q and one for k, shared by all heads (Wortsman et al. 2023,
      // App. E); layernorm also gets a shift when the model has biases.
      const bool shift = bias && config.qk_norm() == "layernorm";
      b.q_norm = MakeNorm(p + "attn.q_norm", head_dim, shift);
      b.k_norm = MakeNorm(p + "attn.k_norm", head_dim, shift);
    }
    b.attn_proj = MakeLinear(p + "attn.c_proj", c, c, bias);
    b.ln_2 = MakeNorm(p + "ln_2", c, bias);
    b.c_fc = MakeLinear(p + "mlp.c_fc", c, 4 * c, bias);
    b.mlp_proj = MakeLinear(p + "mlp.c_proj", 4 * c, c, bias);
    blocks_.push_back(std::move(b));
  }
  ln_f_ = MakeNorm("ln_f", c, bias);
  if (!config.tie_embeddings()) lm_head_ = add("lm_head.weight", torch::empty({vocab_size, c}));

  const int64_t t = config.block_size();
  causal_mask_ = register_buffer("causal_mask", torch::ones({t, t}, torch::kBool).triu(1));
  causal_bias_ = register_buffer(
      "causal_bias",
      torch::zeros({t, t}).masked_fill(causal_mask_, -std::numeric_limits<float>::infinity()));
  if (config.pos() == "rope") {
    // Rotate-half RoPE (GPT-NeoX layout), base 10000: pairs (i, i + head_dim/2) rotate together.
    // The angles are computed in float64 on the CPU (the model is built there and moved to its
    // device afterwards) and stored as float32, so every device gets the same table.
    const auto host_f64 =
        torch::TensorOptions().dtype(torch::kDouble).device(torch::kCPU);  // float64-ok: kCPU
    auto inv_freq = torch::pow(10000.0, -torch::arange(0, head_dim, 2, host_f64) / head_dim);
    auto angles = torch::outer(torch::arange(t, host_f64), inv_freq);
    rope_cos_ = register_buffer("rope_cos", angles.cos().to(torch::kFloat));
    rope_sin_ = register_buffer("rope_sin", angles.sin().to(torch::kFloat));
  }
  Initialize();
}

GPTImpl::Linear GPTImpl::MakeLinear(const std::string& prefix, int64_t in, int64_t out, bool bias) {
  Linear l;
  l.weight = register_parameter(RegisteredName(prefix + ".weight"), torch::empty({out, in}));
  named_.emplace_back(prefix + ".weight", l.weight);
  if (bias) {
    l.bias = register_parameter(RegisteredName(prefix + ".bias"), torch::zeros({out}));
    named_.emplace_back(prefix + ".bias", l.bias);
  }
  return l;
}

GPTImpl::Norm GPTImpl::MakeNorm(const std::string& prefix, int64_t dim, bool bias) {
  Norm n;
  n.weight = register_parameter(RegisteredName(prefix + ".weight"), torch::ones({dim}));
  named_.emplace_back(prefix + ".weight", n.weight);
  if (bias) {
    n.bias = register_parameter(RegisteredName(prefix + ".bias"), torch::zeros({dim}));
    named_.emplace_back(prefix + ".bias", n.bias);
  }
  return n;
}

void GPTImpl::Initialize() {
  torch::NoGradGuard no_grad;
  const bool wortsman = config_.init() == "wortsman";
  const double residual_std = 0.02 / std::sqrt(2.0 * config_.n_layer());
  for (auto& [name, t] : named_) {
    if (t.dim() < 2) continue;  // norm gains stay 1, biases 0
    if (wortsman) {
      // Wortsman et al. 2023: truncated normal (at +-3 std) with std 1/sqrt(fan_in) for every
      // matrix, and no depth scaling. This is NOT OLMo's "mitchell" init, which also divides the
      // std of each block's output projections (attention out, MLP out) by sqrt(2 (layer + 1)).
      // Embeddings are stored (vocab, n_embd) like a Linear's (out, in), so size(1) gives them
      // 1/sqrt(n_embd).
      TruncNormal(t, 1.0 / std::sqrt(static_cast<double>(t.size(1))));
    } else if (name.ends_with("c_proj.weight")) {
      t.normal_(0.0, residual_std);
    } else {
      t.normal_(0.0, 0.02);
    }
  }
}

std::vector<std::pair<std::string, torch::Tensor>> GPTImpl::NamedTensors() const { return named_; }

namespace {
thread_local at::Generator* t_dropout_generator = nullptr;
}  // namespace

ScopedDropoutGenerator::ScopedDropoutGenerator(at::Generator* generator)
    : previous_(t_dropout_generator) {
  t_dropout_generator = generator;
}
ScopedDropoutGenerator::~ScopedDropoutGenerator() { t_dropout_generator = previous_; }

torch::Tensor GPTImpl::Dropout(const torch::Tensor& x) const {
  const double p = config_.dropout();
  if (t_dropout_generator == nullptr || !is_training() || p <= 0) {
    return torch::dropout(x, p, is_training());
  }
  // ATen's CPU dropout, with the noise drawn from this thread's generator.
  if (p >= 1) return x * torch::zeros({}, x.options());
  return x * torch::empty_like(x).bernoulli_(1 - p, *t_dropout_generator).div_(1 - p);
}

torch::Tensor GPTImpl::NormalizeHead(const Norm& norm, const torch::Tensor& x) const {
  const double eps = config_.qk_norm_eps();
  if (config_.qk_norm() == "layernorm") return norm(x, eps);
  // RMSNorm: no mean subtraction, no shift; in fp32 like every norm.
  const auto xf = x.to(torch::kFloat);
  return xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps) * norm.weight;
}

torch::Tensor GPTImpl::ApplyRope(const torch::Tensor& x) const {
  const int64_t t = x.size(-2);
  const int64_t half = x.size(-1) / 2;
  auto cos = rope_cos_.slice(0, 0, t);
  auto sin = rope_sin_.slice(0, 0, t);
  auto x1 = x.slice(-1, 0, half);
  auto x2 = x.slice(-1, half);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
}

torch::Tensor GPTImpl::Attention(const Block& b, const torch::Tensor& x, LayerProbe* probe) {
  const int64_t batch = x.size(0), t = x.size(1), c = x.size(2);
  const int64_t h = config_.n_head(), hd = c / h;
  auto qkv = b.c_attn(x).split(c, 2);
  auto heads = [&](const torch::Tensor& z) { return z.view({batch, t, h, hd}).transpose(1, 2); };
  auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  if (probe != nullptr) {
    probe->q_rms_pre = Rms(q);
    probe->k_rms_pre = Rms(k);
  }
  if (config_.qk_norm() != "none") {
    q = NormalizeHead(b.q_norm, q);
    k = NormalizeHead(b.k_norm, k);
  }
  if (config_.pos() == "rope") {
    q = ApplyRope(q);
    k = ApplyRope(k);
  }
#if TORCH_VERSION_MAJOR >= 2
  // LibTorch >= 2: one fused causal attention (flash or memory-efficient kernels on CUDA, a
  // blocked kernel on the CPU) that never holds the (B, H, T, T) scores, on every pass that does
  // not need them: no probe reading the scores, no softcap acting on them, no dropout on the
  // probabilities (the kernel would draw its masks from torch's process-wide generator, not the
  // run's own; see ScopedDropoutGenerator). Its default scale is 1/sqrt(hd), the same as below.
  if (probe == nullptr && config_.attn_softcap() <= 0 &&
      (!is_training() || config_.dropout() <= 0)) {
    // Under bf16, q and k leave QK-norm in fp32 while v comes from a bf16 GEMM: the fused
    // kernel takes one dtype, the GEMM dtype (it accumulates its softmax in fp32 itself).
    auto y = at::scaled_dot_product_attention(q.to(v.scalar_type()), k.to(v.scalar_type()), v,
                                              /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                              /*is_causal=*/true);
    return Dropout(b.attn_proj(y.transpose(1, 2).contiguous().view({batch, t, c})));
  }
#endif
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  auto mask = causal_mask_.slice(0, 0, t).slice(1, 0, t);
  torch::Tensor att;
  if (config_.attn_softcap() > 0) {
    // The cap must act before the mask (tanh(-inf) would unmask), so this path stays unfused.
    att = (torch::matmul(q, k.transpose(-2, -1)) * scale).to(torch::kFloat);
    if (probe != nullptr) RecordQk(q, k, att, mask, probe);
    const double cap = config_.attn_softcap();
    att = torch::tanh(att / cap) * cap;
    att = att.masked_fill(mask, -std::numeric_limits<float>::infinity());
  } else {
    // One GEMM writes scale * q k^T on top of the additive causal mask: two fewer passes over
    // the (B, H, T, T) tensor forward and backward than scaling and masking separately.
    auto bias = causal_bias_.slice(0, 0, t).slice(1, 0, t);
    att = torch::baddbmm(bias, q.reshape({batch * h, t, hd}),
                         k.reshape({batch * h, t, hd}).transpose(1, 2), /*beta=*/1,
                         /*alpha=*/scale)
              .view({batch, h, t, t});
    if (probe != nullptr) RecordQk(q, k, att, mask, probe);
  }
  att = torch::softmax(att, -1, torch::kFloat);
  if (probe != nullptr) {
    probe->attn_entropy_heads = AttentionEntropyPerHead(att);
    // Every head averages over the same batch and queries, so the mean of the heads is the mean
    // over batch, heads and queries; no second pass over the probabilities.
    double sum = 0;
    for (double e : probe->attn_entropy_heads) sum += e;
    probe->attn_entropy = sum / static_cast<double>(probe->attn_entropy_heads.size());
  }
  att = Dropout(att);
  auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({batch, t, c});
  return Dropout(b.attn_proj(y));
}

void GPTImpl::RecordQk(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& logits,
                       const torch::Tensor& mask, LayerProbe* probe) const {
  probe->q_rms = Rms(q);
  probe->k_rms = Rms(k);
  probe->max_attn_logit = MaxCausalLogit(logits, mask);
}

torch::Tensor GPTImpl::Hidden(const torch::Tensor& idx, ProbeRecord* probes) {
  const int64_t t = idx.size(1);
  TORCH_CHECK(t <= config_.block_size(), "sequence of ", t, " tokens exceeds block_size ",
              config_.block_size());
  auto x = F::embedding(idx, wte_);
  if (wpe_.defined()) x = x + wpe_.slice(0, 0, t);
  x = Dropout(x);
  if (probes != nullptr) probes->layers.assign(blocks_.size(), LayerProbe{});
  const double eps = config_.norm_eps();
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    x = x + Attention(b, b.ln_1(x, eps), probes != nullptr ? &probes->layers[i] : nullptr);
    auto m = b.mlp_proj(torch::gelu(b.c_fc(b.ln_2(x, eps))));
    x = x + Dropout(m);
    if (probes != nullptr) {
      probes->layers[i].kurtosis = Kurtosis(x);
      probes->layers[i].kurtosis_channel = ChannelKurtosis(x);
    }
  }
  return ln_f_(x, eps);
}

torch::Tensor GPTImpl::forward(const torch::Tensor& idx, ProbeRecord* probes) {
  return torch::linear(Hidden(idx, probes), lm_head_.defined() ? lm_head_ : wte_);
}

torch::Tensor GPTImpl::ForwardLoss(const torch::Tensor& idx, const torch::Tensor& targets) {
  auto x = Hidden(idx, nullptr);
  const auto& head = lm_head_.defined() ? lm_head_ : wte_;
  // z_loss keeps the unfused path: its gradient summed in another order than the reference's
  // moves Adam's first update of near-zero gradients (|g| ~ eps) past train.parity's tolerance,
  // and the study uses it too rarely for its speed to matter.
  if (x.device().is_cpu() && x.scalar_type() == torch::kFloat && config_.dtype() != "bfloat16" &&
      config_.z_loss() == 0) {
    return LmHeadCrossEntropy(x.reshape({-1, x.size(-1)}), head, targets.reshape({-1}));
  }
  return Loss(torch::linear(x, head), targets);
}

torch::Tensor GPTImpl::Loss(const torch::Tensor& logits, const torch::Tensor& targets) const {
  auto flat = logits.view({-1, logits.size(-1)}).to(torch::kFloat);
  auto loss = F::cross_entropy(flat, targets.reshape({-1}));
  if (config_.z_loss() > 0) loss = loss + config_.z_loss() * flat.logsumexp(-1).pow(2).mean();
  return loss;
}

}  // namespace ablate::train
