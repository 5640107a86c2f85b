#include "worker/train/device_benchmark.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cost/flops.h"
#include "common/sweep/run_config.h"
#include "common/util/file.h"
#include "common/util/status_macros.h"
#include "common/util/threads.h"
#include "nlohmann/json.hpp"
#include "worker/train/adamw.h"
#include "worker/train/device.h"
#include "worker/train/model.h"
#include "worker/train/step.h"
#include "worker/train/torch_error.h"

namespace ablate::train {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// Bumped when what is measured changes, so that older cache files are measured again.
constexpr int kFormat = 1;

constexpr int64_t kVocab = 4096;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Timed steps: at least min_timed, then more up to max_timed while the timed ones together took
// less than time_box seconds. A loaded machine (the e2e tests start many workers on two cores)
// then pays for two timed steps, a quiet one gets the best of three.
struct Reference {
  v1::RunConfig config;
  int warmup_steps = 1;
  int min_timed = 2;
  int max_timed = 3;
  double time_box = 0.2;
};

// On a CPU a model small enough that the whole benchmark takes a few tenths of a second on one
// core (the e2e tests start many workers on two cores); on a GPU one of a study's size, since a
// tiny model there measures kernel launches, not arithmetic. The CPU batch grows with the
// threads so that every shard of the step (step.h) has a sequence.
Reference ReferenceFor(const torch::Device& device, int threads) {
  Reference r;
  v1::RunConfig& c = r.config;
  if (device.is_cpu()) {
    c.set_n_layer(2);
    c.set_n_embd(128);
    c.set_n_head(4);
    c.set_block_size(128);
    c.set_batch_size(std::max(4, threads));
  } else {
    c.set_n_layer(4);
    c.set_n_embd(256);
    c.set_n_head(8);
    c.set_block_size(256);
    c.set_batch_size(16);
    r.warmup_steps = 2;  // cuBLAS handles, autotuning, the allocator's first blocks
    r.min_timed = 3;
    r.max_timed = 5;
    r.time_box = 1.0;
  }
  sweep::ApplyDefaults(&c);
  return r;
}

std::string Describe(const v1::RunConfig& c) {
  return absl::StrCat("n_layer ", c.n_layer(), ", n_embd ", c.n_embd(), ", n_head ", c.n_head(),
                      ", block ", c.block_size(), ", batch ", c.batch_size(), ", vocab ", kVocab);
}

// Warm-up steps, then the best of the timed ones: forward, backward, clipping and AdamW, as
// trainer.cc runs a step, on random tokens. Reading one weight back at the end of each step waits
// for a GPU's queued kernels, so the time is the step's and not its launch's.
absl::StatusOr<v1::DeviceBenchmark> Measure(GPT& model, AdamW& optimizer,
                                            std::vector<torch::Tensor>& params,
                                            const Reference& ref, const torch::Device& device,
                                            int shards, bool bf16,
                                            const std::function<bool()>& should_stop) {
  const auto started = Clock::now();
  const v1::RunConfig& c = ref.config;
  const auto options = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const std::vector<Batch> batches = {
      {torch::randint(kVocab, {c.batch_size(), c.block_size()}, options),
       torch::randint(kVocab, {c.batch_size(), c.block_size()}, options)}};
  Sharding sharding;
  sharding.shards = shards;
  double best = 0, timed = 0;
  for (int i = 0;; ++i) {
    const int done = i - ref.warmup_steps;  // timed steps so far
    if (done >= ref.max_timed || (done >= ref.min_timed && timed >= ref.time_box)) break;
    if (should_stop && should_stop()) return absl::CancelledError("startup benchmark: stopped");
    const auto step_started = Clock::now();
    AccumulateGradients(model, batches, bf16, /*backward=*/true, sharding);
    ClipGradients(params, c.grad_clip());
    optimizer.Step(c.lr());
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    (void)params.front().flatten()[0].item<float>();
    const double seconds = Since(step_started);
    if (i < ref.warmup_steps) continue;
    timed += seconds;
    if (best == 0 || seconds < best) best = seconds;
  }
  v1::DeviceBenchmark b;
  b.set_dtype(bf16 ? "bfloat16" : "float32");
  const double tokens_per_second = static_cast<double>(cost::TokensPerStep(c)) / best;
  b.set_tokens_per_second(tokens_per_second);
  b.set_flops_per_second(tokens_per_second * cost::FlopsPerToken(c, kVocab));
  b.set_model(Describe(c));
  b.set_seconds(Since(started));
  return b;
}

json KeyFor(const DeviceInfo& info, int threads, const std::string& version,
            const std::string& model) {
  return {{"format", kFormat},  {"device", info.name}, {"torch", info.torch_version},
          {"threads", threads}, {"ablate", version},   {"model", model}};
}

// The cached result under `key`, or nothing (no file, another key, unreadable).
std::optional<std::vector<v1::DeviceBenchmark>> ReadCache(const std::string& path,
                                                          const json& key) {
  if (path.empty()) return std::nullopt;
  auto text = util::ReadFile(path);
  if (!text.ok()) return std::nullopt;
  const json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("key") || doc["key"] != key ||
      !doc.contains("benchmarks") || !doc["benchmarks"].is_array()) {
    return std::nullopt;
  }
  std::vector<v1::DeviceBenchmark> out;
  for (const json& j : doc["benchmarks"]) {
    if (!j.is_object()) return std::nullopt;
    v1::DeviceBenchmark b;
    b.set_dtype(j.value("dtype", ""));
    b.set_flops_per_second(j.value("flops_per_second", 0.0));
    b.set_tokens_per_second(j.value("tokens_per_second", 0.0));
    b.set_model(j.value("model", ""));
    b.set_seconds(j.value("seconds", 0.0));
    if (b.dtype().empty() || !(b.flops_per_second() > 0) || !std::isfinite(b.flops_per_second()) ||
        !(b.tokens_per_second() > 0) || !std::isfinite(b.tokens_per_second())) {
      return std::nullopt;
    }
    out.push_back(std::move(b));
  }
  if (out.empty()) return std::nullopt;
  return out;
}

void WriteCache(const std::string& path, const json& key,
                const std::vector<v1::DeviceBenchmark>& benchmarks) {
  if (path.empty()) return;
  json list = json::array();
  for (const auto& b : benchmarks) {
    list.push_back({{"dtype", b.dtype()},
                    {"flops_per_second", b.flops_per_second()},
                    {"tokens_per_second", b.tokens_per_second()},
                    {"model", b.model()},
                    {"seconds", b.seconds()}});
  }
  const json doc = {{"key", key}, {"benchmarks", list}};
  // Best effort: without the file the next start measures again.
  util::WriteFileAtomically(path, doc.dump(2) + "\n", util::Durability::kRename).IgnoreError();
}

absl::StatusOr<DeviceBenchmarkResult> Run(const DeviceBenchmarkOptions& options) {
  const int threads = util::ThreadsOrAll(options.threads);
  ASSIGN_OR_RETURN(const torch::Device device, ResolveDevice(options.device));
  const DeviceInfo info = DescribeDeviceInfo(device);
  const Reference ref = ReferenceFor(device, threads);
  const json key = KeyFor(info, threads, options.ablate_version, Describe(ref.config));
  DeviceBenchmarkResult result;
  if (auto cached = ReadCache(options.cache_file, key)) {
    result.benchmarks = *std::move(cached);
    result.cached = true;
    return result;
  }

  if (options.should_stop && options.should_stop()) {
    return absl::CancelledError("startup benchmark: stopped");
  }
  // As a slot's training thread is set up (trainer.cc): its share of the threads, a CPU step
  // sharded over them.
  ConfigureThreads(threads);
  const int shards = device.is_cpu() ? ConfigureShardedThread(threads, ref.config.batch_size()) : 1;
  // The init draws from torch's default generator: harmless here, since every run swaps in its
  // own generator state before it draws (trainer.cc) and the benchmark runs before any does.
  GPT model(ref.config, kVocab);
  model->to(device);
  std::vector<torch::Tensor> params;
  for (const auto& [name, t] : model->NamedTensors()) params.push_back(t);
  AdamW optimizer(model->NamedTensors(), ref.config);

  ASSIGN_OR_RETURN(v1::DeviceBenchmark fp32, Measure(model, optimizer, params, ref, device, shards,
                                                     false, options.should_stop));
  result.benchmarks.push_back(std::move(fp32));
  // bf16 where runs use it for speed: CUDA. A CPU has bf16 autocast too, but without bf16 matrix
  // units (AMX, AVX512-BF16) LibTorch 1.13 runs it slower than fp32, a CPU sweep runs float32,
  // and measuring it would double the startup cost of every CPU worker; MPS has none in 1.13.
  if (device.is_cuda()) {
    ASSIGN_OR_RETURN(v1::DeviceBenchmark bf16, Measure(model, optimizer, params, ref, device,
                                                       shards, true, options.should_stop));
    result.benchmarks.push_back(std::move(bf16));
  }
  WriteCache(options.cache_file, key, result.benchmarks);
  return result;
}

}  // namespace

absl::StatusOr<DeviceBenchmarkResult> RunDeviceBenchmark(const DeviceBenchmarkOptions& options) {
  try {
    return Run(options);
  } catch (const c10::Error& e) {
    return TorchErrorStatus("startup benchmark: ", e);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("startup benchmark: ", e.what()));
  } catch (...) {
    // The daemon runs this on its main thread and again as the self-check of a benched worker:
    // whatever is thrown ends the benchmark, not the worker.
    return absl::InternalError("startup benchmark: an exception of unknown type");
  }
}

std::string DescribeBenchmarks(const DeviceBenchmarkResult& result) {
  std::string out;
  double seconds = 0;
  for (const auto& b : result.benchmarks) {
    const double f = b.flops_per_second();
    const std::string rate = f >= 1e12  ? absl::StrFormat("%.1f TFLOP/s", f / 1e12)
                             : f >= 1e9 ? absl::StrFormat("%.1f GFLOP/s", f / 1e9)
                                        : absl::StrFormat("%.1f MFLOP/s", f / 1e6);
    absl::StrAppend(&out, out.empty() ? "" : ", ", rate, " ",
                    b.dtype() == "bfloat16" ? "bf16" : "fp32");
    seconds += b.seconds();
  }
  if (result.benchmarks.empty()) return "none";
  absl::StrAppend(&out, " (", result.benchmarks.front().model(), "), ",
                  absl::StrFormat("%.1f s", seconds), result.cached ? " (cached)" : "");
  return out;
}

}  // namespace ablate::train
