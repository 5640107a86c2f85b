// FormatTable (terminal) and FormatMarkdown (report.md): the same tables, two renderings.
#include "absl/strings/str_cat.h"
#include "common/report/report.h"
#include "common/report/tables.h"

namespace ablate::report {

using analysis::Analysis;

std::string FormatTable(const Analysis& a, int width) {
  std::string out;
  for (const auto& note : a.notes) out += WrapText(absl::StrCat("note: ", note), width);
  for (const auto& m : a.mixed) out += WrapText(absl::StrCat("mixed: ", m.Line()), width);
  if (!a.notes.empty()) out += "\n";
  out += RenderText(SummaryTable(a), width);
  if (const std::string line = UncertaintyLine(a); !line.empty()) out += WrapText(line, width);
  if (!a.necessity.empty()) {
    out += "\n";
    out += RenderText(NecessityTable(a), width);
  }
  out += "\n";
  out += RenderText(BoundaryTable(a), width);
  if (!a.verdicts.empty()) out += "\n";
  for (const auto& v : a.verdicts) out += WrapText(VerdictLine(v), width);
  return out;
}

std::string FormatMarkdown(const Analysis& a, const ReportOptions& options,
                           const std::vector<std::string>& figures,
                           const std::vector<std::string>& captions) {
  const auto& o = a.options;
  std::string out = absl::StrCat("# ", options.title.empty() ? "ablate report" : options.title,
                                 a.partial ? " (partial)" : "", "\n\n");
  absl::StrAppend(&out, a.finished, " of ", a.runs + a.absent, " runs finished (", a.diverged,
                  " diverged). Variant: `", o.variant_axis, "` (baseline `", a.baseline,
                  "`), moderator: `", o.moderator_axis, "`, LR axis: `", o.lr_axis,
                  "`. LR sensitivity over [", o.lr_min, ", ", o.lr_max, "], tau = ", o.tau,
                  ", delta = max(", o.delta_floor,
                  ", 2 x seed std of the non-diverged seeds, pooled over both variants). "
                  "Diverged runs count as the initial loss l0.\n\n");
  if (a.refined > 0 || a.inferred > 0) {
    absl::StrAppend(&out, a.refined,
                    " runs are at LRs the sweep's refinement added (marked [refined rK]); they "
                    "enter every boundary and figure as the grid's LRs do. ",
                    a.inferred,
                    " runs were skipped above divergence and count as diverged at l0 "
                    "(inferred, hollow markers).\n\n");
  }
  for (const auto& note : a.notes) absl::StrAppend(&out, "> **Note:** ", note, "\n>\n");
  if (!a.notes.empty()) out += "\n";
  if (!a.mixed.empty()) {
    out +=
        "## Mixed runs\n\nThese cells and comparisons rest on runs that differ in device kind, "
        "dtype, torch version or tokenizer; their differences may be the hardware's, not the "
        "variant's. Figures marked [mixed] below are among them.\n\n";
    for (const auto& m : a.mixed) absl::StrAppend(&out, "- ", m.Line(), "\n");
    out += "\n";
  }

  if (!a.verdicts.empty()) {
    out += "## Verdicts\n\n";
    for (const auto& v : a.verdicts)
      absl::StrAppend(&out, "- **", v.outcome, "** — ", VerdictLine(v), "\n");
    out += "\n";
  }
  out += "## Summary per curve\n\n";
  out += RenderMarkdown(SummaryTable(a));
  out += "\n";
  if (const std::string line = UncertaintyLine(a); !line.empty()) absl::StrAppend(&out, line, ". ");
  out +=
      "LR sens.: the mean of min(loss, l0) - loss* over the LR range in log LR, the finished "
      "LRs joined and the end values carried flat (cov: the share of the range they span, when "
      "not all of it); LRS (paper): Wortsman et al.'s estimator, the plain mean over the "
      "half-decade grid 3e-4, 1e-3, ..., 0.3 within the range.";
  bool clamped = false;
  for (const auto& c : a.curves) clamped |= c.opt_clamped;
  if (clamped) {
    out +=
        " (clamped): the fitted loss* fell more than two standard errors below the best "
        "measured mean and was raised to that bound.";
  }
  out += "\n";
  if (!a.necessity.empty()) {
    absl::StrAppend(&out, "\n## Necessity threshold (eta-dagger) per ", o.moderator_axis,
                    "\n\nnever: never necessary over every LR both variants finished; not up to "
                    "X: the comparison stopped at X, above which the variant trains no good model "
                    "(censored); an interval's end reads never where too many resamples had no "
                    "eta-dagger.\n\n");
    out += RenderMarkdown(NecessityTable(a));
  }
  out +=
      "\n## Boundaries as brackets\n\nEach boundary lies between two tried LRs; the ratio "
      "hi/lo is how sharply the runs locate it (refinement narrows it). [unresolved by budget]: "
      "the sweep refines this boundary, but its bracket is still wider than until_ratio because "
      "the refinement budget (max_new_runs) ran out.\n\n";
  out += RenderMarkdown(BoundaryTable(a));
  absl::StrAppend(&out,
                  "\n## Final validation loss vs LR\n\nMean ± sample std over finished seeds (n), "
                  "and the mean's ",
                  100 * (1 - o.alpha),
                  "% t-interval [lo, hi] from the curve's seed spread pooled over its LRs.\n");
  for (const auto& context : a.contexts) {
    for (const auto& m : a.moderators) {
      const Table t = LossTable(a, context, m);
      if (t.rows.empty()) continue;
      absl::StrAppend(&out, "\n### ", o.moderator_axis, " = ", m,
                      context.empty() ? "" : absl::StrCat(" (", context, ")"), "\n\n");
      out += RenderMarkdown(t);
    }
  }
  bool probes_header = false;
  for (const auto& context : a.contexts) {
    for (const auto& m : a.moderators) {
      const Table t = ProbeTable(a, context, m);
      if (t.rows.empty()) continue;
      if (!probes_header) {
        out +=
            "\n## Final probes vs LR\n\nMeasured at the last probe step, averaged over finished "
            "seeds (diverged runs included where the probe was finite).\n";
        probes_header = true;
      }
      absl::StrAppend(&out, "\n### ", o.moderator_axis, " = ", m,
                      context.empty() ? "" : absl::StrCat(" (", context, ")"), "\n\n");
      out += RenderMarkdown(t);
    }
  }
  if (!figures.empty()) {
    out +=
        "\n## Figures\n\nEach PNG has a PDF, the gnuplot script (.gp) and the data (.dat) "
        "beside it.\n\n";
    for (size_t i = 0; i < figures.size(); ++i) {
      absl::StrAppend(&out, "![", figures[i], "](", figures[i], ")\n\n");
      if (i < captions.size() && !captions[i].empty()) {
        absl::StrAppend(&out, "*", captions[i], "*\n\n");
      }
    }
  }
  return out;
}

}  // namespace ablate::report
