// The rows behind the terminal table and report.md, built once and rendered either way.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/analysis/analysis.h"

namespace ablate::report {

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  // How RenderText fits a terminal narrower than the table: the first `keys` columns name a row
  // and start every block the other columns are split into; with `detail`, the last column (a
  // sentence a row) becomes a note under the table ("[1]" in the column, "[1] ..." below).
  int keys = 0;
  bool detail = false;
  std::vector<bool> right;  // per column: right-aligned (numbers); empty: every column left
  bool rule = true;         // a line of "-" under the header
};

// "%.4g", or `none` for a figure that does not exist.
std::string Fmt(const std::optional<double>& x, const char* none = "none");

// " [mixed: device kind, dtype]" after a figure that rests on mixed runs; "" when uniform.
std::string MixedMark(const std::vector<std::string>& differs);

// One row per curve: η*, ℓ*, perplexity, LR sensitivity (ours and Wortsman et al.'s estimator),
// max stable/good LR, steps, seeds; each figure with its seed-bootstrap interval "[lo, hi]"
// when it has one; with a "mixed" column (what differs among the curve's runs) when anything is
// mixed.
Table SummaryTable(const analysis::Analysis& a);

// One row per η† (context, moderator, variant vs baseline) with its interval: a value, "never"
// (never necessary over every LR both variants finished), "not up to X" or "no comparison"
// (censored); with the fewest seeds at the LRs that decide it (Necessity::seeds).
Table NecessityTable(const analysis::Analysis& a);

// A verdict's line, the fewest seeds at the points it rests on and the test that decided it:
// "... [seeds: 3] [test: Holm over 6 tests (...); p = 0.003, alpha 0.05]" (no p when the test
// could not run).
std::string VerdictLine(const analysis::Verdict& v);

// What the summary's and η† table's "[lo, hi]" are: "intervals: 95% seed-bootstrap percentile
// intervals, 1000 resamples, seed 20261203 (docs/report.md#uncertainty)"; "" when no figure has
// one (no resamples, or no seed spread to resample).
std::string UncertaintyLine(const analysis::Analysis& a);

// Every boundary as a bracket: per curve max stable LR and max good LR, per η† row the two
// compared LRs it lies between; "(lo, hi)" and hi/lo ("open" when the boundary is the largest LR
// tried, so no LR above it bounds it).
Table BoundaryTable(const analysis::Analysis& a);

// Loss vs LR for one context and moderator: a row per LR, a column per variant.
Table LossTable(const analysis::Analysis& a, const std::string& context,
                const std::string& moderator);

// Final probes vs LR for one context and moderator: a row per (variant, LR), a column per
// probe (means over finished seeds). No rows when no run reported probes.
Table ProbeTable(const analysis::Analysis& a, const std::string& context,
                 const std::string& moderator);

// Space-aligned columns. With `width` > 0 and a table wider than that, every line fits it: the
// detail column's sentences move under the table as numbered notes, the other columns are split
// into blocks of whole columns that fit (each led by the key columns, as pandas prints a wide
// frame), and a column too wide even alone wraps its cells at spaces. 0: one line a row.
std::string RenderText(const Table& t, int width = 0);
std::string RenderMarkdown(const Table& t);  // GitHub table

// `text` (one line) word-wrapped at `width` columns (code points), continuation lines indented
// by `indent`; a word longer than a line is broken across lines. `width` 0: `text` as it is.
// Ends in a newline.
std::string WrapText(const std::string& text, int width, int indent = 2);
}  // namespace ablate::report
