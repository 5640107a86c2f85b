// Provenance and mixed fleets: a study run on a laptop (MPS, float32) and rented GPUs (CUDA,
// bfloat16) must not silently compare numbers produced on different stacks. Every cell, every
// compared pair (baseline vs variant at one LR), every pair of curves behind an eta-dagger and
// every verdict is checked for runs that differ in device kind, dtype, torch version or (where
// both runs know it) tokenizer SHA-256 or, for runs with dropout, shard count.
#pragma once

#include <compare>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/status.h"

namespace ablate::analysis {

struct Analysis;

// Where and how a run ran: what its numbers depend on beyond its config.
struct Provenance {
  std::string device_kind;  // cuda | mps | cpu; empty when the run recorded no device
  std::string dtype;        // float32 | bfloat16
  std::string torch_version;
  std::string tokenizer_sha256;  // empty: not recorded (results from before the field existed)
  // With dropout > 0, the shards a CPU step split each batch into (the worker's --threads): the
  // masks are drawn per shard, so the count changes the numbers. 0: no dropout (the count does
  // not matter) or not recorded.
  int shards = 0;
  auto operator<=>(const Provenance&) const = default;
};

// From RunResult; a result from before device_kind existed gets it from the prefix of its full
// device name ("cuda:0 (NVIDIA GeForce RTX 4090)" -> "cuda").
Provenance ProvenanceOf(const ablate::v1::Run& run);

// Finished runs per distinct provenance.
using ProvenanceCounts = std::map<Provenance, int>;

// Which of "device kind", "dtype", "torch version", "tokenizer", "shard count" (in that order)
// differ between some two of `runs`; empty when they all ran alike. Tokenizers and shard counts
// count only when both are known.
std::vector<std::string> ProvenanceDifferences(const ProvenanceCounts& runs);

// Each distinct provenance by the fields in `differs`, with its run count: "cuda/bfloat16 (2
// runs)"; provenances that look alike on those fields are merged. All fields when `differs` is
// empty. An unrecorded field reads "?".
std::vector<std::string> ProvenanceLabels(const ProvenanceCounts& runs,
                                          const std::vector<std::string>& differs);

// A cell, compared pair, pair of curves or moderator trend whose runs did not all run alike.
struct MixedRuns {
  std::string kind;                  // cell | pair | curves | trend
  std::string where;                 // "lr=0.01,n_layer=4,qk_norm=none"
  std::vector<std::string> differs;  // as ProvenanceDifferences
  std::string detail;                // "cuda/bfloat16 (2 runs) vs mps/float32 (1 run)"

  // "cell lr=0.01,n_layer=4,qk_norm=none: cuda/bfloat16 (2 runs) vs mps/float32 (1 run)"
  std::string Line() const;
};

// Fills Point/Curve/Necessity/Verdict::mixed and Analysis::mixed, marks verdict lines that rest
// on mixed runs and adds a note. Needs the points' provenance counts and the verdicts.
void FlagMixedRuns(Analysis* analysis);

// OK when nothing in the analysis rests on mixed runs; else FailedPrecondition naming every
// mixed cell, pair, pair of curves and trend (what differs, and how many runs ran on what).
absl::Status RequireUniform(const Analysis& analysis);

}  // namespace ablate::analysis
