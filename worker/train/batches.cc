#include "worker/train/batches.h"

namespace ablate::train {

Batch BatchSampler::Next(int64_t batch, const torch::Device& device) {
  // Windows start in [0, size - block - 1], so each has block + 1 tokens (input and target).
  const uint64_t starts = static_cast<uint64_t>(tokens_.size() - block_);
  auto window = torch::empty({batch, block_ + 1}, torch::kInt64);
  int64_t* out = window.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const uint16_t* src = tokens_.data() + rng_.Below(starts);
    for (int64_t t = 0; t <= block_; ++t) *out++ = src[t];
  }
  // contiguous() before the copy: the slices are strided views, and LibTorch 1.13's CPU->MPS
  // copy mishandles strided sources; the copies are tiny.
  return {window.slice(1, 0, block_).contiguous().to(device),
          window.slice(1, 1).contiguous().to(device)};
}

std::vector<Batch> FixedBatches(const TokenFile& tokens, int64_t block, int64_t batch,
                                int64_t count, uint64_t seed, const torch::Device& device) {
  BatchSampler sampler(tokens, block, seed);
  std::vector<Batch> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(sampler.Next(batch, device));
  return out;
}

}  // namespace ablate::train
