// Provenance of sharded steps (common/analysis/provenance.h): with dropout > 0 a CPU step's masks
// depend on how many shards it split the batch into (the worker's --threads), so a cell whose
// dropout runs mix shard counts is flagged as a mixed device is.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/analysis/analysis.h"
#include "common/analysis/provenance.h"

namespace ablate::analysis {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

ablate::v1::Run Finished(int id, const std::string& lr, int seed, double dropout, int shards) {
  ablate::v1::Run r;
  r.set_id(id);
  (*r.mutable_grid_values())["qk_norm"] = "none";
  (*r.mutable_grid_values())["n_layer"] = "2";
  (*r.mutable_grid_values())["lr"] = lr;
  (*r.mutable_grid_values())["seed"] = std::to_string(seed);
  r.set_cell("lr=" + lr + ",n_layer=2,qk_norm=none");
  r.set_seed(seed);
  r.set_state(ablate::v1::SUCCEEDED);
  r.mutable_config()->set_dropout(dropout);
  auto* res = r.mutable_result();
  res->set_initial_loss(8.0);
  res->set_final_val_loss(3.0 + 0.01 * seed);
  res->set_steps_to_threshold(-1);
  res->set_device_kind("cpu");
  res->set_dtype("float32");
  res->set_torch_version("2.1.0");
  res->set_shards(shards);
  return r;
}

TEST(Shards, ACellWhoseDropoutRunsMixShardCountsIsFlagged) {
  std::vector<ablate::v1::Run> runs = {Finished(1, "0.01", 0, 0.1, 2),
                                       Finished(2, "0.01", 1, 0.1, 4)};
  auto a = Analyze(runs);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_FALSE(a->mixed.empty());
  EXPECT_EQ(a->mixed.front().kind, "cell");
  EXPECT_THAT(a->mixed.front().differs, ElementsAre("shard count"));
  EXPECT_THAT(a->mixed.front().Line(), HasSubstr("2 shards (1 run) vs 4 shards (1 run)"));
  EXPECT_FALSE(RequireUniform(*a).ok());
}

TEST(Shards, WithoutDropoutOrAnUnknownCountNothingIsFlagged) {
  // No dropout: every shard count computes the same function.
  auto plain = Analyze({Finished(1, "0.01", 0, 0.0, 2), Finished(2, "0.01", 1, 0.0, 4)});
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(plain->mixed, IsEmpty());
  // A result from before the count was recorded (0) says nothing either way.
  auto old = Analyze({Finished(1, "0.01", 0, 0.1, 0), Finished(2, "0.01", 1, 0.1, 4)});
  ASSERT_TRUE(old.ok());
  EXPECT_THAT(old->mixed, IsEmpty());
  // The same count everywhere: uniform.
  auto same = Analyze({Finished(1, "0.01", 0, 0.1, 4), Finished(2, "0.01", 1, 0.1, 4)});
  ASSERT_TRUE(same.ok());
  EXPECT_THAT(same->mixed, IsEmpty());
}

TEST(Shards, ProvenanceOfADropoutRunCarriesItsShardCount) {
  EXPECT_EQ(ProvenanceOf(Finished(1, "0.01", 0, 0.1, 3)).shards, 3);
  EXPECT_EQ(ProvenanceOf(Finished(1, "0.01", 0, 0.0, 3)).shards, 0);  // irrelevant without dropout
}

}  // namespace
}  // namespace ablate::analysis
