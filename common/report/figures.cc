#include "common/report/figures.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/util/metric_names.h"

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

std::string Preamble(const std::string& name, const std::string& title, const std::string& xlabel,
                     const std::string& ylabel, bool logx, bool logy) {
  std::string s = absl::StrCat(
      "# Drawn by `ablate report` from ", name, ".dat. Restyle freely, then: gnuplot ", name,
      ".gp\n", "set datafile missing '?'\n", "set grid\n", "set key outside right\n", "set title ",
      Quote(title), " noenhanced\n", "set xlabel ", Quote(xlabel), " noenhanced\n", "set ylabel ",
      Quote(ylabel), " noenhanced\n");
  if (logx) s += "set logscale x\nset format x '%g'\n";
  if (logy) s += "set logscale y\nset format y '%g'\n";
  return s;
}

// Appends the terminal/output/plot lines for PNG and PDF.
std::string Outputs(const std::string& name, const Terminals& t, const std::string& plot) {
  std::string s = absl::StrCat("set terminal ", t.png, " size 1000,640 noenhanced\n",
                               "set output '", name, ".png'\n", "plot ", plot, "\n");
  if (!t.pdf.empty()) {
    absl::StrAppend(&s, "set terminal ", t.pdf, " size 7in,4.5in noenhanced\n", "set output '",
                    name, ".pdf'\n", "replot\n");
  }
  return s + "unset output\n";
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

std::optional<Figure> LossVsLr(const Analysis& a, const std::string& title,
                               const std::string& context, const std::string& moderator,
                               const Terminals& t) {
  const auto& o = a.options;
  Figure f;
  f.name =
      Stem(absl::StrCat("loss_vs_lr__", Slug(o.moderator_axis), "_", Slug(moderator)), context);
  std::vector<std::string> plots;
  std::optional<double> l0;
  int block = 0;
  bool inferred = false, refined = false;
  for (size_t v = 0; v < a.variants.size(); ++v) {
    const Curve* c = a.FindCurve(context, a.variants[v], moderator);
    if (c == nullptr) continue;
    std::string rows;
    for (const auto& p : c->points) {
      if (!p.loss) continue;
      const double sd = p.loss_std.value_or(0);
      absl::StrAppend(&rows, Num(p.lr), " ", Num(*p.loss), " ", Num(*p.loss - sd), " ",
                      Num(*p.loss + sd), " ", p.n, " ", p.n_diverged, " ", p.n_inferred, " ",
                      p.refine_round, "\n");
      inferred |= p.n_inferred > 0;
      refined |= p.refine_round > 0;
    }
    if (rows.empty()) continue;
    if (!l0) l0 = c->l0;
    absl::StrAppend(&f.data, "# ", o.variant_axis, "=", a.variants[v], "\n",
                    "# lr loss_mean loss_minus_std loss_plus_std n n_diverged n_inferred "
                    "refine_round\n",
                    rows, "\n\n");
    plots.push_back(absl::StrCat("'", f.name, ".dat' index ", block,
                                 " using 1:3:4 with filledcurves fc rgb '", Color(v),
                                 "' fs transparent solid 0.2 noborder notitle"));
    plots.push_back(absl::StrCat(
        "'", f.name, ".dat' index ", block, " using 1:2 with linespoints lw 2 pt 7 lc rgb '",
        Color(v), "' title ", Quote(absl::StrCat(o.variant_axis, "=", a.variants[v]))));
    // Skipped (pruned) runs were never measured: their points are drawn hollow (white fill,
    // coloured ring) over the line; LRs refinement added get a square around them.
    const std::string where = absl::StrCat("'", f.name, ".dat' index ", block);
    if (inferred) {
      plots.push_back(absl::StrCat(where,
                                   " using 1:($7 > 0 ? $2 : 1/0) with points pt 7 ps 1.2 lc rgb "
                                   "'white' notitle"));
      plots.push_back(absl::StrCat(where,
                                   " using 1:($7 > 0 ? $2 : 1/0) with points pt 6 ps 1.2 lc rgb '",
                                   Color(v), "' title ", Quote("inferred (skipped)")));
    }
    if (refined) {
      plots.push_back(absl::StrCat(where,
                                   " using 1:($8 > 0 ? $2 : 1/0) with points pt 4 ps 2 lc rgb '",
                                   Color(v), "' title ", Quote("added by refinement")));
    }
    inferred = refined = false;
    ++block;
  }
  if (plots.empty()) return std::nullopt;
  f.script = Preamble(
      f.name,
      ContextTitle(absl::StrCat(title, ": final val loss vs LR, ", o.moderator_axis, "=", moderator,
                                a.max_seeds >= 2 ? " (band: ±1 seed std)" : " (1 seed: no band)"),
                   context),
      o.lr_axis, "final validation loss (nats); diverged = l0", true, false);
  if (l0) {
    absl::StrAppend(&f.script, "set arrow from graph 0, first ", Num(*l0), " to graph 1, first ",
                    Num(*l0), " nohead dt 2 lc rgb 'gray40'\n",
                    "set label 'l0' at graph 0.01, first ", Num(*l0),
                    " offset 0,0.6 tc rgb 'gray40'\n");
  }
  f.script += Outputs(f.name, t, absl::StrJoin(plots, ", \\\n     "));
  return f;
}

// η† and LR sensitivity share a shape: one value per moderator, one line per variant, the
// moderator values as categorical x tics (depths 2, 4, 8 evenly spaced).
struct Series {
  std::string label;
  std::vector<std::optional<double>> values;  // by a.moderators
};

std::optional<Figure> PerModerator(const Analysis& a, const std::string& name,
                                   const std::string& title, const std::string& ylabel,
                                   const std::vector<Series>& series, bool logy,
                                   const Terminals& t) {
  Figure f;
  f.name = name;
  std::vector<std::string> plots;
  for (size_t s = 0; s < series.size(); ++s) {
    bool any = false;
    std::string rows;
    for (size_t m = 0; m < a.moderators.size(); ++m) {
      const auto& v = series[s].values[m];
      const bool usable = v && std::isfinite(*v) && (!logy || *v > 0);
      any |= usable;
      // Data-file strings take double quotes; setting values never contain one.
      absl::StrAppend(&rows, m, " \"", a.moderators[m], "\" ", usable ? Num(*v) : "?", "\n");
    }
    if (!any) continue;
    absl::StrAppend(&f.data, "# ", series[s].label, "\n# position ", a.options.moderator_axis,
                    " value ('?' = none)\n", rows, "\n\n");
    plots.push_back(absl::StrCat("'", name, ".dat' index ", plots.size(),
                                 " using 1:3:xtic(2) with linespoints lw 2 pt 7 lc rgb '", Color(s),
                                 "' title ", Quote(series[s].label)));
  }
  if (plots.empty()) return std::nullopt;
  f.script = Preamble(name, title, a.options.moderator_axis, ylabel, false, logy);
  absl::StrAppend(&f.script, "set xrange [-0.5:", a.moderators.size() - 0.5, "]\n");
  f.script += Outputs(name, t, absl::StrJoin(plots, ", \\\n     "));
  return f;
}

std::optional<Figure> AttnLogit(const Analysis& a, const std::string& title,
                                const std::string& context, const Terminals& t) {
  const auto& o = a.options;
  Figure f;
  f.name = Stem("max_attn_logit_vs_lr", context);
  std::vector<std::string> plots;
  size_t index = 0;
  for (const auto& c : a.curves) {
    if (c.context != context) continue;
    std::string rows;
    for (const auto& p : c.points) {
      auto logit = MaxAttnLogit(p);
      if (logit && *logit > 0) absl::StrAppend(&rows, Num(p.lr), " ", Num(*logit), "\n");
    }
    if (rows.empty()) continue;
    const std::string label =
        absl::StrCat(o.variant_axis, "=", c.variant, ", ", o.moderator_axis, "=", c.moderator);
    absl::StrAppend(&f.data, "# ", label, "\n# lr max_attn_logit_mean\n", rows, "\n\n");
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
                                 Quote(label)));
  }
  if (plots.empty()) return std::nullopt;
  f.script = Preamble(f.name,
                      ContextTitle(absl::StrCat(title,
                                                ": max attention logit at the end of "
                                                "training vs LR"),
                                   context),
                      o.lr_axis, "max attention logit (q.k/sqrt(d_h))", true, true);
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
    for (const auto& v : a.variants) {
      Series sens{absl::StrCat(o.variant_axis, "=", v), {}};
      for (const auto& m : a.moderators) {
        const Curve* c = a.FindCurve(context, v, m);
        sens.values.push_back(c ? c->lr_sensitivity : std::nullopt);
      }
      sensitivity.push_back(std::move(sens));
      if (v == a.baseline) continue;
      Series e{absl::StrCat(v, " vs ", a.baseline), {}};
      for (const auto& m : a.moderators) {
        std::optional<double> value;
        for (const auto& n : a.necessity) {
          if (n.context == context && n.variant == v && n.moderator == m) value = n.eta_dagger;
        }
        e.values.push_back(value);
      }
      eta.push_back(std::move(e));
    }
    add(PerModerator(a, Stem("eta_dagger", context),
                     ContextTitle(absl::StrCat(title, ": necessity threshold eta-dagger vs ",
                                               o.moderator_axis, " (missing = never necessary)"),
                                  context),
                     absl::StrCat("eta-dagger (", o.lr_axis, ")"), eta, true, t));
    add(PerModerator(
        a, Stem("lr_sensitivity", context),
        ContextTitle(absl::StrCat(title, ": LR sensitivity vs ", o.moderator_axis, " (LRs in [",
                                  Num(o.lr_min), ", ", Num(o.lr_max), "])"),
                     context),
        "LR sensitivity (nats)", sensitivity, false, t));
    add(AttnLogit(a, title, context, t));
  }
  return out;
}

}  // namespace ablate::report
