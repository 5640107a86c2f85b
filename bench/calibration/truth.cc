#include "bench/calibration/truth.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numbers>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ablate::calibration {
namespace {

constexpr double kLogOptLr = -2.5;  // η_opt = 10^-2.5 ≈ 0.0032, between two grid LRs
constexpr double kWidth = 0.25;     // nats per decade^2 away from η_opt
// Both variants' wall in A and B (only the top grid LR, 0.215, diverges) and the LR the
// steepening below it is measured from, for every curve alike: a variant-specific bump would
// open a gap of its own below the baseline's lower walls in C and D and blur their truth.
constexpr double kTopWall = 0.2;
constexpr double kBump = 0.3;  // nats added at the wall, falling to 0 one decade below it

double Floor(int depth) {  // deeper models reach a lower loss
  return depth == 2 ? 3.8 : depth == 4 ? 3.6 : 3.4;
}

// B: the LR from which the baseline's excess opens; it reaches `effect` half a decade higher.
double EffectOnset(int depth) { return depth == 2 ? 0.03 : depth == 4 ? 0.01 : 0.003; }
constexpr double kRampDecades = 0.5;

double Wall(const Scenario& s, bool baseline) {
  if (baseline && s.kind == Kind::kWall) return 0.1;
  if (baseline && s.kind == Kind::kCensored) return 0.03;
  return kTopWall;
}

// A standard normal from the generator's raw 64-bit output (Box-Muller). std::normal_distribution
// is implementation-defined: libstdc++ and libc++ draw different numbers from the same engine,
// and a benchmark's figures should not depend on the standard library it was built with.
double StandardNormal(std::mt19937_64& g) {
  auto uniform = [&g] { return (static_cast<double>(g() >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  const double u1 = uniform(), u2 = uniform();
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
}

ablate::v1::Run MakeRun(int64_t id, const std::string& variant, int depth, const std::string& lr,
                        int seed, std::optional<double> loss) {
  ablate::v1::Run r;
  const std::string n_layer = std::to_string(depth);
  r.set_id(id);
  r.set_sweep_id(1);
  (*r.mutable_grid_values())["qk_norm"] = variant;
  (*r.mutable_grid_values())["n_layer"] = n_layer;
  (*r.mutable_grid_values())["lr"] = lr;
  (*r.mutable_grid_values())["seed"] = std::to_string(seed);
  r.set_cell(absl::StrCat("lr=", lr, ",n_layer=", n_layer, ",qk_norm=", variant));
  r.set_seed(seed);
  r.set_attempt(1);
  auto* result = r.mutable_result();
  result->set_initial_loss(kL0);
  result->set_steps_to_threshold(-1);
  result->set_device("cpu");
  result->set_device_kind("cpu");
  result->set_dtype("float32");
  if (loss) {
    r.set_state(ablate::v1::SUCCEEDED);
    result->set_final_val_loss(*loss);
    result->set_final_val_ppl(std::exp(*loss));
    result->set_final_train_loss(*loss - 0.05);
  } else {
    // As the trainer ends a divergence: NaN loss, counted as ℓ0 by the analysis.
    r.set_state(ablate::v1::DIVERGED);
    result->set_diverged(true);
    result->set_final_val_loss(std::numeric_limits<double>::quiet_NaN());
  }
  return r;
}

}  // namespace

std::string Scenario::Name() const {
  switch (kind) {
    case Kind::kNoEffect:
      return "A";
    case Kind::kEffect:
      return absl::StrFormat("B e=%g", effect);
    case Kind::kWall:
      return "C";
    case Kind::kCensored:
      return "D";
  }
  return "?";
}

std::string Scenario::Slug() const {
  return kind == Kind::kEffect ? absl::StrFormat("B_e%g", effect) : Name();
}

std::string Scenario::Truth(const std::string& hypothesis) const {
  switch (kind) {
    case Kind::kNoEffect:
      return "false";
    case Kind::kEffect:
      // H2 follows from the gap only through LR sensitivity and, at large e, the baseline's max
      // good LR: B makes no claim about it.
      return hypothesis == "H2" ? "-" : "true";
    case Kind::kWall:
      // The same wall at every depth: η† lies in (0.0464, 0.1] everywhere, so it does not fall.
      return hypothesis == "H3" ? "false" : "true";
    case Kind::kCensored:
      // η† is censored at every depth: the runs cannot say how it moves.
      return hypothesis == "H3" ? "-" : "true";
  }
  return "-";
}

std::string Scenario::EtaTruth() const {
  switch (kind) {
    case Kind::kNoEffect:
      return "not necessary";
    case Kind::kEffect:
    case Kind::kWall:
      return "necessary";
    case Kind::kCensored:
      return "censored at 0.0215";
  }
  return "-";
}

const std::vector<GridLr>& LrGrid() {
  static const std::vector<GridLr> grid = [] {
    std::vector<GridLr> g;
    for (int i = 0; i <= 10; ++i) {
      GridLr lr{absl::StrFormat("%.3g", std::pow(10.0, -4 + i / 3.0)), 0};
      // "%.3g" of a finite positive number always reads back.
      if (!absl::SimpleAtod(lr.text, &lr.value)) std::abort();
      g.push_back(std::move(lr));
    }
    return g;
  }();
  return grid;
}

std::optional<double> TrueLoss(const Scenario& s, bool baseline, int depth, double lr) {
  if (lr >= Wall(s, baseline)) return std::nullopt;
  const double x = std::log10(lr);
  const double steep = std::max(0.0, 1 - std::log10(kTopWall / lr));
  double loss = Floor(depth) + kWidth * (x - kLogOptLr) * (x - kLogOptLr) + kBump * steep * steep;
  if (s.kind == Kind::kEffect && baseline) {
    const double ramp = (x - std::log10(EffectOnset(depth))) / kRampDecades;
    loss += s.effect * std::clamp(ramp, 0.0, 1.0);
  }
  // D: past 0.03 layernorm still trains, 1.5 nats worse: far above its good limit (ℓ* + τ(ℓ0 -
  // ℓ*) ≈ ℓ* + 0.95) yet far below ℓ0, so neither diverged nor untrained.
  if (s.kind == Kind::kCensored && !baseline && lr >= 0.03) loss += 1.5;
  return loss;
}

std::optional<double> TrueEtaDagger(const Scenario& s, int depth, double delta) {
  if (s.kind != Kind::kEffect || !(s.effect > delta)) return std::nullopt;
  return EffectOnset(depth) * std::pow(10.0, kRampDecades * delta / s.effect);
}

std::vector<ablate::v1::Run> MakeRuns(const Scenario& s, int seeds, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<ablate::v1::Run> runs;
  for (const char* variant : {kBaseline, kTreated}) {
    const bool baseline = variant == std::string(kBaseline);
    for (int depth : kDepths) {
      for (const auto& lr : LrGrid()) {
        const std::optional<double> mean = TrueLoss(s, baseline, depth, lr.value);
        for (int k = 0; k < seeds; ++k) {
          std::optional<double> loss;
          if (mean) loss = *mean + kSigma * StandardNormal(g);
          runs.push_back(
              MakeRun(static_cast<int64_t>(runs.size()) + 1, variant, depth, lr.text, k, loss));
        }
      }
    }
  }
  return runs;
}

}  // namespace ablate::calibration
