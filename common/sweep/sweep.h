// Sweep files and single-run files: YAML -> validated protos, and grid expansion.
//
// Pure logic: no server, no torch, no file system (callers read the file and pass its text).
// Every error names the file, the line and the field, e.g.
//   "sweep.yaml:7: grid.n_head: n_embd (256) is not divisible by n_head (3)".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ablate::sweep {

// One grid axis: a RunConfig setting (or "seed") and its values in file order.
struct Axis {
  std::string name;
  std::vector<std::string> values;  // canonical text of each value, e.g. "0.001", "layernorm"
  int line = 0;                     // 1-based line of the axis in the file
  // {logspace: ...}, or a list of at least 2 positive decimals with equal ratios (within 10 % of
  // the log step): an axis `refine:` may bisect geometrically.
  bool log_spaced = false;
};

enum class Order { kGrid, kCoarseToFine };

// `analysis:` (docs/sweep-file.md#analysis-options): the analysis options the server plans
// refinement and pruning with, and `ablate report`'s defaults, so both bracket the same
// boundaries. Unset fields keep ablate::analysis::Options' defaults (common/analysis/refine.h,
// PlanningOptions, maps them).
struct AnalysisSettings {
  std::optional<double> tau;     // max good LR's tolerance, in (0, 1)
  std::optional<double> delta;   // η†'s δ floor in nats, >= 0
  std::optional<double> lr_min;  // LR sensitivity's range, within the grid's LRs
  std::optional<double> lr_max;
  std::optional<std::string> variant;  // the axis compared (a grid axis)
  std::optional<std::string> by;       // the moderator axis (a grid axis)
};

struct SweepSpec {
  std::string name;
  std::string file_name;
  std::string description;
  ablate::v1::DataSpec data;
  ablate::v1::RunConfig fixed;  // settings as written under `fixed:` (defaults not applied)
  std::vector<Axis> grid;       // file order
  Order order = Order::kGrid;
  ablate::v1::DivergenceSpec divergence;
  ablate::v1::ThresholdSpec threshold;
  int max_attempts = 3;
  int priority = 0;
  // Upload each finished run's final checkpoint so `ablate artifacts get` can fetch the weights
  // (RunSpec.keep_final); false keeps nothing beyond the periodic resume checkpoints.
  bool keep_final = true;
  // `refine:` (docs/sweep-file.md#refinement-and-pruning): axis, boundaries, until_ratio,
  // max_new_runs; new_runs/rounds stay 0 here (the server counts them).
  std::optional<ablate::v1::RefineStatus> refine;
  bool prune_above_divergence = false;  // `prune: {above_divergence: true}`
  AnalysisSettings analysis;            // `analysis:`
  // `budget:` (docs/sweep-file.md#budgets): gpu_hours or usd set (at most kMaxBudget), the
  // figures left 0.
  std::optional<ablate::v1::Budget> budget;
  // Where things were written, so Expand's errors can name a line (0 = not from a file).
  std::map<std::string, int> fixed_lines;  // setting under `fixed:` -> its line
  int grid_line = 0;                       // the `grid:` key (or 1 when absent)
  // data.train and data.val -> the line of their value, so checks made after parsing (the
  // server's --data-dir lookup) name the line too.
  std::map<std::string, int> data_lines;
};

// The largest budget limit (GPU-hours or US dollars) a sweep file or one raise may give.
inline constexpr double kMaxBudget = 1e9;

// Longest file name accepted: it prefixes every error message and is stored with the sweep.
inline constexpr size_t kMaxFileNameBytes = 1024;

// file_name: at most kMaxFileNameBytes, no NUL, valid UTF-8 (INVALID_ARGUMENT naming file_name).
absl::Status CheckFileName(std::string_view file_name);

struct Limits {
  int64_t max_runs = 100000;  // a grid larger than this is refused
  // ParseSweep walks the grid to check each run. False leaves that to the caller's own walk
  // (ForEachRun applies the same checks and the size limit, with the same errors): the server's
  // submit walks once, as it stores the runs, rather than twice.
  bool check_runs = true;
};

// Parses and validates a sweep file. Expansion is also checked (size, per-run validity) unless
// limits.check_runs is false.
absl::StatusOr<SweepSpec> ParseSweep(std::string_view yaml, std::string_view file_name,
                                     const Limits& limits = {});

// Re-reads a sweep file that ParseSweep accepted before (the server's stored spec_yaml): the same
// parse and checks, without walking the grid again and without a grid size limit, so re-reading
// a 100,000-run sweep costs what its text costs.
absl::StatusOr<SweepSpec> ParseStoredSweep(std::string_view yaml, std::string_view file_name);

// Expands the grid into run specs in the sweep's order: defaults applied, cell keys and
// grid_values set, run_id/sweep_id left 0. Fails if any run's config is invalid.
absl::StatusOr<std::vector<ablate::v1::RunSpec>> Expand(const SweepSpec& sweep,
                                                        const Limits& limits = {});

// How many runs the grid expands to (axes checked against `limits`; run configs not checked).
absl::StatusOr<int64_t> CountRuns(const SweepSpec& sweep, const Limits& limits = {});

// The same expansion as Expand, one run at a time: `sink` gets each run in order and may stop
// the walk by returning an error. Holds one RunSpec, so validating or streaming a 100,000-run
// grid costs kilobytes where Expand's vector costs ~150 MB.
using RunSink = std::function<absl::Status(ablate::v1::RunSpec&&)>;
absl::Status ForEachRun(const SweepSpec& sweep, const Limits& limits, const RunSink& sink);

// The run the grid expansion gives at one grid point: `grid_values` names a value for every grid
// axis (canonical text; seed included when the grid has a seed axis), which need not be one of
// the axis's listed values; refinement adds runs between grid LRs with it. The seed is the
// exception: one the seed axis does not list is refused unless the sweep has `refine.seeds`
// (extra seeds where a decision is within noise); without a seed axis, only the config's seed.
// The same code as ForEachRun builds each run with, so every derived setting
// (min_lr = lr x min_lr_ratio, ...) follows the point's own values. Errors name the file, the
// line and the field.
absl::StatusOr<ablate::v1::RunSpec> ExpandPoint(
    const SweepSpec& sweep, const google::protobuf::Map<std::string, std::string>& grid_values);

// The order in which `order: coarse_to_fine` visits the n values of the lr axis: both ends,
// the middle, then bisection level by level, rounding towards the nearer end so the sequence is
// symmetric; e.g. n = 7 -> 0, 6, 3, 1, 5, 2, 4.
std::vector<int> CoarseToFineOrder(int n);

// Parses a single-run file (`ablate-worker train RUN.yaml`): a sweep file with one value per
// setting, model and optimizer settings as top-level keys. Defaults applied, validated.
absl::StatusOr<ablate::v1::RunSpec> ParseRunFile(std::string_view yaml, std::string_view file_name);

// RunConfig's defaults, derivations and rules (ApplyDefaults, ValidateConfig): run_config.h.

// A run's data as a worker reads it (docs/sweep-file.md#data). Every rule a worker enforces on
// a DataSpec lives here, so the sweep parser (at submit) and the worker check the same thing.
// Messages name only the problem; callers prefix the field (and file and line).
inline constexpr int kDefaultVocab = 4096;  // a DataSpec's vocab 0 means this
// Byte fallback needs 259 ids (256 bytes and 3 specials); token files are uint16.
inline constexpr int kMinVocab = 260;
inline constexpr int kMaxVocab = 65535;
// synthetic:N asks workers to generate N stories (~400 bytes each); beyond a million the corpus
// would outgrow a worker's disk and memory long before it helped a small model.
inline constexpr int64_t kMaxSyntheticStories = 1000000;
absl::Status CheckVocab(int64_t vocab);
absl::Status CheckTokenizerType(const std::string& type);  // bpe (empty: bpe)
// A text path: not empty; `synthetic:N` with N from 1 to kMaxSyntheticStories.
absl::Status CheckDataPath(const std::string& path);

// Checks a DataSpec with the rules above; the message names the field, e.g.
// "data.tokenizer.vocab: must be between 260 and 65535, got 256 (...)". data.val may be empty
// (the worker then evaluates on the training text); sweep files require it.
absl::Status ValidateData(const ablate::v1::DataSpec& data);

// Every rule a worker enforces that depends on the spec alone: ValidateConfig (run_config.h; of
// the config as given, so defaults must be applied) and ValidateData. The worker calls it before
// training; ParseSweep and ParseRunFile apply the same checks with file and line.
absl::Status ValidateRunSpec(const ablate::v1::RunSpec& spec);

// The stable key of a cell: every grid value but the seed, "axis=value" joined by ",", axes in
// sorted order, so the same cell gets the same key whatever the file's axis order.
std::string CellKey(const google::protobuf::Map<std::string, std::string>& grid_values);

}  // namespace ablate::sweep
