// Report files from a hand-built run set; the export format round trip; CSV quoting.
#include "common/report/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/analysis/inference.h"
#include "common/analysis/refine.h"
#include "common/analysis/stats.h"
#include "common/report/csv.h"
#include "common/report/export.h"
#include "common/report/figures.h"
#include "common/report/tables.h"
#include "nlohmann/json.hpp"

namespace ablate::report {
namespace {

using ablate::v1::Run;
using analysis::IntervalText;
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

// A value in [-1, 1) fixed by a run's id (splitmix64): seed noise that is the same on every
// platform and unrelated between cells.
double Jitter(int64_t id) {
  uint64_t z = static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / static_cast<double>(1ull << 52) - 1;
}

// 2 variants x 2 depths x 3 LRs x `seeds` seeds, all on one CUDA/bfloat16 stack; layernorm never
// diverges, none diverges at 0.1 for depth 8. Seed s adds 0.01 s nats, and each run up to `noise`
// more (Jitter).
std::vector<Run> GridRuns(int seeds, double noise) {
  std::vector<Run> runs;
  const char* lrs[] = {"0.001", "0.01", "0.1"};
  int64_t id = 0;
  for (const char* variant : {"none", "layernorm"}) {
    for (const char* depth : {"2", "8"}) {
      for (int i = 0; i < 3; ++i) {
        for (int seed = 0; seed < seeds; ++seed) {
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
            const double loss = 3.0 + 0.1 * i * (std::string(variant) == "none" ? 3 : 1) +
                                0.01 * seed + noise * Jitter(id);
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
  return runs;
}

// GridRuns with 2 seeds and no noise; one run still queued so the report is partial.
std::vector<Run> StudyRuns() {
  auto runs = GridRuns(2, 0);
  // One run not finished yet: the report must say it is partial.
  runs[1].set_state(ablate::v1::QUEUED);
  runs[1].clear_result();
  return runs;
}

// GridRuns with 3 seeds and 0.03 nats of noise, complete; one of none's three seeds at depth 2
// diverged at 0.1 (the others trained).
std::vector<Run> NoisyRuns() {
  auto runs = GridRuns(3, 0.03);
  for (auto& r : runs) {
    const auto& g = r.grid_values();
    if (g.at("qk_norm") == "none" && g.at("n_layer") == "2" && g.at("lr") == "0.1" &&
        r.seed() == 2) {
      r.set_state(ablate::v1::DIVERGED);
      r.mutable_result()->set_diverged(true);
      r.mutable_result()->set_diverged_step(300);
      r.mutable_result()->clear_final_val_loss();
    }
  }
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

// Writes `a`'s report with gnuplot and expects no warning and each of `pngs` drawn; returns the
// directory.
std::string ExpectGnuplotDraws(const analysis::Analysis& a, const std::vector<Run>& runs,
                               const std::vector<std::string>& pngs) {
  const std::string dir = TempDir() + "/out";
  auto written = WriteReport(a, runs, ReportOptions{}, dir);
  EXPECT_TRUE(written.ok()) << written.status();
  if (written.ok()) {
    EXPECT_THAT(written->warnings, testing::IsEmpty());
  }
  for (const auto& png : pngs) EXPECT_TRUE(std::filesystem::exists(dir + "/" + png)) << png;
  return dir;
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
  // LR sensitivity is the capped curve's area over [3e-4, 0.3] per decade, the ends carried
  // flat: 0 up to 1e-3, 0.15 from there to 1e-2, then up to the refined 0.0316228 and l0 = 8.3
  // beyond it, (0.15 + 1.399 + 2.648 + 2.526) / 3 = 2.241; the finished LRs span 1e-3..0.3, 83%
  // of the range.
  EXPECT_THAT(table, testing::ContainsRegex("none +8 +0.001 [^\n]* 2.241 \\[[0-9.]+, [0-9.]+\\] "
                                            "\\(cov 83%\\) \\(1 LR inferred\\) "));
  EXPECT_THAT(md, HasSubstr("(1 LR inferred)"));
  const std::string sens = Slurp(dir + "/lr_sensitivity.gp");
  EXPECT_THAT(sens, HasSubstr("'rests on inferred points'"));
  EXPECT_THAT(Slurp(dir + "/lr_sensitivity.dat"), HasSubstr("1 \"8\" 2.240868747 ? ? ? 1 "));
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
  EXPECT_THAT(cells, testing::Contains(testing::AllOf(
                         testing::StartsWith(",none,8,0.1,8.3,8.3,0,2,2,0,0,0,,4023.872394,never,,"
                                             "cuda/bfloat16/torch 2.1.0/tokenizer 9f86d081884c (2 "
                                             "runs),0,0,"),
                         testing::EndsWith(",0,0,1.5,1000"))));

  const std::string md = Slurp(dir + "/report.md");
  EXPECT_THAT(md, HasSubstr("# study (partial)"));
  EXPECT_THAT(md, HasSubstr("![loss_vs_lr__n_layer_2.png](loss_vs_lr__n_layer_2.png)"));
  EXPECT_THAT(md, testing::ContainsRegex("\\| 0.1 \\| 8.3 ± 0 [^|]*\\(n=2, 2 diverged\\) \\|"));
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
  EXPECT_THAT(table,
              testing::ContainsRegex("layernorm vs none +[0-9.e-]+ \\[[0-9.e-]+, [0-9.e-]+\\] "
                                     "+2 +interpolated"));
  EXPECT_THAT(table, HasSubstr(" [seeds: 2] [test: "));
  const std::string md = FormatMarkdown(*analysis, {});
  EXPECT_THAT(md, testing::ContainsRegex("\\| layernorm vs none \\| [0-9.e-]+ "
                                         "\\[[0-9.e-]+, [0-9.e-]+\\] \\| 2 \\| interpolated"));
  EXPECT_THAT(md, HasSubstr(" [seeds: 2] [test: "));
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
              testing::ContainsRegex("layernorm vs none +[0-9.e-]+ \\[[0-9.e-]+, [0-9.e-]+\\] +1 "
                                     "+interpolated"));
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
  EXPECT_THAT(eta->data, HasSubstr(" 0.001 0.01 0 "));  // the bracket, not inferred
  // gnuplot draws them: no warning, every PNG written.
  const std::string dir =
      ExpectGnuplotDraws(*analysis, runs, {"eta_dagger.png", "loss_vs_lr__n_layer_8.png"});
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
  EXPECT_THAT(table, testing::ContainsRegex("none +8 +0.001 \\[[^]]*\\] +3.005 .* 0.01 \\[0.01, "
                                            "0.01\\] "));

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

// Uncertainty: every figure a report prints with its seed-bootstrap interval, and every verdict
// with the test that decided it (docs/report.md#uncertainty).

// `s` with the characters a POSIX extended regex treats specially escaped.
std::string Re(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// The data line of `figure` for moderator position `m` ("1 \"8\" ..."), split at spaces.
std::vector<std::string> DataRow(const std::string& data, const std::string& block_label,
                                 size_t m) {
  const size_t block = data.find(absl::StrCat("# ", block_label, "\n"));
  EXPECT_NE(block, std::string::npos) << block_label;
  for (const auto& line : Lines(data.substr(block))) {
    if (line.starts_with(absl::StrCat(m, " \""))) return absl::StrSplit(line, ' ');
  }
  ADD_FAILURE() << "no row " << m << " under " << block_label;
  return {};
}

// The loss-vs-LR data row at `lr` under the block `# <block_label>`, split at spaces.
std::vector<std::string> DataRowAt(const std::string& data, const std::string& block_label,
                                   const std::string& lr) {
  const size_t block = data.find(absl::StrCat("# ", block_label, "\n"));
  EXPECT_NE(block, std::string::npos) << block_label;
  for (const auto& line : Lines(data.substr(block))) {
    if (line.starts_with(lr + " ")) return absl::StrSplit(line, ' ');
  }
  ADD_FAILURE() << "no row at " << lr << " under " << block_label;
  return {};
}

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(Uncertainty, TablesShowEachFigureWithItsInterval) {
  auto a = analysis::Analyze(NoisyRuns());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->bootstrap_resamples, 1000);
  const std::string table = FormatTable(*a);
  const std::string md = FormatMarkdown(*a, {});
  EXPECT_THAT(table, testing::ContainsRegex("LR sens\\. +LRS \\(paper\\) +max stable LR"));
  for (const auto& c : a->curves) {
    SCOPED_TRACE(c.variant + " " + c.moderator);
    ASSERT_TRUE(c.opt_lr_ci && c.opt_loss_ci && c.lr_sensitivity_ci && c.max_stable_ci &&
                c.max_good_ci && c.lr_sensitivity_paper);
    // eta*, loss*, ppl*, LR sensitivity (its LRs 1e-3..0.1 span 67% of [3e-4, 0.3]), the paper's
    // estimator, max stable and max good LR.
    const std::string row = absl::StrCat(
        c.variant, " +", c.moderator, " +", Re(Fmt(c.opt_lr) + IntervalText(c.opt_lr_ci)), " +",
        Re(Fmt(c.opt_loss) + IntervalText(c.opt_loss_ci)), " +[0-9.]+ +",
        Re(Fmt(c.lr_sensitivity) + IntervalText(c.lr_sensitivity_ci)), " \\(cov 67%\\) +",
        Re(Fmt(c.lr_sensitivity_paper)), " +",
        Re(Fmt(c.max_stable_lr) + IntervalText(c.max_stable_ci, true)), " +",
        Re(Fmt(c.max_good_lr) + IntervalText(c.max_good_ci, true)), " ");
    EXPECT_THAT(table, testing::ContainsRegex(row));
    EXPECT_THAT(table, testing::ContainsRegex(absl::StrCat(
                           c.variant, " +", c.moderator, " +[0-9.]+ \\[[0-9.e-]+, [0-9.e-]+\\] ")));
  }
  ASSERT_EQ(a->necessity.size(), 2u);
  for (const auto& n : a->necessity) {
    SCOPED_TRACE(n.moderator);
    ASSERT_TRUE(n.eta_dagger && n.eta_dagger_ci);
    EXPECT_THAT(table,
                testing::ContainsRegex(absl::StrCat(
                    "layernorm vs none +", Re(Fmt(n.eta_dagger) + IntervalText(n.eta_dagger_ci)),
                    " +3 +interpolated")));
    EXPECT_THAT(md, HasSubstr(absl::StrCat("| layernorm vs none | ", Fmt(n.eta_dagger),
                                           IntervalText(n.eta_dagger_ci), " | 3 |")));
  }
  const std::string intervals =
      "intervals: 95% seed-bootstrap percentile intervals, 1000 resamples, seed 20261203 "
      "(docs/report.md#uncertainty)";
  EXPECT_THAT(table, HasSubstr(intervals + "\n"));
  EXPECT_THAT(md, HasSubstr(intervals + ". LR sens.: "));
  // report.md's loss table: each mean with its t-interval.
  const analysis::Point& p = a->curves[0].points[0];
  ASSERT_TRUE(p.loss_ci);
  EXPECT_THAT(md,
              HasSubstr(absl::StrCat(" ± ", Fmt(p.loss_std), IntervalText(p.loss_ci), " (n=3) |")));

  // No resamples, no intervals: the values alone, and no line about them.
  analysis::Options options;
  options.bootstrap_resamples = 0;
  a = analysis::Analyze(NoisyRuns(), options);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string bare = FormatTable(*a);
  EXPECT_THAT(bare, Not(HasSubstr("intervals:")));
  const auto& c = a->curves[0];
  EXPECT_THAT(bare, testing::ContainsRegex(absl::StrCat(
                        "none +2 +", Re(Fmt(c.opt_lr)), " +", Re(Fmt(c.opt_loss)), " +[0-9.]+ +",
                        Re(Fmt(c.lr_sensitivity)), " \\(cov 67%\\) +[0-9.]+ +",
                        Re(Fmt(c.max_stable_lr)), " +", Re(Fmt(c.max_good_lr)), " ")));
}

// An interval in the JSON against the analysis: [lo, hi], null for an infinite end, null for
// none at all.
void ExpectCi(const nlohmann::json& j, const std::optional<analysis::Interval>& want,
              const std::string& what) {
  SCOPED_TRACE(what);
  if (!want) {
    EXPECT_TRUE(j.is_null()) << j;
    return;
  }
  ASSERT_TRUE(j.is_array() && j.size() == 2u) << j;
  for (const auto& [end, value] : {std::pair{j[0], want->lo}, std::pair{j[1], want->hi}}) {
    if (std::isfinite(value)) {
      EXPECT_DOUBLE_EQ(end.get<double>(), value);
    } else {
      EXPECT_TRUE(end.is_null()) << end;
    }
  }
}

void ExpectOpt(const nlohmann::json& j, const std::optional<double>& want,
               const std::string& what) {
  if (want) {
    EXPECT_DOUBLE_EQ(j.get<double>(), *want) << what;
  } else {
    EXPECT_TRUE(j.is_null()) << what << ": " << j;
  }
}

// Every object's keys in alphabetical order, at every level (nlohmann::ordered_json keeps them
// as written).
void ExpectSortedKeys(const nlohmann::ordered_json& j, const std::string& where) {
  if (j.is_object()) {
    std::string last;
    for (const auto& [key, value] : j.items()) {
      EXPECT_LT(last, key) << where;
      last = key;
      ExpectSortedKeys(value, absl::StrCat(where, ".", key));
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) ExpectSortedKeys(j[i], absl::StrCat(where, "[", i, "]"));
  }
}

// Columns a line takes on a terminal (code points).
size_t Columns(const std::string& line) {
  size_t n = 0;
  for (unsigned char c : line) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

// The words of `text`, in order: what a wrapped rendering must keep.
std::vector<std::string> Words(const std::string& text) {
  return absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty());
}

// Issue #39 item 6: the text report was over 200 columns wide (the summary with its intervals,
// eta-dagger's "how"). At a terminal's width every line fits and nothing is lost.
TEST(TextReport, EveryLineFitsTheTerminalAndKeepsEveryFigure) {
  auto a = analysis::Analyze(NoisyRuns());
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string wide = FormatTable(*a);
  size_t widest = 0;
  for (const auto& l : Lines(wide)) widest = std::max(widest, Columns(l));
  ASSERT_GT(widest, 120u) << wide;  // without a width: a row a line, as before
  for (int width : {80, 100, 60}) {
    SCOPED_TRACE(width);
    const std::string text = FormatTable(*a, width);
    for (const auto& l : Lines(text)) EXPECT_LE(Columns(l), static_cast<size_t>(width)) << l;
    // Every header and figure is still there: each curve's interval-carrying cells, each
    // eta-dagger with its "how", each verdict word for word.
    for (const char* header : {"eta*", "loss*", "ppl*", "LRS (paper)", "seeds", "status"}) {
      EXPECT_THAT(text, HasSubstr(header));
    }
    for (const auto& c : a->curves) {
      EXPECT_THAT(text, HasSubstr(Fmt(c.opt_lr) + IntervalText(c.opt_lr_ci)));
      EXPECT_THAT(text, HasSubstr(Fmt(c.opt_loss) + IntervalText(c.opt_loss_ci)));
    }
    for (const auto& n : a->necessity) {
      EXPECT_THAT(text, HasSubstr(Fmt(n.eta_dagger) + IntervalText(n.eta_dagger_ci)));
    }
    // The "how" sentences are notes under the eta-dagger table, numbered in its rows (at 60
    // columns the rest of the row is split in two blocks as well).
    EXPECT_THAT(text,
                testing::ContainsRegex(width >= 80 ? "vs none +[0-9.]+ \\[[^]]+\\] +3 +\\[1\\]"
                                                   : "vs none +3 +\\[1\\]"));
    EXPECT_THAT(text, testing::ContainsRegex("\n\\[1\\] interpolated: "));
    EXPECT_THAT(text, testing::ContainsRegex("\n\\[2\\] interpolated: "));
    const std::vector<std::string> words = Words(text);
    for (const auto& v : a->verdicts) {
      const std::vector<std::string> want = Words(VerdictLine(v));
      EXPECT_NE(std::search(words.begin(), words.end(), want.begin(), want.end()), words.end())
          << VerdictLine(v);
    }
  }
}

TEST(TextReport, RenderTextSplitsIntoBlocksLedByTheKeysAndWrapsOnlyWhatCannotFit) {
  Table t;
  t.header = {"variant", "depth", "a figure", "another figure", "a long sentence"};
  t.keys = 2;
  t.rows = {{"none", "2", "0.1234 [0.1, 0.2]", "5.678 [5.1, 6.2]",
             "one two three four five six seven eight nine ten eleven twelve"},
            {"layernorm", "8", "0.01", "6.0", "short"}};
  EXPECT_EQ(RenderText(t, 0), RenderText(t, 200));  // it fits: as it always was
  const std::string text = RenderText(t, 40);
  for (const auto& l : Lines(text)) EXPECT_LE(Columns(l), 40u) << l;
  // Three blocks, each led by the keys: its header starts "variant    depth".
  size_t headers = 0;
  for (const auto& l : Lines(text)) headers += absl::StartsWith(l, "variant    depth  ") ? 1 : 0;
  EXPECT_EQ(headers, 3u) << text;
  // Whole cells where they fit, the sentence wrapped at spaces under its own header.
  EXPECT_THAT(text, HasSubstr("none       2      0.1234 [0.1, 0.2]"));
  EXPECT_THAT(text, HasSubstr("5.678 [5.1, 6.2]"));
  EXPECT_THAT(Words(text), testing::IsSupersetOf(Words(t.rows[0][4])));
  // A word longer than the width is broken, never left wider.
  EXPECT_EQ(WrapText("abcdefghij klm", 4, 1), "abcd\n efg\n hij\n klm\n");
  EXPECT_EQ(WrapText("fits as is", 0), "fits as is\n");
}

TEST(Uncertainty, JsonAndCsvCarryTheIntervalsAndTests) {
  auto a = analysis::Analyze(NoisyRuns());
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string text = FormatJson(*a);
  const auto j = nlohmann::json::parse(text);
  ExpectSortedKeys(nlohmann::ordered_json::parse(text), "");
  EXPECT_EQ(j["uncertainty"]["method"], "seed bootstrap");
  EXPECT_EQ(j["uncertainty"]["resamples"], 1000);
  EXPECT_EQ(j["uncertainty"]["seed"], 20261203u);
  EXPECT_DOUBLE_EQ(j["uncertainty"]["level"].get<double>(), 0.95);
  EXPECT_DOUBLE_EQ(j["options"]["alpha"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(j["options"]["effect"].get<double>(), a->options.effect);
  EXPECT_DOUBLE_EQ(j["options"]["power"].get<double>(), a->options.power);
  EXPECT_DOUBLE_EQ(j["options"]["untrained_margin"].get<double>(), a->options.untrained_margin);
  EXPECT_EQ(j["options"]["bootstrap_resamples"], 1000);
  EXPECT_EQ(j["options"]["bootstrap_seed"], 20261203u);
  ASSERT_TRUE(j["adaptive_seed_cells"].is_array());
  EXPECT_EQ(j["adaptive_seed_cells"], nlohmann::json(a->adaptive_seed_cells));

  ASSERT_EQ(j["curves"].size(), a->curves.size());
  for (size_t i = 0; i < a->curves.size(); ++i) {
    const auto& c = a->curves[i];
    const auto& cj = j["curves"][i];
    SCOPED_TRACE(c.variant + " " + c.moderator);
    ASSERT_TRUE(c.opt_lr_ci && c.lr_sensitivity_ci && c.seed_sigma);
    ExpectCi(cj["opt_lr_ci"], c.opt_lr_ci, "opt_lr_ci");
    ExpectCi(cj["opt_loss_ci"], c.opt_loss_ci, "opt_loss_ci");
    ExpectCi(cj["lr_sensitivity_ci"], c.lr_sensitivity_ci, "lr_sensitivity_ci");
    ExpectCi(cj["max_stable_ci"], c.max_stable_ci, "max_stable_ci");
    ExpectCi(cj["max_good_ci"], c.max_good_ci, "max_good_ci");
    ExpectOpt(cj["lr_sensitivity_coverage"], c.lr_sensitivity_coverage, "coverage");
    EXPECT_NEAR(cj["lr_sensitivity_coverage"].get<double>(), 2.0 / 3, 1e-9);
    ExpectOpt(cj["lr_sensitivity_paper"], c.lr_sensitivity_paper, "paper");
    EXPECT_EQ(cj["paper_points"], c.paper_points);
    ExpectOpt(cj["seed_sigma"], c.seed_sigma, "seed_sigma");
    EXPECT_EQ(cj["seed_dof"], c.seed_dof);
    EXPECT_EQ(cj["opt_clamped"], c.opt_clamped);
    ASSERT_EQ(cj["points"].size(), c.points.size());
    for (size_t k = 0; k < c.points.size(); ++k) {
      const auto& p = c.points[k];
      const auto& pj = cj["points"][k];
      ExpectCi(pj["loss_ci"], p.loss_ci, absl::StrCat("loss_ci at ", p.lr_text));
      EXPECT_EQ(pj["n_extra_seeds"], p.n_extra_seeds);
      EXPECT_EQ(pj["n_untrained"], p.n_untrained);
      EXPECT_EQ(pj["n_diverged_grid"], p.n_diverged_grid);
    }
  }
  // none at depth 2, lr 0.1: one of the three seeds diverged.
  EXPECT_EQ(j["curves"][0]["points"][2]["n_diverged_grid"], 1);
  ASSERT_EQ(j["necessity"].size(), a->necessity.size());
  for (size_t i = 0; i < a->necessity.size(); ++i) {
    const auto& n = a->necessity[i];
    const auto& nj = j["necessity"][i];
    ASSERT_TRUE(n.eta_dagger_ci);
    ExpectCi(nj["eta_dagger_ci"], n.eta_dagger_ci, "eta_dagger_ci");
    EXPECT_DOUBLE_EQ(nj["never_share"].get<double>(), n.never_share);
    EXPECT_EQ(nj["censored"], n.censored);
    ExpectOpt(nj["censored_at"], n.censored_at, "censored_at");
    EXPECT_EQ(nj["censor_reason"], n.censor_reason);
  }
  ASSERT_EQ(j["verdicts"].size(), a->verdicts.size());
  for (size_t i = 0; i < a->verdicts.size(); ++i) {
    const auto& v = a->verdicts[i];
    const auto& vj = j["verdicts"][i];
    EXPECT_FALSE(v.test.empty());
    EXPECT_EQ(vj["test"], v.test);
    ExpectOpt(vj["p_value"], v.p_value, v.hypothesis);
    EXPECT_DOUBLE_EQ(vj["alpha"].get<double>(), v.alpha);
    EXPECT_EQ(vj["seeds_needed"], v.seeds_needed);
  }

  // The special ends: η† "never" in over alpha/2 of the resamples is a null upper end; max
  // stable LR "none" (below the smallest LR) is a 0.
  a->necessity[0].eta_dagger_ci = analysis::Interval{0.002, kInf};
  a->curves[0].max_stable_ci = analysis::Interval{0, 0.01};
  const auto special = nlohmann::json::parse(FormatJson(*a));
  EXPECT_EQ(special["necessity"][0]["eta_dagger_ci"], nlohmann::json({0.002, nullptr}));
  EXPECT_EQ(special["curves"][0]["max_stable_ci"], nlohmann::json({0, 0.01}));

  // cells.csv: each mean's t-interval.
  const auto cells = Lines(CellsCsv(*a));
  const auto& p = a->curves[0].points[0];
  ASSERT_TRUE(p.loss_ci);
  EXPECT_NEAR(std::stod(Field(cells[0], cells[1], "loss_ci_lo")), p.loss_ci->lo, 1e-9);
  EXPECT_NEAR(std::stod(Field(cells[0], cells[1], "loss_ci_hi")), p.loss_ci->hi, 1e-9);
  EXPECT_EQ(Field(cells[0], cells[1], "n_extra_seeds"), "0");
}

TEST(Uncertainty, FiguresDrawTheIntervals) {
  const auto runs = NoisyRuns();
  auto a = analysis::Analyze(runs);
  ASSERT_TRUE(a.ok()) << a.status();
  const auto figures = BuildFigures(*a, kSweepTitle, Terminals{});

  // η†: columns 8 and 9 of the data are its interval, drawn as bars.
  const Figure* eta = FindFigure(figures, "eta_dagger");
  ASSERT_NE(eta, nullptr);
  EXPECT_THAT(eta->data, HasSubstr("inferred ci_lo ci_hi ci_open"));
  for (size_t m = 0; m < a->moderators.size(); ++m) {
    const auto& n = a->necessity[m];
    ASSERT_EQ(n.moderator, a->moderators[m]);
    ASSERT_TRUE(n.eta_dagger_ci);
    const auto row = DataRow(eta->data, "layernorm vs none", m);
    ASSERT_EQ(row.size(), 11u);
    EXPECT_NEAR(std::stod(row[7]), n.eta_dagger_ci->lo, 1e-9 * n.eta_dagger_ci->lo);
    EXPECT_NEAR(std::stod(row[8]), n.eta_dagger_ci->hi, 1e-9 * n.eta_dagger_ci->hi);
    EXPECT_EQ(row[9], "0");
  }
  EXPECT_THAT(eta->script, HasSubstr(":($10 == 0 ? $8 : 1/0):(0):($9 - $8) with vectors heads"));
  EXPECT_THAT(eta->caption, HasSubstr("error bars: 95% seed-bootstrap intervals"));

  // LR sensitivity: bars, and a y axis from 0 (a 0.003-nat difference looked large on a
  // 0.067..0.071 axis).
  const Figure* sens = FindFigure(figures, "lr_sensitivity");
  ASSERT_NE(sens, nullptr);
  const auto [y0, y1] = RangeOf(sens->script, 'y');
  EXPECT_EQ(y0, 0);
  double top = 0;
  for (const auto& c : a->curves) top = std::max(top, c.lr_sensitivity_ci->hi);
  EXPECT_GT(y1, top);
  EXPECT_THAT(sens->script, HasSubstr("with vectors heads"));
  EXPECT_THAT(sens->caption, HasSubstr("axis from 0"));
  const auto& none8 = *a->FindCurve("", "none", "8");
  const auto row = DataRow(sens->data, "qk_norm=none", 1);
  ASSERT_EQ(row.size(), 11u);
  EXPECT_NEAR(std::stod(row[7]), none8.lr_sensitivity_ci->lo, 1e-9);
  EXPECT_NEAR(std::stod(row[8]), none8.lr_sensitivity_ci->hi, 1e-9);

  // Loss vs LR: the band is the t-interval of the mean of the seeds that trained; an x at l0
  // where a seed diverged.
  const Figure* f2 = FindFigure(figures, "loss_vs_lr__n_layer_2");
  ASSERT_NE(f2, nullptr);
  const auto& none2 = *a->FindCurve("", "none", "2");
  const auto& p = none2.points[2];  // lr 0.1: 1 of 3 seeds diverged, so its mean averages a cap
  ASSERT_EQ(p.n_diverged, 1);
  EXPECT_FALSE(p.loss_ci);  // the analysis gives the capped mean no interval
  // Issue #39 item 7: the band there ran past l0 and below every measured loss (a diverged
  // seed's l0 averaged with seeds that trained); it is now over the two seeds that trained.
  std::vector<double> trained;
  for (const auto& sv : p.seed_values) {
    if (!sv.diverged) trained.push_back(sv.loss);
  }
  ASSERT_EQ(trained.size(), 2u);
  const double stable_mean = (trained[0] + trained[1]) / 2;
  const auto mixed_row = DataRowAt(f2->data, "qk_norm=none", "0.1");
  ASSERT_EQ(mixed_row.size(), 10u);
  const double lo = std::stod(mixed_row[2]), hi = std::stod(mixed_row[3]);
  EXPECT_NEAR((lo + hi) / 2, stable_mean, 1e-9);  // around the seeds that trained
  EXPECT_LT(hi, *p.l0);                           // not past l0
  EXPECT_LT(hi, *p.loss);                         // the capped mean (l0 in it) lies above the band
  EXPECT_NEAR(
      hi - lo,
      2 * analysis::StudentTQuantile(0.975, none2.seed_dof) * *none2.seed_sigma / std::sqrt(2.0),
      1e-9);
  EXPECT_NEAR(std::stod(mixed_row[9]), *p.l0, 1e-9);  // where the x is drawn
  const auto& q = none2.points[1];                    // lr 0.01: every seed trained
  ASSERT_TRUE(q.loss_ci);
  EXPECT_THAT(f2->data,
              HasSubstr(absl::StrCat("\n0.01 ", absl::StrFormat("%.10g", *q.loss), " ",
                                     absl::StrFormat("%.10g", q.loss_ci->lo), " ",
                                     absl::StrFormat("%.10g", q.loss_ci->hi), " 3 0 0 0 ")));
  EXPECT_THAT(f2->script, HasSubstr("using 1:($6 > $7 ? $10 : 1/0) with points pt 2"));
  EXPECT_THAT(f2->caption,
              HasSubstr("band: 95% t-interval of the mean of the seeds that did not diverge"));
  EXPECT_THAT(f2->caption, HasSubstr("x: a seed diverged, drawn at l0"));
  // One key entry for the marker however many variants have it: say a layernorm seed at depth 2
  // diverged too.
  auto both = *a;
  both.curves[2].points[2].n_diverged = 1;
  ASSERT_EQ(both.curves[2].variant, "layernorm");
  const Figure* twice =
      FindFigure(BuildFigures(both, kSweepTitle, Terminals{}), "loss_vs_lr__n_layer_2");
  ASSERT_NE(twice, nullptr);
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(twice->script, "with points pt 2 "), 2u);
  EXPECT_EQ(count(twice->script, "title 'a seed diverged (at l0)'"), 1u);

  // gnuplot draws every one of them.
  ExpectGnuplotDraws(*a, runs, {"eta_dagger.png", "lr_sensitivity.png"});
}

// η† without a value: "never" (the comparison covered every LR both variants finished) or
// censored ("not up to X"); an interval whose upper end is never.
TEST(Uncertainty, NeverCensoredAndOpenEtaDaggerAreToldApart) {
  const auto runs = NoisyRuns();
  auto a = analysis::Analyze(runs);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->necessity.size(), 2u);
  // Depth 2: never necessary, but at 0.002 in some resamples.
  auto& never = a->necessity[0];
  ASSERT_EQ(never.moderator, "2");
  never.eta_dagger.reset();
  never.censored = false;
  never.eta_dagger_ci = analysis::Interval{0.002, kInf};
  // Depth 8: not necessary up to 0.01, where layernorm stops training a good model.
  auto& censored = a->necessity[1];
  censored.eta_dagger.reset();
  censored.censored = true;
  censored.censored_at = 0.01;
  censored.censor_reason = "layernorm is not good above lr=0.01";
  censored.eta_dagger_ci = analysis::Interval{kInf, kInf};

  const std::string table = FormatTable(*a);
  EXPECT_THAT(table, testing::ContainsRegex(
                         "layernorm vs none +never \\[0.002, never\\] +3 +never necessary: "));
  EXPECT_THAT(table, testing::ContainsRegex("layernorm vs none +not up to 0.01 \\[never, never\\] "
                                            "+3 +censored: layernorm is not good above "
                                            "lr=0.01"));
  EXPECT_THAT(table, testing::ContainsRegex("eta-dagger +n_layer=8 layernorm vs none +not up to "
                                            "0.01 "));

  const auto figures = BuildFigures(*a, kSweepTitle, Terminals{});
  const Figure* eta = FindFigure(figures, "eta_dagger");
  ASSERT_NE(eta, nullptr);
  // "never" marks depth 2 only; depth 8 is a lower bound at 0.01, not "never".
  int labels = 0;
  for (const auto& line : Lines(eta->script)) labels += line.starts_with("set label 'never'");
  EXPECT_EQ(labels, 1);
  const auto row2 = DataRow(eta->data, "layernorm vs none", 0);
  const auto row8 = DataRow(eta->data, "layernorm vs none", 1);
  ASSERT_EQ(row2.size(), 11u);
  ASSERT_EQ(row8.size(), 11u);
  EXPECT_EQ(row2[2], "?");
  EXPECT_NE(row2[3], "?");  // the "never" marker's height
  // The interval runs from 0.002 up to the "never" row, as an arrow.
  EXPECT_EQ(row2[7], "0.002");
  EXPECT_EQ(row2[8], row2[3]);
  EXPECT_EQ(row2[9], "1");
  EXPECT_EQ(row8[3], "?");
  EXPECT_EQ(row8[10], "0.01");
  EXPECT_EQ(row8[7], "?");  // [never, never]: nothing to draw
  EXPECT_THAT(eta->script, HasSubstr("with vectors head filled"));
  EXPECT_THAT(eta->script, HasSubstr(absl::StrCat("set ytics add ('never' ", row2[3], ")")));
  EXPECT_THAT(eta->script, HasSubstr("title 'layernorm vs none: never necessary'"));
  EXPECT_THAT(eta->script, HasSubstr("title 'layernorm vs none: not necessary up to (censored)'"));
  EXPECT_THAT(eta->caption, HasSubstr("an arrow up to 'never'"));
  EXPECT_THAT(eta->caption, HasSubstr("open triangle up: not necessary up to that LR"));

  const auto j = nlohmann::json::parse(FormatJson(*a));
  EXPECT_EQ(j["necessity"][0]["eta_dagger_ci"], nlohmann::json({0.002, nullptr}));
  EXPECT_EQ(j["necessity"][1]["eta_dagger_ci"], nlohmann::json({nullptr, nullptr}));
  EXPECT_TRUE(j["necessity"][1]["censored"].get<bool>());
  EXPECT_EQ(j["necessity"][1]["censored_at"], 0.01);

  ExpectGnuplotDraws(*a, runs, {"eta_dagger.png"});
}

TEST(Uncertainty, VerdictLinesNameTheirTestAndP) {
  auto a = analysis::Analyze(NoisyRuns());
  ASSERT_TRUE(a.ok()) << a.status();
  const std::string table = FormatTable(*a);
  const std::string md = FormatMarkdown(*a, {});
  ASSERT_EQ(a->verdicts.size(), 3u);
  for (const auto& v : a->verdicts) {
    SCOPED_TRACE(v.hypothesis);
    ASSERT_FALSE(v.test.empty());
    const std::string head = absl::StrCat(v.line, " [seeds: 3] [test: ", v.test, "; ");
    EXPECT_THAT(table, HasSubstr(head));
    EXPECT_THAT(md, HasSubstr(absl::StrCat("- **", v.outcome, "** — ", head)));
    if (v.p_value) {
      EXPECT_THAT(VerdictLine(v), testing::ContainsRegex("; p [=<] [0-9.e-]+, alpha 0.05\\]$"));
    }
  }
  analysis::Verdict v = a->verdicts[0];
  v.p_value = 0.003;
  EXPECT_THAT(VerdictLine(v), testing::EndsWith(absl::StrCat(" [seeds: 3] [test: ", v.test,
                                                             "; p = 0.003, alpha 0.05]")));
  v.p_value = 2e-6;
  EXPECT_THAT(VerdictLine(v), testing::EndsWith("; p < 0.0001, alpha 0.05]"));
  v.p_value.reset();  // the test could not run
  EXPECT_THAT(VerdictLine(v), testing::EndsWith(absl::StrCat("[test: ", v.test, "; alpha 0.05]")));
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
