// RunConfig's one home (common/sweep/run_config.h): every proto field has exactly one row with a
// default and a line of documentation, the defaults are canonical and valid, every bound is
// enforced with its message, the trainer's schedule decays to the home's derived min_lr, and
// docs/sweep-file.md's settings table says what the table says.
#include "common/sweep/run_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "worker/train/schedule.h"

namespace ablate::sweep {
namespace {

using ablate::v1::RunConfig;
using google::protobuf::FieldDescriptor;
using ::testing::HasSubstr;

bool IsInteger(const FieldDescriptor* field) {
  return field->cpp_type() == FieldDescriptor::CPPTYPE_INT32 ||
         field->cpp_type() == FieldDescriptor::CPPTYPE_INT64;
}

TEST(RunConfigTable, EveryFieldHasExactlyOneRowWithDefaultAndDoc) {
  const auto* descriptor = RunConfig::descriptor();
  std::map<std::string, int> rows;
  for (const Setting& s : RunConfigSettings()) ++rows[s.name];
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const std::string& name = descriptor->field(i)->name();
    EXPECT_EQ(rows[name], 1) << name << " needs exactly one row in run_config.cc";
  }
  for (const Setting& s : RunConfigSettings()) {
    EXPECT_NE(FindSetting(s.name), nullptr) << "row " << s.name << " names no RunConfig field";
    EXPECT_EQ(FindSettingRow(s.name), &s) << s.name;
    EXPECT_FALSE(s.doc.empty()) << s.name << " has no documentation line";
    EXPECT_EQ(s.doc.find('\n'), std::string::npos) << s.name << ": one line";
    // A default is either a constant or a derivation, never both, never neither.
    EXPECT_NE(s.default_value.empty(), s.derive == nullptr) << s.name;
    EXPECT_EQ(s.derived_from.empty(), s.derive == nullptr) << s.name;
  }
  EXPECT_EQ(RunConfigSettings().size(), static_cast<size_t>(descriptor->field_count()));
  EXPECT_EQ(SettingNames().size(), static_cast<size_t>(descriptor->field_count()));
}

TEST(RunConfigTable, DefaultsAreCanonicalTypedAndValid) {
  RunConfig c;
  ApplyDefaults(&c);
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c);
  EXPECT_FALSE(FindConfigProblem(c, ConfigScope::kSweep).has_value());
  for (const Setting& s : RunConfigSettings()) {
    const FieldDescriptor* field = FindSetting(s.name);
    ASSERT_NE(field, nullptr) << s.name;
    EXPECT_TRUE(c.GetReflection()->HasField(c, field)) << s.name;
    const bool is_string = field->cpp_type() == FieldDescriptor::CPPTYPE_STRING;
    EXPECT_EQ(is_string, !s.allowed.empty()) << s.name << ": a string setting lists its values";
    if (!s.default_value.empty()) {
      auto canonical = CanonicalValue(field, s.default_value);
      ASSERT_TRUE(canonical.ok()) << s.name << ": " << canonical.status();
      EXPECT_EQ(*canonical, s.default_value) << s.name << ": write the default canonically";
      EXPECT_EQ(SettingText(c, field), s.default_value) << s.name;
    }
    switch (s.bound.kind) {
      case Bound::Kind::kNone:
        break;
      case Bound::Kind::kAtLeast:
        EXPECT_TRUE(IsInteger(field)) << s.name << ": at-least bounds are for integers";
        break;
      default:
        EXPECT_EQ(field->cpp_type(), FieldDescriptor::CPPTYPE_DOUBLE) << s.name;
    }
    for (const Relation& r : s.relations) {
      EXPECT_FALSE(r.doc.empty()) << s.name;
      EXPECT_NE(r.check, nullptr) << s.name;
    }
  }
}

// A derived default reads settings that already hold theirs, so its row comes after theirs, and
// what it derives follows the config's own values.
TEST(RunConfigTable, MinLrIsDerivedFromTheRunsOwnLr) {
  const auto& table = RunConfigSettings();
  auto index = [&](const std::string& name) { return FindSettingRow(name) - table.data(); };
  EXPECT_LT(index("lr"), index("min_lr"));
  EXPECT_LT(index("min_lr_ratio"), index("min_lr"));
  EXPECT_EQ(FindSettingRow("min_lr")->derived_from, "lr x min_lr_ratio");

  RunConfig c;
  c.set_lr(0.00316228);
  c.set_min_lr_ratio(0.2);
  ApplyDefaults(&c);
  EXPECT_EQ(c.min_lr(), 0.00316228 * 0.2);
  RunConfig only_lr;
  only_lr.set_lr(0.01);
  ApplyDefaults(&only_lr);
  EXPECT_EQ(only_lr.min_lr(), 0.01 * 0.1);
  RunConfig set;
  set.set_min_lr(0);
  ApplyDefaults(&set);
  EXPECT_EQ(set.min_lr(), 0) << "an explicit min_lr is kept";
}

// The trainer's floor is the home's derivation: on a config as a test or tool may hand it
// (min_lr or min_lr_ratio unset), the schedule ends exactly where ApplyDefaults puts min_lr.
TEST(RunConfigTable, ScheduleDecaysToTheDerivedMinLr) {
  struct Case {
    std::optional<double> lr, min_lr_ratio, min_lr;
  };
  for (const Case& k : std::vector<Case>{{0.001, std::nullopt, std::nullopt},
                                         {0.00316228, 0.2, std::nullopt},
                                         {0.1, 0.0, std::nullopt},
                                         {std::nullopt, std::nullopt, std::nullopt},
                                         {0.01, 0.5, 0.0004}}) {
    RunConfig c;
    if (k.lr) c.set_lr(*k.lr);
    if (k.min_lr_ratio) c.set_min_lr_ratio(*k.min_lr_ratio);
    if (k.min_lr) c.set_min_lr(*k.min_lr);
    c.set_warmup(10);
    c.set_steps(100);
    RunConfig complete = c;
    ApplyDefaults(&complete);
    const std::string label = c.ShortDebugString();
    EXPECT_EQ(EffectiveMinLr(c), complete.min_lr()) << label;
    EXPECT_EQ(train::LearningRate(c, 100), complete.min_lr()) << label;
    EXPECT_EQ(train::LearningRate(complete, 100), complete.min_lr()) << label;
    // The schedule reads the peak as given; only its floor is derived.
    if (k.lr) {
      EXPECT_EQ(train::LearningRate(c, 55), train::LearningRate(complete, 55)) << label;
    }
  }
}

// Each bound, crossed on an otherwise default config, is refused naming the setting.
TEST(RunConfigTable, EveryBoundIsEnforcedWithItsMessage) {
  int checked = 0;
  for (const Setting& s : RunConfigSettings()) {
    if (s.bound.kind == Bound::Kind::kNone) continue;
    const FieldDescriptor* field = FindSetting(s.name);
    ASSERT_NE(field, nullptr) << s.name;
    RunConfig c;
    ApplyDefaults(&c);
    std::string outside;
    std::string message;
    switch (s.bound.kind) {
      case Bound::Kind::kAtLeast: {
        const auto lo = static_cast<int64_t>(s.bound.lo);
        outside = absl::StrCat(lo - 1);
        message = absl::StrCat("must be at least ", lo, ", got ", lo - 1);
        break;
      }
      case Bound::Kind::kPositive:
        outside = "0";
        message = "must be positive, got 0";
        break;
      case Bound::Kind::kNonNegative:
        outside = "-1";
        message = "must not be negative, got -1";
        break;
      case Bound::Kind::kHalfOpen:
        outside = FormatDouble(s.bound.hi);
        message = absl::StrCat("must be in [", FormatDouble(s.bound.lo), ", ",
                               FormatDouble(s.bound.hi), "), got ", outside);
        break;
      case Bound::Kind::kClosed:
        outside = FormatDouble(s.bound.hi + 1);
        message = absl::StrCat("must be in [", FormatDouble(s.bound.lo), ", ",
                               FormatDouble(s.bound.hi), "], got ", outside);
        break;
      case Bound::Kind::kNone:
        break;
    }
    SetSetting(&c, field, outside);
    EXPECT_EQ(ValidateConfig(c).message(), absl::StrCat(s.name, ": ", message));
    EXPECT_FALSE(BoundText(s.bound).empty()) << s.name;
    ++checked;
  }
  EXPECT_GE(checked, 25);
}

TEST(RunConfigTable, RelationsAndScopes) {
  RunConfig c;
  ApplyDefaults(&c);
  c.set_n_head(3);
  EXPECT_EQ(ValidateConfig(c).message(), "n_head: n_embd (256) is not divisible by n_head (3)");
  c.set_n_head(4);
  c.set_n_embd(12);
  c.set_pos("rope");
  EXPECT_EQ(ValidateConfig(c).message(),
            "pos: rope needs an even head dimension, but n_embd/n_head = 3");
  c = RunConfig();
  ApplyDefaults(&c);
  c.set_warmup(2000);
  EXPECT_EQ(ValidateConfig(c).message(), "warmup: warmup (2000) is longer than steps (1000)");
  c.set_warmup(100);
  c.set_min_lr(0.001);
  EXPECT_EQ(ValidateConfig(c).message(), "min_lr: min_lr (0.001) is above lr (0.0006)");
  c.set_min_lr(0.0001);
  c.set_dtype("bfloat16");
  c.set_device("mps");
  EXPECT_EQ(ValidateConfig(c).message(), "dtype: bfloat16 needs device cuda, cpu or auto, not mps");
  // device auto: a single run may train bfloat16 there; a sweep's run may not (an MPS worker
  // could lease it).
  c.set_device("auto");
  EXPECT_TRUE(ValidateConfig(c).ok());
  auto problem = FindConfigProblem(c, ConfigScope::kSweep);
  ASSERT_TRUE(problem.has_value());
  EXPECT_EQ(problem->fields, (std::vector<std::string>{"dtype", "device"}));
  EXPECT_THAT(problem->message, HasSubstr("bfloat16 in a sweep needs device: cuda or cpu"));
  c.clear_seed();
  EXPECT_EQ(ValidateConfig(c).message(), "seed: is not set (ApplyDefaults fills every setting)");
}

// docs/sweep-file.md's settings table names every setting once, with the table's default and,
// for a string setting, its allowed values.
TEST(RunConfigTable, SweepFileDocsSayWhatTheTableSays) {
  const char* source = std::getenv("ABLATE_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "ABLATE_SOURCE_DIR must name the checkout (ctest sets it)";
  std::ifstream in(absl::StrCat(source, "/docs/sweep-file.md"));
  ASSERT_TRUE(in) << source << "/docs/sweep-file.md";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t start = doc.find("### Settings");
  ASSERT_NE(start, std::string::npos);
  const size_t end = doc.find("\n### ", start + 1);
  std::map<std::string, int> seen;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(doc).substr(start, end - start), '\n')) {
    if (!absl::ConsumePrefix(&line, "|") || !absl::ConsumeSuffix(&line, "|")) continue;
    // Cells split at each '|' that is not escaped ("none \| rope" is one cell).
    std::vector<std::string> cells(1);
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
        cells.back() += line[++i];
      } else if (line[i] == '|') {
        cells.emplace_back();
      } else {
        cells.back() += line[i];
      }
    }
    for (auto& cell : cells) absl::StripAsciiWhitespace(&cell);
    if (cells.size() < 3 || cells[0] == "setting" || absl::StartsWith(cells[0], "---")) continue;
    std::vector<std::string> names = absl::StrSplit(cells[0], ", ");
    std::vector<std::string> defaults = absl::StrSplit(cells[2], ", ");
    ASSERT_EQ(names.size(), defaults.size()) << line;
    for (size_t i = 0; i < names.size(); ++i) {
      ++seen[names[i]];
      const Setting* row = FindSettingRow(names[i]);
      ASSERT_NE(row, nullptr) << "docs list an unknown setting: " << names[i];
      if (row->derive != nullptr) {
        EXPECT_EQ(defaults[i], row->derived_from) << names[i];
        continue;
      }
      double documented = 0;
      double actual = 0;
      if (absl::SimpleAtod(defaults[i], &documented) &&
          absl::SimpleAtod(row->default_value, &actual)) {
        EXPECT_EQ(documented, actual) << names[i];
      } else {
        EXPECT_EQ(defaults[i], row->default_value) << names[i];
      }
      if (!row->allowed.empty()) {
        EXPECT_EQ(absl::StrReplaceAll(cells[1], {{" ", ""}}), absl::StrJoin(row->allowed, "|"))
            << names[i];
      }
    }
  }
  for (const std::string& name : SettingNames()) {
    EXPECT_EQ(seen[name], 1) << name << " must appear once in docs/sweep-file.md#settings";
  }
}

}  // namespace
}  // namespace ablate::sweep
