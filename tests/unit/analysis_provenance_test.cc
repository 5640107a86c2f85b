// Provenance in the analysis: cells, pairs and trends whose runs ran on different devices,
// dtypes, torch versions or tokenizers are flagged, and require_uniform names what differs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/analysis/analysis.h"
#include "tests/unit/analysis_run_set.h"

namespace ablate::analysis {
namespace {

using ablate::v1::Run;
using ::testing::HasSubstr;
using ::testing::Not;

// Provenance: the device, dtype, torch and tokenizer a run recorded.
Run& On(Run& r, const std::string& device_kind, const std::string& dtype,
        const std::string& torch = "2.1.0", const std::string& tokenizer = "") {
  r.mutable_result()->set_device_kind(device_kind);
  r.mutable_result()->set_device(device_kind == "cuda" ? "cuda:0 (NVIDIA GeForce RTX 4090)"
                                                       : device_kind);
  r.mutable_result()->set_dtype(dtype);
  r.mutable_result()->set_torch_version(torch);
  r.mutable_result()->set_tokenizer_sha256(tokenizer);
  return r;
}

const std::string kTokA = "aaaaaaaaaaaabbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const std::string kTokB = "ccccccccccccdddddddddddddddddddddddddddddddddddddddddddddddddddd";

std::vector<std::string> Lines(const Analysis& a) {
  std::vector<std::string> out;
  for (const auto& m : a.mixed) out.push_back(m.Line());
  return out;
}

TEST(Provenance, UniformSweepHasNoMixedFlag) {
  RunSet s;
  for (const char* v : {"none", "layernorm"}) {
    for (const char* d : {"2", "8"}) {
      for (const char* lr : {"0.001", "0.01"}) {
        On(s.Add(v, d, lr, 0, 3.0), "cuda", "bfloat16", "2.1.0", kTokA);
        // An older result: no device_kind (the kind is the full name's prefix), no tokenizer
        // recorded (unknown, so not a difference).
        ablate::v1::Run& old = On(s.Add(v, d, lr, 1, 3.1), "", "bfloat16", "2.1.0", "");
        old.mutable_result()->set_device("cuda:1 (NVIDIA GeForce RTX 4090)");
      }
    }
  }
  // A run not finished has no provenance yet and must not count as a different one.
  s.Add("none", "2", "0.01", 2, 3.0, ablate::v1::RUNNING).clear_result();
  const auto a = s.Analyse();
  EXPECT_TRUE(a.mixed.empty()) << a.mixed.front().Line();
  for (const auto& c : a.curves) {
    EXPECT_TRUE(c.mixed.empty());
    for (const auto& p : c.points) EXPECT_TRUE(p.mixed.empty());
  }
  for (const auto& n : a.necessity) EXPECT_TRUE(n.mixed.empty());
  for (const auto& v : a.verdicts) {
    EXPECT_TRUE(v.mixed.empty()) << v.line;
    EXPECT_THAT(v.line, ::testing::Not(HasSubstr("mixed")));
  }
  for (const auto& note : a.notes) EXPECT_THAT(note, ::testing::Not(HasSubstr("mixed")));
  const Point& p = At(*CurveOf(a, "none", "2"), 0.01);
  ASSERT_EQ(p.provenance.size(), 2u);  // alike, but one knows its tokenizer and one does not
  EXPECT_EQ(p.provenance.begin()->first.device_kind, "cuda");
  EXPECT_TRUE(RequireUniform(a).ok());
}

TEST(Provenance, CellWithAnMpsFloat32RunAmongCudaBfloat16RunsIsFlagged) {
  RunSet s;
  On(s.Add("none", "4", "0.01", 0, 3.0), "cuda", "bfloat16");
  On(s.Add("none", "4", "0.01", 1, 3.1), "cuda", "bfloat16");
  On(s.Add("none", "4", "0.01", 2, 3.4), "mps", "float32");  // the laptop
  const auto a = s.Analyse();
  const Point& p = At(*CurveOf(a, "none", "4"), 0.01);
  EXPECT_EQ(p.mixed, (std::vector<std::string>{"device kind", "dtype"}));
  EXPECT_EQ(Lines(a), (std::vector<std::string>{
                          "cell lr=0.01,n_layer=4,qk_norm=none: cuda/bfloat16 (2 runs) vs "
                          "mps/float32 (1 run)"}));
  EXPECT_EQ(a.mixed[0].kind, "cell");
  EXPECT_THAT(a.notes, ::testing::Contains(
                           "mixed provenance: 1 cell rest on runs that differ in device kind, "
                           "dtype (each listed below); --require-uniform makes this an error"));
  EXPECT_EQ(CurveOf(a, "none", "4")->mixed, p.mixed);
}

TEST(Provenance, PairOnDifferentDtypesIsFlaggedEvenWhenEachCellIsUniform) {
  RunSet s;
  for (const char* lr : {"0.001", "0.01"}) {
    for (int seed : {0, 1}) {
      On(s.Add("none", "4", lr, seed, 3.5), "cuda", "float32");
      On(s.Add("layernorm", "4", lr, seed, 3.0), "cuda", "bfloat16");
    }
  }
  const auto a = s.Analyse();
  for (const auto& c : a.curves) {
    for (const auto& p : c.points) EXPECT_TRUE(p.mixed.empty());
  }
  EXPECT_EQ(Lines(a),
            (std::vector<std::string>{
                "pair lr=0.001,n_layer=4: qk_norm=none float32 (2 runs) vs qk_norm=layernorm "
                "bfloat16 (2 runs)",
                "pair lr=0.01,n_layer=4: qk_norm=none float32 (2 runs) vs qk_norm=layernorm "
                "bfloat16 (2 runs)"}));
  ASSERT_EQ(a.necessity.size(), 1u);
  EXPECT_EQ(a.necessity[0].mixed, std::vector<std::string>{"dtype"});
  ASSERT_EQ(a.verdicts.size(), 3u);
  for (const auto& v : a.verdicts) {
    EXPECT_EQ(v.mixed, std::vector<std::string>{"dtype"}) << v.hypothesis;
    EXPECT_THAT(v.line, HasSubstr("[rests on mixed runs: dtype differ]"));
  }
}

TEST(Provenance, CurvesMixedOnlyAcrossLrsAreListedAsAPairOfCurves) {
  RunSet s;
  // Every LR ran on one stack for both variants (cells and pairs uniform), but the two LRs ran
  // on different stacks: η*, max stable LR and η† compare across them.
  for (const char* v : {"none", "layernorm"}) {
    On(s.Add(v, "4", "0.001", 0, 3.5), "cuda", "bfloat16");
    On(s.Add(v, "4", "0.01", 0, 3.0), "mps", "float32");
  }
  const auto a = s.Analyse();
  EXPECT_EQ(Lines(a),
            (std::vector<std::string>{
                "curves n_layer=4: qk_norm=none cuda/bfloat16 (1 run) + mps/float32 (1 run) vs "
                "qk_norm=layernorm cuda/bfloat16 (1 run) + mps/float32 (1 run)"}));
  EXPECT_TRUE(a.verdicts[0].mixed.empty());  // H1 compares within an LR only
  EXPECT_EQ(a.verdicts[1].mixed, (std::vector<std::string>{"device kind", "dtype"}));
  EXPECT_EQ(a.verdicts[2].mixed, (std::vector<std::string>{"device kind", "dtype"}));
}

TEST(Provenance, TrendOverTheModeratorOnDifferentStacksIsFlagged) {
  RunSet s;
  for (const char* v : {"none", "layernorm"}) {
    for (const char* lr : {"0.001", "0.01"}) {
      On(s.Add(v, "2", lr, 0, 3.5), "cpu", "float32", "2.1.0");
      On(s.Add(v, "8", lr, 0, 3.0), "cpu", "float32", "2.2.0");
    }
  }
  const auto a = s.Analyse();
  EXPECT_EQ(Lines(a), (std::vector<std::string>{
                          "trend qk_norm=none vs layernorm across n_layer: n_layer=2 torch 2.1.0 "
                          "(4 runs) vs n_layer=8 torch 2.2.0 (4 runs)"}));
  EXPECT_TRUE(a.verdicts[0].mixed.empty());
  EXPECT_TRUE(a.verdicts[1].mixed.empty());
  EXPECT_EQ(a.verdicts[2].mixed, std::vector<std::string>{"torch version"});
  EXPECT_THAT(a.verdicts[2].line, HasSubstr("[rests on mixed runs: torch version differ]"));
}

TEST(Provenance, TokenizersDifferOnlyWhenBothAreKnown) {
  RunSet s;
  On(s.Add("none", "4", "0.01", 0, 3.0), "cuda", "bfloat16", "2.1.0", kTokA);
  On(s.Add("none", "4", "0.01", 1, 3.0), "cuda", "bfloat16", "2.1.0", "");
  EXPECT_TRUE(s.Analyse().mixed.empty());
  On(s.Add("none", "4", "0.01", 2, 3.0), "cuda", "bfloat16", "2.1.0", kTokB);
  EXPECT_EQ(Lines(s.Analyse()),
            (std::vector<std::string>{"cell lr=0.01,n_layer=4,qk_norm=none: tokenizer ? (1 run) "
                                      "vs tokenizer aaaaaaaaaaaa (1 run) vs tokenizer "
                                      "cccccccccccc (1 run)"}));
}

TEST(Provenance, RequireUniformNamesWhatDiffers) {
  RunSet s;
  for (int seed : {0, 1}) {
    On(s.Add("none", "4", "0.01", seed, 3.5), "mps", "float32");
    On(s.Add("layernorm", "4", "0.01", seed, 3.0), "cuda", "bfloat16");
  }
  const auto status = RequireUniform(s.Analyse());
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "runs compared are not uniform: they differ in device kind, dtype (1 mixed):\n"
            "  pair lr=0.01,n_layer=4: qk_norm=none mps/float32 (2 runs) vs qk_norm=layernorm "
            "cuda/bfloat16 (2 runs)");
}

}  // namespace
}  // namespace ablate::analysis
