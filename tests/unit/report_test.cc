// Report files from a hand-built run set; the export format round trip; CSV quoting.
#include "common/report/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/analysis/refine.h"
#include "common/report/csv.h"
#include "common/report/export.h"
#include "common/report/figures.h"
#include "nlohmann/json.hpp"

namespace ablate::report {
namespace {

using ablate::v1::Run;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every directory TempDir makes is removed when the test binary exits, so a run of the suite
// leaves nothing behind in /tmp.
struct TempDirs {
  std::vector<std::string> made;
  ~TempDirs() {
    for (const auto& dir : made) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
};

std::string TempDir() {
  static TempDirs dirs;
  std::string pattern = ::testing::TempDir() + "ablate_report_XXXXXX";
  char* dir = mkdtemp(pattern.data());
  EXPECT_NE(dir, nullptr);
  dirs.made.push_back(pattern);
  return pattern;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

const char* const kTokenizer = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

// 2 variants x 2 depths x 3 LRs x 2 seeds, all on one CUDA/bfloat16 stack; layernorm never
// diverges, none diverges at 0.1 for depth 8; one run still queued so the report is partial.
std::vector<Run> StudyRuns() {
  std::vector<Run> runs;
  const char* lrs[] = {"0.001", "0.01", "0.1"};
  int64_t id = 0;
  for (const char* variant : {"none", "layernorm"}) {
    for (const char* depth : {"2", "8"}) {
      for (int i = 0; i < 3; ++i) {
        for (int seed : {0, 1}) {
          Run r;
          r.set_id(++id);
          r.set_seed(seed);
          (*r.mutable_grid_values())["qk_norm"] = variant;
          (*r.mutable_grid_values())["n_layer"] = depth;
          (*r.mutable_grid_values())["lr"] = lrs[i];
          (*r.mutable_grid_values())["seed"] = std::to_string(seed);
          auto* res = r.mutable_result();
          res->set_device("cuda:0 (NVIDIA GeForce RTX 4090)");
          res->set_device_kind("cuda");
          res->set_dtype("bfloat16");
          res->set_torch_version("2.1.0");
          res->set_tokenizer_sha256(kTokenizer);
          res->set_initial_loss(8.3);
          res->set_steps_to_threshold(-1);
          const bool diverge =
              std::string(variant) == "none" && std::string(depth) == "8" && i == 2;
          if (diverge) {
            r.set_state(ablate::v1::DIVERGED);
            res->set_diverged(true);
            res->set_diverged_step(420);
          } else {
            r.set_state(ablate::v1::SUCCEEDED);
            const double loss =
                3.0 + 0.1 * i * (std::string(variant) == "none" ? 3 : 1) + 0.01 * seed;
            res->set_final_val_loss(loss);
            res->set_final_train_loss(loss - 0.05);
            res->set_final_val_ppl(std::exp(loss));
            res->set_steps_to_threshold(100 + 10 * i);
          }
          (*res->mutable_final_probes())["max_attn_logit"] =
              std::string(variant) == "none" ? 10.0 * std::pow(10, i) : 5.0;
          (*res->mutable_final_probes())["attn_entropy"] = 1.5;
          runs.push_back(r);
        }
      }
    }
  }
  // One run not finished yet: the report must say it is partial.
  runs[1].set_state(ablate::v1::QUEUED);
  runs[1].clear_result();
  return runs;
}

// StudyRuns on a mixed fleet: one depth-8 run of `none` at lr 0.001 ran on the MPS laptop in
// float32 (a mixed cell), and every depth-2 run of `layernorm` ran in float32 on CUDA, so each
// depth-2 cell is uniform but every depth-2 pair compares float32 with bfloat16.
std::vector<Run> MixedStudyRuns() {
  auto runs = StudyRuns();
  for (auto& r : runs) {
    const auto& g = r.grid_values();
    if (g.at("qk_norm") == "none" && g.at("n_layer") == "8" && g.at("lr") == "0.001" &&
        r.seed() == 1) {
      r.mutable_result()->set_device("mps");
      r.mutable_result()->set_device_kind("");  // an older result: the kind comes from device
      r.mutable_result()->set_dtype("float32");
    }
    if (g.at("qk_norm") == "layernorm" && g.at("n_layer") == "2") {
      r.mutable_result()->set_dtype("float32");
    }
  }
  return runs;
}

// The CSV field under `column` in `row` (by the header's names, not positions).
std::string Field(const std::string& header, const std::string& row, const std::string& column) {
  auto names = SplitCsvLine(header);
  auto fields = SplitCsvLine(row);
  EXPECT_TRUE(names.ok() && fields.ok());
  for (size_t i = 0; i < names->size() && i < fields->size(); ++i) {
    if ((*names)[i] == column) return (*fields)[i];
  }
  ADD_FAILURE() << "no column " << column;
  return "";
}

TEST(WriteReport, BoundariesAreBracketsAndRefinedAndInferredPointsAreMarked) {
  auto runs = StudyRuns();
  runs[1].set_state(ablate::v1::SUCCEEDED);  // a complete sweep
  *runs[1].mutable_result() = runs[0].result();
  int64_t id = 1000;
  // none at depth 8 diverged at 0.1: refinement added 0.0316228 (diverged too), and pruning
  // skipped 0.3 (never run).
  for (const auto& [lr, state, round] :
       std::vector<std::tuple<std::string, ablate::v1::RunState, int>>{
           {"0.0316228", ablate::v1::DIVERGED, 1}, {"0.3", ablate::v1::SKIPPED, 0}}) {
    for (int seed : {0, 1}) {
      ablate::v1::Run r;
      r.set_id(++id);
      r.set_seed(seed);
      (*r.mutable_grid_values())["qk_norm"] = "none";
      (*r.mutable_grid_values())["n_layer"] = "8";
      (*r.mutable_grid_values())["lr"] = lr;
      (*r.mutable_grid_values())["seed"] = std::to_string(seed);
      r.set_state(state);
      r.set_refine_round(round);
      if (state == ablate::v1::DIVERGED) {
        r.mutable_result()->set_initial_loss(8.3);
        r.mutable_result()->set_diverged(true);
      }
      runs.push_back(r);
    }
  }
  auto analysis = analysis::Analyze(runs);
  ASSERT_TRUE(analysis.ok()) << analysis.status();
  const std::string table = FormatTable(*analysis);
  // Max stable LR of none at depth 8: 0.01, bracketed by the refined 0.0316228 (ratio 3.16).
  EXPECT_THAT(table, testing::ContainsRegex(
                         "max stable LR +qk_norm=none n_layer=8 +0.01 +\\(0.01, 0.03162\\) +3.16"));
  EXPECT_THAT(table, testing::ContainsRegex("max stable LR +qk_norm=layernorm n_layer=8 +0.1 "
                                            "+\\(0.1, open\\) +open"));
  EXPECT_THAT(table, HasSubstr("2 runs were skipped above divergence"));
  const std::string md = FormatMarkdown(*analysis, {});
  EXPECT_THAT(md, HasSubstr("## Boundaries as brackets"));
  EXPECT_THAT(md, HasSubstr("(n=2, 2 diverged) [refined r1]"));
  EXPECT_THAT(md, HasSubstr("(n=2, 2 diverged, 2 inferred (skipped))"));
  const std::string dir = TempDir() + "/out";
  auto written = WriteReport(*analysis, runs, ReportOptions{}, dir);
  ASSERT_TRUE(written.ok()) << written.status();
  const std::string gp = Slurp(dir + "/loss_vs_lr__n_layer_8.gp");
  EXPECT_THAT(gp, HasSubstr("'inferred (skipped)'"));
  EXPECT_THAT(gp, HasSubstr("'added by refinement'"));
  // Only the curve with such points gets the extra markers.
  EXPECT_THAT(Slurp(dir + "/loss_vs_lr__n_layer_2.gp"), testing::Not(HasSubstr("inferred")));
  const auto json = nlohmann::json::parse(FormatJson(*analysis));
  EXPECT_EQ(json["inferred"], 2);
  EXPECT_EQ(json["refined"], 2);
  // The skipped point at 0.3 is in [3e-4, 0.3]: none's LR sensitivity at depth 8 rests on an
  // inferred l0, and every output says so; the other curves' do not.
  EXPECT_EQ(json["curves"][1]["sensitivity_inferred"], 1);
  EXPECT_EQ(json["curves"][0]["sensitivity_inferred"], 0);
  EXPECT_THAT(table, testing::ContainsRegex("none +8 +0.001 +3.005 +[0-9.]+ +[0-9.]+ "
                                            "\\(1 LR inferred\\) "));
  EXPECT_THAT(md, HasSubstr("(1 LR inferred)"));
  const std::string sens = Slurp(dir + "/lr_sensitivity.gp");
  EXPECT_THAT(sens, HasSubstr("'rests on inferred points'"));
  EXPECT_THAT(Slurp(dir + "/lr_sensitivity.dat"), HasSubstr("1 \"8\" 2.713878551 ? ? ? 1\n"));
}

TEST(WriteReport, WritesEveryFileWithValidImagesAndMatchingCsv) {
  const auto runs = StudyRuns();
  auto analysis = analysis::Analyze(runs);
  ASSERT_TRUE(analysis.ok()) << analysis.status();
  const std::string dir = TempDir() + "/out";
  ReportOptions options;
  options.title = "study";
  auto written = WriteReport(*analysis, runs, options, dir);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_TRUE(written->warnings.empty()) << written->warnings[0];

  for (const char* f :
       {"report.md", "runs.csv", "cells.csv", "loss_vs_lr__n_layer_2.gp",
        "loss_vs_lr__n_layer_2.dat", "loss_vs_lr__n_layer_8.png", "loss_vs_lr__n_layer_8.pdf",
        "eta_dagger.png", "eta_dagger.gp", "lr_sensitivity.png", "max_attn_logit_vs_lr.png",
        "max_attn_logit_vs_lr.pdf"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + f)) << f;
  }
  int pngs = 0;
  for (const auto& f : written->files) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + f)) << f;
    if (f.ends_with(".png")) {
      ++pngs;
      EXPECT_EQ(Slurp(dir + "/" + f).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << f;
    }
    if (f.ends_with(".pdf")) {
      EXPECT_EQ(Slurp(dir + "/" + f).substr(0, 5), "%PDF-") << f;
    }
  }
  EXPECT_EQ(pngs, 5);  // loss vs LR x 2 depths, eta-dagger, sensitivity, attention logit

  // runs.csv: a header and one row per run, in order, with the run's own values.
  const auto rows = Lines(Slurp(dir + "/runs.csv"));
  ASSERT_EQ(rows.size(), runs.size() + 1);
  EXPECT_EQ(rows[0],
            "id,lr,n_layer,qk_norm,seed,state,attempt,l0,final_train_loss,final_val_loss,"
            "final_val_ppl,diverged_step,steps_to_threshold,steps_done,wall_seconds,device,"
            "device_kind,dtype,torch_version,tokenizer_sha256,refine_round,probe_attn_entropy,"
            "probe_max_attn_logit");
  for (size_t i = 0; i < runs.size(); ++i) {
    auto fields = SplitCsvLine(rows[i + 1]);
    ASSERT_TRUE(fields.ok());
    const ablate::v1::Run& r = runs[i];
    EXPECT_EQ((*fields)[0], std::to_string(r.id()));
    EXPECT_EQ((*fields)[1], r.grid_values().at("lr"));
    EXPECT_EQ((*fields)[2], r.grid_values().at("n_layer"));
    EXPECT_EQ((*fields)[3], r.grid_values().at("qk_norm"));
    EXPECT_EQ((*fields)[4], r.grid_values().at("seed"));
    if (r.state() == ablate::v1::SUCCEEDED) {
      EXPECT_EQ((*fields)[5], "succeeded");
      EXPECT_DOUBLE_EQ(std::stod((*fields)[9]), r.result().final_val_loss());
      EXPECT_EQ((*fields)[11], "");
    } else if (r.state() == ablate::v1::DIVERGED) {
      EXPECT_EQ((*fields)[5], "diverged");
      EXPECT_EQ((*fields)[9], "");
      EXPECT_EQ((*fields)[11], "420");
    } else {
      EXPECT_EQ((*fields)[5], "queued");
      EXPECT_EQ((*fields)[7], "");
    }
  }
  // cells.csv: 2 x 2 x 3 cells.
  const auto cells = Lines(Slurp(dir + "/cells.csv"));
  EXPECT_EQ(cells.size(), 13u);
  EXPECT_THAT(cells, testing::Contains(",none,8,0.1,8.3,8.3,0,2,2,0,0,0,,4023.872394,never,,"
                                       "cuda/bfloat16/torch 2.1.0/tokenizer 9f86d081884c (2 runs),"
                                       "0,0,1.5,1000"));

  const std::string md = Slurp(dir + "/report.md");
  EXPECT_THAT(md, HasSubstr("# study (partial)"));
  EXPECT_THAT(md, HasSubstr("![loss_vs_lr__n_layer_2.png](loss_vs_lr__n_layer_2.png)"));
  EXPECT_THAT(md, HasSubstr("| 0.1 | 8.3 ± 0 (n=2, 2 diverged) |"));
  EXPECT_THAT(md, HasSubstr("H3 (eta-dagger of layernorm falls as n_layer grows)"));
  EXPECT_THAT(md, HasSubstr("| qk_norm | lr | attn_entropy | max_attn_logit |"));
  EXPECT_THAT(md, HasSubstr("| none | 0.1 | 1.5 | 1000 |"));
  std::filesystem::remove_all(dir);
}

TEST(WriteReport, WithoutGnuplotWritesScriptsAndSaysSo) {
  const auto runs = StudyRuns();
  auto analysis = analysis::Analyze(runs);
  ASSERT_TRUE(analysis.ok());
  const std::string dir = TempDir();
  ReportOptions options;
  options.gnuplot = "/nonexistent/gnuplot";
  auto written = WriteReport(*analysis, runs, options, dir);
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_EQ(written->warnings.size(), 1u);
  EXPECT_THAT(written->warnings[0], HasSubstr("/nonexistent/gnuplot not found"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/eta_dagger.gp"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/eta_dagger.dat"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/eta_dagger.png"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/report.md"));
  for (const auto& f : written->files) {
    EXPECT_FALSE(f.ends_with(".png")) << f;
  }
  std::filesystem::remove_all(dir);
}

// The figures' gnuplot scripts (issue #15, figures for a paper): what each sets, read back.
const Figure* FindFigure(const std::vector<Figure>& figures, const std::string& name) {
  for (const auto& f : figures) {
    if (f.name == name) return &f;
  }
  ADD_FAILURE() << "no figure " << name;
  return nullptr;
}

// [lo:hi] of `set <axis>range`, or {nan, nan} if the script does not set it.
std::pair<double, double> RangeOf(const std::string& script, char axis) {
  const std::string key = absl::StrCat("set ", std::string(1, axis), "range [");
  const size_t at = script.find(key);
  if (at == std::string::npos) return {std::nan(""), std::nan("")};
  const size_t end = script.find(']', at);
  std::vector<std::string> parts =
      absl::StrSplit(script.substr(at + key.size(), end - at - key.size()), ':');
  return {std::stod(parts.at(0)), std::stod(parts.at(1))};
}

// The script without its comment lines: what gnuplot draws.
std::string Drawn(const std::string& script) {
  std::string out;
  for (const auto& line : Lines(script)) {
    if (!line.starts_with("#")) absl::StrAppend(&out, line, "\n");
  }
  return out;
}

constexpr const char* kSweepTitle = "sweep 1 'tiny'";

TEST(Figures, EveryFigureIsPaperReady) {
  auto analysis = analysis::Analyze(StudyRuns());
  ASSERT_TRUE(analysis.ok());
  const auto figures = BuildFigures(*analysis, kSweepTitle, Terminals{});
  ASSERT_EQ(figures.size(), 5u);  // loss vs LR at 2 depths, η†, LR sensitivity, attention logit
  for (const auto& f : figures) {
    SCOPED_TRACE(f.name);
    const std::string drawn = Drawn(f.script);
    // Legend below the axes (or inside), never beside them.
    EXPECT_THAT(drawn, HasSubstr("set key below"));
    EXPECT_THAT(drawn, Not(HasSubstr("outside right")));
    // No title in the plot; the sweep's name is only in the caption (and the comment line).
    EXPECT_THAT(drawn, Not(HasSubstr("set title")));
    EXPECT_THAT(drawn, Not(HasSubstr("tiny")));
    EXPECT_THAT(f.caption, HasSubstr(kSweepTitle));
    EXPECT_THAT(f.script, HasSubstr(absl::StrCat("# ", f.caption)));
    // One column wide: the PDF page and the PNG at 300 dpi of the same page.
    EXPECT_THAT(drawn, HasSubstr("size 3.5in,2.6in"));
    EXPECT_THAT(drawn, HasSubstr("size 1050,780"));
  }
  // Loss vs LR: the LRs are 0.001..0.1, l0 is 8.3, the losses 3.0..3.61.
  for (const char* name : {"loss_vs_lr__n_layer_2", "loss_vs_lr__n_layer_8"}) {
    SCOPED_TRACE(name);
    const Figure* f = FindFigure(figures, name);
    ASSERT_NE(f, nullptr);
    const auto [x0, x1] = RangeOf(f->script, 'x');
    EXPECT_LT(x0, 0.001);
    EXPECT_GT(x0, 0.001 / 1.3);  // a few percent, not a decade, beyond the data
    EXPECT_GT(x1, 0.1);
    EXPECT_LT(x1, 0.1 * 1.3);
    const auto [y0, y1] = RangeOf(f->script, 'y');
    EXPECT_LT(y0, 3.0);
    EXPECT_GT(y0, 2.5);
    EXPECT_GT(y1, 8.3);  // the dashed l0 line is inside the plot
    EXPECT_LT(y1, 9.0);
    EXPECT_THAT(f->script, HasSubstr("first 8.3 nohead dt 2"));
    EXPECT_THAT(f->script, HasSubstr("set mxtics 10"));
    EXPECT_THAT(f->script, HasSubstr("set xtics add ('0.003' 0.003, '0.03' 0.03)"));
  }
  // η†: a log axis over the sweep's LRs with minor tics and labels between the decades.
  const Figure* eta = FindFigure(figures, "eta_dagger");
  ASSERT_NE(eta, nullptr);
  EXPECT_THAT(eta->script, HasSubstr("set mytics 10"));
  EXPECT_THAT(eta->script, HasSubstr("set ytics add ('0.003' 0.003, '0.03' 0.03)"));
  const auto [e0, e1] = RangeOf(eta->script, 'y');
  EXPECT_GT(e0, 0.001 / 1.3);
  EXPECT_LT(e1, 0.1 * 1.3);  // the sweep's LRs; η† has a value at both depths: no "none" row
  EXPECT_THAT(eta->script, Not(HasSubstr("set label 'never'")));
  const Figure* logit = FindFigure(figures, "max_attn_logit_vs_lr");
  ASSERT_NE(logit, nullptr);
  const auto [l0, l1] = RangeOf(logit->script, 'y');  // logits 5..1000
  EXPECT_GT(l0, 5 / 1.5);
  EXPECT_LT(l1, 1000 * 1.5);
  EXPECT_THAT(logit->script, HasSubstr("set mytics 10"));
}

TEST(Figures, EtaDaggerNoneEverywhereIsDrawnWithNoneMarked) {
  // Both variants equally good at every LR and depth: η† is "none" at every depth.
  auto runs = StudyRuns();
  for (auto& r : runs) {
    if (r.state() != ablate::v1::DIVERGED && r.state() != ablate::v1::SUCCEEDED) continue;
    r.set_state(ablate::v1::SUCCEEDED);
    auto* res = r.mutable_result();
    res->set_diverged(false);
    const double loss = 3.0 + 0.1 * std::stod(r.grid_values().at("lr")) + 0.01 * r.seed();
    res->set_final_val_loss(loss);
    res->set_final_train_loss(loss);
  }
  auto analysis = analysis::Analyze(runs);
  ASSERT_TRUE(analysis.ok());
  for (const auto& n : analysis->necessity) ASSERT_FALSE(n.eta_dagger.has_value()) << n.detail;
  const auto figures = BuildFigures(*analysis, kSweepTitle, Terminals{});
  const Figure* eta = FindFigure(figures, "eta_dagger");
  ASSERT_NE(eta, nullptr);
  const auto [y0, y1] = RangeOf(eta->script, 'y');
  // One "none" label per depth, inside the range, above the highest LR.
  int labels = 0;
  for (const auto& line : Lines(eta->script)) {
    if (!line.starts_with("set label 'never' at first ")) continue;
    ++labels;
    const double y = std::stod(line.substr(line.find(", first ") + 8));
    EXPECT_GT(y, 0.1);
    EXPECT_LT(y, y1);
  }
  EXPECT_EQ(labels, 2);
  EXPECT_LT(y0, 0.001);
  // "none" is also a variant here: the legend says what the marker means.
  EXPECT_THAT(eta->script, HasSubstr("title 'layernorm vs none: never necessary'"));
  EXPECT_THAT(eta->script, Not(HasSubstr(": none'")));
  EXPECT_THAT(eta->data, HasSubstr("0 \"2\" ? "));  // no value, a marker
}

// The plot command's entries, in drawing order.
std::vector<std::string> PlotEntries(const std::string& script) {
  const size_t at = script.find("\nplot ");
  const size_t end = script.find("\nset terminal", at + 1);
  std::vector<std::string> out;
  for (const auto& e : absl::StrSplit(script.substr(at + 6, end - at - 6), ", \\\n")) {
    out.emplace_back(e);
  }
  return out;
}

TEST(Figures, SeedBandsAreDrawnUnderEveryLine) {
  // A see-through band drawn after another variant's line tinted it: every band comes first.
  auto analysis = analysis::Analyze(StudyRuns());
  ASSERT_TRUE(analysis.ok());
  const auto figures = BuildFigures(*analysis, kSweepTitle, Terminals{});
  const Figure* f = FindFigure(figures, "loss_vs_lr__n_layer_2");
  ASSERT_NE(f, nullptr);
  const auto entries = PlotEntries(f->script);
  ASSERT_GE(entries.size(), 4u);
  bool line_seen = false;
  int bands = 0;
  for (const auto& e : entries) {
    if (absl::StrContains(e, "filledcurves")) {
      ++bands;
      EXPECT_FALSE(line_seen) << "a band after a line: " << e;
    } else {
      line_seen = true;
    }
  }
  EXPECT_EQ(bands, 2);
}

TEST(Figures, LogAxisLabelsTakeOneFormAcrossDecades) {
  // Logits from 100 to 1e6: '%g' labelled "10000" next to "1e+06".
  auto runs = StudyRuns();
  for (auto& r : runs) {
    const int i = r.grid_values().at("lr") == "0.001"  ? 0
                  : r.grid_values().at("lr") == "0.01" ? 1
                                                       : 2;
    (*r.mutable_result()->mutable_final_probes())["max_attn_logit"] = 100.0 * std::pow(100, i);
  }
  auto analysis = analysis::Analyze(runs);
  ASSERT_TRUE(analysis.ok());
  const auto figures = BuildFigures(*analysis, kSweepTitle, Terminals{});
  const Figure* logit = FindFigure(figures, "max_attn_logit_vs_lr");
  ASSERT_NE(logit, nullptr);
  EXPECT_THAT(logit->script, HasSubstr("set format y '1e%T'"));
  EXPECT_THAT(Drawn(logit->script), Not(HasSubstr("e+")));
  // The LR axis (1e-3..0.1) keeps its plain labels, the 3s between decades included.
  EXPECT_THAT(logit->script, Not(HasSubstr("set format x '1e%T'")));
  EXPECT_THAT(logit->script, HasSubstr("set xtics add ('0.003' 0.003, '0.03' 0.03)"));
  // A span of two decades up there labels its 3s in the same form.
  for (auto& r : runs) {
    const int i = r.grid_values().at("lr") == "0.001"  ? 0
                  : r.grid_values().at("lr") == "0.01" ? 1
                                                       : 2;
    (*r.mutable_result()->mutable_final_probes())["max_attn_logit"] = 1e5 * std::pow(10, i);
  }
  analysis = analysis::Analyze(runs);
  ASSERT_TRUE(analysis.ok());
  const Figure* high =
      FindFigure(BuildFigures(*analysis, kSweepTitle, Terminals{}), "max_attn_logit_vs_lr");
  ASSERT_NE(high, nullptr);
  EXPECT_THAT(high->script, HasSubstr("'3e5' 300000"));
  EXPECT_THAT(high->script, HasSubstr("'3e6' 3000000"));
}

TEST(Formats, ACancelledRunIsCountedAsCancelledNotFailed) {
  auto runs = StudyRuns();
  runs[1].set_state(ablate::v1::CANCELLED);  // the queued run, cancelled
  runs[2].set_state(ablate::v1::FAILED);
  runs[2].clear_result();
  auto analysis = analysis::Analyze(runs);
  ASSERT_TRUE(analysis.ok());
  EXPECT_EQ(analysis->failed, 2);
  EXPECT_EQ(analysis->cancelled, 1);
  const std::string table = FormatTable(*analysis);
  EXPECT_THAT(table, HasSubstr("(0 pending, 1 failed, 1 cancelled, 0 missing)"));
  EXPECT_THAT(table, HasSubstr("partial: 1 failed, 1 cancelled"));
  EXPECT_THAT(table, Not(HasSubstr("2 failed")));
  const auto j = nlohmann::json::parse(FormatJson(*analysis));
  EXPECT_EQ(j["cancelled"], 1);
  EXPECT_EQ(j["failed"], 2);
}

// η† and each verdict say how many seeds decided them: the fewest finished seeds at their
// deciding LRs (docs/report.md#refinement-and-pruning), in the tables, report.md and JSON.
TEST(WriteReport, EtaDaggerAndVerdictsSayHowManySeedsDecidedThem) {
  auto runs = StudyRuns();
  runs[1].set_state(ablate::v1::SUCCEEDED);  // a complete sweep
  *runs[1].mutable_result() = runs[0].result();
  auto analysis = analysis::Analyze(runs);
  ASSERT_TRUE(analysis.ok()) << analysis.status();
  const std::string table = FormatTable(*analysis);
  EXPECT_THAT(table, testing::ContainsRegex("eta-dagger +seeds +how\n"));
  EXPECT_THAT(table, testing::ContainsRegex("layernorm vs none +[0-9.e-]+ +2 +interpolated"));
  EXPECT_THAT(table, HasSubstr(" [seeds: 2]\n"));
  const std::string md = FormatMarkdown(*analysis, {});
  EXPECT_THAT(md, testing::ContainsRegex("\\| layernorm vs none \\| [0-9.e-]+ \\| 2 \\| "
                                         "interpolated"));
  EXPECT_THAT(md, HasSubstr(" [seeds: 2]\n"));
  auto j = nlohmann::json::parse(FormatJson(*analysis));
  EXPECT_EQ(j["necessity"][0]["seeds"], 2);
  EXPECT_EQ(j["necessity"][0]["deciding_lrs"], nlohmann::json({0.001, 0.01}));
  for (const auto& v : j["verdicts"]) EXPECT_EQ(v["seeds"], 2) << v["line"];

  // One seed of layernorm at depth 2 and lr 0.001 (a deciding LR of its η†) fewer.
  ASSERT_EQ(runs[13].grid_values().at("qk_norm"), "layernorm");
  ASSERT_EQ(runs[13].grid_values().at("n_layer"), "2");
  ASSERT_EQ(runs[13].grid_values().at("lr"), "0.001");
  runs.erase(runs.begin() + 13);
  analysis = analysis::Analyze(runs);
  ASSERT_TRUE(analysis.ok()) << analysis.status();
  j = nlohmann::json::parse(FormatJson(*analysis));
  EXPECT_EQ(j["necessity"][0]["seeds"], 1);
  EXPECT_EQ(j["necessity"][1]["seeds"], 2);  // depth 8 still rests on 2
  EXPECT_THAT(FormatTable(*analysis),
              testing::ContainsRegex("layernorm vs none +[0-9.e-]+ +1 +interpolated"));
}

TEST(WriteReport, BoundariesTheRefinementBudgetLeftUnresolvedAreMarked) {
  auto runs = StudyRuns();
  runs[1].set_state(ablate::v1::SUCCEEDED);  // a complete sweep
  *runs[1].mutable_result() = runs[0].result();
  auto analysis = analysis::Analyze(runs);
  ASSERT_TRUE(analysis.ok()) << analysis.status();
  // A spent budget: none's max stable bracket at depth 8, (0.01, 0.1), and both η† brackets,
  // (0.001, 0.01), stay wider than until_ratio.
  ablate::v1::RefineStatus rule;
  rule.set_axis("lr");
  rule.add_boundaries("max_stable");
  rule.add_boundaries("eta_dagger");
  rule.set_until_ratio(1.3);
  rule.set_max_new_runs(0);
  ASSERT_TRUE(analysis::MarkUnresolvedByBudget(runs, rule, &*analysis).ok());
  EXPECT_EQ(analysis->unresolved_by_budget, 3);
  const std::string table = FormatTable(*analysis);
  EXPECT_THAT(table, testing::ContainsRegex("max stable LR +qk_norm=none n_layer=8 +0.01 +"
                                            "\\(0.01, 0.1\\) +10 \\[unresolved by budget\\]"));
  EXPECT_THAT(table, testing::ContainsRegex("max stable LR +qk_norm=layernorm n_layer=8 +0.1 "
                                            "+\\(0.1, open\\) +open\n"));
  EXPECT_THAT(table, testing::ContainsRegex("eta-dagger +n_layer=2 layernorm vs none .*"
                                            "\\[unresolved by budget\\]"));
  EXPECT_THAT(table, HasSubstr("note: 3 boundaries left unresolved by the refinement budget"));
  const auto j = nlohmann::json::parse(FormatJson(*analysis));
  EXPECT_EQ(j["unresolved_by_budget"], 3);
  EXPECT_TRUE(j["curves"][1]["max_stable_unresolved_by_budget"].get<bool>());  // none, depth 8
  EXPECT_FALSE(j["curves"][0]["max_stable_unresolved_by_budget"].get<bool>());
  EXPECT_TRUE(j["necessity"][0]["unresolved_by_budget"].get<bool>());
  const auto figures = BuildFigures(*analysis, "t", Terminals{});
  const Figure* f8 = FindFigure(figures, "loss_vs_lr__n_layer_8");
  ASSERT_NE(f8, nullptr);
  EXPECT_THAT(f8->script, HasSubstr("set object rect from 0.01, graph 0 to 0.1, graph 1"));
  EXPECT_THAT(f8->caption, HasSubstr("unresolved by the refinement budget"));
  EXPECT_THAT(FindFigure(figures, "loss_vs_lr__n_layer_2")->script,
              Not(HasSubstr("set object rect")));
  const Figure* eta = FindFigure(figures, "eta_dagger");
  ASSERT_NE(eta, nullptr);
  EXPECT_THAT(eta->script, HasSubstr("with yerrorbars"));
  EXPECT_THAT(eta->script, HasSubstr("unresolved by budget"));
  EXPECT_THAT(eta->data, HasSubstr(" 0.001 0.01 0\n"));
  // gnuplot draws them: no warning, every PNG written.
  const std::string dir = TempDir() + "/out";
  auto written = WriteReport(*analysis, runs, ReportOptions{}, dir);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_THAT(written->warnings, testing::IsEmpty());
  EXPECT_TRUE(std::filesystem::exists(dir + "/eta_dagger.png"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/loss_vs_lr__n_layer_8.png"));
  EXPECT_THAT(Slurp(dir + "/report.md"), HasSubstr("[unresolved by budget]"));
}

TEST(Formats, TableMarkdownAndJsonCarryTheFigures) {
  auto analysis = analysis::Analyze(StudyRuns());
  ASSERT_TRUE(analysis.ok());
  const std::string table = FormatTable(*analysis);
  EXPECT_THAT(
      table,
      HasSubstr(
          "note: partial: 23 of 24 runs finished (1 pending, 0 failed, 0 cancelled, 0 missing)"));
  EXPECT_THAT(table, HasSubstr("qk_norm"));
  EXPECT_THAT(table, HasSubstr("H2 ("));
  // depth 8, none: losses 3.005, 3.305, diverged (8.3): η* 0.001, max stable 0.01.
  EXPECT_THAT(table, testing::ContainsRegex("none +8 +0.001 +3.005 .* 0.01 "));

  const auto j = nlohmann::json::parse(FormatJson(*analysis));
  EXPECT_EQ(j["baseline"], "none");
  EXPECT_EQ(j["curves"].size(), 4u);
  EXPECT_EQ(j["curves"][1]["moderator"], "8");
  EXPECT_DOUBLE_EQ(j["curves"][1]["max_stable_lr"].get<double>(), 0.01);
  EXPECT_TRUE(j["necessity"][0]["eta_dagger"].is_null() ||
              j["necessity"][0]["eta_dagger"].is_number());
  EXPECT_EQ(j["verdicts"].size(), 3u);
  EXPECT_TRUE(j["partial"].get<bool>());
}

TEST(Provenance, UniformSweepHasNoMixedColumnOrMark) {
  auto a = analysis::Analyze(StudyRuns());
  ASSERT_TRUE(a.ok());
  EXPECT_THAT(FormatTable(*a), testing::Not(HasSubstr("mixed")));
  EXPECT_THAT(FormatMarkdown(*a, {}), testing::Not(HasSubstr("mixed")));
  const auto cells = Lines(CellsCsv(*a));
  ASSERT_EQ(cells.size(), 13u);
  for (size_t i = 1; i < cells.size(); ++i) {
    EXPECT_EQ(Field(cells[0], cells[i], "mixed"), "") << cells[i];
  }
  const auto j = nlohmann::json::parse(FormatJson(*a));
  EXPECT_TRUE(j["mixed"].empty());
  EXPECT_TRUE(j["curves"][0]["points"][0]["mixed"].empty());
  EXPECT_EQ(j["curves"][0]["points"][0]["provenance"][0]["dtype"], "bfloat16");
  EXPECT_TRUE(analysis::RequireUniform(*a).ok());
}

TEST(Provenance, MixedCellsAndPairsShowInEveryFormat) {
  const auto runs = MixedStudyRuns();
  auto a = analysis::Analyze(runs);
  ASSERT_TRUE(a.ok());
  const std::string cell =
      "cell lr=0.001,n_layer=8,qk_norm=none: cuda/bfloat16 (1 run) vs mps/float32 (1 run)";
  const std::string dtype_pair =
      "pair lr=0.01,n_layer=2: qk_norm=none bfloat16 (2 runs) vs qk_norm=layernorm float32 (2 "
      "runs)";

  // Terminal: every mixed place listed, a "mixed" column, marked verdicts.
  const std::string table = FormatTable(*a);
  EXPECT_THAT(table, HasSubstr("mixed: " + cell + "\n"));
  EXPECT_THAT(table, HasSubstr("mixed: " + dtype_pair + "\n"));
  EXPECT_THAT(table,
              HasSubstr("mixed: pair lr=0.001,n_layer=8: qk_norm=none cuda/bfloat16 (1 run) + "
                        "mps/float32 (1 run) vs qk_norm=layernorm cuda/bfloat16 (2 runs)\n"));
  EXPECT_THAT(table, testing::ContainsRegex("status +mixed\n"));
  EXPECT_THAT(table, testing::ContainsRegex("none +8 .*complete +device kind, dtype\n"));
  EXPECT_THAT(table, testing::ContainsRegex("layernorm +2 .*complete +-\n"));
  EXPECT_THAT(table, HasSubstr("[rests on mixed runs: device kind, dtype differ]"));

  // report.md: the list, and marks on the loss-vs-LR cells and the eta-dagger rows.
  const std::string md = FormatMarkdown(*a, {});
  EXPECT_THAT(md, HasSubstr("## Mixed runs"));
  EXPECT_THAT(md, HasSubstr("- " + cell + "\n"));
  EXPECT_THAT(md, HasSubstr("- " + dtype_pair + "\n"));
  EXPECT_THAT(md, HasSubstr("(n=2) [mixed: device kind, dtype] |"));
  EXPECT_THAT(md,
              testing::ContainsRegex("\\| 2 \\| layernorm vs none \\| .* \\[mixed: dtype\\] \\|"));

  // cells.csv: what differs, and every stack a cell ran on.
  const auto cells = Lines(CellsCsv(*a));
  int mixed_rows = 0;
  for (size_t i = 1; i < cells.size(); ++i) {
    const std::string mixed = Field(cells[0], cells[i], "mixed");
    if (mixed.empty()) continue;
    ++mixed_rows;
    EXPECT_EQ(mixed, "device kind; dtype");
    EXPECT_EQ(Field(cells[0], cells[i], "n_layer"), "8");
    EXPECT_EQ(Field(cells[0], cells[i], "lr"), "0.001");
    EXPECT_EQ(Field(cells[0], cells[i], "provenance"),
              "cuda/bfloat16/torch 2.1.0/tokenizer 9f86d081884c (1 run); mps/float32/torch "
              "2.1.0/tokenizer 9f86d081884c (1 run)");
  }
  EXPECT_EQ(mixed_rows, 1);

  // runs.csv: the laptop's run reads mps although it predates device_kind.
  const auto rows = Lines(RunsCsv(runs));
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].result().device() != "mps") continue;
    EXPECT_EQ(Field(rows[0], rows[i + 1], "device_kind"), "mps");
    EXPECT_EQ(Field(rows[0], rows[i + 1], "dtype"), "float32");
  }

  // JSON: the list, and the flags on points, curves, eta-dagger rows and verdicts.
  const auto j = nlohmann::json::parse(FormatJson(*a));
  ASSERT_FALSE(j["mixed"].empty());
  EXPECT_EQ(j["mixed"][0]["kind"], "cell");
  EXPECT_EQ(j["mixed"][0]["where"], "lr=0.001,n_layer=8,qk_norm=none");
  EXPECT_EQ(j["mixed"][0]["differs"], nlohmann::json({"device kind", "dtype"}));
  EXPECT_EQ(j["curves"][1]["moderator"], "8");
  EXPECT_EQ(j["curves"][1]["points"][0]["mixed"], nlohmann::json({"device kind", "dtype"}));
  EXPECT_EQ(j["curves"][1]["points"][0]["provenance"].size(), 2u);
  EXPECT_EQ(j["necessity"][0]["mixed"], nlohmann::json({"dtype"}));
  EXPECT_EQ(j["verdicts"][0]["mixed"], nlohmann::json({"device kind", "dtype"}));

  // --require-uniform's error names each of them.
  const auto status = analysis::RequireUniform(*a);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr(cell));
  EXPECT_THAT(std::string(status.message()), HasSubstr(dtype_pair));
}

TEST(Export, RoundTripsSweepRunsAndMetrics) {
  Export data;
  data.sweep.set_id(7);
  data.sweep.set_name("q'uote\"d,sweep");
  data.sweep.set_spec_yaml("name: x\ngrid: {lr: [0.1]}\n");
  data.sweep.add_axes("lr");
  data.runs = MixedStudyRuns();
  data.metrics = {{1, 0, "train_loss", 8.31}, {1, 10, "weird,\"name\"", -1e-300}};
  const std::string dir = TempDir() + "/export";
  ASSERT_TRUE(WriteExport(data, dir).ok());
  auto back = ReadExport(dir);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->sweep.SerializeAsString(), data.sweep.SerializeAsString());
  ASSERT_EQ(back->runs.size(), data.runs.size());
  for (size_t i = 0; i < data.runs.size(); ++i) {
    EXPECT_EQ(back->runs[i].id(), data.runs[i].id());
    EXPECT_EQ(back->runs[i].state(), data.runs[i].state());
    EXPECT_EQ(back->runs[i].grid_values().at("lr"), data.runs[i].grid_values().at("lr"));
    EXPECT_EQ(back->runs[i].result().final_val_loss(), data.runs[i].result().final_val_loss());
    EXPECT_EQ(back->runs[i].result().final_probes().size(),
              data.runs[i].result().final_probes().size());
    EXPECT_TRUE(back->runs[i].result().final_probes().empty() ||
                back->runs[i].result().final_probes().at("max_attn_logit") ==
                    data.runs[i].result().final_probes().at("max_attn_logit"));
    EXPECT_EQ(back->runs[i].result().device_kind(), data.runs[i].result().device_kind());
    EXPECT_EQ(back->runs[i].result().dtype(), data.runs[i].result().dtype());
    EXPECT_EQ(back->runs[i].result().torch_version(), data.runs[i].result().torch_version());
    EXPECT_EQ(back->runs[i].result().tokenizer_sha256(), data.runs[i].result().tokenizer_sha256());
  }
  // `report --from` sees the same mixed cells and pairs as the report from the server did.
  auto before = analysis::Analyze(data.runs);
  auto after = analysis::Analyze(back->runs);
  ASSERT_TRUE(before.ok() && after.ok());
  ASSERT_EQ(after->mixed.size(), before->mixed.size());
  EXPECT_FALSE(after->mixed.empty());
  for (size_t i = 0; i < before->mixed.size(); ++i) {
    EXPECT_EQ(after->mixed[i].Line(), before->mixed[i].Line());
  }
  ASSERT_EQ(back->metrics.size(), 2u);
  EXPECT_EQ(back->metrics[1].name, "weird,\"name\"");
  EXPECT_EQ(back->metrics[1].value, -1e-300);
  EXPECT_EQ(back->metrics[1].step, 10);

  // Without metrics.csv: still readable. A broken line: named with file and line.
  std::filesystem::remove(dir + "/metrics.csv");
  EXPECT_TRUE(ReadExport(dir).ok());
  std::ofstream(dir + "/runs.jsonl", std::ios::app) << "{\"id\": \"not a number\"}\n";
  auto broken = ReadExport(dir);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("runs.jsonl:25"));
  EXPECT_FALSE(ReadExport(dir + "/nope").ok());
  std::filesystem::remove_all(dir);
}

// Issue #24 item 9: runs.jsonl names states as `status -o json`, the tables and the CSVs do
// ("succeeded"); an export written before (the proto's "SUCCEEDED") still reads.
TEST(Export, RunStatesAreLowerCaseAndOldExportsStillRead) {
  Export data;
  data.sweep.set_id(7);
  data.runs = MixedStudyRuns();
  data.runs[0].set_state(v1::SKIPPED);
  data.with_metrics = false;
  const std::string dir = TempDir() + "/export-states";
  ASSERT_TRUE(WriteExport(data, dir).ok());
  std::ifstream in(dir + "/runs.jsonl");
  std::string line, old_casing;
  std::set<std::string> states;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    states.insert(j["state"].get<std::string>());
    // What an older build wrote: the proto's enum names.
    std::string upper = j["state"].get<std::string>();
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    auto old = j;
    old["state"] = upper;
    old_casing += old.dump() + "\n";
  }
  EXPECT_EQ(states, (std::set<std::string>{"diverged", "queued", "skipped", "succeeded"}));
  std::ofstream(dir + "/runs.jsonl", std::ios::trunc) << old_casing;
  auto back = ReadExport(dir);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->runs.size(), data.runs.size());
  for (size_t i = 0; i < data.runs.size(); ++i) {
    EXPECT_EQ(back->runs[i].state(), data.runs[i].state()) << i;
  }
  std::filesystem::remove_all(dir);
}

TEST(Csv, QuotesAndSplitsBack) {
  const std::vector<std::string> fields = {"plain", "a,b", "say \"hi\"", ""};
  const std::string line = CsvLine(fields);
  EXPECT_EQ(line, "plain,\"a,b\",\"say \"\"hi\"\"\",\n");
  auto back = SplitCsvLine(line.substr(0, line.size() - 1));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, fields);
  EXPECT_FALSE(SplitCsvLine("\"open").ok());
}

}  // namespace
}  // namespace ablate::report
