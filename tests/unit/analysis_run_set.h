// Hand-built run sets for the analysis tests (analysis_*_test.cc): RunSet adds finished or
// diverged runs of a qk_norm x n_layer x lr x seed grid, each starting at loss kL0; At and
// CurveOf find a curve's point and a curve, failing the test when missing.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/analysis/analysis.h"

namespace ablate::analysis {

inline constexpr double kL0 = 8.0;  // initial loss of every hand-built run

struct RunSet {
  std::vector<v1::Run> runs;

  // A finished run; `loss` < 0 means diverged.
  v1::Run& Add(const std::string& variant, const std::string& n_layer, const std::string& lr,
               int seed, double loss, v1::RunState state = v1::SUCCEEDED) {
    v1::Run r;
    r.set_id(static_cast<int64_t>(runs.size()) + 1);
    (*r.mutable_grid_values())["qk_norm"] = variant;
    (*r.mutable_grid_values())["n_layer"] = n_layer;
    (*r.mutable_grid_values())["lr"] = lr;
    (*r.mutable_grid_values())["seed"] = std::to_string(seed);
    r.set_cell("lr=" + lr + ",n_layer=" + n_layer + ",qk_norm=" + variant);
    r.set_seed(seed);
    r.mutable_result()->set_initial_loss(kL0);
    r.mutable_result()->set_steps_to_threshold(-1);
    if (loss < 0) {
      r.set_state(v1::DIVERGED);
      r.mutable_result()->set_diverged(true);
      r.mutable_result()->set_final_val_loss(std::numeric_limits<double>::quiet_NaN());
    } else {
      r.set_state(state);
      r.mutable_result()->set_final_val_loss(loss);
      r.mutable_result()->set_final_train_loss(loss - 0.1);
    }
    runs.push_back(r);
    return runs.back();
  }

  Analysis Analyse(Options o = {}) const {
    auto a = Analyze(runs, o);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : Analysis{};
  }
};

// `seeds` finished seeds around `mean`, spread symmetrically by `spread` (offsets -1, 0, +1 for 3
// seeds; -1, +1 for 2), so the cell's mean is `mean` exactly. A negative mean: every seed diverged.
inline void AddSeeds(RunSet* s, const std::string& variant, const std::string& n_layer,
                     const std::string& lr, double mean, int seeds, double spread) {
  for (int k = 0; k < seeds; ++k) {
    const double offset = seeds == 1 ? 0 : -1 + 2.0 * k / (seeds - 1);
    s->Add(variant, n_layer, lr, k, mean < 0 ? -1 : mean + offset * spread);
  }
}

inline const Point& At(const Curve& c, double lr) {
  for (const auto& p : c.points) {
    if (std::fabs(p.lr - lr) < 1e-12) return p;
  }
  static Point missing;
  ADD_FAILURE() << "no point at lr " << lr;
  return missing;
}

// A pointer, never null (a failed expectation and an empty curve when missing): call sites write
// `*CurveOf(...)`, so no compiler has to guess whether a reference returned from a call with
// temporary string arguments dangles (GCC 14's -Wdangling-reference does).
inline const Curve* CurveOf(const Analysis& a, const std::string& variant,
                            const std::string& n_layer) {
  const Curve* c = a.FindCurve("", variant, n_layer);
  EXPECT_NE(c, nullptr) << variant << " " << n_layer;
  static const Curve missing;
  return c ? c : &missing;
}

}  // namespace ablate::analysis
