// Turning an Analysis into what people read: a terminal table, Markdown, JSON, CSV files and
// gnuplot figures (PNG + PDF, each with the .gp script and .dat data that drew it, so a figure
// can be restyled for a paper without re-running anything).
//
// Used by `ablate report SWEEP [--out DIR] [--format table|md|json]` and
// `ablate report --from EXPORT_DIR`. No server, no torch; WriteReport runs gnuplot if present.
#pragma once

#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "common/analysis/analysis.h"

namespace ablate::report {

struct ReportOptions {
  std::string title;                // e.g. the sweep name; "ablate report" when empty
  bool figures = true;              // false: no .gp/.dat/.png/.pdf at all
  std::string gnuplot = "gnuplot";  // program name (searched in PATH) or path
};

struct WrittenReport {
  std::vector<std::string> files;     // paths written, relative to out_dir
  std::vector<std::string> warnings;  // e.g. "gnuplot not found: ..."; the rest was still written
};

// Writes report.md, runs.csv, cells.csv and the figures into out_dir (created if needed).
// `runs` are the runs `analysis` was computed from (runs.csv lists each of them).
absl::StatusOr<WrittenReport> WriteReport(const analysis::Analysis& analysis,
                                          const std::vector<ablate::v1::Run>& runs,
                                          const ReportOptions& options, const std::string& out_dir);

// Fixed-width summary for a terminal: notes, verdicts, one row per curve, η† per moderator.
// `width` > 0: every line fits that many columns (tables split into blocks of columns, η†'s
// "how" moved under its table, sentences wrapped; tables.h RenderText); 0: a row a line.
std::string FormatTable(const analysis::Analysis& analysis, int width = 0);

// report.md's text. `figures` are image paths to link (relative to the markdown file);
// `captions`, when given, one per figure, are printed under them (a figure's title lives there,
// not in the plot).
std::string FormatMarkdown(const analysis::Analysis& analysis, const ReportOptions& options,
                           const std::vector<std::string>& figures = {},
                           const std::vector<std::string>& captions = {});

// Every figure of the analysis as one JSON document (nulls for figures that do not exist), keys
// in alphabetical order; each interval an explicit "<figure>_ci": [lo, hi], with "uncertainty"
// saying how they were drawn.
std::string FormatJson(const analysis::Analysis& analysis);

// One row per run: id, each grid axis under its name, state, l0, final train/val loss, diverged
// step, steps-to-threshold, each final probe.
std::string RunsCsv(const std::vector<ablate::v1::Run>& runs);

// The study's cost per device class, from the runs' charged usage (Run.usage): a Markdown
// section ("## Cost") or a terminal table (within `width` columns when > 0, as FormatTable);
// empty when no run was charged (an export from before cost was recorded).
std::string CostTable(const std::vector<ablate::v1::Run>& runs, bool markdown, int width = 0);

// One row per context x variant x moderator x LR, with the mean's t-interval (loss_ci_lo/hi).
std::string CellsCsv(const analysis::Analysis& analysis);

}  // namespace ablate::report
