// common/cost/memory.h: the device memory a run is estimated to need, and how the estimate
// (`ablate estimate`) and the CLI use it. The estimate against real runs is tests/train's
// train.memory.
#include "common/cost/memory.h"

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/render.h"
#include "common/cost/estimate.h"
#include "common/cost/flops.h"
#include "common/sweep/run_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ablate::cost {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::RunConfig Config(const std::function<void(v1::RunConfig*)>& set = nullptr) {
  v1::RunConfig c;
  c.set_n_layer(4);
  c.set_n_head(4);
  c.set_n_embd(256);
  c.set_block_size(256);
  c.set_batch_size(16);
  if (set) set(&c);
  sweep::ApplyDefaults(&c);
  return c;
}

TEST(Memory, Gpt2SmallHasNanoGptsParameterCountWithPositions) {
  const v1::RunConfig c = Config([](v1::RunConfig* c) {
    c->set_n_layer(12);
    c->set_n_head(12);
    c->set_n_embd(768);
    c->set_block_size(1024);
    c->set_bias(true);
    c->set_pos("learned");
    c->set_tie_embeddings(true);
  });
  const MemoryEstimate m = EstimateMemory(c, 50257);
  // nanoGPT's GPT-2 small: 124,439,808 parameters, of which wpe is 1024 x 768.
  EXPECT_EQ(m.params, 124439808);
  EXPECT_EQ(m.params, ParamCount(c, 50257) + 1024 * 768);
  EXPECT_EQ(m.weights, 4 * m.params);
  EXPECT_EQ(m.gradients, 4 * m.params);
  EXPECT_EQ(m.optimizer, 8 * m.params);
  EXPECT_EQ(m.autocast_copies, 0);  // float32
  // RoPE has no position table.
  const v1::RunConfig rope = Config([](v1::RunConfig* c) { c->set_pos("rope"); });
  EXPECT_EQ(EstimateMemory(rope, 4096).params, ParamCount(rope, 4096));
}

// The header's formula, written out for fp32 without the switches: per layer 64 bytes per
// B·T·C element and 4 per attention score (Korthikanti et al. 2022's 16·sbh + 2·a·s²·b elements
// without dropout, at 4 bytes), plus the final norm's input and output.
TEST(Memory, ActivationsAreTheHeadersFormula) {
  const v1::RunConfig c = Config([](v1::RunConfig* c) {
    c->set_pos("learned");
    c->set_dropout(0);
    c->set_qk_norm("none");
  });
  const double btc = 16.0 * 256 * 256, scores = 16.0 * 4 * 256 * 256, logits = 16.0 * 256 * 4096;
  const MemoryEstimate m = EstimateMemory(c, 4096);
  // The head keeps its log-softmax output (4 bytes a logit) for backward.
  EXPECT_EQ(m.activations,
            static_cast<int64_t>(4 * (64 * btc + 4 * scores) + 8 * btc + 4 * logits));
  EXPECT_EQ(m.attention_scores, static_cast<int64_t>(4 * 4 * scores));
  // The largest transient here is the head's backward: the log-probabilities' gradient and
  // softmax backward's output.
  EXPECT_EQ(m.transient, static_cast<int64_t>(8 * logits));
  // A step outweighs the probe pass (8 sequences' scores at 16 bytes) here.
  EXPECT_EQ(m.probe, int64_t{8} * 4 * 256 * 256 * 16);
  EXPECT_EQ(m.tensors, m.weights + m.optimizer + m.autocast_copies + m.data + m.gradients +
                           m.activations + m.transient);
  EXPECT_EQ(m.runtime, kGpuRuntimeBytes);
  EXPECT_EQ(m.margin, kGpuMemoryMargin);
  EXPECT_EQ(m.total,
            static_cast<int64_t>(std::ceil(static_cast<double>(m.tensors) * kGpuMemoryMargin)) +
                kGpuRuntimeBytes);
}

// LibTorch >= 2's fused attention holds no scores: a run without a softcap or dropout loses its
// attention_scores and the attention backward's transient; one with either keeps them all.
TEST(Memory, FusedAttentionHoldsNoScoresWhereItRuns) {
  const v1::RunConfig plain = Config([](v1::RunConfig* c) {
    c->set_dropout(0);
    c->set_attn_softcap(0);
    c->set_block_size(1024);  // with a small vocabulary: the attention backward is the largest
                              // transient, not the head's
  });
  const MemoryEstimate held = EstimateMemory(plain, 512, MemoryDevice::kGpu);
  const MemoryEstimate fused = EstimateMemory(plain, 512, MemoryDevice::kGpu, 1, Attention::kFused);
  ASSERT_GT(held.attention_scores, 0);
  EXPECT_EQ(fused.attention_scores, 0);
  EXPECT_EQ(fused.activations, held.activations - held.attention_scores);
  EXPECT_LT(fused.transient, held.transient);
  EXPECT_LT(fused.total, held.total);
  EXPECT_EQ(fused.probe, held.probe) << "the probe pass holds the scores either way";
  for (const auto& [name, set] :
       std::vector<std::pair<std::string, std::function<void(v1::RunConfig*)>>>{
           {"softcap", [](v1::RunConfig* c) { c->set_attn_softcap(30); }},
           {"dropout", [](v1::RunConfig* c) { c->set_dropout(0.1); }}}) {
    v1::RunConfig c = plain;
    set(&c);
    EXPECT_EQ(EstimateMemory(c, 512, MemoryDevice::kGpu, 1, Attention::kFused).total,
              EstimateMemory(c, 512, MemoryDevice::kGpu).total)
        << name << " keeps the unfused path";
  }
}

TEST(Memory, GrowsWithEveryDimensionOfTheRun) {
  const int64_t base = EstimateMemory(Config(), 4096).total;
  const std::vector<std::pair<std::string, std::function<void(v1::RunConfig*)>>> bigger = {
      {"batch", [](v1::RunConfig* c) { c->set_batch_size(32); }},
      {"block", [](v1::RunConfig* c) { c->set_block_size(512); }},
      {"layers", [](v1::RunConfig* c) { c->set_n_layer(8); }},
      {"width", [](v1::RunConfig* c) { c->set_n_embd(512); }},
      {"heads (more scores)", [](v1::RunConfig* c) { c->set_n_head(8); }},
      {"grad_accum (more batches held)", [](v1::RunConfig* c) { c->set_grad_accum(4); }},
      {"untied embeddings", [](v1::RunConfig* c) { c->set_tie_embeddings(false); }},
      {"qk_norm", [](v1::RunConfig* c) { c->set_qk_norm("rmsnorm"); }},
      {"rope", [](v1::RunConfig* c) { c->set_pos("rope"); }},
      {"softcap", [](v1::RunConfig* c) { c->set_attn_softcap(30); }},
      {"dropout", [](v1::RunConfig* c) { c->set_dropout(0.1); }},
      {"z_loss", [](v1::RunConfig* c) { c->set_z_loss(1e-4); }},
  };
  for (const auto& [name, set] : bigger) {
    EXPECT_GT(EstimateMemory(Config(set), 4096).total, base) << name;
  }
  EXPECT_GT(EstimateMemory(Config(), 8192).total, base) << "vocab";
  // grad_accum holds its micro-batches' tokens, not their activations.
  const MemoryEstimate accum =
      EstimateMemory(Config([](v1::RunConfig* c) { c->set_grad_accum(4); }), 4096);
  EXPECT_EQ(accum.activations, EstimateMemory(Config(), 4096).activations);
}

TEST(Memory, Bf16HalvesTheGemmActivationsButCopiesTheMatrices) {
  const MemoryEstimate fp32 = EstimateMemory(Config(), 4096);
  const MemoryEstimate bf16 =
      EstimateMemory(Config([](v1::RunConfig* c) { c->set_dtype("bfloat16"); }), 4096);
  EXPECT_LT(bf16.activations, fp32.activations);
  EXPECT_GT(bf16.activations, fp32.activations / 2);  // norms and softmax stay fp32
  EXPECT_EQ(bf16.autocast_copies, 2 * (4 * 12 * 256 * 256 + 4096 * 256));
  EXPECT_EQ(bf16.weights, fp32.weights);  // master weights stay fp32
}

TEST(Memory, TheCpuPathFusesTheHeadAndCountsShards) {
  const v1::RunConfig c = Config([](v1::RunConfig* c) { c->set_batch_size(64); });
  const MemoryEstimate gpu = EstimateMemory(c, 32000);
  const MemoryEstimate cpu = EstimateMemory(c, 32000, MemoryDevice::kCpu);
  // 64 x 256 x 32000 logits: 4.2 GB of gradients on a GPU; the fused CPU head never has them.
  EXPECT_EQ(gpu.transient, int64_t{64} * 256 * 32000 * 8);
  EXPECT_LT(cpu.transient, gpu.transient / 10);
  EXPECT_EQ(cpu.runtime, kCpuRuntimeBytes);
  const MemoryEstimate sharded = EstimateMemory(c, 32000, MemoryDevice::kCpu, /*shards=*/4);
  EXPECT_EQ(sharded.gradients, 5 * cpu.gradients);
  // Shards are a CPU matter: a GPU step is one.
  EXPECT_EQ(EstimateMemory(c, 32000, MemoryDevice::kGpu, 4).gradients, gpu.gradients);
  // z_loss and bf16 take the unfused head on the CPU too.
  v1::RunConfig z = c;
  z.set_z_loss(1e-4);
  EXPECT_GT(EstimateMemory(z, 32000, MemoryDevice::kCpu).transient, gpu.transient);
}

// Long blocks and few sequences: the probe pass's float64 copies of one layer's scores outweigh
// a whole step on the CPU (train.memory measured it: 576 MiB at L2 H8 T512 B8).
TEST(Memory, TheProbePassCanBeThePeak) {
  const v1::RunConfig c = Config([](v1::RunConfig* c) {
    c->set_n_layer(2);
    c->set_n_head(8);
    c->set_n_embd(64);
    c->set_block_size(512);
    c->set_batch_size(8);
  });
  const MemoryEstimate m = EstimateMemory(c, 320, MemoryDevice::kCpu);
  EXPECT_EQ(m.probe, int64_t{576} << 20);
  EXPECT_GT(m.probe, m.gradients + m.activations + m.transient);
  EXPECT_EQ(m.tensors, m.weights + m.optimizer + m.autocast_copies + m.data + m.probe);
  EXPECT_EQ(m.margin, kCpuMemoryMargin);
}

TEST(Memory, RunsStoreTheGpuPathUnlessPinnedToTheCpu) {
  v1::RunConfig c = Config();
  EXPECT_EQ(RunMemoryBytes(c, 4096), EstimateMemory(c, 4096).total);
  c.set_device("cpu");
  EXPECT_EQ(RunMemoryBytes(c, 4096), EstimateMemory(c, 4096, MemoryDevice::kCpu).total);
  c.set_device("cuda");
  EXPECT_EQ(RunMemoryBytes(c, 4096), EstimateMemory(c, 4096).total);
}

TEST(Memory, FormatsBytesToThreeSignificantDigits) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(int64_t{24} << 20), "24.0 MiB");
  EXPECT_EQ(FormatBytes(int64_t{300} << 20), "300 MiB");
  EXPECT_EQ(FormatBytes(int64_t{1000} << 20), "0.977 GiB");
  EXPECT_EQ(FormatBytes(static_cast<int64_t>(1.234 * (1 << 30))), "1.23 GiB");
  EXPECT_EQ(FormatBytes(int64_t{80} << 30), "80.0 GiB");
}

FleetWorker Worker(const std::string& kind, int64_t memory, int slots) {
  FleetWorker w;
  w.device_kind = kind;
  w.device_class = kind;
  w.memory_bytes = memory;
  w.slots = slots;
  return w;
}

// A grid of 3 small runs (~1 GiB) and 2 large ones (~15 GiB), both on `device`.
std::vector<WorkShape> Grid(const std::string& device = "auto") {
  std::vector<WorkShape> shapes;
  auto set = [&](int layers, v1::RunConfig* c) {
    c->set_n_layer(layers);
    c->set_device(device);
  };
  for (int i = 0; i < 3; ++i) {
    AddRun(Config([&](v1::RunConfig* c) { set(2, c); }), 4096, &shapes);
  }
  for (int i = 0; i < 2; ++i) {
    AddRun(Config([&](v1::RunConfig* c) {
             set(12, c);
             c->set_batch_size(256);
           }),
           4096, &shapes);
  }
  return shapes;
}

TEST(Estimate, CountsTheRunsNoLiveWorkerCanHold) {
  const std::vector<WorkShape> grid = Grid();
  ASSERT_EQ(grid.size(), 2u);
  const int64_t small = grid[0].memory_bytes, large = grid[1].memory_bytes;
  ASSERT_LT(small, int64_t{2} << 30);
  ASSERT_GT(large, int64_t{8} << 30);

  // 16 GiB over 2 slots: 8 GiB a slot holds the small runs only.
  SpeedModel two_slots({Worker("cuda", int64_t{16} << 30, 2)}, {});
  v1::SweepEstimate e = Estimate(grid, 5, 0, two_slots);
  EXPECT_EQ(e.memory_bytes_max(), large);
  EXPECT_EQ(e.largest_worker_memory_bytes(), int64_t{8} << 30);
  EXPECT_EQ(e.unfittable_runs(), 2);
  EXPECT_THAT(e.notes(), testing::Contains(absl::StrCat(
                             "2 runs need up to ", FormatBytes(large),
                             " of device memory; the largest live worker has 8.00 GiB per slot: "
                             "they would wait in the queue for a bigger device")));

  // One slot of a bigger device holds them all: no note.
  SpeedModel big({Worker("cuda", int64_t{16} << 30, 2), Worker("cuda", int64_t{80} << 30, 1)}, {});
  e = Estimate(grid, 5, 0, big);
  EXPECT_EQ(e.largest_worker_memory_bytes(), int64_t{80} << 30);
  EXPECT_EQ(e.unfittable_runs(), 0);
  for (const auto& n : e.notes()) EXPECT_THAT(n, Not(HasSubstr("device memory")));

  // A worker that did not report its memory is not limited (as Lease treats it).
  EXPECT_EQ(Estimate(grid, 5, 0, SpeedModel({Worker("cuda", 0, 1)}, {})).unfittable_runs(), 0);
  // No live worker: nothing to compare with.
  e = Estimate(grid, 5, 0, SpeedModel({}, {}));
  EXPECT_EQ(e.unfittable_runs(), 0);
  EXPECT_EQ(e.largest_worker_memory_bytes(), 0);
  EXPECT_EQ(e.memory_bytes_max(), large);
}

TEST(Estimate, OnlyWorkersThatMayRunAShapeCountForIt) {
  // Runs pinned to cuda; the big machine is a CPU one.
  const std::vector<WorkShape> grid = Grid("cuda");
  SpeedModel fleet({Worker("cuda", int64_t{8} << 30, 1), Worker("cpu", int64_t{256} << 30, 1)}, {});
  EXPECT_EQ(fleet.LargestMemoryPerSlot("cuda"), int64_t{8} << 30);
  EXPECT_EQ(fleet.LargestMemoryPerSlot(), int64_t{256} << 30);
  EXPECT_EQ(Estimate(grid, 5, 0, fleet).unfittable_runs(), 2);
  // With no worker of its kind at all the runs wait for the kind, not for memory.
  EXPECT_EQ(
      Estimate(grid, 5, 0, SpeedModel({Worker("cpu", int64_t{1} << 30, 1)}, {})).unfittable_runs(),
      0);
}

TEST(Estimate, TheCliShowsMemoryInBinaryUnits) {
  v1::SweepEstimate e;
  e.set_base_runs(5);
  e.set_max_runs(5);
  e.set_memory_bytes_max(static_cast<int64_t>(15.4 * (1 << 30)));
  e.set_largest_worker_memory_bytes(int64_t{8} << 30);
  e.set_unfittable_runs(2);
  EXPECT_THAT(cli::EstimateText("grid", e),
              HasSubstr("device memory: up to 15.4 GiB per run; largest live worker 8.00 GiB "
                        "per slot; 2 runs fit no live worker\n"));
  e.set_unfittable_runs(0);
  e.set_largest_worker_memory_bytes(0);
  EXPECT_THAT(cli::EstimateText("grid", e), HasSubstr("device memory: up to 15.4 GiB per run\n"));
  e.set_memory_bytes_max(0);  // a server before the estimate: no line
  EXPECT_THAT(cli::EstimateText("grid", e), Not(HasSubstr("device memory")));
}

}  // namespace
}  // namespace ablate::cost
