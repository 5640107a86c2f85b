// WriteReport: every output file of `ablate report --out DIR`.
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/report/figures.h"
#include "common/report/report.h"
#include "common/report/subprocess.h"
#include "common/util/file.h"
#include "common/util/status_macros.h"

namespace ablate::report {
namespace {

// Which PNG/PDF terminals this gnuplot has; cairo ones when available (antialiased, real fonts).
Terminals ProbeTerminals(const std::string& gnuplot, const std::string& dir) {
  Terminals t;
  auto probe = RunProgram({gnuplot, "-e", "set terminal"}, dir);
  if (!probe.ok() || probe->exit_code != 0) return t;
  auto has = [&](const char* name) {
    return absl::StrContains(probe->output, absl::StrCat(" ", name, " "));
  };
  t.png = has("pngcairo") ? "pngcairo" : "png";
  t.pdf = has("pdfcairo") ? "pdfcairo" : (has("pdf") ? "pdf" : "");
  return t;
}

}  // namespace

absl::StatusOr<WrittenReport> WriteReport(const analysis::Analysis& analysis,
                                          const std::vector<ablate::v1::Run>& runs,
                                          const ReportOptions& options,
                                          const std::string& out_dir) {
  RETURN_IF_ERROR(util::MakeDirs(out_dir));
  WrittenReport written;
  // A report is made again from the runs at will, so a rename (no reader sees half a file) is
  // enough; it does not wait for the disk.
  auto write = [&](const std::string& name, const std::string& content) -> absl::Status {
    RETURN_IF_ERROR(util::WriteFileAtomically(absl::StrCat(out_dir, "/", name), content,
                                              util::Durability::kRename));
    written.files.push_back(name);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(write("runs.csv", RunsCsv(runs)));
  RETURN_IF_ERROR(write("cells.csv", CellsCsv(analysis)));

  std::vector<std::string> images, captions;
  if (options.figures) {
    const std::string title = options.title.empty() ? "ablate" : options.title;
    const bool have_gnuplot = ProgramExists(options.gnuplot);
    const Terminals terminals =
        have_gnuplot ? ProbeTerminals(options.gnuplot, out_dir) : Terminals{};
    if (!have_gnuplot) {
      written.warnings.push_back(
          absl::StrCat(options.gnuplot,
                       " not found: wrote each figure's .gp script and .dat data but no "
                       "images; install gnuplot and run `gnuplot NAME.gp` in ",
                       out_dir));
    } else if (terminals.pdf.empty()) {
      written.warnings.push_back("this gnuplot has no PDF terminal: figures are PNG only");
    }
    for (const auto& f : BuildFigures(analysis, title, terminals)) {
      RETURN_IF_ERROR(write(f.name + ".gp", f.script));
      RETURN_IF_ERROR(write(f.name + ".dat", f.data));
      if (!have_gnuplot) continue;
      auto run = RunProgram({options.gnuplot, f.name + ".gp"}, out_dir);
      if (!run.ok() || run->exit_code != 0) {
        written.warnings.push_back(
            absl::StrCat("gnuplot failed on ", f.name, ".gp: ",
                         run.ok() ? absl::StrCat("exit ", run->exit_code, ": ", run->output)
                                  : std::string(run.status().message())));
        continue;
      }
      for (const char* ext : {".png", ".pdf"}) {
        if (std::filesystem::exists(absl::StrCat(out_dir, "/", f.name, ext))) {
          written.files.push_back(f.name + ext);
        }
      }
      images.push_back(f.name + ".png");
      captions.push_back(f.caption);
    }
  }
  RETURN_IF_ERROR(write("report.md", FormatMarkdown(analysis, options, images, captions) +
                                         CostTable(runs, /*markdown=*/true)));
  return written;
}

}  // namespace ablate::report
