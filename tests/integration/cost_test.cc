// Cost and budgets over real gRPC + PostgreSQL (issue #25, docs/architecture.md#cost): what each
// attempt is charged, the sweep's cost by device class, the dry-run estimate, and a budget that
// stops leasing until it is raised; each run's device memory estimate and the runs no live worker
// can hold (issue #38).
#include <chrono>
#include <cmath>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cost/flops.h"
#include "common/cost/memory.h"
#include "common/sweep/sweep.h"
#include "gmock/gmock.h"
#include "pqxx/pqxx"
#include "server/store/pqxx_compat.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

using ::testing::HasSubstr;

class CostTest : public ServerFixture {
 protected:
  void Configure(server::ServerOptions* o) override {
    o->lease_seconds = 30;
    o->reap_interval_seconds = 0.2;
  }

  // A worker with a device name (its class), a price and, optionally, a startup benchmark.
  int64_t RegisterPriced(const std::string& name, const std::string& device_name, double price,
                         int slots, double bench_flops = 0) {
    v1::RegisterRequest req;
    auto* info = req.mutable_info();
    info->set_name(name);
    info->set_device_kind("cpu");
    info->set_device_name(device_name);
    info->set_slots(slots);
    info->set_price_per_hour(price);
    if (bench_flops > 0) {
      auto* b = info->add_benchmarks();
      b->set_dtype("float32");
      b->set_flops_per_second(bench_flops);
    }
    v1::RegisterResponse resp;
    auto s = WorkerStub()->Register(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.worker_id();
  }

  grpc::Status Complete(int64_t run, int attempt) {
    v1::CompleteRequest req;
    req.set_run_id(run);
    req.set_attempt(attempt);
    req.set_lease_token(LeaseToken(run, attempt));
    req.set_state(v1::SUCCEEDED);
    req.mutable_result()->set_final_val_loss(1.5);
    req.mutable_result()->set_steps_done(100);
    v1::CompleteResponse resp;
    return WorkerStub()->Complete(Ctx().get(), req, &resp);
  }

  // Seconds between the attempt's `leased` event and the event that ended it.
  double AttemptSeconds(int64_t run, int attempt, const std::string& end_kind) {
    v1::ListRunEventsRequest req;
    req.set_run_id(run);
    v1::ListRunEventsResponse resp;
    EXPECT_TRUE(SweepStub()->ListRunEvents(Ctx().get(), req, &resp).ok());
    double start = -1, end = -1;
    for (const auto& e : resp.events()) {
      if (e.attempt() != attempt) continue;
      if (e.kind() == "leased") start = e.time();
      if (e.kind() == end_kind && end < 0) end = e.time();
    }
    EXPECT_GE(start, 0) << "run " << run << " attempt " << attempt << " was never leased";
    EXPECT_GE(end, 0) << "run " << run << " attempt " << attempt << " has no " << end_kind;
    return end - start;
  }

  const v1::Run* FindRun(const v1::GetSweepResponse& s, int64_t id) {
    for (const auto& r : s.runs()) {
      if (r.id() == id) return &r;
    }
    ADD_FAILURE() << "no run " << id;
    return nullptr;
  }

  // The runs a sweep file expands to, in queue order.
  static std::vector<v1::RunSpec> Runs(const std::string& yaml) {
    auto parsed = sweep::ParseSweep(yaml, "s.yaml");
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (!parsed.ok()) return {};
    auto runs = sweep::Expand(*parsed);
    EXPECT_TRUE(runs.ok() && !runs->empty());
    return runs.ok() ? *std::move(runs) : std::vector<v1::RunSpec>{};
  }

  // One run's model FLOPs in SweepYaml's sweeps (all its runs have one size).
  static double RunFlops(const std::string& yaml) {
    const std::vector<v1::RunSpec> runs = Runs(yaml);
    if (runs.empty()) return 0;
    return cost::RunFlops(runs.front().config(), cost::VocabOf(runs.front().data()));
  }

  // A budget of `unit` (gpu_hours or usd) that holds two of SweepYaml's runs, raised by enough
  // for one more: the stored budget keeps its unit (the other limit stays NULL, 0 in the
  // Budget), its limit is the sum, and exactly one more run starts.
  void RaiseKeepsTheUnitAndTheNewLimitHolds(const std::string& unit, double limit, double by) {
    const std::string yaml = SweepYaml(absl::StrCat("raised-", unit), 2, 3, "",
                                       absl::StrCat("budget: {", unit, ": ", limit, "}\n"));
    // 25 device-seconds and $0.025 a run (100 s on one of 4 slots at $3.60 an hour).
    const int64_t w = RegisterPriced("w", "Xeon", 3.6, 4, RunFlops(yaml) / 100);
    const int64_t sweep = Submit(yaml).sweep().id();
    ASSERT_TRUE(Lease(w).has_run());
    ASSERT_TRUE(Lease(w).has_run());
    EXPECT_FALSE(Lease(w).has_run()) << "a third run would pass the " << unit << " budget";

    v1::SetBudgetRequest raise;
    raise.mutable_sweep()->set_id(sweep);
    raise.set_raise(by);
    v1::SetBudgetResponse raised;
    auto st = SweepStub()->SetBudget(Ctx().get(), raise, &raised);
    ASSERT_TRUE(st.ok()) << st.error_message();
    const v1::Budget& b = raised.sweep().budget();
    const bool usd = unit == "usd";
    EXPECT_NEAR(usd ? b.usd() : b.gpu_hours(), limit + by, 1e-12);
    EXPECT_EQ(usd ? b.gpu_hours() : b.usd(), 0)
        << "a raise gave the " << unit << " budget a limit in the other unit";
    EXPECT_FALSE(b.reached());
    EXPECT_EQ(b.runs_left(), 1);
    {
      pqxx::connection conn(url_);
      pqxx::work tx(conn);
      auto r = server::pg::ExecText(
          tx, "SELECT budget_gpu_hours IS NULL, budget_usd IS NULL FROM sweeps WHERE id = $1",
          sweep);
      ASSERT_EQ(r.size(), 1u);
      EXPECT_EQ(r[0][0].as<bool>(), usd);
      EXPECT_EQ(r[0][1].as<bool>(), !usd);
    }

    // One more run, then the new limit stops the sweep, now and at the keeper's next rounds.
    ASSERT_TRUE(Lease(w).has_run());
    EXPECT_FALSE(Lease(w).has_run()) << "a fourth run would pass the raised " << unit << " budget";
    v1::Budget after;
    for (int i = 0; i < 50 && !after.reached(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      after = GetSweep(sweep, false).sweep().budget();
    }
    EXPECT_TRUE(after.reached());
    EXPECT_NEAR(usd ? after.usd() : after.gpu_hours(), limit + by, 1e-12);
    EXPECT_EQ(usd ? after.gpu_hours() : after.usd(), 0);
    EXPECT_EQ(after.runs_left(), 0);
    EXPECT_FALSE(Lease(w).has_run());
  }
};

TEST_F(CostTest, EachAttemptIsChargedItsLeaseTimeAtItsSlotsShareOfThePrice) {
  const int64_t w1 = RegisterPriced("w1", "Xeon A", 7.2, 2);
  const int64_t w2 = RegisterPriced("w2", "Xeon B", 0, 1);
  const int64_t sweep = Submit(SweepYaml("charged", 2, 1)).sweep().id();

  auto a = Lease(w1);
  ASSERT_TRUE(a.has_run());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(Complete(a.spec().run_id(), 1).ok());
  // B: handed back by w1, then held by w2 (unpriced) until its lease expires.
  auto b = Lease(w1);
  ASSERT_TRUE(b.has_run());
  const int64_t run_b = b.spec().run_id();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  v1::ReleaseRequest rel;
  rel.set_run_id(run_b);
  rel.set_attempt(1);
  rel.set_lease_token(LeaseToken(run_b, 1));
  v1::ReleaseResponse rel_resp;
  ASSERT_TRUE(WorkerStub()->Release(Ctx().get(), rel, &rel_resp).ok());
  auto b2 = Lease(w2);
  ASSERT_TRUE(b2.has_run());
  ASSERT_EQ(b2.spec().run_id(), run_b);

  const double a_wall = AttemptSeconds(a.spec().run_id(), 1, "completed");
  const double b_wall = AttemptSeconds(run_b, 1, "released");
  ASSERT_GT(a_wall, 0.25);
  auto got = GetSweep(sweep);
  const v1::Run* ra = FindRun(got, a.spec().run_id());
  const v1::Run* rb = FindRun(got, run_b);
  ASSERT_TRUE(ra && rb);
  // Half of w1 (2 slots) for the lease's wall time, at half its price.
  EXPECT_NEAR(ra->usage().device_seconds(), a_wall / 2, 1e-3);
  EXPECT_NEAR(ra->usage().usd(), a_wall * 3.6 / 3600, 1e-6);
  EXPECT_TRUE(ra->usage().priced());
  EXPECT_EQ(ra->usage().device_class(), "cpu Xeon A");
  // B's second attempt is still running on w2: charged up to now, all of w2, unpriced.
  EXPECT_GT(rb->usage().device_seconds(), b_wall / 2);
  EXPECT_NEAR(rb->usage().usd(), b_wall * 3.6 / 3600, 1e-6);
  EXPECT_FALSE(rb->usage().priced());
  EXPECT_EQ(rb->usage().device_class(), "cpu Xeon B");

  const v1::SweepCost& cost = got.sweep().cost();
  ASSERT_EQ(cost.classes_size(), 2);
  EXPECT_EQ(cost.classes(0).device_class(), "cpu Xeon A");  // most device time first
  EXPECT_EQ(cost.classes(0).runs(), 2);
  EXPECT_EQ(cost.classes(0).running(), 0);
  EXPECT_NEAR(cost.classes(0).device_seconds(), (a_wall + b_wall) / 2, 1e-3);
  EXPECT_TRUE(cost.classes(0).priced());
  EXPECT_EQ(cost.classes(1).running(), 1);
  EXPECT_FALSE(cost.classes(1).priced());
  EXPECT_FALSE(cost.priced());
  EXPECT_NEAR(cost.usd(), (a_wall + b_wall) * 3.6 / 3600, 1e-6);

  // An expired lease is charged only up to its expiry, never past the reaper's visit.
  {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    server::pg::ExecText(tx, "UPDATE runs SET lease_expires_at = now() WHERE id = $1", run_b);
    tx.commit();
  }
  double charged = 0;
  for (int i = 0; i < 100; ++i) {
    got = GetSweep(sweep);
    if (FindRun(got, run_b)->state() == v1::QUEUED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(FindRun(got, run_b)->state(), v1::QUEUED);
  charged = FindRun(got, run_b)->usage().device_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_DOUBLE_EQ(FindRun(GetSweep(sweep), run_b)->usage().device_seconds(), charged)
      << "an ended attempt's charge must not grow";
  EXPECT_EQ(GetSweep(sweep).sweep().cost().classes(1).running(), 0);
}

TEST_F(CostTest, ABadPriceOrBenchmarkIsRefusedAtRegister) {
  for (double price : {-1.0, std::nan(""), 1e9}) {
    v1::RegisterRequest req;
    req.mutable_info()->set_name("w");
    req.mutable_info()->set_device_kind("cpu");
    req.mutable_info()->set_price_per_hour(price);
    v1::RegisterResponse resp;
    auto s = WorkerStub()->Register(Ctx().get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << price;
    EXPECT_THAT(s.error_message(), HasSubstr("info.price_per_hour"));
  }
  v1::RegisterRequest req;
  req.mutable_info()->set_name("w");
  req.mutable_info()->set_device_kind("cpu");
  req.mutable_info()->add_benchmarks()->set_flops_per_second(std::nan(""));
  v1::RegisterResponse resp;
  EXPECT_EQ(WorkerStub()->Register(Ctx().get(), req, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(CostTest, TheEstimatePricesTheGridFromTheBenchmarkThenFromFinishedRuns) {
  const std::string yaml =
      SweepYaml("estimated", 2, 2, "", "refine: {axis: lr, max_new_runs: 4}\n");
  const double flops = RunFlops(yaml);
  // One slot runs a run in 100 s; 4 slots: 25 device-seconds a run at $3.60 a device-hour.
  const int64_t w = RegisterPriced("w", "Xeon", 3.6, 4, flops / 100);
  v1::SubmitSweepRequest req;
  req.set_spec_yaml(yaml);
  req.set_file_name("s.yaml");
  req.set_dry_run(true);
  v1::SubmitSweepResponse resp;
  ASSERT_TRUE(SweepStub()->SubmitSweep(Ctx().get(), req, &resp).ok());
  const v1::SweepEstimate& e = resp.estimate();
  EXPECT_EQ(e.base_runs(), 4);
  EXPECT_EQ(e.max_runs(), 8);
  EXPECT_DOUBLE_EQ(e.flops_per_run(), flops);
  ASSERT_EQ(e.classes_size(), 1);
  EXPECT_EQ(e.classes(0).device_class(), "cpu Xeon");
  EXPECT_EQ(e.classes(0).source(), "startup benchmark");
  EXPECT_NEAR(e.classes(0).device_hours_base(), 4 * 25 / 3600.0, 1e-9);
  EXPECT_NEAR(e.classes(0).device_hours_max(), 8 * 25 / 3600.0, 1e-9);
  EXPECT_NEAR(e.usd_base(), 4 * 25 * 3.6 / 3600, 1e-9);
  // 4 runs on 4 slots at once: one run's 100 s.
  EXPECT_NEAR(e.wall_seconds_base(), 100, 1e-6);

  // A finished run of the same size replaces the benchmark (after the model's few seconds).
  const int64_t sweep = Submit(yaml).sweep().id();
  auto l = Lease(w);
  ASSERT_TRUE(l.has_run());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(Complete(l.spec().run_id(), 1).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(3200));
  ASSERT_TRUE(SweepStub()->SubmitSweep(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.estimate().classes(0).source(), "1 finished run of similar size");
  const double run_device_seconds =
      FindRun(GetSweep(sweep), l.spec().run_id())->usage().device_seconds();
  EXPECT_NEAR(resp.estimate().classes(0).device_hours_base(), 4 * run_device_seconds / 3600, 1e-9);
  // The sweep's ETA now comes from the fleet's speed on the work left.
  const v1::Sweep s = GetSweep(sweep, false).sweep();
  EXPECT_EQ(s.eta_basis(), "throughput");
  EXPECT_GT(s.eta_seconds(), 0);
}

TEST_F(CostTest, ABudgetStopsLeasingUntilItIsRaised) {
  const std::string yaml = SweepYaml("budgeted", 2, 2, "", "budget: {usd: 0.06}\n");
  const double flops = RunFlops(yaml);
  // $0.025 a run (25 device-seconds at $3.60 an hour): 0.06 holds two, not three.
  const int64_t w = RegisterPriced("w", "Xeon", 3.6, 4, flops / 100);
  const int64_t sweep = Submit(yaml).sweep().id();
  ASSERT_TRUE(Lease(w).has_run());
  ASSERT_TRUE(Lease(w).has_run());
  EXPECT_FALSE(Lease(w).has_run()) << "a third run would pass the budget";
  // The keeper's next round: two running runs commit $0.05, so nothing fits.
  v1::Budget b;
  for (int i = 0; i < 50 && !b.reached(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    b = GetSweep(sweep, false).sweep().budget();
  }
  EXPECT_TRUE(b.reached());
  EXPECT_DOUBLE_EQ(b.usd(), 0.06);
  EXPECT_NEAR(b.committed(), 0.05, 1e-9);
  EXPECT_NEAR(b.per_run(), 0.025, 1e-9);
  EXPECT_GT(b.spent(), 0);
  EXPECT_EQ(b.runs_left(), 0);
  EXPECT_FALSE(Lease(w).has_run());

  // Refused raises.
  v1::SetBudgetRequest raise;
  raise.mutable_sweep()->set_id(sweep);
  raise.set_raise(-1);
  v1::SetBudgetResponse raised;
  auto st = SweepStub()->SetBudget(Ctx().get(), raise, &raised);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const int64_t plain = Submit(SweepYaml("unbudgeted", 1, 1)).sweep().id();
  raise.mutable_sweep()->set_id(plain);
  raise.set_raise(1);
  st = SweepStub()->SetBudget(Ctx().get(), raise, &raised);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("has no budget"));
  v1::CancelSweepRequest cancel;  // out of the way: its run would be leased below
  cancel.mutable_sweep()->set_id(plain);
  v1::CancelSweepResponse cancelled;
  ASSERT_TRUE(SweepStub()->CancelSweep(Ctx().get(), cancel, &cancelled).ok());

  // +$0.03 leaves room for one more run, at once.
  raise.mutable_sweep()->set_id(sweep);
  raise.set_raise(0.03);
  ASSERT_TRUE(SweepStub()->SetBudget(Ctx().get(), raise, &raised).ok());
  EXPECT_DOUBLE_EQ(raised.sweep().budget().usd(), 0.09);
  EXPECT_FALSE(raised.sweep().budget().reached());
  EXPECT_EQ(raised.sweep().budget().runs_left(), 1);
  ASSERT_TRUE(Lease(w).has_run());
  EXPECT_FALSE(Lease(w).has_run());
}

// 0.02 GPU-h (72 device-seconds) holds two 25 s runs; +0.007 (97.2 s) one more, not two.
TEST_F(CostTest, ARaiseOfAGpuHoursBudgetStaysInGpuHoursAndIsEnforced) {
  RaiseKeepsTheUnitAndTheNewLimitHolds("gpu_hours", 0.02, 0.007);
}

// $0.06 holds two $0.025 runs; +$0.03 one more, not two.
TEST_F(CostTest, ARaiseOfAUsdBudgetStaysInDollarsAndIsEnforced) {
  RaiseKeepsTheUnitAndTheNewLimitHolds("usd", 0.06, 0.03);
}

// A grid over batch size: runs of two memory sizes.
std::string MemoryYaml() {
  return "name: memory\n"
         "data: {train: \"synthetic:50\", val: \"synthetic:10\", tokenizer: {type: bpe, vocab: "
         "512}}\n"
         "fixed: {n_embd: 64, n_head: 2, block_size: 64, steps: 100}\n"
         "grid:\n  batch_size: [4, 512]\n  seed: [0, 1]\n";
}

TEST_F(CostTest, EachRunStoresItsMemoryEstimate) {
  const std::string yaml = MemoryYaml();
  const std::vector<v1::RunSpec> runs = Runs(yaml);
  ASSERT_EQ(runs.size(), 4u);
  const int64_t sweep = Submit(yaml).sweep().id();
  pqxx::connection conn(url_);
  pqxx::work tx(conn);
  auto r = server::pg::ExecText(
      tx, "SELECT memory_bytes FROM runs WHERE sweep_id = $1 ORDER BY order_index", sweep);
  ASSERT_EQ(static_cast<size_t>(r.size()), runs.size());
  std::set<int64_t> sizes;
  for (size_t i = 0; i < runs.size(); ++i) {
    const v1::RunConfig& c = runs[i].config();
    const int64_t want = cost::RunMemoryBytes(c, cost::VocabOf(runs[i].data()));
    EXPECT_GT(want, 0);
    EXPECT_EQ(r[i][0].as<int64_t>(), want) << "run " << i << " (batch " << c.batch_size() << ")";
    sizes.insert(r[i][0].as<int64_t>());
  }
  EXPECT_EQ(sizes.size(), 2u) << "batch 4 and batch 512 need the same memory";
}

TEST_F(CostTest, TheEstimateCountsTheRunsNoLiveWorkerCanHold) {
  const std::string yaml = MemoryYaml();
  int64_t small = 0, large = 0;
  for (const auto& run : Runs(yaml)) {
    const int64_t m = cost::RunMemoryBytes(run.config(), cost::VocabOf(run.data()));
    (run.config().batch_size() == 4 ? small : large) = m;
  }
  ASSERT_LT(small, large);
  auto estimate = [&] {
    v1::SubmitSweepRequest req;
    req.set_spec_yaml(yaml);
    req.set_file_name("s.yaml");
    req.set_dry_run(true);
    v1::SubmitSweepResponse resp;
    auto st = SweepStub()->SubmitSweep(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.estimate();
  };
  auto register_worker = [&](const std::string& name, int64_t memory, int slots) {
    v1::RegisterRequest req;
    req.mutable_info()->set_name(name);
    req.mutable_info()->set_device_kind("cuda");
    req.mutable_info()->set_device_name("Small GPU");
    req.mutable_info()->set_device_memory_bytes(memory);
    req.mutable_info()->set_slots(slots);
    v1::RegisterResponse resp;
    auto st = WorkerStub()->Register(Ctx().get(), req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  };

  v1::SweepEstimate e = estimate();  // no live worker
  EXPECT_EQ(e.memory_bytes_max(), large);
  EXPECT_EQ(e.largest_worker_memory_bytes(), 0);
  EXPECT_EQ(e.unfittable_runs(), 0);

  // Two slots of a device with room for one large run: each slot holds the small runs only.
  register_worker("small", large + small, 2);
  e = estimate();
  EXPECT_EQ(e.largest_worker_memory_bytes(), (large + small) / 2);
  EXPECT_EQ(e.unfittable_runs(), 2);
  EXPECT_THAT(e.notes(),
              ::testing::Contains(HasSubstr(absl::StrCat(
                  "2 runs need up to ", cost::FormatBytes(large), " of device memory"))));

  // A worker whose one slot holds the large runs: every run fits.
  register_worker("big", large, 1);
  e = estimate();
  EXPECT_EQ(e.largest_worker_memory_bytes(), large);
  EXPECT_EQ(e.unfittable_runs(), 0);
}

}  // namespace
}  // namespace ablate::testing
