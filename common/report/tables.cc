#include "common/report/tables.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/analysis/stats.h"

namespace ablate::report {

using analysis::Analysis;
using analysis::Curve;
using analysis::Point;

std::string Fmt(const std::optional<double>& x, const char* none) {
  return x ? absl::StrFormat("%.4g", *x) : std::string(none);
}

namespace {

const Point* PointAt(const Curve& c, const std::optional<double>& lr) {
  return lr ? c.PointAt(*lr) : nullptr;
}

std::string Steps(const Analysis& a, const Point* p) {
  if (!a.has_threshold) return "n/a";
  if (p == nullptr) return "-";
  return Fmt(p->steps_to_threshold, "never");
}

// After a boundary whose bracket the refinement budget left wider than until_ratio.
constexpr const char* kUnresolved = " [unresolved by budget]";

std::string Unresolved(bool unresolved) { return unresolved ? kUnresolved : ""; }

// After a figure that rests on skipped runs' ℓ0 (pruned, never measured).
std::string Inferred(int lrs) {
  return lrs == 0 ? "" : absl::StrCat(" (", lrs, lrs == 1 ? " LR" : " LRs", " inferred)");
}

std::string CurveStatus(const Curve& c) {
  int pending = 0, failed = 0, cancelled = 0, absent = 0;
  for (const auto& p : c.points) {
    pending += p.n_pending;
    failed += p.n_failed - p.n_cancelled;
    cancelled += p.n_cancelled;
    absent += p.n_absent;
  }
  if (c.complete) return "complete";
  std::vector<std::string> parts;
  if (pending) parts.push_back(absl::StrCat(pending, " pending"));
  if (failed) parts.push_back(absl::StrCat(failed, " failed"));
  if (cancelled) parts.push_back(absl::StrCat(cancelled, " cancelled"));
  if (absent) parts.push_back(absl::StrCat(absent, " missing"));
  return absl::StrCat("partial: ", absl::StrJoin(parts, ", "));
}

// The fewest seeds behind a figure's deciding LRs; "-" when it has none (no comparison).
std::string SeedsCell(int seeds) { return seeds > 0 ? absl::StrCat(seeds) : "-"; }

// A figure's seed-bootstrap interval, " [0.003162, 0.03162]" after its value; "" without
// resamples or an interval.
std::string Ci(const Analysis& a, const std::optional<analysis::Interval>& ci,
               bool zero_is_none = false) {
  return a.bootstrap_resamples > 0 ? analysis::IntervalText(ci, zero_is_none) : "";
}

// LR sensitivity, its interval, and the share of [lr_min, lr_max] the finished LRs span when
// they do not span all of it (the rest is the end values carried flat).
std::string SensitivityCell(const Analysis& a, const Curve& c) {
  std::string cell = absl::StrCat(Fmt(c.lr_sensitivity), Ci(a, c.lr_sensitivity_ci));
  if (c.lr_sensitivity && c.lr_sensitivity_coverage && *c.lr_sensitivity_coverage < 1 - 1e-9) {
    absl::StrAppend(&cell, absl::StrFormat(" (cov %.0f%%)", 100 * *c.lr_sensitivity_coverage));
  }
  return cell;
}

// η† without a value: "never" when the comparison covered every LR both variants finished,
// "not up to X" when it stopped at the treated variant's max good LR, else "no comparison".
std::string EtaDaggerValue(const analysis::Necessity& n) {
  if (n.eta_dagger) return Fmt(n.eta_dagger);
  if (!n.censored) return "never";
  return n.censored_at ? absl::StrCat("not up to ", Fmt(n.censored_at)) : "no comparison";
}

// A p-value as the verdicts print theirs.
std::string PValue(double p) {
  return p < 1e-4 ? std::string("< 0.0001") : absl::StrFormat("= %.2g", p);
}

}  // namespace

std::string VerdictLine(const analysis::Verdict& v) {
  std::string out = absl::StrCat(v.line, " [seeds: ", SeedsCell(v.seeds), "]");
  if (!v.test.empty()) {
    absl::StrAppend(&out, " [test: ", v.test, "; ",
                    v.p_value ? absl::StrCat("p ", PValue(*v.p_value), ", ") : "", "alpha ",
                    v.alpha, "]");
  }
  return out;
}

std::string UncertaintyLine(const Analysis& a) {
  if (a.bootstrap_resamples <= 0) return "";
  bool any = false;
  for (const auto& c : a.curves) {
    any |= c.opt_lr_ci || c.opt_loss_ci || c.lr_sensitivity_ci || c.max_stable_ci || c.max_good_ci;
  }
  for (const auto& n : a.necessity) any |= n.eta_dagger_ci.has_value();
  if (!any) return "";
  return absl::StrFormat(
      "intervals: %g%% seed-bootstrap percentile intervals, %d resamples, seed %d "
      "(docs/report.md#uncertainty)",
      100 * (1 - a.options.alpha), a.bootstrap_resamples, a.options.bootstrap_seed);
}

std::string MixedMark(const std::vector<std::string>& differs) {
  return differs.empty() ? "" : absl::StrCat(" [mixed: ", absl::StrJoin(differs, ", "), "]");
}

Table SummaryTable(const Analysis& a) {
  const auto& o = a.options;
  Table t;
  const bool contexts = a.contexts.size() > 1 || !a.contexts.front().empty();
  if (contexts) t.header.push_back("context");
  t.header.insert(t.header.end(), {o.variant_axis, o.moderator_axis, "eta*", "loss*", "ppl*",
                                   "LR sens.", "LRS (paper)", "max stable LR", "max good LR",
                                   "steps to thr. @best LR", "seeds", "status"});
  // Only a mixed fleet gets the column: a uniform sweep's table stays as narrow as before.
  const bool mixed = !a.mixed.empty();
  if (mixed) t.header.push_back("mixed");
  t.keys = contexts ? 3 : 2;  // context, variant, moderator
  for (const auto& c : a.curves) {
    std::vector<std::string> row;
    if (contexts) row.push_back(c.context);
    const Point* opt = PointAt(c, c.best_lr);
    row.insert(
        row.end(),
        {c.variant, c.moderator,
         absl::StrCat(Fmt(c.opt_lr), Ci(a, c.opt_lr_ci), Unresolved(c.opt_unresolved_by_budget)),
         absl::StrCat(Fmt(c.opt_loss), Ci(a, c.opt_loss_ci), c.opt_clamped ? " (clamped)" : ""),
         Fmt(c.opt_loss ? std::optional<double>(std::exp(*c.opt_loss)) : std::nullopt),
         absl::StrCat(SensitivityCell(a, c), Inferred(c.sensitivity_inferred)),
         Fmt(c.lr_sensitivity_paper),
         absl::StrCat(Fmt(c.max_stable_lr), Ci(a, c.max_stable_ci, /*zero_is_none=*/true),
                      Unresolved(c.max_stable_unresolved_by_budget)),
         absl::StrCat(Fmt(c.max_good_lr), Ci(a, c.max_good_ci, /*zero_is_none=*/true),
                      Unresolved(c.max_good_unresolved_by_budget)),
         Steps(a, opt), absl::StrCat(c.seeds), CurveStatus(c)});
    if (mixed) row.push_back(c.mixed.empty() ? "-" : absl::StrJoin(c.mixed, ", "));
    t.rows.push_back(std::move(row));
  }
  return t;
}

Table NecessityTable(const Analysis& a) {
  Table t;
  t.header = {"context", a.options.moderator_axis, "variant", "eta-dagger", "seeds", "how"};
  t.keys = 3;
  t.detail = true;  // "how": a sentence a row, under the table where it does not fit
  for (const auto& n : a.necessity) {
    std::string how;
    if (n.eta_dagger) {
      how = absl::StrCat(n.interpolated ? "interpolated" : "at a grid LR", ": ", n.detail);
    } else if (!n.censored) {
      how = absl::StrCat("never necessary: ", n.detail);
    } else {
      // The reason the comparison stopped, then the numbers where it did when they say more.
      how = absl::StrCat("censored: ", n.censor_reason,
                         n.detail == n.censor_reason ? "" : absl::StrCat("; ", n.detail));
    }
    // How often a resample found no η† (never, or not up to its censoring LR): only when some
    // did and η† has a value here, since a "never" row says so already.
    if (a.bootstrap_resamples > 0 && n.eta_dagger && n.never_share > 0) {
      absl::StrAppend(
          &how, absl::StrFormat(" (no eta-dagger in %.0f%% of resamples)", 100 * n.never_share));
    }
    t.rows.push_back(
        {n.context.empty() ? "-" : n.context, n.moderator,
         absl::StrCat(n.variant, " vs ", n.baseline),
         absl::StrCat(EtaDaggerValue(n), Ci(a, n.eta_dagger_ci),
                      Unresolved(n.unresolved_by_budget)),
         SeedsCell(n.seeds),
         absl::StrCat(how, MixedMark(n.mixed),
                      n.inferred == 0 ? ""
                                      : absl::StrCat(" [", n.inferred,
                                                     " compared LRs rest on skipped runs: "
                                                     "inferred]"))});
  }
  return t;
}

Table BoundaryTable(const Analysis& a) {
  const auto& o = a.options;
  Table t;
  t.header = {"boundary", "where", "value", "bracket (lo, hi)", "ratio"};
  t.keys = 2;
  auto add = [&](const std::string& boundary, const std::string& where, const std::string& value,
                 const std::optional<double>& lo, const std::optional<double>& hi,
                 bool unresolved) {
    std::string bracket = "-", ratio = "-";
    if (lo && hi) {
      bracket = absl::StrCat("(", Fmt(lo), ", ", Fmt(hi), ")");
      ratio = absl::StrFormat("%.3g", *hi / *lo);
    } else if (lo) {
      bracket = absl::StrCat("(", Fmt(lo), ", open)");
      ratio = "open";
    }
    t.rows.push_back({boundary, where, value, bracket, ratio + Unresolved(unresolved)});
  };
  for (const auto& c : a.curves) {
    std::string where =
        absl::StrCat(o.variant_axis, "=", c.variant, " ", o.moderator_axis, "=", c.moderator);
    if (!c.context.empty()) where = absl::StrCat(c.context, " ", where);
    add("max stable LR", where, Fmt(c.max_stable_lr), c.max_stable_lr, c.max_stable_above,
        c.max_stable_unresolved_by_budget);
    add("max good LR", where, Fmt(c.max_good_lr), c.max_good_lr, c.max_good_above,
        c.max_good_unresolved_by_budget);
  }
  for (const auto& n : a.necessity) {
    std::string where =
        absl::StrCat(o.moderator_axis, "=", n.moderator, " ", n.variant, " vs ", n.baseline);
    if (!n.context.empty()) where = absl::StrCat(n.context, " ", where);
    add("eta-dagger", where, EtaDaggerValue(n), n.bracket_lo, n.bracket_hi, n.unresolved_by_budget);
  }
  return t;
}

Table LossTable(const Analysis& a, const std::string& context, const std::string& moderator) {
  Table t;
  t.header.push_back(a.options.lr_axis);
  std::vector<const Curve*> curves;
  std::set<double> lrs;
  for (const auto& v : a.variants) {
    const Curve* c = a.FindCurve(context, v, moderator);
    if (c == nullptr) continue;
    curves.push_back(c);
    t.header.push_back(absl::StrCat(v, " loss"));
    for (const auto& p : c->points) lrs.insert(p.lr);
  }
  for (double lr : lrs) {
    std::vector<std::string> row = {absl::StrFormat("%.4g", lr)};
    for (const Curve* c : curves) {
      const Point* p = PointAt(*c, lr);
      if (p == nullptr || !p->loss) {
        row.push_back("-");
        continue;
      }
      std::string cell = Fmt(p->loss);
      if (p->loss_std) absl::StrAppend(&cell, " ± ", Fmt(p->loss_std));
      // The mean's t-interval (from the curve's pooled seed spread, not a bootstrap).
      absl::StrAppend(&cell, analysis::IntervalText(p->loss_ci), " (n=", p->n);
      if (p->n_extra_seeds) absl::StrAppend(&cell, ", ", p->n_extra_seeds, " by refine.seeds");
      if (p->n_diverged) absl::StrAppend(&cell, ", ", p->n_diverged, " diverged");
      if (p->n_inferred) absl::StrAppend(&cell, ", ", p->n_inferred, " inferred (skipped)");
      if (p->n_untrained) absl::StrAppend(&cell, ", ", p->n_untrained, " untrained");
      absl::StrAppend(&cell, ")", MixedMark(p->mixed));
      if (p->refine_round > 0) absl::StrAppend(&cell, " [refined r", p->refine_round, "]");
      row.push_back(cell);
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

Table ProbeTable(const Analysis& a, const std::string& context, const std::string& moderator) {
  std::set<std::string> names;
  for (const auto& v : a.variants) {
    const Curve* c = a.FindCurve(context, v, moderator);
    if (c == nullptr) continue;
    for (const auto& p : c->points) {
      for (const auto& [name, value] : p.probes) names.insert(name);
    }
  }
  Table t;
  if (names.empty()) return t;
  t.header = {a.options.variant_axis, a.options.lr_axis};
  t.header.insert(t.header.end(), names.begin(), names.end());
  for (const auto& v : a.variants) {
    const Curve* c = a.FindCurve(context, v, moderator);
    if (c == nullptr) continue;
    for (const auto& p : c->points) {
      if (p.probes.empty()) continue;
      std::vector<std::string> row = {v, absl::StrFormat("%.4g", p.lr)};
      for (const auto& name : names) {
        auto it = p.probes.find(name);
        row.push_back(it == p.probes.end() ? "-" : Fmt(it->second));
      }
      t.rows.push_back(std::move(row));
    }
  }
  return t;
}

namespace {

// Columns `s` takes: code points, so "±" and "η" do not skew the columns.
size_t Width(absl::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

// The first `n` code points of `s`, and the rest.
std::pair<std::string, std::string> SplitAt(const std::string& s, size_t n) {
  size_t i = 0;
  for (size_t seen = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && seen++ == n) break;
  }
  return {s.substr(0, i), s.substr(i)};
}

// `text` on lines of at most `width` code points (at least 1), broken at spaces; a word longer
// than a line is broken inside. Continuation lines begin with `indent` spaces.
std::vector<std::string> WrapLines(const std::string& text, size_t width, size_t indent = 0) {
  width = std::max<size_t>(1, width);
  if (indent >= width) indent = 0;
  std::vector<std::string> out{""};
  size_t used = 0, start = 0;  // columns on the current line; where its text begins
  auto next_line = [&] {
    out.push_back(std::string(indent, ' '));
    used = start = indent;
  };
  for (absl::string_view piece : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    std::string word(piece);
    const bool empty = used == start;
    if (used + Width(word) + (empty ? 0 : 1) <= width) {
      absl::StrAppend(&out.back(), empty ? "" : " ", word);
      used += Width(word) + (empty ? 0 : 1);
      continue;
    }
    if (!empty) next_line();
    while (Width(word) > width - used) {  // longer than a whole line: broken inside
      auto [head, rest] = SplitAt(word, width - used);
      out.back() += head;
      next_line();
      word = rest;
    }
    out.back() += word;
    used += Width(word);
  }
  return out;
}

// The widest word of each column (header included): what it shrinks to before words break.
std::vector<size_t> WordWidths(const Table& t) {
  std::vector<size_t> out(t.header.size(), 1);
  auto take = [&](size_t i, const std::string& cell) {
    for (absl::string_view w : absl::StrSplit(cell, ' ', absl::SkipEmpty())) {
      out[i] = std::max(out[i], Width(w));
    }
  };
  for (size_t i = 0; i < t.header.size(); ++i) take(i, t.header[i]);
  for (const auto& row : t.rows) {
    for (size_t i = 0; i < row.size() && i < out.size(); ++i) take(i, row[i]);
  }
  return out;
}

// `t`'s columns `cols` at `widths` (one per column of t), each cell wrapped to its column; a row
// as many lines as its tallest cell.
std::string RenderColumns(const Table& t, const std::vector<size_t>& cols,
                          const std::vector<size_t>& widths) {
  auto line = [&](const std::vector<std::string>& cells) {
    std::vector<std::vector<std::string>> wrapped;
    size_t height = 1;
    for (size_t c : cols) {
      const std::string& cell = c < cells.size() ? cells[c] : "";
      wrapped.push_back(Width(cell) <= widths[c] ? std::vector<std::string>{cell}
                                                 : WrapLines(cell, widths[c]));
      height = std::max(height, wrapped.back().size());
    }
    std::string out;
    for (size_t h = 0; h < height; ++h) {
      std::string l;
      for (size_t k = 0; k < cols.size(); ++k) {
        const std::string& piece = h < wrapped[k].size() ? wrapped[k][h] : "";
        const std::string pad(widths[cols[k]] - std::min(widths[cols[k]], Width(piece)), ' ');
        const bool right = cols[k] < t.right.size() && t.right[cols[k]];
        absl::StrAppend(&l, k > 0 ? "  " : "", right ? pad : "", piece, right ? "" : pad);
      }
      while (!l.empty() && l.back() == ' ') l.pop_back();
      absl::StrAppend(&out, l, "\n");
    }
    return out;
  };
  std::string out = line(t.header);
  size_t total = 0;
  for (size_t c : cols) total += widths[c] + 2;
  if (t.rule) out += std::string(total > 2 ? total - 2 : 0, '-') + "\n";
  for (const auto& row : t.rows) out += line(row);
  return out;
}

}  // namespace

std::string WrapText(const std::string& text, int width, int indent) {
  if (width <= 0 || Width(text) <= static_cast<size_t>(width)) return text + "\n";
  return absl::StrCat(
      absl::StrJoin(WrapLines(text, static_cast<size_t>(width), static_cast<size_t>(indent)), "\n"),
      "\n");
}

std::string RenderText(const Table& t, int width) {
  const size_t n = t.header.size();
  std::vector<size_t> widths(n, 0);
  for (size_t i = 0; i < n; ++i) widths[i] = Width(t.header[i]);
  for (const auto& row : t.rows) {
    for (size_t i = 0; i < row.size() && i < n; ++i) widths[i] = std::max(widths[i], Width(row[i]));
  }
  size_t total = 0;
  for (size_t w : widths) total += w + 2;
  total = total > 2 ? total - 2 : 0;
  std::vector<size_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = i;
  if (width <= 0 || total <= static_cast<size_t>(width)) return RenderColumns(t, all, widths);
  const size_t limit = static_cast<size_t>(width);
  if (t.detail && n > 1) {
    // The sentences under the table, each numbered where its row has it.
    Table rest = t;
    rest.detail = false;
    std::string notes;
    int k = 0;
    for (auto& row : rest.rows) {
      if (row.size() < n || row[n - 1].empty() || row[n - 1] == "-") continue;
      const std::string mark = absl::StrCat("[", ++k, "]");
      notes +=
          WrapText(absl::StrCat(mark, " ", row[n - 1]), width, static_cast<int>(Width(mark)) + 1);
      row[n - 1] = mark;
    }
    return absl::StrCat(RenderText(rest, width), notes);
  }
  // Blocks of whole columns that fit beside the key columns.
  const size_t keys = std::min<size_t>(std::max(0, t.keys), n - 1);
  size_t key_width = 0;
  for (size_t i = 0; i < keys; ++i) key_width += widths[i] + 2;
  std::vector<std::vector<size_t>> blocks;
  size_t used = 0;
  for (size_t i = keys; i < n; ++i) {
    if (blocks.empty() || used + 2 + widths[i] > limit) {
      blocks.emplace_back();
      for (size_t k = 0; k < keys; ++k) blocks.back().push_back(k);
      used = key_width + widths[i];
    } else {
      used += 2 + widths[i];
    }
    blocks.back().push_back(i);
  }
  // A block still too wide (one column wider than the rest of the line) narrows its widest
  // columns: to their widest word first, then through words.
  const std::vector<size_t> words = WordWidths(t);
  std::string out;
  for (size_t b = 0; b < blocks.size(); ++b) {
    std::vector<size_t> w = widths;
    size_t sum = 0;
    for (size_t c : blocks[b]) sum += w[c] + 2;
    sum -= 2;
    for (bool through_words : {false, true}) {
      while (sum > limit) {
        size_t widest = n;
        for (size_t c : blocks[b]) {
          const size_t floor = through_words ? 1 : words[c];
          if (w[c] > floor && (widest == n || w[c] > w[widest])) widest = c;
        }
        if (widest == n) break;
        --w[widest];
        --sum;
      }
    }
    if (b > 0) out += "\n";
    out += RenderColumns(t, blocks[b], w);
  }
  return out;
}

std::string RenderMarkdown(const Table& t) {
  auto escape = [](const std::string& s) { return absl::StrReplaceAll(s, {{"|", "\\|"}}); };
  auto line = [&](const std::vector<std::string>& cells) {
    std::vector<std::string> escaped;
    for (const auto& c : cells) escaped.push_back(escape(c));
    return absl::StrCat("| ", absl::StrJoin(escaped, " | "), " |\n");
  };
  std::string out = line(t.header);
  out += absl::StrCat("|", absl::StrJoin(std::vector<std::string>(t.header.size(), "---"), "|"),
                      "|\n");
  for (const auto& row : t.rows) out += line(row);
  return out;
}

}  // namespace ablate::report
