// Grid expansion: the cartesian product of the axes, in the sweep's order.
#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sweep/run_config.h"
#include "common/sweep/sweep.h"

namespace ablate::sweep {
namespace {

using ablate::v1::RunSpec;

// Axis visiting order (outermost first) and, per axis, the order of its value indices.
struct Traversal {
  std::vector<size_t> axes;
  std::vector<std::vector<int>> value_order;  // indexed by axis position in the file
};

Traversal MakeTraversal(const SweepSpec& sweep) {
  Traversal t;
  const size_t n = sweep.grid.size();
  t.value_order.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int count = static_cast<int>(sweep.grid[i].values.size());
    for (int v = 0; v < count; ++v) t.value_order[i].push_back(v);
  }
  if (sweep.order == Order::kGrid) {
    for (size_t i = 0; i < n; ++i) t.axes.push_back(i);
    return t;
  }
  // coarse_to_fine: every seed-0 run before any seed-1 run, and within a seed the LRs spread
  // first, so a sweep stopped early still has a rough loss-vs-LR curve for every other cell.
  auto position = [&](const char* name) -> int {
    for (size_t i = 0; i < n; ++i) {
      if (sweep.grid[i].name == name) return static_cast<int>(i);
    }
    return -1;
  };
  const int seed = position("seed");
  const int lr = position("lr");
  // With pruning, a curve's high LRs must be tried with every seed early: only when all its
  // seeds diverged at an LR are the larger ones skipped, so the LR sequence goes outermost and
  // the seeds inside it (0, 6, 3, ... each with every seed).
  const bool prune_first = sweep.prune_above_divergence && lr >= 0;
  if (seed >= 0 && !prune_first) t.axes.push_back(seed);
  if (lr >= 0) {
    t.axes.push_back(lr);
    t.value_order[lr] = CoarseToFineOrder(static_cast<int>(sweep.grid[lr].values.size()));
  }
  if (seed >= 0 && prune_first) t.axes.push_back(seed);
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<int>(i) != seed && static_cast<int>(i) != lr) t.axes.push_back(i);
  }
  return t;
}

// "FILE:LINE: grid.n_head: ..." for a run that fails validation: blame the first involved
// setting the file varies, else one it fixes, else the setting's default (no line of its own).
absl::Status LocateProblem(const SweepSpec& sweep, const ConfigProblem& problem) {
  const std::string prefix = sweep.file_name.empty() ? "sweep" : sweep.file_name;
  for (const auto& field : problem.fields) {
    for (const auto& axis : sweep.grid) {
      if (axis.name == field) {
        return absl::InvalidArgumentError(
            absl::StrCat(prefix, ":", axis.line, ": grid.", field, ": ", problem.message));
      }
    }
  }
  for (const auto& field : problem.fields) {
    auto it = sweep.fixed_lines.find(field);
    if (it != sweep.fixed_lines.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, ":", it->second, ": fixed.", field, ": ", problem.message));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(prefix, ":", std::max(1, sweep.grid_line), ": ",
                                                 problem.fields[0],
                                                 " (default): ", problem.message));
}

bool HasSeedAxis(const SweepSpec& sweep) {
  for (const auto& axis : sweep.grid) {
    if (axis.name == "seed") return true;
  }
  return false;
}

// The run at one grid point, `values[i]` the canonical text of grid axis i: the one place a run
// is built from the sweep, for the grid walk and for the points refinement adds (ExpandPoint),
// so a refined run is what the grid would have run at its values, derived settings included.
absl::StatusOr<RunSpec> BuildRun(const SweepSpec& sweep,
                                 const std::vector<const std::string*>& values,
                                 bool has_seed_axis) {
  RunSpec run;
  run.set_sweep_name(sweep.name);
  *run.mutable_config() = sweep.fixed;
  for (size_t i = 0; i < sweep.grid.size(); ++i) {
    const Axis& axis = sweep.grid[i];
    SetSetting(run.mutable_config(), FindSetting(axis.name), *values[i]);
    (*run.mutable_grid_values())[axis.name] = *values[i];
  }
  ApplyDefaults(run.mutable_config());
  if (!has_seed_axis) (*run.mutable_grid_values())["seed"] = absl::StrCat(run.config().seed());
  // kSweep: any worker whose device matches may lease a sweep's run.
  if (auto problem = FindConfigProblem(run.config(), ConfigScope::kSweep)) {
    return LocateProblem(sweep, *problem);
  }
  run.set_cell(CellKey(run.grid_values()));
  *run.mutable_data() = sweep.data;
  *run.mutable_divergence() = sweep.divergence;
  *run.mutable_threshold() = sweep.threshold;
  run.set_keep_final(sweep.keep_final);
  return run;
}

}  // namespace

absl::StatusOr<RunSpec> ExpandPoint(const SweepSpec& sweep,
                                    const google::protobuf::Map<std::string, std::string>& at) {
  const std::string prefix = sweep.file_name.empty() ? "sweep" : sweep.file_name;
  std::vector<std::string> texts;
  texts.reserve(sweep.grid.size());
  for (const auto& axis : sweep.grid) {
    auto it = at.find(axis.name);
    const auto* setting = FindSetting(axis.name);
    if (it == at.end() || setting == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ":", axis.line, ": grid.", axis.name,
                                                     ": no value given for this axis"));
    }
    auto canonical = CanonicalValue(setting, it->second);
    if (!canonical.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ":", axis.line, ": grid.", axis.name,
                                                     ": ", canonical.status().message()));
    }
    // Seeds are not a continuum: a seed the grid does not list is a run the sweep never asked
    // for, unless `refine.seeds` lets refinement add seeds to cells where a decision is noisy.
    const bool extra_seeds = sweep.refine && sweep.refine->seeds_max() > 0;
    if (axis.name == "seed" && !extra_seeds &&
        std::find(axis.values.begin(), axis.values.end(), *canonical) == axis.values.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, ":", axis.line, ": grid.seed: ", *canonical,
                       " is not one of the grid's seeds (only refine.seeds adds seeds)"));
    }
    texts.push_back(*std::move(canonical));
  }
  for (const auto& [name, value] : at) {
    const bool known = std::any_of(sweep.grid.begin(), sweep.grid.end(),
                                   [&](const Axis& a) { return a.name == name; });
    if (!known && name != "seed") {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ":", std::max(1, sweep.grid_line),
                                                     ": grid: '", name, "' is not a grid axis"));
    }
  }
  std::vector<const std::string*> values;
  for (const auto& t : texts) values.push_back(&t);
  auto run = BuildRun(sweep, values, HasSeedAxis(sweep));
  // Without a seed axis every run has the one seed the config gives: another is not this sweep's.
  auto seed = at.find("seed");
  if (run.ok() && seed != at.end() && seed->second != run->grid_values().at("seed")) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, ":", std::max(1, sweep.grid_line), ": grid: no seed axis, so every run has seed ",
        run->grid_values().at("seed"), ", not ", seed->second));
  }
  return run;
}

std::vector<int> CoarseToFineOrder(int n) {
  std::vector<int> order;
  if (n <= 0) return order;
  order.push_back(0);
  if (n == 1) return order;
  order.push_back(n - 1);
  // Breadth-first bisection: each level halves every gap, left to right.
  std::deque<std::pair<int, int>> gaps = {{0, n - 1}};
  while (!gaps.empty()) {
    std::deque<std::pair<int, int>> next;
    for (const auto& [lo, hi] : gaps) {
      if (hi - lo < 2) continue;
      int mid = (lo + hi) / 2;
      // Odd gaps round towards the nearer end of the whole range, keeping the order symmetric.
      if ((lo + hi) % 2 != 0 && lo + hi > n - 1) mid += 1;
      order.push_back(mid);
      next.emplace_back(lo, mid);
      next.emplace_back(mid, hi);
    }
    gaps = std::move(next);
  }
  return order;
}

std::string CellKey(const google::protobuf::Map<std::string, std::string>& grid_values) {
  std::vector<std::pair<std::string, std::string>> sorted;
  for (const auto& [axis, value] : grid_values) {
    if (axis != "seed") sorted.emplace_back(axis, value);
  }
  std::sort(sorted.begin(), sorted.end());
  return absl::StrJoin(sorted, ",", absl::PairFormatter("="));
}

absl::StatusOr<int64_t> CountRuns(const SweepSpec& sweep, const Limits& limits) {
  const std::string prefix = sweep.file_name.empty() ? "sweep" : sweep.file_name;
  int64_t total = 1;
  for (const auto& axis : sweep.grid) {
    if (axis.values.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, ":", axis.line, ": grid.", axis.name, ": empty axis"));
    }
    if (FindSetting(axis.name) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, ":", axis.line, ": grid.", axis.name,
                                                     ": unknown setting '", axis.name, "'"));
    }
    total *= static_cast<int64_t>(axis.values.size());
    if (total > limits.max_runs) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, ":", std::max(1, sweep.grid_line), ": grid: expands to more than ",
          limits.max_runs, " runs (the server's limit); split the sweep or drop values"));
    }
  }
  return total;
}

absl::Status ForEachRun(const SweepSpec& sweep, const Limits& limits, const RunSink& sink) {
  auto counted = CountRuns(sweep, limits);
  if (!counted.ok()) return counted.status();
  const int64_t total = *counted;
  const Traversal traversal = MakeTraversal(sweep);
  const size_t n = sweep.grid.size();
  const bool has_seed_axis = HasSeedAxis(sweep);

  // Odometer over traversal positions; the last axis in traversal order turns fastest.
  std::vector<size_t> digit(n, 0);
  std::vector<const std::string*> values(n);
  for (int64_t r = 0; r < total; ++r) {
    for (size_t i = 0; i < n; ++i) {
      values[i] = &sweep.grid[i].values[traversal.value_order[i][digit[i]]];
    }
    auto run = BuildRun(sweep, values, has_seed_axis);
    if (!run.ok()) return run.status();
    if (auto s = sink(*std::move(run)); !s.ok()) return s;

    for (size_t k = traversal.axes.size(); k-- > 0;) {
      const size_t axis = traversal.axes[k];
      if (++digit[axis] < sweep.grid[axis].values.size()) break;
      digit[axis] = 0;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RunSpec>> Expand(const SweepSpec& sweep, const Limits& limits) {
  auto total = CountRuns(sweep, limits);
  if (!total.ok()) return total.status();
  std::vector<RunSpec> runs;
  runs.reserve(static_cast<size_t>(*total));
  auto s = ForEachRun(sweep, limits, [&](RunSpec&& run) {
    runs.push_back(std::move(run));
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return runs;
}

}  // namespace ablate::sweep
