// Writes a tiny GPT's weights, its micro-batches, and what the trainer's own code computes from
// them (worker/train/step.h, probes.h, adamw.h, schedule.h) for tests/train/parity.py, which
// recomputes everything with the independent PyTorch reference model and torch.optim.AdamW:
//   - eval-mode loss on the first micro-batch, and every probe on it;
//   - the train-mode loss and gradients accumulated over the micro-batches (dropout draws from
//     torch's CPU generator, seeded with kDropoutSeed just before the first forward pass);
//   - the gradient norm, clipping, and the parameters after one AdamW step at the scheduled LR.
//
//   train_parity_dump OUT_DIR qk_norm pos init [key=value ...]   (keys: see the loop below)
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/sweep/run_config.h"
#include "worker/train/adamw.h"
#include "worker/train/model.h"
#include "worker/train/probes.h"
#include "worker/train/schedule.h"
#include "worker/train/step.h"

namespace {

constexpr uint64_t kDropoutSeed = 4321;
// The optimizer step is update kStep + 1 of a 100-step run with warmup 10: a cosine-phase LR.
constexpr int64_t kStep = 40;

void WriteTensors(const std::string& path, const std::vector<torch::Tensor>& tensors) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& t : tensors) {
    auto c = t.detach().to(torch::kFloat).contiguous();
    out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: %s OUT_DIR qk_norm pos init [bias=1] [untied] [softcap=C] [zloss=Z] "
                 "[dropout=P] [accum=N] [clip=C] [wd=W]\n",
                 argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  ablate::v1::RunConfig config;
  config.set_n_layer(2);
  config.set_n_head(2);
  config.set_n_embd(16);
  config.set_block_size(8);
  config.set_qk_norm(argv[2]);
  config.set_pos(argv[3]);
  config.set_init(argv[4]);
  for (int i = 5; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "bias=1") config.set_bias(true);
    if (arg == "untied") config.set_tie_embeddings(false);
    if (arg.starts_with("softcap=")) config.set_attn_softcap(std::stod(arg.substr(8)));
    if (arg.starts_with("zloss=")) config.set_z_loss(std::stod(arg.substr(6)));
    if (arg.starts_with("dropout=")) config.set_dropout(std::stod(arg.substr(8)));
    if (arg.starts_with("accum=")) config.set_grad_accum(std::stoi(arg.substr(6)));
    if (arg.starts_with("clip=")) config.set_grad_clip(std::stod(arg.substr(5)));
    if (arg.starts_with("wd=")) config.set_weight_decay(std::stod(arg.substr(3)));
    if (arg == "independent") config.set_weight_decay_mode("independent");
  }
  config.set_lr(1e-2);
  config.set_warmup(10);
  config.set_steps(100);
  ablate::sweep::ApplyDefaults(&config);
  const int64_t vocab = 67;
  torch::manual_seed(1234);
  ablate::train::GPT model(config, vocab);
  // Perturb the gains and biases away from 1 and 0 so the test also covers their gradients'
  // effect on the forward pass.
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : model->NamedTensors()) {
      if (t.dim() == 1) t.add_(torch::randn_like(t) * 0.1);
    }
  }
  std::vector<ablate::train::Batch> micro_batches;
  for (int i = 0; i < std::max(1, config.grad_accum()); ++i) {
    auto x = torch::randint(vocab, {3, 8}, torch::kInt64);
    micro_batches.push_back({x, torch::randint(vocab, {3, 8}, torch::kInt64)});
  }
  model->train();
  const double eval_loss = ablate::train::EvaluateLoss(model, {micro_batches[0]}, false);
  const auto probes = ablate::train::RunProbes(model, micro_batches[0].x);
  torch::manual_seed(kDropoutSeed);
  const double loss = ablate::train::AccumulateGradients(model, micro_batches, false, true);

  nlohmann::json manifest;
  manifest["config"] = {
      {"n_layer", config.n_layer()},   {"n_head", config.n_head()},
      {"n_embd", config.n_embd()},     {"block_size", config.block_size()},
      {"bias", config.bias()},         {"tie_embeddings", config.tie_embeddings()},
      {"qk_norm", config.qk_norm()},   {"pos", config.pos()},
      {"init", config.init()},         {"attn_softcap", config.attn_softcap()},
      {"z_loss", config.z_loss()},     {"qk_norm_eps", config.qk_norm_eps()},
      {"norm_eps", config.norm_eps()}, {"dropout", config.dropout()}};
  manifest["vocab"] = vocab;
  manifest["loss"] = loss;
  manifest["eval_loss"] = eval_loss;
  manifest["probes"] = probes;
  manifest["dropout_seed"] = kDropoutSeed;
  for (const auto& b : micro_batches) {
    auto ids = [](const torch::Tensor& t) {
      return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    };
    manifest["micro_batches"].push_back({{"x", ids(b.x)}, {"y", ids(b.y)}});
  }
  std::vector<torch::Tensor> params, grads;
  for (const auto& [name, t] : model->NamedTensors()) {
    manifest["tensors"].push_back({{"name", name}, {"shape", t.sizes().vec()}});
    params.push_back(t.detach().clone());
    grads.push_back(t.grad().clone());
  }
  WriteTensors(out + "/params.bin", params);
  WriteTensors(out + "/grads.bin", grads);

  // One optimizer step exactly as the trainer takes it: clip, then AdamW at the scheduled LR.
  std::vector<torch::Tensor> live;
  for (const auto& [name, t] : model->NamedTensors()) live.push_back(t);
  manifest["grad_norm"] = ablate::train::ClipGradients(live, config.grad_clip());
  const double lr = ablate::train::LearningRate(config, kStep);
  ablate::train::AdamW optimizer(model->NamedTensors(), config);
  optimizer.Step(lr);
  manifest["optimizer"] = {{"step", kStep},
                           {"lr", lr},
                           {"peak_lr", config.lr()},
                           {"warmup", config.warmup()},
                           {"steps", config.steps()},
                           {"grad_clip", config.grad_clip()},
                           {"weight_decay", config.weight_decay()},
                           {"weight_decay_mode", config.weight_decay_mode()},
                           {"beta1", config.beta1()},
                           {"beta2", config.beta2()},
                           {"eps", config.eps()}};
  WriteTensors(out + "/updated.bin", live);
  std::ofstream(out + "/manifest.json") << manifest.dump();
  // The initial weights too (before the perturbation above only the 1-D ones differ), for the
  // init-statistics check.
  torch::manual_seed(1234);
  ablate::train::GPT fresh(config, vocab);
  std::vector<torch::Tensor> init;
  for (const auto& [name, t] : fresh->NamedTensors()) init.push_back(t);
  WriteTensors(out + "/init.bin", init);
  return 0;
}
