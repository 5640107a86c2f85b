#include "common/report/figures.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/analysis/inference.h"
#include "common/run/metric_names.h"

namespace ablate::report {
namespace {

using analysis::Analysis;
using analysis::Curve;
using analysis::Point;

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string Color(size_t i) { return kColors[i % (sizeof(kColors) / sizeof(kColors[0]))]; }

// A gnuplot single-quoted string.
std::string Quote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

std::string Slug(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-';
    out += keep ? c : '_';
  }
  return out;
}

std::string Stem(const std::string& base, const std::string& context) {
  return context.empty() ? base : absl::StrCat(base, "__", Slug(context));
}

std::string Num(double x) { return absl::StrFormat("%.10g", x); }

// Figures are sized for one column of a two-column paper (3.5 in wide). Titles stay out of the
// plot: what a figure shows, and of which sweep, is its caption (report.md, and the script's
// first line), where a paper puts it too. The legend sits below the axes, where it cannot cover
// a curve and costs no width.
std::string Preamble(const std::string& name, const std::string& caption, const std::string& xlabel,
                     const std::string& ylabel, bool logx, bool logy) {
  std::string s = absl::StrCat(
      "# ", caption, "\n# Drawn by `ablate report` from ", name,
      ".dat. Restyle freely, then: gnuplot ", name, ".gp\n", "set datafile missing '?'\n",
      "set grid xtics ytics lw 0.5 lc rgb 'gray85'\n",
      "set key below horizontal Left reverse samplen 1.5 spacing 1.1 maxcols 2\n", "set xlabel ",
      Quote(xlabel), " noenhanced\n", "set ylabel ", Quote(ylabel), " noenhanced\n");
  if (logx) s += "set logscale x\nset format x '%g'\n";
  if (logy) s += "set logscale y\nset format y '%g'\n";
  return s;
}

// Appends the terminal/output/plot lines for PNG and PDF: the same 3.5 x 2.6 in page, the PNG
// at 300 dpi (1050 x 780 px, fonts and lines scaled to match).
std::string Outputs(const std::string& name, const Terminals& t, const std::string& plot) {
  // Point size and key spacing do not scale with the font from one terminal to the other: each
  // gets its own.
  std::string s = absl::StrCat(
      "set terminal ", t.png, " size 1050,780 font ',22' linewidth 3 noenhanced\n",
      "set pointsize 1.5\nset key width -2\n", "set output '", name, ".png'\nplot ", plot, "\n");
  if (!t.pdf.empty()) {
    absl::StrAppend(
        &s, "set terminal ", t.pdf, " size 3.5in,2.6in font ',7' linewidth 1.5 noenhanced\n",
        "set pointsize 0.35\nset key width 1\n", "set output '", name, ".pdf'\nreplot\n");
  }
  return s + "unset output\n";
}

// A range [lo, hi] of the data on a log axis, padded by a few percent of its span in log space
// (gnuplot's autoscale would widen it to whole decades, a decade of empty plot either side).
std::pair<double, double> LogRange(double lo, double hi) {
  const double pad = lo == hi ? 1.5 : std::pow(hi / lo, 0.05);
  return {lo / pad, hi * pad};
}

// The same on a linear axis: 5 % of the span either side.
std::pair<double, double> LinearRange(double lo, double hi) {
  const double pad = hi > lo ? 0.05 * (hi - lo) : std::max(0.05 * std::abs(hi), 0.01);
  return {lo - pad, hi + pad};
}

std::string SetRange(char axis, std::pair<double, double> r) {
  return absl::StrCat("set ", std::string(1, axis), "range [", Num(r.first), ":", Num(r.second),
                      "]\n");
}

// Whether a log axis over [lo, hi] labels in powers of ten: when %g would print some of its
// tics as "1e+06" and others as "10000", every label takes the one form "1e4", "1e6".
bool Scientific(double lo, double hi) { return lo < 1e-4 * (1 - 1e-9) || hi >= 1e6 * (1 - 1e-9); }

// A tic label: "0.003", or with `scientific` "3e-3".
std::string TicLabel(double v, bool scientific) {
  if (!scientific) return Num(v);
  const int e = static_cast<int>(std::floor(std::log10(v) + 1e-9));
  return absl::StrCat(Num(std::round(v / std::pow(10.0, e) * 1e6) / 1e6), "e", e);
}

// Tics on a log axis over [lo, hi]: gnuplot labels each decade; over a span of a decade or two
// the values in between are labelled too (2, 3, 5 or 3 of each decade) so that a point at
// 0.003 can be read off, and minor tics mark 2..9 of every decade. Every label has one form
// (Scientific).
std::string LogTics(char axis, double lo, double hi) {
  const bool scientific = Scientific(lo, hi);
  const double span = std::log10(hi / lo);
  std::vector<int> mantissas;
  if (span <= 1.5) {
    mantissas = {2, 3, 5};
  } else if (span <= 3) {
    mantissas = {3};
  }
  std::vector<std::string> extra;
  for (int e = static_cast<int>(std::floor(std::log10(lo))); e <= std::ceil(std::log10(hi)); ++e) {
    for (int m : mantissas) {
      const double v = m * std::pow(10.0, e);
      // 3 * 10^-1 may come out an ulp above 0.3: compare with a little slack.
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9))
        extra.push_back(absl::StrCat("'", TicLabel(v, scientific), "' ", Num(v)));
    }
  }
  const std::string a(1, axis);
  std::string s = absl::StrCat("set m", a, "tics 10\n");
  // %T: the decade's power of ten ("1e6"), where '%g' (the preamble's) would mix forms.
  if (scientific) absl::StrAppend(&s, "set format ", a, " '1e%T'\n");
  if (!extra.empty())
    absl::StrAppend(&s, "set ", a, "tics add (", absl::StrJoin(extra, ", "), ")\n");
  return s;
}

// The largest "max_attn_logit*" probe of a point (per-layer probes share the prefix).
std::optional<double> MaxAttnLogit(const Point& p) {
  std::optional<double> best;
  for (const auto& [name, v] : p.probes) {
    if (absl::StartsWith(name, metric::kMaxAttnLogit) && (!best || v > *best)) best = v;
  }
  return best;
}

std::string ContextTitle(const std::string& title, const std::string& context) {
  return context.empty() ? title : absl::StrCat(title, " [", context, "]");
}

// Lowest and highest of `v` (finite values only); nullopt when there is none.
std::optional<std::pair<double, double>> Extent(const std::vector<double>& v) {
  std::optional<std::pair<double, double>> out;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    if (!out) out = std::make_pair(x, x);
    out->first = std::min(out->first, x);
    out->second = std::max(out->second, x);
  }
  return out;
}

// The loss band at `p`: the (1 - alpha) t-interval of the mean of its seeds that did not
// diverge, from the curve's pooled seed spread. A diverged seed counts as l0 in the cell's mean,
// but a band around a mean of one seed at l0 and one that trained ran past l0 and below every
// loss measured there (issue #39); the band says where the runs that trained lie. nullopt: no
// seed trained, or no spread to draw a band from.
std::optional<analysis::Interval> StableBand(const Analysis& a, const Curve& c, const Point& p) {
  if (p.n_diverged == 0) return p.loss_ci;
  if (!c.seed_sigma || c.seed_dof == 0) return std::nullopt;
  double sum = 0;
  int n = 0;
  for (const auto& seed : p.seed_values) {
    if (seed.diverged) continue;
    sum += seed.loss;
    ++n;
  }
  if (n == 0) return std::nullopt;
  const double half = analysis::StudentTQuantile(1 - a.options.alpha / 2, c.seed_dof) *
                      *c.seed_sigma / std::sqrt(static_cast<double>(n));
  return analysis::Interval{sum / n - half, sum / n + half};
}

std::optional<Figure> LossVsLr(const Analysis& a, const std::string& title,
                               const std::string& context, const std::string& moderator,
                               const Terminals& t) {
  const auto& o = a.options;
  Figure f;
  f.name =
      Stem(absl::StrCat("loss_vs_lr__", Slug(o.moderator_axis), "_", Slug(moderator)), context);
  // The bands (each mean's interval) are drawn first, all of them, then the lines: a see-through
  // band drawn after another variant's line would tint it.
  std::vector<std::string> bands, plots;
  std::optional<double> l0;
  std::vector<double> xs, ys;
  int block = 0;
  bool inferred = false, refined = false, diverged = false, any_band = false,
       diverged_titled = false;
  // A boundary's bracket the refinement budget left wider than until_ratio: shaded in the
  // curve's colour, so the figure shows where the boundary could lie, not just a line.
  std::vector<std::string> shades;
  for (size_t v = 0; v < a.variants.size(); ++v) {
    const Curve* c = a.FindCurve(context, a.variants[v], moderator);
    if (c == nullptr) continue;
    for (const auto& [unresolved, lo, hi] :
         {std::tuple{c->max_stable_unresolved_by_budget, c->max_stable_lr, c->max_stable_above},
          std::tuple{c->max_good_unresolved_by_budget, c->max_good_lr, c->max_good_above}}) {
      if (!unresolved || !lo || !hi) continue;
      const std::string shade = absl::StrCat("set object rect from ", Num(*lo), ", graph 0 to ",
                                             Num(*hi), ", graph 1 behind fc rgb '", Color(v),
                                             "' fs transparent solid 0.12 noborder\n");
      if (std::find(shades.begin(), shades.end(), shade) == shades.end()) {
        shades.push_back(shade);
      }
    }
    std::string rows;
    for (const auto& p : c->points) {
      if (!p.loss) continue;
      // The band is over the seeds that trained (StableBand); a point without one (no seed
      // spread, or every seed diverged) has none: the band closes onto the line there.
      const std::optional<analysis::Interval> stable = StableBand(a, *c, p);
      const analysis::Interval band = stable.value_or(analysis::Interval{*p.loss, *p.loss});
      any_band |= stable.has_value();
      // Where a diverged seed is drawn: at the l0 it counts as.
      const std::optional<double> cap = p.l0 ? p.l0 : c->l0;
      xs.push_back(p.lr);
      ys.push_back(band.lo);
      ys.push_back(band.hi);
      absl::StrAppend(&rows, Num(p.lr), " ", Num(*p.loss), " ", Num(band.lo), " ", Num(band.hi),
                      " ", p.n, " ", p.n_diverged, " ", p.n_inferred, " ", p.refine_round, " ",
                      p.loss_std ? Num(*p.loss_std) : "?", " ", cap ? Num(*cap) : Num(*p.loss),
                      "\n");
      inferred |= p.n_inferred > 0;
      refined |= p.refine_round > 0;
      diverged |= p.n_diverged > p.n_inferred;
    }
    if (rows.empty()) continue;
    if (!l0) l0 = c->l0;
    absl::StrAppend(&f.data, "# ", o.variant_axis, "=", a.variants[v], "\n",
                    "# lr loss_mean band_lo band_hi (the t-interval of the mean of the seeds "
                    "that did not diverge) n n_diverged n_inferred refine_round loss_std ('?' = "
                    "none) l0 (where a diverged seed is drawn)\n",
                    rows, "\n\n");
    bands.push_back(absl::StrCat("'", f.name, ".dat' index ", block,
                                 " using 1:3:4 with filledcurves fc rgb '", Color(v),
                                 "' fs transparent solid 0.2 noborder notitle"));
    plots.push_back(absl::StrCat(
        "'", f.name, ".dat' index ", block, " using 1:2 with linespoints lw 2 pt 7 lc rgb '",
        Color(v), "' title ", Quote(absl::StrCat(o.variant_axis, "=", a.variants[v]))));
    // Skipped (pruned) runs were never measured: their points are drawn hollow (white fill,
    // coloured ring) over the line; a point where a seed that ran diverged (counted at l0) is an
    // x on white; LRs refinement added get a square around them.
    const std::string where = absl::StrCat("'", f.name, ".dat' index ", block);
    if (inferred) {
      plots.push_back(absl::StrCat(where,
                                   " using 1:($7 > 0 ? $2 : 1/0) with points pt 7 ps 1.2 lc rgb "
                                   "'white' notitle"));
      plots.push_back(absl::StrCat(where,
                                   " using 1:($7 > 0 ? $2 : 1/0) with points pt 6 ps 1.2 lc rgb '",
                                   Color(v), "' title ", Quote("inferred (skipped)")));
    }
    if (diverged) {
      plots.push_back(absl::StrCat(
          where, " using 1:($6 > $7 ? $10 : 1/0) with points pt 7 ps 1.6 lc rgb 'white' notitle"));
      // At l0, where the diverged seeds count, not on the line: in a cell where some seeds
      // trained, the mean is neither. One key entry for the marker, not one per variant: its
      // shape is what it explains. Larger than the white disk under it, so that its arms show.
      plots.push_back(absl::StrCat(
          where, " using 1:($6 > $7 ? $10 : 1/0) with points pt 2 ps 2.4 lw 2 lc rgb '", Color(v),
          "' ", diverged_titled ? "notitle" : "title 'a seed diverged (at l0)'"));
      diverged_titled = true;
    }
    if (refined) {
      plots.push_back(absl::StrCat(where,
                                   " using 1:($8 > 0 ? $2 : 1/0) with points pt 4 ps 2 lc rgb '",
                                   Color(v), "' title ", Quote("added by refinement")));
    }
    inferred = refined = diverged = false;
    ++block;
  }
  if (plots.empty()) return std::nullopt;
  f.caption = ContextTitle(
      absl::StrCat(
          title, ": final validation loss vs LR, ", o.moderator_axis, "=", moderator,
          any_band ? absl::StrFormat(" (band: %g%% t-interval of the mean of the seeds that did "
                                     "not diverge)",
                                     100 * (1 - o.alpha))
          : a.max_seeds >= 2 ? " (no seed spread: no band)"
                             : " (1 seed: no band)",
          "; dashed: l0, where diverged runs count",
          diverged_titled ? "; x: a seed diverged, drawn at l0" : "",
          shades.empty() ? ""
                         : "; shaded: a boundary's bracket left unresolved by the "
                           "refinement budget"),
      context);
  f.script = Preamble(f.name, f.caption, o.lr_axis, "final val loss (nats)", true, false);
  for (const auto& shade : shades) f.script += shade;
  // The l0 line is the value every diverged run is counted at: it must be inside the range.
  if (l0) ys.push_back(*l0);
  const auto x = Extent(xs);
  const auto y = Extent(ys);
  f.script += SetRange('x', LogRange(x->first, x->second));
  f.script += LogTics('x', x->first, x->second);
  f.script += SetRange('y', LinearRange(y->first, y->second));
  f.script += "set mytics 2\n";
  if (l0) {
    absl::StrAppend(&f.script, "set arrow from graph 0, first ", Num(*l0), " to graph 1, first ",
                    Num(*l0), " nohead dt 2 lc rgb 'gray40'\n",
                    "set label 'l0' at graph 0.02, first ", Num(*l0),
                    " offset 0,-0.8 tc rgb 'gray40'\n");
  }
  bands.insert(bands.end(), plots.begin(), plots.end());
  f.script += Outputs(f.name, t, absl::StrJoin(bands, ", \\\n     "));
  return f;
}

// η† and LR sensitivity share a shape: one value per moderator, one line per variant, the
// moderator values as categorical x tics (depths 2, 4, 8 evenly spaced). Several lines are each
// shifted a little sideways, so that their error bars at one moderator do not hide each other.
struct Series {
  std::string label;
  std::vector<std::optional<double>> values;  // by a.moderators
  // By a.moderators: the value is "never" (η†: never necessary), drawn as a marker at the top of
  // the plot rather than left out. Empty: no value is "never", a missing one is just missing.
  std::vector<bool> none;
  // By a.moderators (η† only): the bracket of a value the refinement budget left unresolved,
  // drawn as an error bar beside it. Empty: none is.
  std::vector<std::optional<std::pair<double, double>>> unresolved;
  // By a.moderators: the value rests on skipped runs' ℓ0 (inferred, never measured), drawn
  // hollow. Empty: none does.
  std::vector<bool> inferred;
  // By a.moderators: the seed-bootstrap interval, drawn as an error bar. An infinite upper end
  // (η†: no η† in more than alpha/2 of the resamples) is an arrow up to the "never" row. Empty:
  // no intervals.
  std::vector<std::optional<analysis::Interval>> ci;
  // By a.moderators (η† only): "not necessary up to X" (censored where the treated variant stops
  // training a good model), drawn at X as an open triangle pointing up: a lower bound, not a
  // value. Empty: none is censored there.
  std::vector<std::optional<double>> lower_bound;
};

// v[i], or T{} past its end (a Series' optional vectors may be empty).
template <typename T>
T At(const std::vector<T>& v, size_t i) {
  return i < v.size() ? v[i] : T{};
}

// `context` goes at the end of the caption, after what PerModerator adds to `caption` (what the
// error bars and markers it drew mean). `lr_extent` (η† only): the y range is the sweep's LRs,
// where every η† lies, and "never" is a row above them. Otherwise the y axis is linear and, with
// `from_zero`, starts at 0: a magnitude whose differences look large on a tight axis.
std::optional<Figure> PerModerator(const Analysis& a, const std::string& name, std::string caption,
                                   const std::string& context, const std::string& ylabel,
                                   const std::vector<Series>& series, bool logy,
                                   std::optional<std::pair<double, double>> lr_extent,
                                   bool from_zero, const Terminals& t) {
  Figure f;
  f.name = name;
  const size_t moderators = a.moderators.size();
  auto usable = [&](const std::optional<double>& v) {
    return v.has_value() && std::isfinite(*v) && (!logy || *v > 0);
  };
  // An interval whose upper end is "never": only the η† figure has a row to point it at.
  auto open = [&](const std::optional<analysis::Interval>& ci) {
    return lr_extent && ci && usable(ci->lo) && std::isinf(ci->hi);
  };
  // Which series have anything to draw, and whether the "never" row is needed.
  std::vector<size_t> drawn;
  bool marks_none = false;
  for (size_t s = 0; s < series.size(); ++s) {
    bool any = false;
    for (size_t m = 0; m < moderators; ++m) {
      const bool value = usable(At(series[s].values, m));
      const bool none = !value && At(series[s].none, m) && lr_extent;
      any |= value || none || (!value && usable(At(series[s].lower_bound, m)));
      marks_none |= none || open(At(series[s].ci, m));
    }
    if (any) drawn.push_back(s);
  }
  if (drawn.empty()) return std::nullopt;
  // Where "never" is drawn: above the highest LR, inside the plot.
  std::optional<double> none_at;
  std::pair<double, double> range{0, 0};
  if (lr_extent) {
    range = LogRange(lr_extent->first, lr_extent->second);
    // A row well above the highest LR (a tenth of the axis), so that its "never" tic label
    // clears the highest LR's.
    if (marks_none) {
      const double span = range.second / range.first;
      none_at = range.second * std::pow(span, 0.1);
      range.second = *none_at * std::pow(span, 0.12);
    }
  }
  std::vector<std::string> plots, labels;
  std::vector<double> ys;
  bool any_bars = false, any_open = false, any_lower = false;
  for (size_t k = 0; k < drawn.size(); ++k) {
    const Series& series_k = series[drawn[k]];
    const std::string color = Color(drawn[k]);
    const double shift = drawn.size() > 1 ? (k - (drawn.size() - 1) / 2.0) * 0.08 : 0;
    // The x column, shifted: "($1-0.04)".
    auto x = [](double by) { return absl::StrFormat("($1%+g)", by); };
    bool any_none = false, any_unresolved = false, any_inferred = false, bars = false,
         arrows = false, lower = false;
    std::string rows;
    for (size_t m = 0; m < moderators; ++m) {
      const auto& v = series_k.values[m];
      const bool value = usable(v);
      const bool none = !value && At(series_k.none, m) && none_at.has_value();
      any_none |= none;
      if (value) ys.push_back(*v);
      const auto unresolved = value ? At(series_k.unresolved, m) : std::nullopt;
      any_unresolved |= unresolved.has_value();
      const std::string bracket =
          unresolved ? absl::StrCat(Num(unresolved->first), " ", Num(unresolved->second))
                     : std::string("? ?");
      const bool inferred = value && At(series_k.inferred, m);
      any_inferred |= inferred;
      const auto ci = At(series_k.ci, m);
      const bool ci_open = open(ci);
      // Drawn even without a value: a "never" η† may still have a finite interval.
      const bool ci_closed = ci && usable(ci->lo) && usable(ci->hi);
      std::string interval = "? ? 0";
      if (ci_open) {
        interval = absl::StrCat(Num(ci->lo), " ", Num(*none_at), " 1");
        arrows = true;
      } else if (ci_closed) {
        interval = absl::StrCat(Num(ci->lo), " ", Num(ci->hi), " 0");
        ys.push_back(ci->lo);
        ys.push_back(ci->hi);
        bars = true;
      }
      const auto bound = value ? std::nullopt : At(series_k.lower_bound, m);
      lower |= usable(bound);
      // Data-file strings take double quotes; setting values never contain one.
      absl::StrAppend(&rows, m, " \"", a.moderators[m], "\" ", value ? Num(*v) : "?", " ",
                      none ? Num(*none_at) : "?", " ", bracket, " ", inferred ? 1 : 0, " ",
                      interval, " ", usable(bound) ? Num(*bound) : "?", "\n");
      if (none) {
        // Not "none": that may also be a variant's name (qk_norm=none).
        labels.push_back(absl::StrCat("set label 'never' at first ", Num(m + shift), ", first ",
                                      Num(*none_at), " center offset 0,1 tc rgb '", color, "'\n"));
      }
    }
    any_bars |= bars || arrows;
    any_open |= arrows;
    any_lower |= lower;
    absl::StrAppend(&f.data, "# ", series_k.label, "\n# position ", a.options.moderator_axis,
                    " value ('?' = none) none_marker unresolved_lo unresolved_hi inferred ci_lo "
                    "ci_hi ci_open (1: ci_hi is +infinity, drawn up to the never row) "
                    "lower_bound\n",
                    rows, "\n\n");
    const std::string block = absl::StrCat("'", name, ".dat' index ", k, " using ");
    const std::string where = block + x(shift);
    // Error bars first, so that the line and its markers are drawn over them; as arrows from
    // ci_lo to ci_hi, so that an interval needs no value to hang on: flat caps at both ends (an
    // error bar), or a head at the "never" row.
    for (const auto& [drawn_here, style] :
         {std::pair{bars,
                    "($10 == 0 ? $8 : 1/0):(0):($9 - $8) with vectors heads size screen "
                    "0.01,90"},
          std::pair{arrows,
                    "($10 > 0 ? $8 : 1/0):(0):($9 - $8) with vectors head filled size "
                    "screen 0.012,25"}}) {
      if (drawn_here) {
        plots.push_back(absl::StrCat(where, ":", style, " lc rgb '", color, "' notitle"));
      }
    }
    plots.push_back(absl::StrCat(where, ":3 with linespoints lw 2 pt 7 lc rgb '", color, "' title ",
                                 Quote(series_k.label)));
    if (any_inferred) {
      plots.push_back(absl::StrCat(
          where, ":($7 > 0 ? $3 : 1/0) with points pt 7 ps 1.2 lc rgb 'white' notitle"));
      plots.push_back(absl::StrCat(where, ":($7 > 0 ? $3 : 1/0) with points pt 6 ps 1.2 lc rgb '",
                                   color, "' title ", Quote("rests on inferred points")));
    }
    if (any_unresolved) {
      // Beside the interval's bar, not over it.
      plots.push_back(absl::StrCat(
          block, x(shift + 0.03), ":3:5:6 with yerrorbars pt 6 lc rgb '", color, "' title ",
          Quote(absl::StrCat(series_k.label, ": unresolved by budget (bracket)"))));
    }
    if (any_none) {
      plots.push_back(absl::StrCat(where, ":4 with points pt 9 lc rgb '", color, "' title ",
                                   Quote(absl::StrCat(series_k.label, ": never necessary"))));
    }
    if (lower) {
      plots.push_back(
          absl::StrCat(where, ":11 with points pt 8 lc rgb '", color, "' title ",
                       Quote(absl::StrCat(series_k.label, ": not necessary up to (censored)"))));
    }
  }
  const std::string level = absl::StrFormat("%g%%", 100 * (1 - a.options.alpha));
  if (any_bars) {
    absl::StrAppend(&caption, "; error bars: ", level, " seed-bootstrap intervals",
                    any_open ? " (an arrow up to 'never': the interval reaches never)" : "");
  }
  if (any_lower) {
    absl::StrAppend(&caption,
                    "; open triangle up: not necessary up to that LR, where the variant stops "
                    "training a good model (censored)");
  }
  f.caption = ContextTitle(caption, context);
  f.script = Preamble(name, f.caption, a.options.moderator_axis, ylabel, false, logy);
  absl::StrAppend(&f.script, "set xrange [-0.5:", moderators - 0.5, "]\n");
  std::vector<std::string> xtics;
  for (size_t m = 0; m < moderators; ++m) {
    xtics.push_back(absl::StrCat(Quote(a.moderators[m]), " ", m));
  }
  absl::StrAppend(&f.script, "set xtics (", absl::StrJoin(xtics, ", "), ")\n");
  if (lr_extent) {
    f.script += SetRange('y', range);
    f.script += LogTics('y', lr_extent->first, lr_extent->second);
    if (none_at) absl::StrAppend(&f.script, "set ytics add ('never' ", Num(*none_at), ")\n");
  } else if (const auto y = Extent(ys)) {
    auto r = logy ? LogRange(y->first, y->second) : LinearRange(y->first, y->second);
    if (from_zero && !logy && y->first >= 0) r.first = 0;
    f.script += SetRange('y', r);
    f.script += logy ? LogTics('y', y->first, y->second) : "set mytics 2\n";
  }
  for (const auto& l : labels) f.script += l;
  f.script += Outputs(name, t, absl::StrJoin(plots, ", \\\n     "));
  return f;
}

std::optional<Figure> AttnLogit(const Analysis& a, const std::string& title,
                                const std::string& context, const Terminals& t) {
  const auto& o = a.options;
  Figure f;
  f.name = Stem("max_attn_logit_vs_lr", context);
  std::vector<std::string> plots;
  std::vector<double> xs, ys;
  size_t index = 0;
  for (const auto& c : a.curves) {
    if (c.context != context) continue;
    std::string rows;
    for (const auto& p : c.points) {
      auto logit = MaxAttnLogit(p);
      if (logit && *logit > 0) {
        absl::StrAppend(&rows, Num(p.lr), " ", Num(*logit), "\n");
        xs.push_back(p.lr);
        ys.push_back(*logit);
      }
    }
    if (rows.empty()) continue;
    const std::string label =
        absl::StrCat(o.variant_axis, "=", c.variant, ", ", o.moderator_axis, "=", c.moderator);
    absl::StrAppend(&f.data, "# ", label, "\n# lr max_attn_logit_mean\n", rows, "\n\n");
    // The key names the variant axis once, in the caption: short entries fit two to a row.
    const std::string key = absl::StrCat(c.variant, ", ", o.moderator_axis, "=", c.moderator);
    // Colour by variant, dash pattern by moderator: the eye groups variants first.
    size_t variant = 0, moderator = 0;
    for (size_t i = 0; i < a.variants.size(); ++i)
      variant = a.variants[i] == c.variant ? i : variant;
    for (size_t i = 0; i < a.moderators.size(); ++i) {
      moderator = a.moderators[i] == c.moderator ? i : moderator;
    }
    plots.push_back(absl::StrCat("'", f.name, ".dat' index ", index++,
                                 " using 1:2 with linespoints lw 2 pt ", 5 + moderator % 4, " dt ",
                                 1 + moderator % 5, " lc rgb '", Color(variant), "' title ",
                                 Quote(key)));
  }
  if (plots.empty()) return std::nullopt;
  f.caption = ContextTitle(
      absl::StrCat(title, ": max attention logit (q.k/sqrt(d_h)) at the end of training vs LR; ",
                   "colour: ", o.variant_axis, ", dashes: ", o.moderator_axis),
      context);
  f.script = Preamble(f.name, f.caption, o.lr_axis, "max attention logit", true, true);
  const auto x = Extent(xs);
  const auto y = Extent(ys);
  f.script += SetRange('x', LogRange(x->first, x->second));
  f.script += LogTics('x', x->first, x->second);
  f.script += SetRange('y', LogRange(y->first, y->second));
  f.script += LogTics('y', y->first, y->second);
  f.script += Outputs(f.name, t, absl::StrJoin(plots, ", \\\n     "));
  return f;
}

}  // namespace

std::vector<Figure> BuildFigures(const Analysis& a, const std::string& title, const Terminals& t) {
  const auto& o = a.options;
  std::vector<Figure> out;
  auto add = [&](std::optional<Figure> f) {
    if (f) out.push_back(std::move(*f));
  };
  for (const auto& context : a.contexts) {
    for (const auto& m : a.moderators) add(LossVsLr(a, title, context, m, t));

    std::vector<Series> eta, sensitivity;
    std::vector<double> lrs;
    for (const auto& c : a.curves) {
      if (c.context != context) continue;
      for (const auto& p : c.points) {
        if (p.lr > 0) lrs.push_back(p.lr);
      }
    }
    for (const auto& v : a.variants) {
      Series sens{absl::StrCat(o.variant_axis, "=", v), {}, {}, {}, {}, {}, {}};
      for (const auto& m : a.moderators) {
        const Curve* c = a.FindCurve(context, v, m);
        sens.values.push_back(c ? c->lr_sensitivity : std::nullopt);
        sens.inferred.push_back(c != nullptr && c->sensitivity_inferred > 0);
        sens.ci.push_back(c ? c->lr_sensitivity_ci : std::nullopt);
      }
      sensitivity.push_back(std::move(sens));
      if (v == a.baseline) continue;
      Series e{absl::StrCat(v, " vs ", a.baseline), {}, {}, {}, {}, {}, {}};
      for (const auto& m : a.moderators) {
        const analysis::Necessity* found = nullptr;
        for (const auto& n : a.necessity) {
          if (n.context == context && n.variant == v && n.moderator == m) found = &n;
        }
        const analysis::Necessity uncompared;  // nothing to draw
        const analysis::Necessity& n = found != nullptr ? *found : uncompared;
        e.values.push_back(n.eta_dagger);
        // "never" only where the comparison covered every LR both variants finished; a censored
        // one is a lower bound ("not necessary up to X"), or nothing without a comparison.
        e.none.push_back(found != nullptr && !n.eta_dagger && !n.censored);
        e.lower_bound.push_back(n.censored ? n.censored_at : std::nullopt);
        e.unresolved.push_back(n.unresolved_by_budget && n.bracket_lo && n.bracket_hi
                                   ? std::optional(std::make_pair(*n.bracket_lo, *n.bracket_hi))
                                   : std::nullopt);
        e.inferred.push_back(n.inferred > 0);
        e.ci.push_back(n.eta_dagger_ci);
      }
      eta.push_back(std::move(e));
    }
    const auto lr_extent = Extent(lrs);
    add(PerModerator(a, Stem("eta_dagger", context),
                     absl::StrCat(title, ": necessity threshold eta-dagger vs ", o.moderator_axis,
                                  " (never necessary: marked 'never' at the top)"),
                     context, absl::StrCat("eta-dagger (", o.lr_axis, ")"), eta, true, lr_extent,
                     /*from_zero=*/false, t));
    // From 0: on a tight axis a 0.003-nat difference between two variants looks large.
    add(PerModerator(a, Stem("lr_sensitivity", context),
                     absl::StrCat(title, ": LR sensitivity vs ", o.moderator_axis, " (LRs in [",
                                  Num(o.lr_min), ", ", Num(o.lr_max), "]; axis from 0)"),
                     context, "LR sensitivity (nats)", sensitivity, false, std::nullopt,
                     /*from_zero=*/true, t));
    add(AttnLogit(a, title, context, t));
  }
  return out;
}

}  // namespace ablate::report
