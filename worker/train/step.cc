#include "worker/train/step.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <optional>
#include <thread>

#include "worker/train/autocast.h"
#include "worker/train/device.h"

namespace ablate::train {
namespace {

// Rows [begin, end) of shard s of n rows split into `shards` parts as evenly as possible.
std::pair<int64_t, int64_t> ShardRows(int64_t n, int shards, int s) {
  return {n * s / shards, n * (s + 1) / shards};
}

}  // namespace

void OnShardThreads(int shards, const std::function<void(int)>& body) {
  if (shards <= 1) {
    body(0);
    return;
  }
  const at::ThreadLocalState state;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(shards));
  auto run = [&](int s) {
    try {
      at::ThreadLocalStateGuard guard(state);
      SetThreadIntraOpThreads(1);
      body(s);
    } catch (...) {
      errors[static_cast<size_t>(s)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(shards - 1));
  for (int s = 1; s < shards; ++s) threads.emplace_back(run, s);
  {
    // The caller's own thread count is restored after its shard.
    const int caller_threads = at::get_num_threads();
    run(0);
    SetThreadIntraOpThreads(caller_threads);
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

int ShardsFor(int threads, int64_t batch_size) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, batch_size)));
}

int ConfigureShardedThread(int threads, int64_t batch_size) {
  const int shards = ShardsFor(threads, batch_size);
  if (shards > 1) SetThreadIntraOpThreads(1);
  return shards;
}

double AccumulateGradients(GPT& model, const std::vector<Batch>& micro_batches, bool bf16,
                           bool backward, const Sharding& sharding) {
  const auto count = static_cast<double>(micro_batches.size());
  std::optional<torch::NoGradGuard> no_grad;
  if (!backward) no_grad.emplace();
  torch::Tensor total;
  if (sharding.shards <= 1) {
    for (size_t m = 0; m < micro_batches.size(); ++m) {
      const Batch& b = micro_batches[m];
      std::optional<at::Generator> generator;
      if (m < sharding.dropout_seeds.size()) {
        generator = at::detail::createCPUGenerator(sharding.dropout_seeds[m]);
      }
      ScopedDropoutGenerator dropout(generator ? &*generator : nullptr);
      torch::Tensor loss;
      {
        ScopedAutocast autocast(b.x.device(), bf16);
        loss = model->ForwardLoss(b.x, b.y);
      }
      if (backward) (loss / count).backward();
      total = total.defined() ? total + loss.detach() : loss.detach();
    }
    return total.item<double>() / count;
  }

  // Shards drawing dropout masks from the one default generator at once would draw them in
  // whatever order the threads happen to run.
  TORCH_CHECK(model->config().dropout() <= 0 || !model->is_training() ||
                  sharding.dropout_seeds.size() >=
                      micro_batches.size() * static_cast<size_t>(sharding.shards),
              "sharded steps with dropout need a dropout seed per micro-batch and shard");
  std::vector<torch::Tensor> params;
  for (const auto& [name, t] : model->NamedTensors()) params.push_back(t);
  double loss_sum = 0;
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const Batch& b = micro_batches[m];
    const int64_t rows = b.x.size(0);
    const int shards = ShardsFor(sharding.shards, rows);
    std::vector<torch::Tensor> losses(static_cast<size_t>(shards));
    std::vector<std::vector<torch::Tensor>> grads(static_cast<size_t>(shards));
    OnShardThreads(shards, [&](int s) {
      const auto [begin, end] = ShardRows(rows, shards, s);
      std::optional<at::Generator> generator;
      const size_t seed_index = m * static_cast<size_t>(sharding.shards) + static_cast<size_t>(s);
      if (seed_index < sharding.dropout_seeds.size()) {
        generator = at::detail::createCPUGenerator(sharding.dropout_seeds[seed_index]);
      }
      ScopedDropoutGenerator dropout(generator ? &*generator : nullptr);
      torch::Tensor loss;
      {
        ScopedAutocast autocast(b.x.device(), bf16);
        loss = model->ForwardLoss(b.x.slice(0, begin, end), b.y.slice(0, begin, end));
      }
      losses[static_cast<size_t>(s)] = loss.detach();
      if (backward) {
        // This shard's share of the micro-batch's mean loss, over the step's micro-batches.
        const double weight = static_cast<double>(end - begin) / static_cast<double>(rows) / count;
        grads[static_cast<size_t>(s)] =
            torch::autograd::grad({loss * weight}, params, /*grad_outputs=*/{},
                                  /*retain_graph=*/false, /*create_graph=*/false,
                                  /*allow_unused=*/true);
      }
    });
    for (int s = 0; s < shards; ++s) {
      const auto [begin, end] = ShardRows(rows, shards, s);
      loss_sum += losses[static_cast<size_t>(s)].item<double>() * static_cast<double>(end - begin) /
                  static_cast<double>(rows);
    }
    if (!backward) continue;
    // Summed in shard order, so thread timing never changes a bit of the result.
    for (size_t i = 0; i < params.size(); ++i) {
      torch::Tensor sum;
      for (const auto& g : grads) {
        if (!g[i].defined()) continue;
        sum = sum.defined() ? sum + g[i] : g[i];
      }
      if (!sum.defined()) continue;
      torch::Tensor& grad = params[i].mutable_grad();
      if (grad.defined()) {
        grad.add_(sum);
      } else {
        grad = sum;
      }
    }
  }
  return loss_sum / count;
}

double EvaluateLoss(GPT& model, const std::vector<Batch>& batches, bool bf16, int shards) {
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  double sum = 0;
  for (const Batch& b : batches) {
    const int64_t rows = b.x.size(0);
    const int n = ShardsFor(shards, rows);
    std::vector<double> losses(static_cast<size_t>(n));
    OnShardThreads(n, [&](int s) {
      const auto [begin, end] = ShardRows(rows, n, s);
      ScopedAutocast autocast(b.x.device(), bf16);
      losses[static_cast<size_t>(s)] =
          model->ForwardLoss(b.x.slice(0, begin, end), b.y.slice(0, begin, end)).item<double>() *
          static_cast<double>(end - begin) / static_cast<double>(rows);
    });
    for (double l : losses) sum += l;
  }
  if (was_training) model->train();
  return sum / static_cast<double>(std::max<size_t>(1, batches.size()));
}

double ClipGradients(const std::vector<torch::Tensor>& params, double clip) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  for (const auto& p : params) {
    if (p.grad().defined()) norms.push_back(p.grad().norm(2).to(torch::kFloat));
  }
  if (norms.empty()) return 0;
  const double norm = torch::stack(norms).norm(2).item<double>();
  if (clip > 0 && std::isfinite(norm)) {
    const double scale = clip / (norm + 1e-6);
    if (scale < 1) {
      for (const auto& p : params) {
        if (p.grad().defined()) p.grad().mul_(scale);
      }
    }
  }
  return norm;
}

}  // namespace ablate::train
