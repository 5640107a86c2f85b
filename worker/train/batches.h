// Training, validation and probe batches drawn from a memory-mapped token file.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "worker/train/dataset.h"
#include "worker/train/rng.h"

namespace ablate::train {

struct Batch {
  torch::Tensor x, y;  // (batch, block) int64; y is x shifted by one token
};

// Random windows of block+1 tokens at uniform offsets; the generator's state is all a checkpoint
// needs to redraw the same batches.
class BatchSampler {
 public:
  BatchSampler(const TokenFile& tokens, int64_t block, uint64_t seed)
      : tokens_(tokens), block_(block), rng_(seed) {}

  Batch Next(int64_t batch, const torch::Device& device);

  Rng& rng() { return rng_; }

 private:
  const TokenFile& tokens_;
  int64_t block_;
  Rng rng_;
};

// `count` batches drawn once from a generator with a fixed seed, independent of the run's seed,
// so every run of a sweep is evaluated (or probed) on the same tokens.
std::vector<Batch> FixedBatches(const TokenFile& tokens, int64_t block, int64_t batch,
                                int64_t count, uint64_t seed, const torch::Device& device);

}  // namespace ablate::train
