// The calibration benchmark's known truth: mean loss-vs-LR curves of two variants ("none", the
// baseline, and "layernorm") at three depths, the scenarios that make H1/H2/H3 and η† true or
// false, and synthetic sweeps drawn from them (seed noise added) as ablate.v1.Run protos.
//
// Every curve is a parabola in log10 LR (floor + a (log10 η - log10 η_opt)^2) that steepens in
// the last decade before the top LR's wall, as measured curves do. A run at or above its
// curve's divergence wall diverges, every seed alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"

namespace ablate::calibration {

// ln(4096): every run's initial loss ℓ0 (a 4096-token vocabulary).
inline constexpr double kL0 = 8.317766166719343;
// The seed noise: each run's final loss is its curve's mean plus N(0, kSigma^2).
inline constexpr double kSigma = 0.03;
inline constexpr int kDepths[] = {2, 4, 8};
inline constexpr char kBaseline[] = "none";
inline constexpr char kTreated[] = "layernorm";

enum class Kind {
  kNoEffect,  // A: both variants identical at every depth, diverging alike at the top LR
  kEffect,    // B: the baseline worse by `effect` above η_true(depth), which falls with depth
  kWall,      // C: the baseline diverges from 0.1 up, layernorm only at the top LR
  kCensored,  // D: the baseline diverges from 0.03 up, layernorm trains there but badly
};

struct Scenario {
  Kind kind = Kind::kNoEffect;
  double effect = 0;  // kEffect: the baseline's excess loss (nats) once the gap has opened

  std::string Name() const;  // "A", "B e=0.2", ...: a table's scenario column
  std::string Slug() const;  // "A", "B_e0.2", ...: an export directory's name
  // What the scenario makes true: "true", "false", or "-" where it claims nothing.
  std::string Truth(const std::string& hypothesis) const;
  // η† per depth: "not necessary" (A: up to 0.1, where the comparison ends: layernorm is not
  // good above it), "necessary", "censored at 0.0215" (D).
  std::string EtaTruth() const;
};

// The grid's 11 LRs, 3 per decade from 1e-4 up (10^(-4 + i/3)): the grid_values text and the
// value it reads as. The truth is evaluated at that value, so it and the analysis agree on every
// LR.
struct GridLr {
  std::string text;
  double value = 0;
};
const std::vector<GridLr>& LrGrid();

// A curve's true mean final validation loss at `lr`; nullopt: every seed diverges there.
std::optional<double> TrueLoss(const Scenario& s, bool baseline, int depth, double lr);

// kEffect: the LR where the true gap ℓ_none - ℓ_layernorm first exceeds `delta`; nullopt when
// it never does (or in another scenario).
std::optional<double> TrueEtaDagger(const Scenario& s, int depth, double delta);

// One synthetic sweep: every variant x depth x LR x seed (seeds "0".."seeds-1"), its noise
// drawn from a generator seeded with `seed`. The same seed gives the same runs everywhere.
std::vector<ablate::v1::Run> MakeRuns(const Scenario& s, int seeds, uint64_t seed);

}  // namespace ablate::calibration
