// Model-level checks with hand-computed expectations: probes, weight decay, the optimizer.
#include "worker/train/model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "common/cost/flops.h"
#include "common/run/metric_names.h"
#include "common/sweep/run_config.h"
#include "worker/train/adamw.h"
#include "worker/train/probes.h"

namespace ablate::train {
namespace {

ablate::v1::RunConfig TinyConfig() {
  ablate::v1::RunConfig c;
  c.set_n_layer(2);
  c.set_n_head(2);
  c.set_n_embd(16);
  c.set_block_size(6);
  ablate::sweep::ApplyDefaults(&c);
  return c;
}

// (B, H, T, T) causal attention, uniform over the t + 1 keys each query t sees.
torch::Tensor UniformCausal(int64_t b, int64_t h, int64_t t) {
  auto probs = torch::zeros({b, h, t, t}, torch::kDouble);
  for (int64_t q = 0; q < t; ++q) {
    probs.select(2, q).slice(-1, 0, q + 1).fill_(1.0 / static_cast<double>(q + 1));
  }
  return probs;
}

// Raw entropy grows as log(t + 1) along the sequence; normalised per query position it is 1 at
// every position and head, so a layer's figure no longer depends on the context length.
TEST(ProbesTest, UniformCausalAttentionHasNormalisedEntropyOneAtEveryPositionAndHead) {
  auto probs = UniformCausal(2, 3, 7);
  auto per_query = NormalisedEntropyPerQuery(probs);
  ASSERT_EQ(per_query.sizes().vec(), (std::vector<int64_t>{2, 3, 6}));  // query 0 left out
  EXPECT_NEAR((per_query - 1).abs().max().item<double>(), 0.0, 1e-12);
  for (double h : AttentionEntropyPerHead(probs)) EXPECT_NEAR(h, 1.0, 1e-12);
  EXPECT_EQ(AttentionEntropyPerHead(probs).size(), 3u);
  EXPECT_NEAR(AttentionEntropy(probs), 1.0, 1e-12);
}

TEST(ProbesTest, OneHotAttentionHasNormalisedEntropyZero) {
  const int64_t t = 5;
  auto probs = torch::zeros({2, 2, t, t}, torch::kDouble);
  for (int64_t q = 0; q < t; ++q) {
    probs.select(2, q).select(-1, 0).fill_(1.0);  // head 0: every query on the first token
  }
  probs.select(1, 1).copy_(torch::eye(t, torch::kDouble));  // head 1: every query on itself
  EXPECT_EQ(NormalisedEntropyPerQuery(probs).abs().max().item<double>(), 0.0);
  EXPECT_EQ(AttentionEntropy(probs), 0.0);
}

// Hand-computed: head 0 uniform (1 at every query), head 1 splits every query t >= 1 evenly
// between its first two keys, entropy log 2 over a maximum of log(t + 1).
TEST(ProbesTest, NormalisedEntropyDividesEachQueryByItsOwnKeyCount) {
  const int64_t t = 4;
  auto probs = UniformCausal(1, 2, t);
  probs.select(1, 1).zero_();
  probs[0][1][0][0] = 1.0;
  probs.select(1, 1).slice(1, 1).slice(2, 0, 2).fill_(0.5);
  const double head1 = (1.0 + std::log(2) / std::log(3) + std::log(2) / std::log(4)) / 3;
  auto heads = AttentionEntropyPerHead(probs);
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_NEAR(heads[0], 1.0, 1e-12);
  EXPECT_NEAR(heads[1], head1, 1e-12);
  EXPECT_NEAR(AttentionEntropy(probs), (1.0 + head1) / 2, 1e-12);
}

// MPS has no float64: on a device the probes must reduce in float32 (docs/trainer.md, Devices).
TEST(ProbesTest, ReduceInFloat64OnlyOnTheCpu) {
  EXPECT_EQ(ProbeReduceType(torch::Device(torch::kCPU)), torch::kDouble);
  EXPECT_EQ(ProbeReduceType(torch::Device(torch::kMPS)), torch::kFloat);
  EXPECT_EQ(ProbeReduceType(torch::Device(torch::kCUDA, 0)), torch::kFloat);
}

TEST(ProbesTest, GaussianKurtosisIsThree) {
  torch::manual_seed(0);
  EXPECT_NEAR(Kurtosis(torch::randn({4000, 512})), 3.0, 0.03);
  // A constant-magnitude vector has kurtosis 1.
  EXPECT_NEAR(Kurtosis(torch::ones({3, 8})), 1.0, 1e-12);
}

// He et al. 2024's per-channel kurtosis against a hand computation. Two tokens (in two batch
// rows, so the RMS runs over every leading dim) of two channels, x = [[1, 2], [3, 4]]:
// s_0^2 = (1 + 9) / 2 = 5, s_1^2 = (4 + 16) / 2 = 10, so mean(s^4) / mean(s^2)^2 =
// ((25 + 100) / 2) / 7.5^2 = 10 / 9. The per-token definition on the same tensor differs:
// (8.5 / 2.5^2 + 168.5 / 12.5^2) / 2.
TEST(ProbesTest, ChannelKurtosisMatchesAHandComputation) {
  auto x = torch::tensor({1.0, 2.0, 3.0, 4.0}, torch::kDouble).view({2, 1, 2});
  EXPECT_NEAR(ChannelKurtosis(x), 10.0 / 9.0, 1e-12);
  EXPECT_NEAR(Kurtosis(x), (8.5 / 6.25 + 168.5 / 156.25) / 2, 1e-12);
  // Equal channel RMS: 1, whatever the values within a channel (per token this is 3).
  torch::manual_seed(0);
  EXPECT_NEAR(ChannelKurtosis(torch::randn({4000, 64})), 1.0, 0.01);
  EXPECT_NEAR(ChannelKurtosis(torch::ones({3, 8})), 1.0, 1e-12);
  // One channel carrying everything (the extreme outlier feature): C.
  auto outlier = torch::zeros({5, 8}, torch::kDouble);
  outlier.select(1, 3).fill_(2.0);
  EXPECT_NEAR(ChannelKurtosis(outlier), 8.0, 1e-12);
}

TEST(ProbesTest, MaxLogitIgnoresMaskedPairs) {
  auto logits = torch::tensor({{1.0, 100.0}, {2.5, -1.0}}).view({1, 1, 2, 2});
  auto mask = torch::ones({2, 2}, torch::kBool).triu(1);
  EXPECT_DOUBLE_EQ(MaxCausalLogit(logits, mask), 2.5);
  EXPECT_DOUBLE_EQ(Rms(torch::tensor({3.0, -3.0, 3.0, -3.0})), 3.0);
}

TEST(ProbesTest, ModelWithZeroQueriesAttendsUniformly) {
  torch::manual_seed(0);
  GPT model(TinyConfig(), 32);
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : model->NamedTensors()) {
      if (name.ends_with("c_attn.weight")) t.slice(0, 0, 16).zero_();  // q = 0
    }
  }
  auto x = torch::randint(32, {2, 6}, torch::kInt64);
  auto probes = RunProbes(model, x);
  // Zero logits: uniform attention, normalised entropy 1 in every layer and head (to float32
  // rounding of the probabilities).
  for (const char* name :
       {"attn_entropy.l0", "attn_entropy.l1", "attn_entropy.l0.h0", "attn_entropy.l0.h1",
        "attn_entropy.l1.h0", "attn_entropy.l1.h1", "attn_entropy", "attn_entropy_min_head"}) {
    EXPECT_NEAR(probes.at(name), 1.0, 1e-6) << name;
  }
  EXPECT_FALSE(probes.contains("attn_entropy.l0.h2"));
  EXPECT_DOUBLE_EQ(probes.at("max_attn_logit.l1"), 0.0);
  EXPECT_DOUBLE_EQ(probes.at("q_rms.l0"), 0.0);
  EXPECT_GT(probes.at("k_rms.l0"), 0.0);
  EXPECT_GT(probes.at("param_norm"), 0.0);
  EXPECT_TRUE(probes.contains("kurtosis.l1"));
  EXPECT_TRUE(probes.contains("output_logit_max"));
}

// On a trained-looking (random) model the heads differ: the summary is the lowest head, never
// above the mean, and every series is where its name says.
TEST(ProbesTest, MinHeadIsTheLowestHeadAndAtMostTheMean) {
  auto c = TinyConfig();
  c.set_n_head(4);
  torch::manual_seed(0);
  GPT model(c, 32);
  {
    torch::NoGradGuard no_grad;
    // Large q/k projections give peaked, unequal heads.
    for (auto& [name, t] : model->NamedTensors()) {
      if (name.ends_with("c_attn.weight")) t.slice(0, 0, 32).normal_(0.0, 1.0);
    }
  }
  auto probes = RunProbes(model, torch::randint(32, {3, 6}, torch::kInt64));
  double lowest = 2, layer_sum = 0, channel_sum = 0;
  for (int l = 0; l < 2; ++l) {
    double head_sum = 0;
    for (int h = 0; h < 4; ++h) {
      const double e = probes.at(metric::HeadMetric(metric::kAttnEntropy, l, h));
      EXPECT_GE(e, 0.0);
      EXPECT_LE(e, 1.0 + 1e-6);
      lowest = std::min(lowest, e);
      head_sum += e;
    }
    const double layer = probes.at(metric::LayerMetric(metric::kAttnEntropy, l));
    EXPECT_NEAR(layer, head_sum / 4, 1e-12);
    layer_sum += layer;
    const double channel = probes.at(metric::LayerMetric(metric::kKurtosisChannel, l));
    EXPECT_GE(channel, 1.0);
    channel_sum += channel;
  }
  EXPECT_EQ(probes.at(metric::kAttnEntropyMinHead), lowest);
  EXPECT_NEAR(probes.at(metric::kAttnEntropy), layer_sum / 2, 1e-12);
  EXPECT_LT(probes.at(metric::kAttnEntropyMinHead), probes.at(metric::kAttnEntropy));
  EXPECT_LT(probes.at(metric::kAttnEntropy), 0.99);  // the projections did make heads peaked
  EXPECT_NEAR(probes.at(metric::kKurtosisChannel), channel_sum / 2, 1e-12);
}

// One layer with one head of width 16 whose q and k projections are `scale` x identity, so q = k
// = scale x the attention input; random token embeddings and no position embedding, so with one
// token repeated every position's attention input is u = ln_1(wte[token]).
struct IdentityQk {
  ablate::v1::RunConfig config;
  GPT model;
  std::map<std::string, torch::Tensor> p;  // the model's tensors by name

  IdentityQk(const std::string& qk_norm, double scale) : config(OneHead(qk_norm)), model(nullptr) {
    torch::manual_seed(0);
    model = GPT(config, 8);
    torch::NoGradGuard no_grad;
    for (const auto& [name, t] : model->NamedTensors()) p.emplace(name, t);
    auto qkv = p.at("h.0.attn.c_attn.weight");
    qkv.zero_();
    qkv.slice(0, 0, 16).copy_(torch::eye(16) * scale);
    qkv.slice(0, 16, 32).copy_(torch::eye(16) * scale);
    p.at("wte.weight").copy_(torch::randn({8, 16}));
    p.at("wpe.weight").zero_();
  }
  static ablate::v1::RunConfig OneHead(const std::string& qk_norm) {
    auto c = TinyConfig();
    c.set_n_head(1);
    c.set_n_layer(1);
    c.set_qk_norm(qk_norm);
    return c;
  }
  torch::Tensor U(int64_t token) {
    return torch::layer_norm(p.at("wte.weight")[token], {16}, p.at("h.0.ln_1.weight"),
                             torch::Tensor(), config.norm_eps());
  }
};

TEST(ProbesTest, KnownQueryKeyGivesItsLogit) {
  // Identity q and k projections: every logit is |u|^2 / sqrt(16).
  IdentityQk m("none", 1.0);
  torch::NoGradGuard no_grad;
  const double expected = m.U(3).pow(2).sum().item<double>() / 4.0;
  auto probes = RunProbes(m.model, torch::full({1, 4}, 3, torch::kInt64));
  EXPECT_NEAR(probes.at("max_attn_logit.l0"), expected, 1e-4 * expected);
}

TEST(ProbesTest, RmsBeforeQkNormSeesTheProjectionNotTheGain) {
  // Identity projections scaled by 10 under rmsnorm QK-norm (gain 1): q and k enter the dot
  // product with RMS ~1 whatever the scale, while the pre-norm probe reports 10 x RMS(u).
  IdentityQk m("rmsnorm", 10.0);
  torch::NoGradGuard no_grad;
  const double pre = 10 * std::sqrt(m.U(3).pow(2).mean().item<double>());
  auto probes = RunProbes(m.model, torch::full({1, 4}, 3, torch::kInt64));
  EXPECT_NEAR(probes.at("q_rms_pre.l0"), pre, 1e-4 * pre);
  EXPECT_NEAR(probes.at("k_rms_pre.l0"), pre, 1e-4 * pre);
  EXPECT_NEAR(probes.at("q_rms.l0"), 1.0, 1e-3);
  EXPECT_NEAR(probes.at("k_rms.l0"), 1.0, 1e-3);
}

// docs/trainer.md's bound: with rmsnorm QK-norm (gains g_q, g_k; no rope), |q.k| / sqrt(d_h) <
// sqrt(d_h) * max_i |g_q,i g_k,i|, reached when q and k point the same way: here q = k at every
// pair (the norm removes the projections' scale of 10).
TEST(ProbesTest, QkNormBoundsTheMaxLogitBySqrtHeadDimTimesTheGains) {
  IdentityQk m("rmsnorm", 10.0);
  torch::NoGradGuard no_grad;
  m.p.at("h.0.attn.q_norm.weight").fill_(2.0);
  m.p.at("h.0.attn.k_norm.weight").fill_(1.5);
  const double bound = std::sqrt(16.0) * 2.0 * 1.5;
  auto same = RunProbes(m.model, torch::full({1, 4}, 3, torch::kInt64));
  // Every logit is g_q g_k ||n||^2 / sqrt(d_h), with ||n||^2 = d_h ms / (ms + eps) just under d_h
  // (eps / ms ~ 1e-8 here): the bound, reached from below.
  EXPECT_NEAR(same.at("max_attn_logit.l0"), bound, 1e-4 * bound);
  EXPECT_LT(same.at("max_attn_logit.l0"), bound * (1 + 1e-5));  // float32 rounding only
  // Mixed tokens and signed, unequal gains: every logit stays inside sqrt(d_h) max_i |g_q,i g_k,i|.
  auto g_q = torch::linspace(-2.0, 2.0, 16), g_k = torch::linspace(3.0, 0.5, 16);
  m.p.at("h.0.attn.q_norm.weight").copy_(g_q);
  m.p.at("h.0.attn.k_norm.weight").copy_(g_k);
  const double gains = (g_q * g_k).abs().max().item<double>();
  auto mixed = RunProbes(m.model, torch::randint(8, {2, 6}, torch::kInt64));
  EXPECT_LT(std::abs(mixed.at("max_attn_logit.l0")), std::sqrt(16.0) * gains);
}

TEST(AdamWTest, DecaysOnlyTensorsOfRankTwoOrMore) {
  auto c = TinyConfig();
  c.set_lr(0.1);
  c.set_weight_decay(0.5);
  for (const std::string mode : {"coupled", "independent"}) {
    c.set_weight_decay_mode(mode);
    torch::manual_seed(0);
    GPT model(c, 32);
    auto named = model->NamedTensors();
    AdamW opt(named, c);
    std::vector<torch::Tensor> before;
    for (auto& [name, t] : named) {
      before.push_back(t.detach().clone());
      t.mutable_grad() = torch::zeros_like(t);  // Adam's own update is then exactly 0
    }
    const double lr = 0.05;  // mid-schedule: independent decay scales by lr / peak = 0.5
    opt.Step(lr);
    const double factor = mode == "coupled" ? 1 - lr * 0.5 : 1 - (lr / 0.1) * 0.5;
    for (size_t i = 0; i < named.size(); ++i) {
      const auto& [name, t] = named[i];
      EXPECT_EQ(opt.decays(i), t.dim() >= 2) << name;
      auto expected = t.dim() >= 2 ? before[i] * factor : before[i];
      EXPECT_TRUE(torch::allclose(t, expected, 1e-6, 1e-7)) << mode << " " << name;
    }
  }
}

TEST(AdamWTest, CoupledModeMatchesTorchAdamW) {
  auto c = TinyConfig();
  c.set_weight_decay(0.1);
  torch::manual_seed(0);
  auto a = torch::randn({5, 4});
  auto b = a.clone();
  AdamW ours({{"w", a}}, c);
  torch::optim::AdamW reference(std::vector<torch::Tensor>{b}, torch::optim::AdamWOptions(c.lr())
                                                                   .betas({c.beta1(), c.beta2()})
                                                                   .eps(c.eps())
                                                                   .weight_decay(c.weight_decay()));
  for (int step = 0; step < 5; ++step) {
    auto g = torch::randn({5, 4});
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    ours.Step(c.lr());
    reference.step();
  }
  EXPECT_TRUE(torch::allclose(a, b, 1e-6, 1e-7));
}

TEST(ModelTest, TiedEmbeddingIsOneTensor) {
  auto c = TinyConfig();
  GPT tied(c, 32);
  c.set_tie_embeddings(false);
  GPT untied(c, 32);
  auto names = [](GPT& m) {
    std::vector<std::string> n;
    for (auto& [name, t] : m->NamedTensors()) n.push_back(name);
    return n;
  };
  auto tied_names = names(tied), untied_names = names(untied);
  EXPECT_EQ(std::count(tied_names.begin(), tied_names.end(), "lm_head.weight"), 0);
  EXPECT_EQ(std::count(untied_names.begin(), untied_names.end(), "lm_head.weight"), 1);
  EXPECT_EQ(untied_names.size(), tied_names.size() + 1);
}

// The server prices and budgets runs with cost::ParamCount (common/cost/flops.h), and the startup
// benchmark's FLOP/s are in its unit: it must count exactly what the model registers, less the
// learned position embedding (nanoGPT's non-embedding N), under every switch that adds or
// removes a tensor.
TEST(ModelTest, CostParamCountIsTheModelsWithoutPositions) {
  int checked = 0;
  for (const char* qk_norm : {"none", "layernorm", "rmsnorm"}) {
    for (bool bias : {false, true}) {
      for (bool tie : {true, false}) {
        for (const char* pos : {"learned", "rope", "none"}) {
          auto c = TinyConfig();
          c.set_qk_norm(qk_norm);
          c.set_bias(bias);
          c.set_tie_embeddings(tie);
          c.set_pos(pos);
          const int64_t vocab = 40;
          GPT model(c, vocab);
          int64_t numel = 0;
          for (const auto& [name, t] : model->NamedTensors()) {
            if (name != "wpe.weight") numel += t.numel();
          }
          EXPECT_EQ(cost::ParamCount(c, vocab), numel)
              << "qk_norm " << qk_norm << ", bias " << bias << ", tie_embeddings " << tie
              << ", pos " << pos;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 36);
}

}  // namespace
}  // namespace ablate::train
