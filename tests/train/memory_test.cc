// common/cost/memory.h against the trainer: the parameters it counts are the model's, and the
// memory it estimates bounds what a real training run on the CPU holds at its peak, within a
// stated factor. Each run trains in a child process of its own (fork), so its peak is not hidden
// by heap another test left behind: the child first trains a tiny run (libtorch's code paged in,
// the data prepared), resets its peak resident set (/proc/self/clear_refs 5), then trains the
// measured run; the run's peak is VmHWM minus the resident set just before it.
//
// Prints one line per config (estimate, its parts, measured): the figures common/cost/memory.h
// quotes. Every torch call happens in a child: the parent never starts OpenMP, which a fork would
// leave broken.
#include "common/cost/memory.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sweep/run_config.h"
#include "tests/train/tiny_spec.h"
#include "worker/train/model.h"
#include "worker/train/trainer.h"

namespace ablate::train {
namespace {

namespace fs = std::filesystem;

// A field of /proc/self/status in bytes ("VmHWM:  123456 kB"); -1 if absent.
int64_t StatusBytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

// Runs `body` in a forked child and returns the numbers it wrote (at most 8), or an empty vector
// when the child failed.
std::vector<int64_t> InChild(const std::function<std::vector<int64_t>()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::vector<int64_t> out = body();
    int64_t buf[9] = {static_cast<int64_t>(out.size())};
    for (size_t i = 0; i < out.size() && i < 8; ++i) buf[i + 1] = out[i];
    const ssize_t n = write(fds[1], buf, sizeof(buf));
    _exit(n == static_cast<ssize_t>(sizeof(buf)) ? 0 : 1);
  }
  close(fds[1]);
  int64_t buf[9] = {0};
  const ssize_t n = read(fds[0], buf, sizeof(buf));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n != static_cast<ssize_t>(sizeof(buf)) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return {};
  }
  return std::vector<int64_t>(buf + 1, buf + 1 + std::min<int64_t>(buf[0], 8));
}

class MemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        (fs::temp_directory_path() / ("ablate-memory-test-" + std::to_string(getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static TrainOptions Options(const std::string& name) {
    TrainOptions o;
    o.device = "cpu";
    o.out_dir = dir_ + "/" + name;
    o.cache_dir = dir_ + "/cache";
    o.threads = 1;  // one shard: the estimate's CPU path with shards = 1
    return o;
  }

  // A run of `config`'s shape on the tiny run's data, two steps, no probes or evaluation before
  // the last step (which has both).
  static v1::RunSpec Spec(const std::function<void(v1::RunConfig*)>& shape) {
    v1::RunSpec spec = TinySpec();
    auto* c = spec.mutable_config();
    c->set_dropout(0);
    c->set_steps(2);
    c->set_warmup(1);
    c->set_eval_every(1000);
    c->set_probe_every(1000);
    shape(c);
    sweep::ApplyDefaults(c);
    return spec;
  }

  // {baseline resident bytes, peak resident bytes} of training `spec` in a fresh child; empty
  // when training failed.
  static std::vector<int64_t> Measure(const v1::RunSpec& spec, const std::string& name) {
    return InChild([&]() -> std::vector<int64_t> {
      // Warm up: libtorch's kernels paged in, the tokenizer and token files in the cache.
      v1::RunSpec warm = Spec([](v1::RunConfig*) {});
      if (!Train(warm, Options(name + "-warm"), nullptr).ok()) return {};
      {
        std::ofstream reset("/proc/self/clear_refs");
        reset << "5";
      }
      const int64_t base = StatusBytes("VmRSS");
      auto trained = Train(spec, Options(name), nullptr);
      if (!trained.ok()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), trained.status().ToString().c_str());
        return {};
      }
      return {base, StatusBytes("VmHWM")};
    });
  }

  static std::string dir_;
};

std::string MemoryTest::dir_;

// The parameters the estimate counts (position embedding included) are the tensors the model
// registers, in every variant that changes them.
TEST_F(MemoryTest, CountsTheModelsParameters) {
  struct Variant {
    std::string name;
    std::function<void(v1::RunConfig*)> set;
  };
  const std::vector<Variant> variants = {
      {"learned, tied", [](v1::RunConfig*) {}},
      {"rope, untied, bias",
       [](v1::RunConfig* c) {
         c->set_pos("rope");
         c->set_tie_embeddings(false);
         c->set_bias(true);
       }},
      {"qk layernorm with bias",
       [](v1::RunConfig* c) {
         c->set_qk_norm("layernorm");
         c->set_bias(true);
       }},
      {"qk rmsnorm, 3 layers",
       [](v1::RunConfig* c) {
         c->set_qk_norm("rmsnorm");
         c->set_n_layer(3);
       }},
  };
  for (const auto& v : variants) {
    const v1::RunSpec spec = Spec(v.set);
    constexpr int64_t kVocab = 320;
    const std::vector<int64_t> numel = InChild([&]() -> std::vector<int64_t> {
      GPT model(spec.config(), kVocab);
      int64_t n = 0;
      for (const auto& p : model->parameters()) n += p.numel();
      return {n};
    });
    ASSERT_EQ(numel.size(), 1u) << v.name;
    EXPECT_EQ(cost::EstimateMemory(spec.config(), kVocab).params, numel[0]) << v.name;
  }
}

// Measured peak <= estimate <= kSlack x measured, on runs large enough that the fixed allowance
// does not decide it, each stressing another term: the parameters and optimizer state, the
// attention scores (long blocks), the full logits (bf16, z_loss: the unfused head), and the
// activations of the study's switches (qk_norm, rope, dropout, softcap).
TEST_F(MemoryTest, EstimateBoundsTheMeasuredPeak) {
#if TORCH_VERSION_MAJOR >= 2
  constexpr cost::Attention kAttention = cost::Attention::kFused;
#else
  constexpr cost::Attention kAttention = cost::Attention::kHeld;
#endif
  constexpr double kSlack = 3.0;
  struct Config {
    std::string name;
    int layers, heads, embd, block, batch;
    std::function<void(v1::RunConfig*)> extra;
  };
  const auto none = [](v1::RunConfig*) {};
  const std::vector<Config> configs = {
      {"wide", 4, 6, 384, 128, 8, none},
      {"long", 2, 8, 64, 512, 8, none},
      {"deep", 8, 4, 128, 256, 16, none},
      {"bf16", 4, 4, 128, 256, 16, [](v1::RunConfig* c) { c->set_dtype("bfloat16"); }},
      {"z_loss", 2, 4, 128, 256, 32, [](v1::RunConfig* c) { c->set_z_loss(1e-4); }},
      {"qk rope drop cap", 4, 4, 128, 256, 16,
       [](v1::RunConfig* c) {
         c->set_qk_norm("rmsnorm");
         c->set_pos("rope");
         c->set_dropout(0.1);
         c->set_attn_softcap(30);
       }},
  };
  constexpr int64_t kVocab = 320;  // the tiny run's tokenizer
  // estimate = ceil(tensors x margin) + runtime; the parts (common/cost/memory.h): weights,
  // gradients, AdamW and autocast copies; activations; the step's largest transient; the probe
  // pass. "measured/tensors" is what the margin has to cover.
  std::printf("%-38s %9s %9s %9s %9s %9s %9s %9s %6s %6s\n", "config", "estimate", "tensors",
              "weights+", "activ", "transient", "probe", "measured", "est/m", "m/tens");
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& cfg = configs[i];
    const v1::RunSpec spec = Spec([&](v1::RunConfig* c) {
      c->set_n_layer(cfg.layers);
      c->set_n_head(cfg.heads);
      c->set_n_embd(cfg.embd);
      c->set_block_size(cfg.block);
      c->set_batch_size(cfg.batch);
      cfg.extra(c);
    });
    const std::string name = absl::StrFormat("%s: L%d H%d C%d T%d B%d", cfg.name, cfg.layers,
                                             cfg.heads, cfg.embd, cfg.block, cfg.batch);
    // The attention this build's trainer runs: LibTorch >= 2's fused kernel holds no scores.
    const cost::MemoryEstimate e =
        cost::EstimateMemory(spec.config(), kVocab, cost::MemoryDevice::kCpu, 1, kAttention);
    const std::vector<int64_t> m = Measure(spec, absl::StrCat("run", i));
    ASSERT_EQ(m.size(), 2u) << name << ": the run did not train";
    const int64_t measured = m[1] - m[0];
    std::printf(
        "%-38s %9s %9s %9s %9s %9s %9s %9s %6.2f %6.2f\n", name.c_str(),
        cost::FormatBytes(e.total).c_str(), cost::FormatBytes(e.tensors).c_str(),
        cost::FormatBytes(e.weights + e.gradients + e.optimizer + e.autocast_copies).c_str(),
        cost::FormatBytes(e.activations).c_str(), cost::FormatBytes(e.transient).c_str(),
        cost::FormatBytes(e.probe).c_str(), cost::FormatBytes(measured).c_str(),
        static_cast<double>(e.total) / static_cast<double>(measured),
        static_cast<double>(measured) / static_cast<double>(e.tensors));
    std::fflush(stdout);
    EXPECT_GE(e.total, measured) << name << ": the estimate is below the measured peak";
    EXPECT_LE(static_cast<double>(e.total), kSlack * static_cast<double>(measured))
        << name << ": the estimate is more than " << kSlack << "x the measured peak";
  }
}

}  // namespace
}  // namespace ablate::train
