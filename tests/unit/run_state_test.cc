#include "common/run/run_state.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace ablate::util {
namespace {

TEST(RunState, TerminalStatesAreExactlyTheFinishedOnes) {
  for (auto s : {v1::SUCCEEDED, v1::DIVERGED, v1::FAILED, v1::CANCELLED, v1::SKIPPED}) {
    EXPECT_TRUE(IsTerminal(s)) << v1::RunState_Name(s);
  }
  for (auto s : {v1::RUN_STATE_UNSPECIFIED, v1::QUEUED, v1::LEASED, v1::RUNNING}) {
    EXPECT_FALSE(IsTerminal(s)) << v1::RunState_Name(s);
  }
}

TEST(RunState, OnlySucceededAndDivergedHaveAnOutcome) {
  for (int i = v1::RunState_MIN; i <= v1::RunState_MAX; ++i) {
    const auto s = static_cast<v1::RunState>(i);
    EXPECT_EQ(HasOutcome(s), s == v1::SUCCEEDED || s == v1::DIVERGED) << v1::RunState_Name(s);
    // An outcome is only ever the end of a run.
    if (HasOutcome(s)) {
      EXPECT_TRUE(IsTerminal(s)) << v1::RunState_Name(s);
    }
  }
}

TEST(RunState, NamesAreTheLowerCaseProtoNamesAndRoundTrip) {
  std::set<std::string> seen;
  for (int i = v1::RunState_MIN; i <= v1::RunState_MAX; ++i) {
    const auto s = static_cast<v1::RunState>(i);
    const std::string name(RunStateName(s));
    if (s == v1::RUN_STATE_UNSPECIFIED) {
      EXPECT_EQ(name, "");
      continue;
    }
    std::string lower = v1::RunState_Name(s);
    for (char& c : lower) c = static_cast<char>(c - 'A' + 'a');
    EXPECT_EQ(name, lower);
    EXPECT_EQ(RunStateFromName(name), s) << name;
    EXPECT_TRUE(seen.insert(name).second) << name;
  }
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_EQ(RunStateFromName(""), v1::RUN_STATE_UNSPECIFIED);
  EXPECT_EQ(RunStateFromName("QUEUED"), v1::RUN_STATE_UNSPECIFIED);
  EXPECT_EQ(RunStateFromName("skipped"), v1::SKIPPED);  // migrations/0004_refinement.sql
  EXPECT_EQ(RunStateFromName("pruned"), v1::RUN_STATE_UNSPECIFIED);
}

// Usable in constant expressions, so a switch or a static table can be built from them.
static_assert(IsTerminal(v1::CANCELLED) && !IsTerminal(v1::RUNNING));
static_assert(RunStateFromName("diverged") == v1::DIVERGED);

}  // namespace
}  // namespace ablate::util
