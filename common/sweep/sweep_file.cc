// Sweep files and single-run files: the YAML layer over run_config, grid_axis and expand.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/run/metric_names.h"
#include "common/sweep/grid_axis.h"
#include "common/sweep/run_config.h"
#include "common/sweep/sweep.h"
#include "common/sweep/yaml_source.h"
#include "common/util/did_you_mean.h"
#include "common/util/fields.h"
#include "common/util/status_macros.h"

namespace ablate::sweep {
namespace {

using ablate::v1::DataSpec;
using ablate::v1::DivergenceSpec;
using ablate::v1::RunSpec;
using ablate::v1::ThresholdSpec;

const std::vector<std::string> kSweepKeys = {
    "name",       "description", "data",      "fixed",        "grid",
    "order",      "divergence",  "threshold", "max_attempts", "priority",
    "keep_final", "refine",      "prune",     "analysis",     "budget"};
absl::Status UnknownKey(const YamlSource& source, const YAML::Node& key, const std::string& field,
                        const std::vector<std::string>& candidates);

const std::vector<std::string> kBoundaries = {"optimum", "max_stable", "max_good", "eta_dagger"};
const std::vector<std::string> kRefineKeys = {"axis", "boundaries", "until_ratio", "max_new_runs",
                                              "seeds"};

// `refine.seeds: {max: N}`: the most seeds a cell may reach where a decision is within noise.
// Checked against the grid's seed axis once the whole file is read; `line` remembers where.
absl::Status ParseRefineSeeds(const YamlSource& source, const YAML::Node& node,
                              const Limits& limits, ablate::v1::RefineStatus* r, int* line) {
  RETURN_IF_ERROR(source.Mapping(node, "refine.seeds"));
  *line = YamlSource::Line(node);
  bool has_max = false;
  for (const auto& entry : node) {
    const auto key = entry.first.Scalar();
    const auto field = absl::StrCat("refine.seeds.", key);
    if (key != "max") return UnknownKey(source, entry.first, field, {"max"});
    ASSIGN_OR_RETURN(const int64_t max, source.Int(entry.second, field));
    if (max < 1 || max > limits.max_runs) {
      return source.Error(entry.second, field,
                          absl::StrCat("must be between 1 and ", limits.max_runs,
                                       " (the most seeds a cell may reach), not ", max));
    }
    r->set_seeds_max(static_cast<int32_t>(max));
    *line = YamlSource::Line(entry.second);
    has_max = true;
  }
  if (!has_max) {
    return source.Error(node, "refine.seeds.max",
                        "missing (the most seeds a cell may reach where a decision is within "
                        "noise)");
  }
  return absl::OkStatus();
}

// `refine:`. The axis is checked against the grid once the whole file is read (the grid may
// come later); `axis_line` remembers where it was written.
absl::StatusOr<ablate::v1::RefineStatus> ParseRefine(const YamlSource& source,
                                                     const YAML::Node& node, const Limits& limits,
                                                     int* axis_line, int* seeds_line) {
  RETURN_IF_ERROR(source.Mapping(node, "refine"));
  ablate::v1::RefineStatus r;
  r.set_until_ratio(1.3);
  bool has_axis = false, has_budget = false, has_boundaries = false;
  for (const auto& entry : node) {
    const auto key = entry.first.Scalar();
    const auto field = absl::StrCat("refine.", key);
    const YAML::Node& value = entry.second;
    if (key == "axis") {
      ASSIGN_OR_RETURN(*r.mutable_axis(), source.Scalar(value, field));
      *axis_line = YamlSource::Line(value);
      has_axis = true;
    } else if (key == "boundaries") {
      if (!value.IsSequence() || value.size() == 0) {
        return source.Error(value, field,
                            "expected a non-empty list of optimum|max_stable|max_good|eta_dagger");
      }
      std::set<std::string> seen;
      for (const auto& item : value) {
        ASSIGN_OR_RETURN(const std::string name, source.Scalar(item, field));
        if (std::find(kBoundaries.begin(), kBoundaries.end(), name) == kBoundaries.end()) {
          return source.Error(item, field,
                              absl::StrCat("unknown boundary '", name,
                                           "': one of optimum|max_stable|max_good|eta_dagger",
                                           util::DidYouMean(name, kBoundaries)));
        }
        if (!seen.insert(name).second) {
          return source.Error(item, field, absl::StrCat("'", name, "' listed twice"));
        }
        r.add_boundaries(name);
      }
      has_boundaries = true;
    } else if (key == "until_ratio") {
      ASSIGN_OR_RETURN(const double ratio, source.Double(value, field));
      // At or below 1 no bracket is ever narrow enough: the budget would be spent bisecting
      // LRs that %.6g can no longer tell apart.
      if (!(ratio > 1) || !std::isfinite(ratio)) {
        return source.Error(value, field,
                            absl::StrCat("must be a finite number > 1 (the largest hi/lo ratio of "
                                         "a bracket that needs no more runs), not ",
                                         source.Scalar(value, field).value_or("?")));
      }
      r.set_until_ratio(ratio);
    } else if (key == "max_new_runs") {
      ASSIGN_OR_RETURN(const int64_t budget, source.Int(value, field));
      if (budget < 0) return source.Error(value, field, "must be >= 0 (a budget of runs)");
      if (budget > limits.max_runs) {
        return source.Error(value, field,
                            absl::StrCat("must be at most the grid limit (", limits.max_runs, ")"));
      }
      r.set_max_new_runs(static_cast<int32_t>(budget));
      has_budget = true;
    } else if (key == "seeds") {
      RETURN_IF_ERROR(ParseRefineSeeds(source, value, limits, &r, seeds_line));
    } else {
      return UnknownKey(source, entry.first, field, kRefineKeys);
    }
  }
  if (!has_axis) return source.Error(node, "refine.axis", "missing (the axis to refine, e.g. lr)");
  if (!has_budget) {
    return source.Error(node, "refine.max_new_runs",
                        "missing (the most runs refinement may add to the sweep)");
  }
  if (!has_boundaries) {
    for (const auto& b : kBoundaries) r.add_boundaries(b);
  }
  return r;
}

// refine.seeds against the grid: extra seeds are new values of the seed axis, so there must be
// one (a fixed seed has nothing to add to), and max may not ask for fewer than it lists.
absl::Status CheckRefineSeeds(const YamlSource& source, const SweepSpec& sweep, int line) {
  if (!sweep.refine || sweep.refine->seeds_max() == 0) return absl::OkStatus();
  const auto seed = std::find_if(sweep.grid.begin(), sweep.grid.end(),
                                 [](const Axis& a) { return a.name == "seed"; });
  if (seed == sweep.grid.end()) {
    return source.Error(line, "refine.seeds.max",
                        "needs a seed axis in the grid (e.g. grid.seed: [0, 1]): extra seeds are "
                        "new values of it");
  }
  if (sweep.refine->seeds_max() < static_cast<int>(seed->values.size())) {
    return source.Error(
        line, "refine.seeds.max",
        absl::StrCat(sweep.refine->seeds_max(), " is below the ", seed->values.size(),
                     " seeds grid.seed (line ", seed->line, ") already gives every cell"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ParsePrune(const YamlSource& source, const YAML::Node& node) {
  RETURN_IF_ERROR(source.Mapping(node, "prune"));
  bool above = false;
  for (const auto& entry : node) {
    const auto key = entry.first.Scalar();
    const auto field = absl::StrCat("prune.", key);
    if (key != "above_divergence") {
      return UnknownKey(source, entry.first, field, {"above_divergence"});
    }
    ASSIGN_OR_RETURN(const std::string text, source.Scalar(entry.second, field));
    if (text == "true" || text == "yes" || text == "on") {
      above = true;
    } else if (text == "false" || text == "no" || text == "off") {
      above = false;
    } else {
      return source.Error(entry.second, field, absl::StrCat("'", text, "' is not true or false"));
    }
  }
  return above;
}
const std::vector<std::string> kBudgetKeys = {"gpu_hours", "usd"};

// `budget: {gpu_hours: N}` or `{usd: N}`: one limit, a finite number above 0. Device-hours count
// every device kind (a CPU hour is a "GPU-hour" here); dollars are what workers declare with
// --price-per-hour.
absl::StatusOr<ablate::v1::Budget> ParseBudget(const YamlSource& source, const YAML::Node& node) {
  RETURN_IF_ERROR(source.Mapping(node, "budget"));
  ablate::v1::Budget b;
  std::string first;
  for (const auto& entry : node) {
    const auto key = entry.first.Scalar();
    const auto field = absl::StrCat("budget.", key);
    if (key != "gpu_hours" && key != "usd") {
      return source.Error(
          entry.first, field,
          absl::StrCat("unknown key; a budget is gpu_hours (device-hours) or usd (US dollars, "
                       "the unit of ablate-worker --price-per-hour)",
                       util::DidYouMean(key, kBudgetKeys)));
    }
    if (!first.empty()) {
      return source.Error(entry.first, field,
                          absl::StrCat("a budget has one limit: budget.", first,
                                       " is already set (give gpu_hours or usd, not both)"));
    }
    first = key;
    ASSIGN_OR_RETURN(const double limit, source.Double(entry.second, field));
    if (!(limit > 0) || !(limit <= kMaxBudget)) {
      return source.Error(entry.second, field,
                          absl::StrCat("must be a finite number above 0 and at most 1e9, not ",
                                       source.Scalar(entry.second, field).value_or("?")));
    }
    (key == "usd" ? b.set_usd(limit) : b.set_gpu_hours(limit));
  }
  if (first.empty()) {
    return source.Error(node, "budget", "empty; give {gpu_hours: N} or {usd: N}");
  }
  return b;
}

const std::vector<std::string> kAnalysisKeys = {"tau", "delta", "lr_range", "variant", "by"};

// Where each `analysis:` field was written: the axes and the LR range are checked against the
// grid once the whole file is read (the grid may come later).
struct AnalysisLines {
  int lr_range = 0, variant = 0, by = 0;
};

absl::StatusOr<AnalysisSettings> ParseAnalysis(const YamlSource& source, const YAML::Node& node,
                                               AnalysisLines* lines) {
  RETURN_IF_ERROR(source.Mapping(node, "analysis"));
  AnalysisSettings a;
  for (const auto& entry : node) {
    const auto key = entry.first.Scalar();
    const auto field = absl::StrCat("analysis.", key);
    const YAML::Node& value = entry.second;
    if (key == "tau") {
      ASSIGN_OR_RETURN(const double tau, source.Double(value, field));
      // Max good LR keeps (1 - tau) of the achievable improvement: at 0 only the optimum is
      // good, at 1 every LR that did not diverge is.
      if (!(tau > 0 && tau < 1)) {
        return source.Error(value, field,
                            absl::StrCat("must be a number in (0, 1) (the share of the "
                                         "improvement max good LR may give up), not ",
                                         source.Scalar(value, field).value_or("?")));
      }
      a.tau = tau;
    } else if (key == "delta") {
      ASSIGN_OR_RETURN(const double delta, source.Double(value, field));
      if (!(delta >= 0) || !std::isfinite(delta)) {
        return source.Error(value, field,
                            absl::StrCat("must be a finite number >= 0 (η†'s floor in nats), not ",
                                         source.Scalar(value, field).value_or("?")));
      }
      a.delta = delta;
    } else if (key == "lr_range") {
      double lo = 0, hi = 0;
      bool ok = value.IsSequence() && value.size() == 2;
      if (ok) {
        ASSIGN_OR_RETURN(lo, source.Double(value[0], field));
        ASSIGN_OR_RETURN(hi, source.Double(value[1], field));
        ok = lo > 0 && hi > lo && std::isfinite(hi);
      }
      if (!ok) {
        return source.Error(value, field,
                            "expected [min, max] with 0 < min < max (LR sensitivity's range)");
      }
      a.lr_min = lo;
      a.lr_max = hi;
      lines->lr_range = YamlSource::Line(value);
    } else if (key == "variant" || key == "by") {
      ASSIGN_OR_RETURN(std::string axis, source.Scalar(value, field));
      (key == "variant" ? lines->variant : lines->by) = YamlSource::Line(value);
      (key == "variant" ? a.variant : a.by) = std::move(axis);
    } else {
      return UnknownKey(source, entry.first, field, kAnalysisKeys);
    }
  }
  return a;
}

// The `analysis:` fields that name the grid: axes that exist and are neither the seed nor the LR
// axis, and an LR range within the grid's LRs (outside it, LR sensitivity would average over LRs
// the sweep never ran).
absl::Status CheckAnalysisAgainstGrid(const YamlSource& source, const SweepSpec& sweep,
                                      const AnalysisLines& lines) {
  const AnalysisSettings& a = sweep.analysis;
  const std::string lr_axis = sweep.refine ? sweep.refine->axis() : std::string("lr");
  std::vector<std::string> names;
  for (const auto& axis : sweep.grid) names.push_back(axis.name);
  auto check_axis = [&](const std::optional<std::string>& axis, int line,
                        const std::string& field) -> absl::Status {
    if (!axis) return absl::OkStatus();
    if (std::find(names.begin(), names.end(), *axis) == names.end()) {
      const std::string hint = util::DidYouMean(*axis, names);
      return source.Error(
          line, field,
          absl::StrCat("'", *axis, "' is not a grid axis",
                       hint.empty()
                           ? absl::StrCat(" (the grid's axes: ", absl::StrJoin(names, ", "), ")")
                           : hint));
    }
    if (*axis == "seed") {
      return source.Error(line, field, "the seed axis is averaged over, never compared");
    }
    if (*axis == lr_axis) {
      return source.Error(line, field,
                          absl::StrCat("the ", lr_axis, " axis is the curve's x axis, not a ",
                                       "variant or moderator"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check_axis(a.variant, lines.variant, "analysis.variant"));
  RETURN_IF_ERROR(check_axis(a.by, lines.by, "analysis.by"));
  if (a.variant && a.by && *a.variant == *a.by) {
    return source.Error(lines.by, "analysis.by",
                        absl::StrCat("'", *a.by, "' is the same axis as analysis.variant"));
  }
  if (a.lr_min) {
    const auto axis = std::find_if(sweep.grid.begin(), sweep.grid.end(),
                                   [&](const Axis& g) { return g.name == lr_axis; });
    if (axis == sweep.grid.end()) {
      return source.Error(lines.lr_range, "analysis.lr_range",
                          absl::StrCat("the grid has no ", lr_axis, " axis to take a range of"));
    }
    double lo = 0, hi = 0;
    bool first = true;
    for (const auto& v : axis->values) {
      double x = 0;
      if (!absl::SimpleAtod(v, &x)) continue;
      lo = first ? x : std::min(lo, x);
      hi = first ? x : std::max(hi, x);
      first = false;
    }
    for (const double end : {*a.lr_min, *a.lr_max}) {
      if (!first && end >= lo * (1 - 1e-9) && end <= hi * (1 + 1e-9)) continue;
      return source.Error(lines.lr_range, "analysis.lr_range",
                          absl::StrCat(FormatDouble(end), " is outside the grid's ", lr_axis,
                                       " values [", FormatDouble(lo), ", ", FormatDouble(hi), "]"));
    }
  }
  return absl::OkStatus();
}

const std::vector<std::string> kRunFileSections = {"name", "description", "data", "divergence",
                                                   "threshold"};

absl::Status UnknownKey(const YamlSource& source, const YAML::Node& key, const std::string& field,
                        const std::vector<std::string>& candidates) {
  return source.Error(
      key, field,
      absl::StrCat("unknown key '", key.Scalar(), "'", util::DidYouMean(key.Scalar(), candidates)));
}

// A sweep name is a label in CLI output, URLs and report file names: printable ASCII within
// util::kMaxNameBytes (so errors echo at most a short prefix), then a file-name-safe subset.
absl::Status CheckName(const YamlSource& source, const YAML::Node& node, const std::string& name) {
  if (auto s = util::CheckName("name", name); !s.ok()) {
    return source.Error(YamlSource::Line(node), "", s.message());
  }
  const bool ok = std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
  if (ok) return absl::OkStatus();
  return source.Error(node, "name",
                      absl::StrCat("'", name, "' may only contain letters, digits, '.', '_', '-'"));
}

// A DataSpec rule (validate.cc, shared with the worker) applied to the value at `node`.
absl::Status CheckAt(const YamlSource& source, const YAML::Node& node, const std::string& field,
                     const absl::Status& check) {
  if (check.ok()) return check;
  return source.Error(node, field, check.message());
}

// data: {train, val, tokenizer: {type: bpe, vocab}}; `lines` (when given) gets the line of
// train's and val's values.
absl::StatusOr<DataSpec> ParseData(const YamlSource& source, const YAML::Node& node,
                                   std::map<std::string, int>* lines = nullptr) {
  RETURN_IF_ERROR(source.Mapping(node, "data"));
  DataSpec data;
  data.mutable_tokenizer()->set_type("bpe");
  data.mutable_tokenizer()->set_vocab(kDefaultVocab);
  for (const auto& entry : node) {
    const auto key = entry.first.Scalar();
    const auto field = absl::StrCat("data.", key);
    if (key == "train" || key == "val") {
      ASSIGN_OR_RETURN(const std::string path, source.Scalar(entry.second, field));
      RETURN_IF_ERROR(CheckAt(source, entry.second, field, CheckDataPath(path)));
      *(key == "train" ? data.mutable_train() : data.mutable_val()) = path;
      if (lines != nullptr) (*lines)[key] = YamlSource::Line(entry.second);
    } else if (key == "tokenizer") {
      RETURN_IF_ERROR(source.Mapping(entry.second, field));
      for (const auto& t : entry.second) {
        const auto tkey = t.first.Scalar();
        const auto tfield = absl::StrCat(field, ".", tkey);
        if (tkey == "type") {
          ASSIGN_OR_RETURN(const std::string type, source.Scalar(t.second, tfield));
          RETURN_IF_ERROR(CheckAt(source, t.second, tfield, CheckTokenizerType(type)));
        } else if (tkey == "vocab") {
          ASSIGN_OR_RETURN(const int64_t vocab, source.Int(t.second, tfield));
          RETURN_IF_ERROR(CheckAt(source, t.second, tfield, CheckVocab(vocab)));
          data.mutable_tokenizer()->set_vocab(static_cast<int32_t>(vocab));
        } else {
          return UnknownKey(source, t.first, tfield, {"type", "vocab"});
        }
      }
    } else {
      return UnknownKey(source, entry.first, field, {"train", "val", "tokenizer"});
    }
  }
  if (data.train().empty()) return source.Error(node, "data.train", "missing (the training text)");
  if (data.val().empty()) return source.Error(node, "data.val", "missing (the validation text)");
  // The worker's own check of the whole spec: any rule above this line missed fails here.
  if (absl::Status s = ValidateData(data); !s.ok()) return source.Error(node, "", s.message());
  return data;
}

DivergenceSpec DefaultDivergence() {
  DivergenceSpec d;
  d.set_loss_above_init_by(1.0);
  d.set_patience(50);
  return d;
}

absl::StatusOr<DivergenceSpec> ParseDivergence(const YamlSource& source, const YAML::Node& node) {
  RETURN_IF_ERROR(source.Mapping(node, "divergence"));
  DivergenceSpec d = DefaultDivergence();
  for (const auto& entry : node) {
    const auto key = entry.first.Scalar();
    const auto field = absl::StrCat("divergence.", key);
    if (key == "loss_above_init_by") {
      ASSIGN_OR_RETURN(const double margin, source.Double(entry.second, field));
      if (margin <= 0) return source.Error(entry.second, field, "must be positive");
      d.set_loss_above_init_by(margin);
    } else if (key == "patience") {
      ASSIGN_OR_RETURN(const int64_t patience, source.Int(entry.second, field));
      if (patience < 1) return source.Error(entry.second, field, "must be at least 1");
      d.set_patience(patience);
    } else {
      return UnknownKey(source, entry.first, field, {"loss_above_init_by", "patience"});
    }
  }
  return d;
}

absl::StatusOr<ThresholdSpec> ParseThreshold(const YamlSource& source, const YAML::Node& node) {
  RETURN_IF_ERROR(source.Mapping(node, "threshold"));
  ThresholdSpec t;
  for (const auto& entry : node) {
    const auto key = entry.first.Scalar();
    const auto field = absl::StrCat("threshold.", key);
    if (key != metric::kTrainLoss) {
      return UnknownKey(source, entry.first, field, {metric::kTrainLoss});
    }
    ASSIGN_OR_RETURN(const double loss, source.Double(entry.second, field));
    if (loss <= 0) return source.Error(entry.second, field, "must be positive");
    t.set_train_loss(loss);
  }
  return t;
}

// One `setting: value` (under fixed:, or top level in a run file) into `config`.
absl::Status ParseSetting(const YamlSource& source, const YAML::Node& key, const YAML::Node& value,
                          const std::string& prefix, ablate::v1::RunConfig* config) {
  const auto name = key.Scalar();
  const auto field = absl::StrCat(prefix, name);
  const auto* setting = FindSetting(name);
  if (setting == nullptr) {
    return source.Error(
        key, field,
        absl::StrCat("unknown setting '", name, "'", util::DidYouMean(name, SettingNames())));
  }
  if (value.IsSequence() || value.IsMap()) {
    return source.Error(value, field,
                        prefix.empty() ? "a single-run file takes one value per setting (grids "
                                         "belong in a sweep file)"
                                       : "expected a single value (lists belong under grid:)");
  }
  ASSIGN_OR_RETURN(const std::string text, source.Scalar(value, field));
  auto canonical = CanonicalValue(setting, text);
  if (!canonical.ok()) return source.Error(value, field, canonical.status().message());
  SetSetting(config, setting, *canonical);
  return absl::OkStatus();
}

// `walk`: expand and validate every run (a file ParseSweep accepted before skips it).
absl::Status ParseSweepBody(const YamlSource& source, const YAML::Node& root, const Limits& limits,
                            bool walk, SweepSpec* sweep) {
  if (!root.IsMap()) {
    return source.Error(root, "",
                        "a sweep file is a mapping with keys name, data, fixed, grid, ...");
  }
  RETURN_IF_ERROR(source.Mapping(root, ""));
  sweep->data.Clear();
  sweep->divergence = DefaultDivergence();
  sweep->keep_final = true;
  sweep->grid_line = 1;
  bool has_name = false, has_data = false;
  int refine_axis_line = 0, refine_seeds_line = 0, prune_line = 0;
  AnalysisLines analysis_lines;
  for (const auto& entry : root) {
    const auto key = entry.first.Scalar();
    const YAML::Node& value = entry.second;
    if (key == "name") {
      ASSIGN_OR_RETURN(sweep->name, source.Scalar(value, key));
      RETURN_IF_ERROR(CheckName(source, value, sweep->name));
      has_name = true;
    } else if (key == "description") {
      ASSIGN_OR_RETURN(sweep->description, source.Scalar(value, key, util::kMaxTextBytes));
    } else if (key == "data") {
      ASSIGN_OR_RETURN(sweep->data, ParseData(source, value, &sweep->data_lines));
      has_data = true;
    } else if (key == "fixed") {
      if (value.IsNull()) continue;
      RETURN_IF_ERROR(source.Mapping(value, key));
      for (const auto& setting : value) {
        RETURN_IF_ERROR(
            ParseSetting(source, setting.first, setting.second, "fixed.", &sweep->fixed));
        sweep->fixed_lines[setting.first.Scalar()] = YamlSource::Line(setting.first);
      }
    } else if (key == "grid") {
      sweep->grid_line = YamlSource::Line(entry.first);
      if (value.IsNull()) continue;
      RETURN_IF_ERROR(source.Mapping(value, key));
      for (const auto& axis : value) {
        ASSIGN_OR_RETURN(Axis parsed, ParseAxis(source, axis.first, axis.second, limits.max_runs));
        sweep->grid.push_back(std::move(parsed));
      }
    } else if (key == "order") {
      ASSIGN_OR_RETURN(const std::string order, source.Scalar(value, key));
      if (order == "grid") {
        sweep->order = Order::kGrid;
      } else if (order == "coarse_to_fine") {
        sweep->order = Order::kCoarseToFine;
      } else {
        return source.Error(value, key,
                            absl::StrCat("'", order, "' is not one of grid|coarse_to_fine",
                                         util::DidYouMean(order, {"grid", "coarse_to_fine"})));
      }
    } else if (key == "divergence") {
      ASSIGN_OR_RETURN(sweep->divergence, ParseDivergence(source, value));
    } else if (key == "threshold") {
      ASSIGN_OR_RETURN(sweep->threshold, ParseThreshold(source, value));
    } else if (key == "max_attempts") {
      ASSIGN_OR_RETURN(const int64_t attempts, source.Int(value, key));
      if (attempts < 1 || attempts > 100) {
        return source.Error(value, key, "must be between 1 and 100");
      }
      sweep->max_attempts = static_cast<int>(attempts);
    } else if (key == "priority") {
      ASSIGN_OR_RETURN(const int64_t priority, source.Int(value, key));
      if (priority < -1000000 || priority > 1000000) {
        return source.Error(value, key, "must be between -1000000 and 1000000");
      }
      sweep->priority = static_cast<int>(priority);
    } else if (key == "keep_final") {
      ASSIGN_OR_RETURN(const std::string text, source.Scalar(value, key));
      std::string lower = text;
      for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower == "true" || lower == "yes" || lower == "on") {
        sweep->keep_final = true;
      } else if (lower == "false" || lower == "no" || lower == "off") {
        sweep->keep_final = false;
      } else {
        return source.Error(value, key, absl::StrCat("expected true or false, got '", text, "'"));
      }
    } else if (key == "refine") {
      ASSIGN_OR_RETURN(sweep->refine,
                       ParseRefine(source, value, limits, &refine_axis_line, &refine_seeds_line));
    } else if (key == "prune") {
      ASSIGN_OR_RETURN(sweep->prune_above_divergence, ParsePrune(source, value));
      prune_line = YamlSource::Line(entry.first);
    } else if (key == "analysis") {
      ASSIGN_OR_RETURN(sweep->analysis, ParseAnalysis(source, value, &analysis_lines));
    } else if (key == "budget") {
      ASSIGN_OR_RETURN(sweep->budget, ParseBudget(source, value));
    } else if (FindSetting(key) != nullptr) {
      return source.Error(
          entry.first, key,
          absl::StrCat("'", key, "' is a run setting: put it under fixed: or grid:"));
    } else {
      return UnknownKey(source, entry.first, key, kSweepKeys);
    }
  }
  if (!has_name) return source.Error(root, "name", "missing (every sweep needs a name)");
  if (!has_data) return source.Error(root, "data", "missing (data: {train: ..., val: ...})");
  for (const auto& axis : sweep->grid) {
    auto it = sweep->fixed_lines.find(axis.name);
    if (it != sweep->fixed_lines.end()) {
      return source.Error(
          axis.line, absl::StrCat("grid.", axis.name),
          absl::StrCat("also set under fixed: (line ", it->second, "); give it in one place"));
    }
  }
  if (sweep->refine) {
    const std::string& name = sweep->refine->axis();
    const auto axis = std::find_if(sweep->grid.begin(), sweep->grid.end(),
                                   [&](const Axis& a) { return a.name == name; });
    if (name == "seed") {
      return source.Error(refine_axis_line, "refine.axis",
                          "the seed axis cannot be refined (seeds are not a continuum)");
    }
    if (axis == sweep->grid.end()) {
      return source.Error(refine_axis_line, "refine.axis",
                          absl::StrCat("'", name, "' is not a grid axis"));
    }
    if (!axis->log_spaced) {
      return source.Error(
          refine_axis_line, "refine.axis",
          absl::StrCat("grid.", name, " (line ", axis->line,
                       ") is not a log-spaced decimal axis: refinement bisects geometrically, so "
                       "write it as {logspace: ...} or a list of positive decimals with equal "
                       "ratios"));
    }
    if (axis->values.size() < 2) {
      return source.Error(refine_axis_line, "refine.axis",
                          absl::StrCat("grid.", name, " has one value: nothing to bracket"));
    }
    RETURN_IF_ERROR(CheckRefineSeeds(source, *sweep, refine_seeds_line));
  }
  if (sweep->prune_above_divergence &&
      std::none_of(sweep->grid.begin(), sweep->grid.end(), [&](const Axis& a) {
        return a.name == (sweep->refine ? sweep->refine->axis() : std::string("lr"));
      })) {
    return source.Error(prune_line, "prune.above_divergence",
                        "needs a learning-rate grid axis (lr, or refine.axis) to prune along");
  }
  RETURN_IF_ERROR(CheckAnalysisAgainstGrid(source, *sweep, analysis_lines));
  if (!walk) return absl::OkStatus();
  // Expansion is where per-run problems (n_embd % n_head, warmup > steps) surface; do it now so
  // a bad file is refused at submit, not when a worker picks up the bad run.
  return ForEachRun(*sweep, limits, [](ablate::v1::RunSpec&&) { return absl::OkStatus(); });
}

}  // namespace

absl::Status CheckFileName(std::string_view file_name) {
  return util::CheckText("file_name", absl::string_view(file_name.data(), file_name.size()),
                         kMaxFileNameBytes);
}

absl::StatusOr<SweepSpec> ParseSweep(std::string_view yaml, std::string_view file_name,
                                     const Limits& limits) {
  RETURN_IF_ERROR(CheckFileName(file_name));
  const YamlSource source{std::string(file_name)};
  ASSIGN_OR_RETURN(const YAML::Node root, source.Load(std::string(yaml)));
  SweepSpec sweep;
  sweep.file_name = std::string(file_name);
  RETURN_IF_ERROR(source.CatchYaml(
      [&] { return ParseSweepBody(source, root, limits, limits.check_runs, &sweep); }));
  return sweep;
}

absl::StatusOr<SweepSpec> ParseStoredSweep(std::string_view yaml, std::string_view file_name) {
  RETURN_IF_ERROR(CheckFileName(file_name));
  const YamlSource source{std::string(file_name)};
  ASSIGN_OR_RETURN(const YAML::Node root, source.Load(std::string(yaml)));
  SweepSpec sweep;
  sweep.file_name = std::string(file_name);
  Limits unbounded;
  unbounded.max_runs = std::numeric_limits<int64_t>::max();
  RETURN_IF_ERROR(
      source.CatchYaml([&] { return ParseSweepBody(source, root, unbounded, false, &sweep); }));
  return sweep;
}

absl::StatusOr<RunSpec> ParseRunFile(std::string_view yaml, std::string_view file_name) {
  RETURN_IF_ERROR(CheckFileName(file_name));
  const YamlSource source{std::string(file_name)};
  ASSIGN_OR_RETURN(const YAML::Node root, source.Load(std::string(yaml)));
  RunSpec run;
  RETURN_IF_ERROR(source.CatchYaml([&]() -> absl::Status {
    if (!root.IsMap()) {
      return source.Error(root, "", "a run file is a mapping of settings (lr: 0.001, ...)");
    }
    RETURN_IF_ERROR(source.Mapping(root, ""));
    *run.mutable_divergence() = DefaultDivergence();
    std::map<std::string, int> lines;
    bool has_data = false;
    for (const auto& entry : root) {
      const auto key = entry.first.Scalar();
      lines[key] = YamlSource::Line(entry.first);
      if (key == "name") {
        ASSIGN_OR_RETURN(*run.mutable_sweep_name(), source.Scalar(entry.second, key));
        RETURN_IF_ERROR(CheckName(source, entry.second, run.sweep_name()));
      } else if (key == "description") {
        RETURN_IF_ERROR(source.Scalar(entry.second, key, util::kMaxTextBytes).status());
      } else if (key == "data") {
        ASSIGN_OR_RETURN(*run.mutable_data(), ParseData(source, entry.second));
        has_data = true;
      } else if (key == "divergence") {
        ASSIGN_OR_RETURN(*run.mutable_divergence(), ParseDivergence(source, entry.second));
      } else if (key == "threshold") {
        ASSIGN_OR_RETURN(*run.mutable_threshold(), ParseThreshold(source, entry.second));
      } else if (FindSetting(key) != nullptr) {
        RETURN_IF_ERROR(ParseSetting(source, entry.first, entry.second, "", run.mutable_config()));
      } else {
        std::vector<std::string> candidates = kRunFileSections;
        candidates.insert(candidates.end(), SettingNames().begin(), SettingNames().end());
        return UnknownKey(source, entry.first, key, candidates);
      }
    }
    if (!has_data) return source.Error(root, "data", "missing (data: {train: ..., val: ...})");
    ApplyDefaults(run.mutable_config());
    if (auto problem = FindConfigProblem(run.config())) {
      for (const auto& field : problem->fields) {
        auto it = lines.find(field);
        if (it != lines.end()) return source.Error(it->second, field, problem->message);
      }
      return source.Error(1, absl::StrCat(problem->fields[0], " (default)"), problem->message);
    }
    (*run.mutable_grid_values())["seed"] = absl::StrCat(run.config().seed());
    run.set_cell(CellKey(run.grid_values()));
    return absl::OkStatus();
  }));
  return run;
}

}  // namespace ablate::sweep
