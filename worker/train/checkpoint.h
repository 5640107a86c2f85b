// Checkpoints: everything needed to continue a run bit for bit (on CPU), written atomically.
//
// A checkpoint at step s holds the state after s optimizer steps *and* after step s's metrics
// were reported: the sampler and torch RNG states are those from before step s's batch was
// drawn, so a resumed run redraws that batch, recomputes its gradient (identically) and takes
// update s+1 without reporting step s twice.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "worker/train/adamw.h"
#include "worker/train/loss_tracker.h"
#include "worker/train/model.h"

namespace ablate::train {

struct CheckpointState {
  int64_t step = 0;
  std::array<uint64_t, 4> sampler{};
  torch::Tensor torch_rng;  // torch's default CPU generator (dropout draws from it)
  LossTrackerState tracker;
  double wall_seconds = 0;    // training time before this checkpoint, for the result
  double last_val_loss = -1;  // -1: not measured yet
  double min_val_loss = -1;
  std::map<std::string, double> last_probes;
  ablate::v1::RunConfig config;  // the run's config, so a resume with another one is refused
};

absl::Status SaveCheckpoint(const std::string& path, GPT& model, const AdamW& optimizer,
                            const CheckpointState& state);

// Loads into an already-constructed model and optimizer; a checkpoint of a different
// architecture (tensor count or shape) is refused with the mismatching tensor named.
absl::Status LoadCheckpoint(const std::string& path, GPT& model, AdamW& optimizer,
                            CheckpointState* state);

}  // namespace ablate::train
