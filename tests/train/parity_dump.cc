// Writes a tiny GPT's weights, a batch, its loss and every gradient for tests/train/parity.py,
// which recomputes them with the independent PyTorch reference model.
//
//   train_parity_dump OUT_DIR qk_norm pos init [key=value ...]   (keys: RunConfig fields below)
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/spec/spec.h"
#include "worker/train/model.h"

namespace {

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
    std::fprintf(stderr, "usage: %s OUT_DIR qk_norm pos init [bias=1] [softcap=C] [zloss=Z]\n",
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
  }
  ablate::spec::ApplyDefaults(&config);
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
  auto x = torch::randint(vocab, {3, 8}, torch::kInt64);
  auto y = torch::randint(vocab, {3, 8}, torch::kInt64);
  auto loss = model->Loss(model->forward(x), y);
  loss.backward();

  nlohmann::json manifest;
  manifest["config"] = {
      {"n_layer", config.n_layer()},   {"n_head", config.n_head()},
      {"n_embd", config.n_embd()},     {"block_size", config.block_size()},
      {"bias", config.bias()},         {"tie_embeddings", config.tie_embeddings()},
      {"qk_norm", config.qk_norm()},   {"pos", config.pos()},
      {"init", config.init()},         {"attn_softcap", config.attn_softcap()},
      {"z_loss", config.z_loss()},     {"qk_norm_eps", config.qk_norm_eps()},
      {"norm_eps", config.norm_eps()}, {"dropout", 0.0}};
  manifest["vocab"] = vocab;
  manifest["loss"] = loss.item<double>();
  manifest["x"] = std::vector<int64_t>(x.data_ptr<int64_t>(), x.data_ptr<int64_t>() + x.numel());
  manifest["y"] = std::vector<int64_t>(y.data_ptr<int64_t>(), y.data_ptr<int64_t>() + y.numel());
  std::vector<torch::Tensor> params, grads;
  for (const auto& [name, t] : model->NamedTensors()) {
    manifest["tensors"].push_back({{"name", name}, {"shape", t.sizes().vec()}});
    params.push_back(t);
    grads.push_back(t.grad());
  }
  std::ofstream(out + "/manifest.json") << manifest.dump();
  WriteTensors(out + "/params.bin", params);
  WriteTensors(out + "/grads.bin", grads);
  // The initial weights too (before the perturbation above only the 1-D ones differ), for the
  // init-statistics check.
  torch::manual_seed(1234);
  ablate::train::GPT fresh(config, vocab);
  std::vector<torch::Tensor> init;
  for (const auto& [name, t] : fresh->NamedTensors()) init.push_back(t);
  WriteTensors(out + "/init.bin", init);
  return 0;
}
