// gnuplot figures of an Analysis: each a script (.gp) and its data (.dat); drawing them into
// .png and .pdf is the writer's job (see report_writer.cc), so the scripts stay re-runnable.
#pragma once

#include <string>
#include <vector>

#include "common/analysis/analysis.h"

namespace ablate::report {

struct Figure {
  std::string name;    // file stem: NAME.gp, NAME.dat, NAME.png, NAME.pdf
  std::string script;  // reads NAME.dat from the current directory
  std::string data;
  // What the figure shows, of which sweep (`title`) and context: the caption report.md prints
  // under it and the script's first line. The plot itself carries no title.
  std::string caption;
};

// gnuplot terminal names; the writer probes which exist (cairo ones look far better).
struct Terminals {
  std::string png = "pngcairo";
  std::string pdf = "pdfcairo";  // empty: no PDF terminal, the script draws PNG only
};

// Loss vs LR per moderator (one line per variant, each mean's t-interval as a band, log x, an x
// where a seed diverged), η† vs moderator (log y, seed-bootstrap error bars), max attention
// logit vs LR (log y), LR sensitivity vs moderator (error bars, y from 0). A figure with nothing
// to draw is left out rather than drawn empty; η† is drawn even when it is "never" at every
// moderator, with "never" marked. `title` (the sweep) goes into the captions only.
std::vector<Figure> BuildFigures(const analysis::Analysis& analysis, const std::string& title,
                                 const Terminals& terminals);

}  // namespace ablate::report
