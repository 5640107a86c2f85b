// What a run costs in arithmetic: parameters, tokens and model FLOPs, counted the way nanoGPT's
// estimate_mfu counts them (6N + 12·L·H·Q·T per token, N without position embeddings). The
// worker's startup benchmark reports FLOP/s in this unit and the server's estimates and budgets
// divide by it, so a speed measured on one model size transfers to another.
//
// Pure arithmetic on a RunConfig with defaults applied (common/sweep/run_config.h); no torch.
#pragma once

#include <cstdint>

#include "ablate/v1/ablate.pb.h"

namespace ablate::cost {

// Trainable parameters of worker/train/model.cc's GPT for `vocab` tokens, without the learned
// position embedding (nanoGPT's get_num_params(non_embedding=True)). Exactly what the model
// registers: train.model checks it against the module's numel.
int64_t ParamCount(const v1::RunConfig& config, int64_t vocab);

// Model FLOPs per trained token: 6N for the matrices (forward and backward) plus 12·L·H·Q·T for
// attention's two matmuls (Q = head size, T = block size).
double FlopsPerToken(const v1::RunConfig& config, int64_t vocab);

// Tokens one optimizer step trains on: batch_size × grad_accum × block_size.
int64_t TokensPerStep(const v1::RunConfig& config);

// Tokens and FLOPs of the whole run (`steps` optimizer steps; evaluation not counted).
double RunTokens(const v1::RunConfig& config);
double RunFlops(const v1::RunConfig& config, int64_t vocab);

// A DataSpec's vocabulary (0 means the default, common/sweep/sweep.h kDefaultVocab).
int64_t VocabOf(const v1::DataSpec& data);

}  // namespace ablate::cost
