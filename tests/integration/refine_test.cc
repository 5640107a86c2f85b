// Refinement and pruning (issue #11) through two real replicas on one database: runs are leased
// and completed over gRPC with chosen results (the loss values decide the boundaries), so every
// bracket and every skipped run is known in advance.
#include <gmock/gmock.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sweep/sweep.h"
#include "google/protobuf/util/message_differencer.h"
#include "pqxx/pqxx"
#include "server/store/pqxx_compat.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kData[] =
    "data: {train: \"synthetic:50\", val: \"synthetic:10\", tokenizer: {type: bpe, vocab: "
    "512}}\n"
    "fixed: {n_embd: 32, n_head: 2, block_size: 32, batch_size: 4, steps: 100}\n";

class RefineTest : public ServerFixture {
 protected:
  // Long leases, so none lapses by accident; ExpireLease forces one and the reaper (every 0.2 s)
  // does the rest.
  void Configure(server::ServerOptions* o) override {
    o->lease_seconds = 30;
    o->reap_interval_seconds = 0.2;
  }

  // Polls (bounded) until the sweep has `n` runs; returns the last read.
  v1::GetSweepResponse WaitForRuns(int64_t sweep, int n) {
    v1::GetSweepResponse got;
    for (int i = 0; i < 100; ++i) {
      got = GetSweep(sweep);
      if (got.runs_size() >= n) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return got;
  }

  void SetUp() override {
    ServerFixture::SetUp();
    ASSERT_NE(StartReplica(options_), nullptr);
  }

  grpc::Status Complete(const v1::LeaseResponse& l, v1::RunState state, double loss,
                        int replica = 0) {
    v1::CompleteRequest req;
    req.set_run_id(l.spec().run_id());
    req.set_attempt(l.lease().attempt());
    req.set_lease_token(LeaseToken(l.spec().run_id(), l.lease().attempt()));
    req.set_state(state);
    req.mutable_result()->set_initial_loss(8.0);
    req.mutable_result()->set_diverged(state == v1::DIVERGED);
    req.mutable_result()->set_final_val_loss(state == v1::DIVERGED ? 8.0 : loss);
    req.mutable_result()->set_steps_done(100);
    v1::CompleteResponse resp;
    return WorkerStub(replica)->Complete(Ctx().get(), req, &resp);
  }

  // Leases every queued run now; key: "lr/seed".
  std::map<std::string, v1::LeaseResponse> LeaseAll(int64_t worker, int replica = 0) {
    std::map<std::string, v1::LeaseResponse> out;
    for (;;) {
      auto l = Lease(worker, 0, replica);
      if (!l.has_run()) return out;
      out[absl::StrCat(l.spec().grid_values().at("lr"), "/", l.spec().grid_values().at("seed"))] =
          l;
    }
  }

  std::vector<v1::Run> RunsAt(int64_t sweep, const std::string& lr) {
    std::vector<v1::Run> out;
    const auto got = GetSweep(sweep);
    for (const auto& r : got.runs()) {
      if (r.grid_values().at("lr") == lr) out.push_back(r);
    }
    return out;
  }
};

TEST_F(RefineTest, BisectsTheMaxStableBracketOncePerPointAcrossReplicasUntilTheBudget) {
  const std::string yaml = absl::StrCat(
      "name: refine\n", kData,
      "grid:\n  lr: {logspace: {min: 1.0e-3, max: 1.0e-1, per_decade: 1}}\n  seed: [0, 1]\n"
      "refine: {axis: lr, boundaries: [max_stable], until_ratio: 1.5, max_new_runs: 4}\n");
  const int64_t sweep = Submit(yaml).sweep().id();
  // 64 slots: each worker leases every queued run at once (LeaseAll).
  const int64_t w0 = Register("w0", "cpu", 0, 64), w1 = Register("w1", "cpu", 1, 64);
  auto base = LeaseAll(w0);
  ASSERT_EQ(base.size(), 6u);
  // 0.001 and 0.01 train, 0.1 diverges: max stable LR 0.01, bracket (0.01, 0.1), ratio 10.
  for (const std::string k : {"0.001/0", "0.001/1", "0.01/0", "0.01/1"}) {
    ASSERT_TRUE(Complete(base.at(k), v1::SUCCEEDED, k.starts_with("0.001") ? 3.0 : 2.5).ok()) << k;
    EXPECT_EQ(GetSweep(sweep).runs_size(), 6) << "nothing is added before the curve settles";
  }
  // The last two base runs complete at the same moment on the two replicas: whichever decides
  // second sees both finished, and the midpoint is added for each seed exactly once.
  std::atomic<int> ok{0};
  std::vector<std::thread> racers;
  for (int replica : {0, 1}) {
    racers.emplace_back([&, replica] {
      if (Complete(base.at(absl::StrCat("0.1/", replica)), v1::DIVERGED, 0, replica).ok()) ++ok;
    });
  }
  for (auto& t : racers) t.join();
  EXPECT_EQ(ok.load(), 2);
  auto got = GetSweep(sweep);
  EXPECT_EQ(got.sweep().state(), "active");
  EXPECT_EQ(got.runs_size(), 8);
  const auto mid = RunsAt(sweep, "0.0316228");  // sqrt(0.01 x 0.1) as %.6g
  ASSERT_EQ(mid.size(), 2u);
  for (const auto& r : mid) {
    EXPECT_EQ(r.refine_round(), 1);
    EXPECT_EQ(r.state(), v1::QUEUED);
    EXPECT_EQ(r.cell(), "lr=0.0316228");
    EXPECT_DOUBLE_EQ(r.config().lr(), 0.0316228);  // trains with exactly the text's number
  }
  EXPECT_EQ(got.sweep().counts().refined(), 2);
  EXPECT_EQ(got.sweep().refine().new_runs(), 2);
  EXPECT_EQ(got.sweep().refine().rounds(), 1);
  EXPECT_EQ(got.sweep().refine().max_new_runs(), 4);
  v1::ListRunEventsRequest ev;
  ev.set_run_id(mid[0].id());
  v1::ListRunEventsResponse events;
  ASSERT_TRUE(SweepStub(1)->ListRunEvents(Ctx().get(), ev, &events).ok());
  ASSERT_GE(events.events_size(), 1);
  EXPECT_EQ(events.events(0).kind(), "refined");
  EXPECT_THAT(events.events(0).message(),
              HasSubstr("added by refinement round 1: max_stable qk_norm=none,n_layer=4: (0.01, "
                        "0.1)"));

  // Round 1 diverges on the other replica's worker: bracket (0.01, 0.0316228), ratio 3.16.
  auto round1 = LeaseAll(w1, 1);
  ASSERT_EQ(round1.size(), 2u);
  EXPECT_EQ(round1.begin()->second.spec().config().lr(), 0.0316228);
  for (const auto& [k, l] : round1) ASSERT_TRUE(Complete(l, v1::DIVERGED, 0, 1).ok()) << k;
  const auto second = RunsAt(sweep, "0.0177828");
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].refine_round(), 2);
  // Round 2 trains: bracket (0.0177828, 0.0316228) is 1.78 wide, but the budget (4) is spent.
  for (const auto& [k, l] : LeaseAll(w0)) ASSERT_TRUE(Complete(l, v1::SUCCEEDED, 2.4).ok()) << k;
  got = GetSweep(sweep);
  EXPECT_EQ(got.runs_size(), 10);
  EXPECT_EQ(got.sweep().state(), "finished");
  EXPECT_EQ(got.sweep().refine().new_runs(), 4);
  EXPECT_EQ(got.sweep().refine().rounds(), 2);
  std::set<std::pair<std::string, int64_t>> keys;
  for (const auto& r : got.runs()) keys.insert({r.cell(), r.seed()});
  EXPECT_EQ(keys.size(), 10u);
}

TEST_F(RefineTest, PrunesAboveAnLrWhereEverySeedDivergedAndRetryRunsThemAfterAll) {
  const std::string yaml = absl::StrCat("name: prune\n", kData,
                                        "grid:\n  lr: [0.001, 0.01, 0.1, 1]\n  seed: [0, 1]\n"
                                        "order: coarse_to_fine\nprune: {above_divergence: true}\n");
  const int64_t sweep = Submit(yaml).sweep().id();
  const int64_t w = Register("w", "cpu", 0, 64);  // leases every queued run at once
  // One run at a time, in queue order: LRs 0.001, 1, 0.01, 0.1, every seed of an LR together.
  std::vector<std::string> order;
  auto next = [&]() {
    auto l = Lease(w, 0, static_cast<int>(order.size() % 2));
    EXPECT_TRUE(l.has_run());
    order.push_back(
        absl::StrCat(l.spec().grid_values().at("lr"), "/", l.spec().grid_values().at("seed")));
    return l;
  };
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Complete(next(), v1::SUCCEEDED, 3.0).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Complete(next(), v1::DIVERGED, 0).ok());
  // Seed 0 diverges at 0.01: not yet every seed, nothing skipped.
  ASSERT_TRUE(Complete(next(), v1::DIVERGED, 0).ok());
  for (const auto& r : RunsAt(sweep, "0.1")) EXPECT_EQ(r.state(), v1::QUEUED);
  ASSERT_TRUE(Complete(next(), v1::DIVERGED, 0, 1).ok());
  EXPECT_THAT(order,
              ::testing::ElementsAre("0.001/0", "0.001/1", "1/0", "1/1", "0.01/0", "0.01/1"));
  auto got = GetSweep(sweep);
  EXPECT_EQ(got.sweep().state(), "finished");
  EXPECT_EQ(got.sweep().counts().skipped(), 2);
  const auto skipped = RunsAt(sweep, "0.1");
  ASSERT_EQ(skipped.size(), 2u);
  for (const auto& r : skipped) {
    EXPECT_EQ(r.state(), v1::SKIPPED);
    EXPECT_EQ(r.attempt(), 0);
    EXPECT_THAT(r.error(), HasSubstr("every seed (2) of"));
    EXPECT_THAT(r.error(), HasSubstr("diverged at lr=0.01"));
  }
  // ablate retry --state skipped: both run after all, and a divergence of one does not skip the
  // other again.
  v1::RetryRunsRequest retry;
  retry.mutable_sweep()->set_id(sweep);
  retry.add_states(v1::SKIPPED);
  v1::RetryRunsResponse requeued;
  ASSERT_TRUE(SweepStub(1)->RetryRuns(Ctx().get(), retry, &requeued).ok());
  EXPECT_EQ(requeued.requeued(), 2);
  auto l = Lease(w);
  ASSERT_TRUE(l.has_run());
  ASSERT_TRUE(Complete(l, v1::DIVERGED, 0).ok());
  int queued = 0;
  for (const auto& r : RunsAt(sweep, "0.1")) queued += r.state() == v1::QUEUED ? 1 : 0;
  EXPECT_EQ(queued, 1);
  EXPECT_EQ(GetSweep(sweep).sweep().state(), "active");
}

// Issue: refinement copied the lower bracket end's stored spec and changed only `lr`, so a
// refined run kept the template's absolute min_lr (lr x min_lr_ratio of another LR). A refined
// run must be exactly what expanding the sweep file with its LR on the grid gives.
TEST_F(RefineTest, RefinedRunsAreTheSweepFilesExpansionAtTheirLr) {
  const std::string yaml =
      "name: refine-spec\n"
      "data: {train: \"synthetic:50\", val: \"synthetic:10\", tokenizer: {type: bpe, vocab: 512}}\n"
      "fixed: {n_embd: 32, n_head: 2, block_size: 32, batch_size: 4, steps: 100, warmup: 10,\n"
      "        min_lr_ratio: 0.2}\n"
      "grid:\n  lr: {logspace: {min: 1.0e-3, max: 1.0e-1, per_decade: 1}}\n"
      "  n_layer: [1, 2]\n  seed: [0, 1]\n"
      "threshold: {train_loss: 3.0}\n"
      "divergence: {loss_above_init_by: 2.0, patience: 7}\n"
      "keep_final: false\n"
      "refine: {axis: lr, boundaries: [max_stable], until_ratio: 1.5, max_new_runs: 16}\n";
  const int64_t sweep = Submit(yaml).sweep().id();
  const int64_t w = Register("w", "cpu", 0);
  auto parsed = sweep::ParseSweep(yaml, "sweep.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // The grid: 0.1 diverges everywhere, the rest trains; every run refinement adds trains too.
  const std::set<std::string> grid = {"0.001", "0.01", "0.1"};
  int refined = 0;
  for (;;) {
    auto l = Lease(w);
    if (!l.has_run()) break;
    if (grid.count(l.spec().grid_values().at("lr")) > 0) {
      const bool diverge = l.spec().grid_values().at("lr") == "0.1";
      ASSERT_TRUE(Complete(l, diverge ? v1::DIVERGED : v1::SUCCEEDED, 2.5).ok());
      continue;
    }
    v1::RunSpec got = l.spec();
    const std::string lr = got.grid_values().at("lr");
    // What the grid would have run at this LR: the same file with this one value on the lr axis.
    sweep::SweepSpec at = *parsed;
    for (auto& axis : at.grid) {
      if (axis.name == "lr") axis.values = {lr};
    }
    auto expanded = sweep::Expand(at);
    ASSERT_TRUE(expanded.ok()) << expanded.status();
    const v1::RunSpec* want = nullptr;
    for (const auto& r : *expanded) {
      if (r.cell() == got.cell() && r.grid_values().at("seed") == got.grid_values().at("seed")) {
        want = &r;
      }
    }
    ASSERT_NE(want, nullptr) << got.cell();
    got.set_run_id(0);
    got.set_sweep_id(0);
    std::string diff;
    google::protobuf::util::MessageDifferencer differ;
    differ.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differ.Compare(*want, got))
        << got.cell() << "/" << got.grid_values().at("seed") << ":\n"
        << diff;
    EXPECT_DOUBLE_EQ(got.config().min_lr(), got.config().lr() * 0.2) << got.cell();
    ++refined;
    ASSERT_TRUE(Complete(l, v1::SUCCEEDED, 2.4).ok());
  }
  // Two curves, two seeds, and at least the first round's midpoint for each.
  EXPECT_GE(refined, 4);
  EXPECT_EQ(GetSweep(sweep).sweep().counts().refined(), refined);
}

// Every way a run ends goes through the same after-run step: a curve whose last run the reaper
// fails (attempts exhausted) or the user cancels settles, and its bracket is refined then, not
// at some later Complete that may never come.
// The reaper fails a run at its first lease expiry (--max-preemptions 1).
class RefineOnePreemptionTest : public RefineTest {
 protected:
  void Configure(server::ServerOptions* o) override {
    RefineTest::Configure(o);
    o->faults.max_preemptions = 1;
  }
};

TEST_F(RefineOnePreemptionTest, ARunTheReaperFailsSettlesItsCurveAndRefinesIt) {
  const std::string yaml = absl::StrCat(
      "name: reaped\n", kData,
      "grid:\n  lr: [0.001, 0.01, 0.1, 1]\n  seed: [0]\nmax_attempts: 1\n"
      "refine: {axis: lr, boundaries: [max_stable], until_ratio: 1.5, max_new_runs: 4}\n");
  const int64_t sweep = Submit(yaml).sweep().id();
  const int64_t w = Register("w", "cpu", 0, 64);  // LeaseAll holds every queued run at once
  auto base = LeaseAll(w);
  ASSERT_EQ(base.size(), 4u);
  ASSERT_TRUE(Complete(base.at("0.001/0"), v1::SUCCEEDED, 3.0).ok());
  ASSERT_TRUE(Complete(base.at("0.01/0"), v1::SUCCEEDED, 2.5).ok());
  ASSERT_TRUE(Complete(base.at("0.1/0"), v1::DIVERGED, 0).ok());
  EXPECT_EQ(GetSweep(sweep).runs_size(), 4) << "lr 1 is still running: the curve is unsettled";
  ExpireLease(base.at("1/0").spec().run_id());  // its worker vanished; one preemption: failed
  const auto got = WaitForRuns(sweep, 5);
  ASSERT_EQ(got.runs_size(), 5) << "the reaper's failure did not trigger refinement";
  EXPECT_EQ(got.sweep().state(), "active");
  EXPECT_EQ(RunsAt(sweep, "1")[0].state(), v1::FAILED);
  EXPECT_EQ(RunsAt(sweep, "0.0316228").size(), 1u);
}

TEST_F(RefineTest, CancellingACurvesLastPendingRunRefinesIt) {
  const std::string yaml = absl::StrCat(
      "name: cancelled\n", kData, "grid:\n  lr: [0.001, 0.01, 0.1, 1]\n  seed: [0]\n",
      "refine: {axis: lr, boundaries: [max_stable], until_ratio: 1.5, max_new_runs: 4}\n");
  const int64_t sweep = Submit(yaml).sweep().id();
  const int64_t w = Register("w", "cpu", 0, 64);  // LeaseAll holds every queued run at once
  auto base = LeaseAll(w);
  ASSERT_TRUE(Complete(base.at("0.001/0"), v1::SUCCEEDED, 3.0).ok());
  ASSERT_TRUE(Complete(base.at("0.01/0"), v1::SUCCEEDED, 2.5).ok());
  ASSERT_TRUE(Complete(base.at("0.1/0"), v1::DIVERGED, 0).ok());
  v1::CancelSweepRequest cancel;
  cancel.mutable_sweep()->set_id(sweep);
  cancel.add_run_ids(base.at("1/0").spec().run_id());
  v1::CancelSweepResponse cancelled;
  ASSERT_TRUE(SweepStub()->CancelSweep(Ctx().get(), cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.cancelled(), 1);
  const auto got = GetSweep(sweep);
  EXPECT_EQ(got.runs_size(), 5) << "cancelling the last pending run did not trigger refinement";
  EXPECT_EQ(got.sweep().state(), "active");
  EXPECT_EQ(RunsAt(sweep, "0.0316228").size(), 1u);
}

// Pruning needs consistent evidence: a run above the wall that succeeds, or the wall's own run
// retried and succeeding, brings the runs it skipped back into the queue, with an event saying
// why.
TEST_F(RefineTest, ASuccessAboveTheWallRequeuesItsSkippedRuns) {
  const std::string yaml = absl::StrCat("name: unwall\n", kData,
                                        "grid:\n  lr: [0.001, 0.01, 0.1, 1]\n  seed: [0]\n"
                                        "prune: {above_divergence: true}\n");
  const int64_t sweep = Submit(yaml).sweep().id();
  const int64_t w = Register("w", "cpu", 0, 64);  // LeaseAll holds every queued run at once
  auto base = LeaseAll(w);
  ASSERT_EQ(base.size(), 4u);
  // 0.1 goes back to the queue unrun; 1 stays leased (a worker is training it).
  ASSERT_TRUE(Complete(base.at("0.001/0"), v1::SUCCEEDED, 3.0).ok());
  ExpireLease(base.at("0.1/0").spec().run_id());
  for (int i = 0; i < 100 && RunsAt(sweep, "0.1")[0].state() != v1::QUEUED; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(RunsAt(sweep, "0.1")[0].state(), v1::QUEUED);
  // The one seed diverges at 0.01 and nothing above has succeeded: 0.1 is skipped.
  ASSERT_TRUE(Complete(base.at("0.01/0"), v1::DIVERGED, 0).ok());
  const auto skipped = RunsAt(sweep, "0.1")[0];
  ASSERT_EQ(skipped.state(), v1::SKIPPED);
  // Then 1 trains fine: the divergence at 0.01 was no wall.
  ASSERT_TRUE(Complete(base.at("1/0"), v1::SUCCEEDED, 2.0).ok());
  const auto back = RunsAt(sweep, "0.1")[0];
  EXPECT_EQ(back.state(), v1::QUEUED);
  EXPECT_EQ(back.error(), "");
  const auto events = Events(skipped.id());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind(), "unskipped");
  EXPECT_THAT(events.back().message(), HasSubstr("succeeded at lr=1"));
  EXPECT_EQ(GetSweep(sweep).sweep().state(), "active");
  auto l = Lease(w);
  ASSERT_TRUE(l.has_run());
  EXPECT_EQ(l.spec().run_id(), skipped.id());
}

TEST_F(RefineTest, ARetriedSkippedRunThatSucceedsRequeuesTheRestOfTheWall) {
  const std::string yaml = absl::StrCat("name: retried\n", kData,
                                        "grid:\n  lr: [0.001, 0.01, 0.1, 1]\n  seed: [0]\n"
                                        "prune: {above_divergence: true}\n");
  const int64_t sweep = Submit(yaml).sweep().id();
  const int64_t w = Register("w", "cpu", 0);
  ASSERT_TRUE(Complete(Lease(w), v1::SUCCEEDED, 3.0).ok());  // 0.001
  ASSERT_TRUE(Complete(Lease(w), v1::DIVERGED, 0).ok());     // 0.01: 0.1 and 1 are skipped
  const auto first = RunsAt(sweep, "0.1")[0];
  const auto second = RunsAt(sweep, "1")[0];
  ASSERT_EQ(first.state(), v1::SKIPPED);
  ASSERT_EQ(second.state(), v1::SKIPPED);
  EXPECT_EQ(GetSweep(sweep).sweep().state(), "finished");
  // ablate retry --state skipped --run <0.1>: it trains, so 0.01 was no wall for 1 either.
  v1::RetryRunsRequest retry;
  retry.mutable_sweep()->set_id(sweep);
  retry.add_run_ids(first.id());
  retry.add_states(v1::SKIPPED);
  v1::RetryRunsResponse requeued;
  ASSERT_TRUE(SweepStub()->RetryRuns(Ctx().get(), retry, &requeued).ok());
  ASSERT_EQ(requeued.requeued(), 1);
  auto again = Lease(w);
  ASSERT_EQ(again.spec().run_id(), first.id());
  EXPECT_EQ(RunsAt(sweep, "1")[0].state(), v1::SKIPPED) << "no new evidence yet";
  ASSERT_TRUE(Complete(again, v1::SUCCEEDED, 2.5).ok());
  EXPECT_EQ(RunsAt(sweep, "1")[0].state(), v1::QUEUED);
  const auto events = Events(second.id());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind(), "unskipped");
  EXPECT_THAT(events.back().message(), HasSubstr("succeeded at lr=0.1"));
  EXPECT_EQ(GetSweep(sweep).sweep().state(), "active");
}

// refine.seeds: where the comparison that crosses η† is within noise, both variants' cells at
// that LR get the next seed, each run exactly the sweep file expanded at that point with that
// seed; once they settle and the cells are at seeds.max, nothing more is added.
TEST_F(RefineTest, ExtraSeedsGoWhereEtaDaggersCrossingIsWithinNoise) {
  const std::string yaml = absl::StrCat(
      "name: seeds\n", kData,
      "grid:\n  qk_norm: [none, layernorm]\n  lr: [0.001, 0.01, 0.1]\n  seed: [0, 1, 2]\n"
      "refine: {axis: lr, boundaries: [max_stable], until_ratio: 1.5, max_new_runs: 8,\n"
      "         seeds: {max: 4}}\n");
  const int64_t sweep = Submit(yaml).sweep().id();
  auto parsed = sweep::ParseSweep(yaml, "sweep.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(GetSweep(sweep).sweep().refine().seeds_max(), 4);
  const int64_t w = Register("w", "cpu", 0);
  // none is clearly better at 0.001 (-0.2) and clearly worse at 0.1 (+0.5); at 0.01, where η†
  // is crossed, worse by 0.03: above δ 0.02, but within 2σ of it (σ 0.008 from 3 seeds).
  const std::map<std::string, double> none = {{"0.001", 2.8}, {"0.01", 3.03}, {"0.1", 3.5}};
  std::vector<v1::RunSpec> extra;
  for (;;) {
    auto l = Lease(w);
    if (!l.has_run()) break;
    const auto& g = l.spec().grid_values();
    const int seed = std::stoi(g.at("seed"));
    if (seed > 2) extra.push_back(l.spec());
    const double mean = g.at("qk_norm") == "none" ? none.at(g.at("lr")) : 3.0;
    // The grid's seeds spread by 0.01; an extra seed lands on the mean.
    ASSERT_TRUE(Complete(l, v1::SUCCEEDED, mean + (seed > 2 ? 0 : 0.01 * (seed - 1))).ok());
  }
  ASSERT_EQ(extra.size(), 2u);
  std::set<std::string> cells;
  for (v1::RunSpec got : extra) {
    cells.insert(got.cell());
    EXPECT_EQ(got.grid_values().at("seed"), "3");
    EXPECT_EQ(got.config().seed(), 3);
    auto want = sweep::ExpandPoint(*parsed, got.grid_values());
    ASSERT_TRUE(want.ok()) << want.status();
    got.set_run_id(0);
    got.set_sweep_id(0);
    std::string diff;
    google::protobuf::util::MessageDifferencer differ;
    differ.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differ.Compare(*want, got)) << got.cell() << ":\n" << diff;
  }
  EXPECT_EQ(cells, (std::set<std::string>{"lr=0.01,qk_norm=layernorm", "lr=0.01,qk_norm=none"}));
  const auto got = GetSweep(sweep);
  EXPECT_EQ(got.runs_size(), 20);
  EXPECT_EQ(got.sweep().state(), "finished");
  EXPECT_EQ(got.sweep().refine().new_runs(), 2);
  for (const auto& r : got.runs()) {
    if (r.seed() != 3) continue;
    EXPECT_EQ(r.refine_round(), 1);
    const auto events = Events(r.id());
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.front().kind(), "refined");
    EXPECT_THAT(events.front().message(),
                HasSubstr("extra seed: eta_dagger n_layer=4,qk_norm=layernorm at lr=0.01"));
  }
}

TEST_F(RefineTest, SubmitRefusesARefineOnANonLogAxisWithFileAndLine) {
  v1::SubmitSweepRequest req;
  req.set_spec_yaml(absl::StrCat("name: bad\n", kData,
                                 "grid:\n  lr: [0.001, 0.01]\n  n_layer: [1, 2]\n"
                                 "refine: {axis: n_layer, max_new_runs: 8}\n"));
  req.set_file_name("bad.yaml");
  v1::SubmitSweepResponse resp;
  auto st = SweepStub()->SubmitSweep(Ctx().get(), req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("bad.yaml:7: refine.axis: grid.n_layer (line 6) is not a log-spaced"));
}

}  // namespace
}  // namespace ablate::testing
