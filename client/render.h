// Terminal rendering for the CLI: aligned tables, progress bars, durations, run states.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "common/run/run_state.h"

namespace ablate::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Columns padded to their widest cell; numeric-looking cells right-aligned. Control characters
  // in a cell are escaped (util::Printable), so no cell can drive the terminal or add a row.
  std::string Render() const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string StateName(v1::RunState state);         // "queued", "running", ...
std::string Bar(double fraction, int width);       // [#######.....]
std::string Duration(double seconds);              // "1h02m", "3m05s", "12s", "0.4s", "-"
std::string Num(double value, int precision = 4);  // %.{p}g, "-" for NaN
std::string TimeAgo(double unix_seconds);
// Why an active sweep cannot progress now ("budget reached", "no live worker", ...: what follows
// "held: " in its eta_basis, the server's word); "" when it can (or it is not active).
std::string HeldReason(const v1::Sweep& sweep);
// The sweep's state as a person reads it: the held reason for an active sweep held (its budget
// reached, no worker that can run it), else its state. `compact`: at most 14 columns.
std::string SweepStateLabel(const v1::Sweep& sweep, bool compact);
// `value` with `decimals` decimals, except that a nonzero value below the last decimal's step
// (10^-decimals), which would print as 0 or as that one step, has 3 significant digits, trailing
// zeros dropped: Fixed(1.234, 2) "1.23", Fixed(0.00312, 2) "0.00312", Fixed(0.003, 2) "0.003",
// Fixed(0.4, 0) "0.4". The one rule for every figure the CLI prints (GPU-hours, dollars,
// seconds), so a small figure never reads 0.
std::string Fixed(double value, int decimals);
// "12/32 done, 2 running, ..."; with `color`, each state's count in its state's colour.
// The counts by state name, live states first (running, leased, queued, then the finished ones).
std::vector<std::pair<const char*, int>> CountsByState(const v1::SweepCounts& counts);
std::string CountsLine(const v1::SweepCounts& counts, bool color = false);
// `text` in the colour of run state `state` ("running", "failed", ...) as an ANSI SGR sequence.
std::string Colored(const std::string& state, const std::string& text);
// Whether stdout gets colour: a terminal, and NO_COLOR unset or empty (https://no-color.org).
bool UseColor();
// The terminal's width and height in columns and rows (stdout), else $COLUMNS / $LINES, else
// 80 x 24.
std::pair<int, int> TerminalSize();
// Columns `s` takes on a terminal: ANSI SGR sequences none, a UTF-8 character one.
int VisibleWidth(const std::string& s);
// `line` cut to at most `width` visible columns (ANSI SGR sequences take none, a UTF-8
// character one), ending in "~" when cut; a colour left open is reset.
std::string FitWidth(const std::string& line, int width);
// "refine lr (max_stable, eta_dagger) until ratio 1.3: 12 of 96 new runs, round 3"
std::string RefineLine(const v1::RefineStatus& refine);
// Run-state predicates live in common/run/run_state.h; kept visible here for CLI code.
using util::IsTerminal;
// `ablate ls`: one row a sweep. Compact (the default) fits 80 columns: a long name is cut ("~"),
// progress is a short bar and done/total. `wide`: the whole name and every count.
std::string SweepsTable(const std::vector<v1::Sweep>& sweeps, bool wide);
// What the fleet does to a sweep's runs, when anything: "3 queued runs fit no live worker (they
// wait for a device with more memory)", "held: 1 queued run waits for a worker it has not failed
// on (at most 9m50s more)", "preempted 2, worker faults 5 (requeued)". Empty when the counts are
// all 0.
std::vector<std::string> FleetLines(const v1::SweepCounts& counts);
// A grid value short enough to read at a glance: a non-integer number with more than `digits`
// significant digits is cut to `digits` ("0.0316228" -> "0.0316", "0.001" stays); anything else
// (integers, names) as written.
std::string ShortValue(const std::string& text, int digits = 3);
// One label a run of `runs` (same order) naming its cell by what tells the rows apart: the axes
// whose values differ among the runs, in `axes` order (the sweep's file order), seed left out,
// "lr=0.0316,qk_norm=rms"; what every run shares (a one-value axis, n_layer=1) is dropped.
// Numbers read at 3 significant digits, more on an axis whose values 3 would not tell apart.
// Runs that all share one cell keep the whole cell key.
std::vector<std::string> CellLabels(const google::protobuf::RepeatedPtrField<v1::Run>& runs,
                                    const google::protobuf::RepeatedPtrField<std::string>& axes);
// One frame of `ablate watch` on a terminal of `width` x `height`, every line at most `width`
// columns: the sweep; the summary (bar, percent, ETA, every count, the fleet's preemptions and
// unfittable runs), wrapped onto more lines rather than cut; then a line per active run whose
// columns stay put as runs come and go (the ID padded to the sweep's widest, the seed and the
// cell's label (CellLabels, padded) before the worker, which takes the cut).
std::vector<std::string> WatchFrame(const v1::SweepUpdate& update, const std::string& eta_text,
                                    int width, int height, bool color);
// Cost (client/render_cost.cc; docs/architecture.md#cost).
std::string GpuHours(double device_seconds);  // "0.52 GPU-h", "12.3 GPU-h", "0.003 GPU-h", "-"
std::string Usd(double usd);                  // "$0.43", "$1,234", "$0.0042", "-" when negative
// What a sweep's runs were charged: "spent 1.23 GPU-h, $0.43" then one line per device class
// ("  cuda NVIDIA GeForce RTX 4090  3 runs (1 running)  1.00 GPU-h  $0.35"). Empty before any.
std::vector<std::string> CostLines(const v1::SweepCost& cost, bool per_class);
// "budget 40 GPU-h: spent 1.23, running runs ~0.30 more; next run ~0.05, 25 may start now" or
// "budget reached: ..." naming the command that raises it.
std::string BudgetLine(const v1::Budget& budget, const std::string& sweep_ref);
// `ablate estimate`: the per-class table, the fleet's wall time and cost, the budget's fit, notes.
std::string EstimateText(const std::string& name, const v1::SweepEstimate& estimate);

// Proto -> one-line JSON (field names as in the proto). Run states are lower case, as in the
// tables and as sweep states are ("succeeded", "active"); a run id of 0 ("no run", e.g. an idle
// worker's current_run_id) is left out rather than printed as "0".
std::string ToJson(const google::protobuf::Message& message);
double Now();

}  // namespace ablate::cli
