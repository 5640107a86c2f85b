// A sweep's run counts come from run_counts (migration 0011), kept by triggers on runs: after
// every kind of transition they must equal a count over the runs themselves, whether the deltas
// are folded (run_counts_compact) or not. And ListRuns never answers more than one page.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "server/store/cost_store.h"
#include "server/store/db.h"
#include "server/store/sweep_store.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

class CountsTest : public ServerFixture {
 protected:
  // The reaper fails a run at its first lease expiry, so one test walks every way a run ends.
  void Configure(server::ServerOptions* o) override {
    o->reap_interval_seconds = 0.2;
    o->faults.max_preemptions = 1;
  }

  // Every count GetSweep shows, against an aggregate over the sweep's runs.
  void ExpectExact(int64_t sweep, const std::string& where) {
    SCOPED_TRACE(where);
    const v1::Sweep s = GetSweep(sweep, /*runs=*/false).sweep();
    pqxx::connection conn(url_);
    pqxx::nontransaction tx(conn);
    pqxx::row r = tx.exec(absl::StrCat(
        "SELECT count(*) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state = "
        "'leased'), count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state = "
        "'succeeded'), count(*) FILTER (WHERE state = 'diverged'), count(*) FILTER (WHERE state "
        "= 'failed'), count(*) FILTER (WHERE state = 'cancelled'), count(*) FILTER (WHERE state "
        "= 'skipped'), count(*), count(*) FILTER (WHERE refine_round > 0), "
        "coalesce(max(refine_round), 0) = (SELECT coalesce(max(max_round), 0) FROM run_counts "
        "WHERE sweep_id = r.sweep_id), avg(extract(epoch from finished_at - started_at)) "
        "FILTER (WHERE state IN ('succeeded', 'diverged', 'failed') AND started_at IS NOT NULL) "
        "IS NOT DISTINCT FROM (SELECT sum(finished_seconds) / nullif(sum(finished_timed), 0) "
        "FROM run_counts WHERE sweep_id = r.sweep_id) FROM runs r WHERE sweep_id = ",
        sweep, " GROUP BY sweep_id"))[0];
    const auto& c = s.counts();
    EXPECT_EQ(c.queued(), r[0].as<int>());
    EXPECT_EQ(c.leased(), r[1].as<int>());
    EXPECT_EQ(c.running(), r[2].as<int>());
    EXPECT_EQ(c.succeeded(), r[3].as<int>());
    EXPECT_EQ(c.diverged(), r[4].as<int>());
    EXPECT_EQ(c.failed(), r[5].as<int>());
    EXPECT_EQ(c.cancelled(), r[6].as<int>());
    EXPECT_EQ(c.skipped(), r[7].as<int>());
    EXPECT_EQ(c.total(), r[8].as<int>());
    EXPECT_EQ(c.refined(), r[9].as<int>());
    EXPECT_TRUE(r[10].as<bool>()) << "the highest refine round";
    EXPECT_TRUE(r[11].as<bool>()) << "the mean duration of finished runs (exact, numeric)";
    // ListRuns' total for a state filter is summed from the same rows.
    v1::ListRunsRequest req;
    req.mutable_sweep()->set_id(sweep);
    req.add_states(v1::QUEUED);
    req.add_states(v1::FAILED);
    req.set_limit(1);
    v1::ListRunsResponse resp;
    ASSERT_TRUE(SweepStub()->ListRuns(Ctx().get(), req, &resp).ok());
    EXPECT_EQ(resp.total(), r[0].as<int>() + r[5].as<int>());
    ExpectCellsMatchRuns(sweep, 2);
  }

  // ListCells, read in pages of `page` cells, against the same fold over the sweep's runs as the
  // CLI did before the server aggregated (ablate status).
  void ExpectCellsMatchRuns(int64_t sweep, int page) {
    struct Want {
      v1::SweepCounts counts;
      double loss_sum = 0;
      int loss_n = 0;
      int64_t steps = 0, total_steps = 0;
      int round = 0;
      int64_t first_id = 0;
      google::protobuf::Map<std::string, std::string> grid;
    };
    std::map<std::string, Want> want;
    const v1::GetSweepResponse all = GetSweep(sweep, /*runs=*/true);
    for (const auto& r : all.runs()) {
      auto [it, fresh] = want.try_emplace(r.cell());
      Want& w = it->second;
      if (fresh || r.id() < w.first_id) {
        w.first_id = r.id();
        w.grid = r.grid_values();
        w.grid.erase("seed");
      }
      w.round = fresh ? r.refine_round() : std::min(w.round, r.refine_round());
      v1::SweepCounts& c = w.counts;
      switch (r.state()) {
        case v1::QUEUED:
          c.set_queued(c.queued() + 1);
          break;
        case v1::LEASED:
          c.set_leased(c.leased() + 1);
          break;
        case v1::RUNNING:
          c.set_running(c.running() + 1);
          break;
        case v1::SUCCEEDED:
          c.set_succeeded(c.succeeded() + 1);
          break;
        case v1::DIVERGED:
          c.set_diverged(c.diverged() + 1);
          break;
        case v1::FAILED:
          c.set_failed(c.failed() + 1);
          break;
        case v1::CANCELLED:
          c.set_cancelled(c.cancelled() + 1);
          break;
        case v1::SKIPPED:
          c.set_skipped(c.skipped() + 1);
          break;
        default:
          ADD_FAILURE() << "run " << r.id() << " in state " << r.state();
      }
      c.set_total(c.total() + 1);
      if (r.refine_round() > 0) c.set_refined(c.refined() + 1);
      const double loss = r.state() == v1::SUCCEEDED  ? r.result().final_val_loss()
                          : r.state() == v1::DIVERGED ? NAN
                          : r.latest_val_loss() > 0   ? r.latest_val_loss()
                                                      : NAN;
      if (std::isfinite(loss)) {
        w.loss_sum += loss;
        ++w.loss_n;
      }
      if (r.state() == v1::RUNNING) {
        w.steps += r.step();
        w.total_steps += r.total_steps();
      }
    }
    v1::ListCellsRequest req;
    req.mutable_sweep()->set_id(sweep);
    req.set_limit(page);
    std::vector<v1::CellSummary> got;
    for (int calls = 0;; ++calls) {
      ASSERT_LT(calls, 1000) << "ListCells never ended";
      v1::ListCellsResponse resp;
      auto st = SweepStub()->ListCells(Ctx().get(), req, &resp);
      ASSERT_TRUE(st.ok()) << st.error_message();
      EXPECT_LE(resp.cells_size(), page);
      for (const auto& c : resp.cells()) got.push_back(c);
      if (resp.next_after_cell().empty()) break;
      req.set_after_cell(resp.next_after_cell());
    }
    ASSERT_EQ(got.size(), want.size());
    for (const auto& c : got) {
      SCOPED_TRACE(c.cell());
      ASSERT_TRUE(want.contains(c.cell())) << "a cell twice, or one no run has";
      const Want& w = want[c.cell()];
      EXPECT_EQ(c.counts().SerializeAsString(), w.counts.SerializeAsString())
          << c.counts().ShortDebugString() << " vs " << w.counts.ShortDebugString();
      EXPECT_EQ(c.loss_runs(), w.loss_n);
      if (w.loss_n > 0) {
        EXPECT_NEAR(c.mean_val_loss(), w.loss_sum / w.loss_n, 1e-12);
      }
      EXPECT_EQ(c.running_steps(), w.steps);
      EXPECT_EQ(c.running_total_steps(), w.total_steps);
      EXPECT_EQ(c.refine_round(), w.round);
      using Grid = std::map<std::string, std::string>;
      EXPECT_EQ(Grid(c.grid_values().begin(), c.grid_values().end()),
                Grid(w.grid.begin(), w.grid.end()));
      want.erase(c.cell());
    }
  }

  int64_t CountRows(int64_t sweep) {
    pqxx::connection conn(url_);
    pqxx::nontransaction tx(conn);
    return tx.exec(absl::StrCat("SELECT count(*) FROM run_counts WHERE sweep_id = ", sweep))[0][0]
        .as<int64_t>();
  }

  v1::LeaseResponse LeaseRun(int64_t worker) {
    v1::LeaseResponse l = Lease(worker);
    EXPECT_TRUE(l.has_run());
    return l;
  }

  void CompleteRun(const v1::LeaseResponse& l, v1::RunState state) {
    v1::CompleteRequest c;
    c.set_run_id(l.lease().run_id());
    c.set_attempt(l.lease().attempt());
    c.set_lease_token(l.lease().token());
    c.set_state(state);
    c.mutable_result()->set_final_val_loss(1.0);
    v1::CompleteResponse cr;
    auto s = WorkerStub()->Complete(Ctx().get(), c, &cr);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }

  void Beat(int64_t worker, const v1::LeaseResponse& l) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_run_id(l.lease().run_id());
    req.set_attempt(l.lease().attempt());
    req.set_lease_token(l.lease().token());
    req.set_step(3);
    v1::HeartbeatResponse resp;
    EXPECT_TRUE(WorkerStub()->Heartbeat(Ctx().get(), req, &resp).ok());
  }
};

TEST_F(CountsTest, EveryTransitionKeepsTheCountsExact) {
  const int64_t sweep = Submit(SweepYaml("counts", 4, 3, "", "max_attempts: 1\n")).sweep().id();
  const int64_t other = Submit(SweepYaml("other", 2, 2)).sweep().id();
  ExpectExact(sweep, "submit");
  const int64_t w = Register("w", "cpu", 0, /*slots=*/8);

  auto a = LeaseRun(w);
  ExpectExact(sweep, "lease");
  Beat(w, a);
  ExpectExact(sweep, "heartbeat: leased -> running");
  // A live run's latest val loss counts in its cell's mean; a NaN one (a failed run's) does not.
  Sql(absl::StrCat("UPDATE runs SET latest_val_loss = 2.5 WHERE id = ", a.lease().run_id()));
  ExpectExact(sweep, "a running run's val loss");
  CompleteRun(a, v1::SUCCEEDED);
  ExpectExact(sweep, "complete succeeded");
  CompleteRun(LeaseRun(w), v1::DIVERGED);
  auto failing = LeaseRun(w);
  Sql(absl::StrCat("UPDATE runs SET latest_val_loss = 'NaN' WHERE id = ",
                   failing.lease().run_id()));
  CompleteRun(failing, v1::FAILED);
  ExpectExact(sweep, "complete diverged, failed");

  auto released = LeaseRun(w);
  v1::ReleaseRequest rel;
  rel.set_run_id(released.lease().run_id());
  rel.set_attempt(released.lease().attempt());
  rel.set_lease_token(released.lease().token());
  rel.set_reason("shutting down");
  v1::ReleaseResponse rr;
  ASSERT_TRUE(WorkerStub()->Release(Ctx().get(), rel, &rr).ok());
  ExpectExact(sweep, "release");

  // The reaper: an expired lease, past this server's one preemption a run, fails the run.
  auto expiring = LeaseRun(w);
  ExpireLease(expiring.lease().run_id());
  for (int i = 0; i < 100 && GetSweep(sweep, false).sweep().counts().failed() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ExpectExact(sweep, "reap past max_preemptions");

  v1::CancelSweepRequest cancel;
  cancel.mutable_sweep()->set_id(sweep);
  cancel.add_run_ids(LeaseRun(w).lease().run_id());
  v1::CancelSweepResponse cr;
  ASSERT_TRUE(SweepStub()->CancelSweep(Ctx().get(), cancel, &cr).ok());
  ExpectExact(sweep, "cancel a leased run");

  v1::RetryRunsRequest retry;
  retry.mutable_sweep()->set_id(sweep);
  v1::RetryRunsResponse rtr;
  ASSERT_TRUE(SweepStub()->RetryRuns(Ctx().get(), retry, &rtr).ok());
  EXPECT_EQ(rtr.requeued(), 3);  // two failed, one cancelled
  ExpectExact(sweep, "retry");

  // Refinement's and pruning's writes are plain statements on runs like these: a run added in
  // round 2 and a queued run skipped.
  Sql(absl::StrCat(
      "INSERT INTO runs (sweep_id, cell, seed, order_index, priority, device, max_attempts, "
      "total_steps, refine_round) VALUES (",
      sweep, ", 'refined', 0, 100, 0, 'auto', 1, 10, 2)"));
  Sql(
      absl::StrCat("UPDATE runs SET state = 'skipped', finished_at = now() WHERE id = (SELECT "
                   "min(id) FROM runs WHERE sweep_id = ",
                   sweep, " AND state = 'queued')"));
  ExpectExact(sweep, "refine insert, prune");

  // Folding the deltas changes no count and leaves one row per (sweep, shape).
  EXPECT_GT(CountRows(sweep), 1);
  server::Db db(url_, 1);
  server::SweepStore store(&db);
  auto folded = store.CompactRunCounts();
  ASSERT_TRUE(folded.ok()) << folded.status();
  // Two shapes: the grid's, and the hand-inserted run's (no size recorded).
  EXPECT_EQ(CountRows(sweep), 2);
  ExpectExact(sweep, "compacted");
  ExpectExact(other, "the other sweep, untouched");

  // The whole sweep cancelled, then deleted: its rows go with it, the other sweep's stay.
  cancel.clear_run_ids();
  ASSERT_TRUE(SweepStub()->CancelSweep(Ctx().get(), cancel, &cr).ok());
  ExpectExact(sweep, "cancel the sweep");
  v1::DeleteSweepRequest del;
  del.mutable_sweep()->set_id(sweep);
  v1::DeleteSweepResponse dr;
  auto ds = SweepStub()->DeleteSweep(Ctx().get(), del, &dr);
  ASSERT_TRUE(ds.ok()) << ds.error_message();
  EXPECT_EQ(CountRows(sweep), 0);
  ExpectExact(other, "after deleting the first");
}

// Leases and completions racing on one sweep, with compactions beside them.
TEST_F(CountsTest, ConcurrentTransitionsAndCompactionStayExact) {
  const int64_t sweep = Submit(SweepYaml("race", 20, 10)).sweep().id();
  std::atomic<bool> stop{false};
  std::thread folder([&] {
    server::Db db(url_, 1);
    server::SweepStore store(&db);
    while (!stop) {
      EXPECT_TRUE(store.CompactRunCounts().ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < 6; ++t) {
    workers.emplace_back([&, t] {
      const int64_t w = Register(absl::StrCat("racer-", t));
      for (int i = 0; i < 25; ++i) {
        v1::LeaseResponse l = Lease(w);
        if (!l.has_run()) break;
        if (i % 5 != 4) CompleteRun(l, i % 2 ? v1::SUCCEEDED : v1::FAILED);
        if (i % 5 == 4) break;  // keep one held
      }
    });
  }
  for (auto& t : workers) t.join();
  stop = true;
  folder.join();
  ExpectExact(sweep, "after the race");
}

// The ETA's remaining work from run_counts equals the walk over the runs it replaced.
TEST_F(CountsTest, RemainingWorkMatchesTheRuns) {
  const int64_t sweep = Submit(SweepYaml("remaining", 5, 2)).sweep().id();
  const int64_t w = Register("w", "cpu", 0, 4);
  CompleteRun(LeaseRun(w), v1::SUCCEEDED);
  auto held = LeaseRun(w);
  Beat(w, held);
  server::Db db(url_, 1);
  server::CostStore costs(&db, 30);
  auto work = costs.Remaining(sweep);
  ASSERT_TRUE(work.ok()) << work.status();
  pqxx::connection conn(url_);
  pqxx::nontransaction tx(conn);
  pqxx::result want = tx.exec(absl::StrCat(
      "SELECT count(*) FILTER (WHERE state = 'queued'), coalesce(sum(greatest(0, 1 - "
      "step::float8 / greatest(total_steps, 1))) FILTER (WHERE state IN ('leased', 'running')), "
      "0), count(*) FILTER (WHERE flops IS NULL) FROM runs WHERE sweep_id = ",
      sweep, " AND state IN ('queued', 'leased', 'running')"));
  double runs = 0;
  for (const auto& s : work->shapes) runs += s.runs;
  EXPECT_GT(want[0][1].as<double>(), 0);
  EXPECT_NEAR(runs, want[0][0].as<double>() + want[0][1].as<double>(), 1e-9);
  EXPECT_EQ(work->unknown_size, want[0][2].as<int64_t>());
}

// No ListRuns reply carries more than a page, GetSweep refuses to include more than a page's
// runs, and paging covers every run once.
TEST_F(CountsTest, ListRunsNeverAnswersMoreThanAPage) {
  // A generous deadline: 12,100 runs take a while on a loaded test machine.
  v1::SubmitSweepRequest submit;
  submit.set_spec_yaml(SweepYaml("pages", 121, 100));
  v1::SubmitSweepResponse submitted;
  auto st = SweepStub()->SubmitSweep(Ctx(admin_, 180).get(), submit, &submitted);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const int64_t sweep = submitted.sweep().id();
  const int total = 12100;
  auto page = [&](int limit, int offset) {
    v1::ListRunsRequest req;
    req.mutable_sweep()->set_id(sweep);
    req.set_limit(limit);
    req.set_offset(offset);
    v1::ListRunsResponse resp;
    auto s = SweepStub()->ListRuns(Ctx(admin_, 120).get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  };
  EXPECT_EQ(page(0, 0).runs_size(), 1000);  // the default page
  EXPECT_EQ(page(1000000, 0).runs_size(), 10000);
  std::set<int64_t> seen;
  int64_t previous_order = total;
  for (int offset = 0; offset < total; offset += 3000) {
    auto r = page(3000, offset);
    EXPECT_EQ(r.total(), total);
    EXPECT_LE(r.runs_size(), 3000);
    for (const auto& run : r.runs()) {
      EXPECT_LT(run.order_index(), previous_order);  // newest first, no repeats
      previous_order = run.order_index();
      seen.insert(run.id());
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), total);
  // Its 121 cells: the default page holds them all; pages of 50 cover each once, 100 runs each.
  v1::ListCellsRequest cells;
  cells.mutable_sweep()->set_id(sweep);
  v1::ListCellsResponse cr;
  ASSERT_TRUE(SweepStub()->ListCells(Ctx(admin_, 120).get(), cells, &cr).ok());
  EXPECT_EQ(cr.cells_size(), 121);
  EXPECT_TRUE(cr.next_after_cell().empty());
  cells.set_limit(121);  // exactly the rest: the last page says so, no empty page follows
  cr.Clear();
  ASSERT_TRUE(SweepStub()->ListCells(Ctx(admin_, 120).get(), cells, &cr).ok());
  EXPECT_EQ(cr.cells_size(), 121);
  EXPECT_TRUE(cr.next_after_cell().empty());
  std::set<std::string> cell_keys;
  cells.set_limit(50);
  for (int calls = 0; calls < 10; ++calls) {
    cr.Clear();
    ASSERT_TRUE(SweepStub()->ListCells(Ctx(admin_, 120).get(), cells, &cr).ok());
    EXPECT_LE(cr.cells_size(), 50);
    for (const auto& c : cr.cells()) {
      EXPECT_EQ(c.counts().total(), 100);
      EXPECT_EQ(c.counts().queued(), 100);
      EXPECT_TRUE(cell_keys.insert(c.cell()).second) << c.cell();
    }
    if (cr.next_after_cell().empty()) break;
    cells.set_after_cell(cr.next_after_cell());
  }
  EXPECT_EQ(cell_keys.size(), 121u);
  v1::GetSweepRequest get;
  get.mutable_sweep()->set_id(sweep);
  get.set_include_runs(true);
  v1::GetSweepResponse resp;
  auto s = SweepStub()->GetSweep(Ctx().get(), get, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("ListRuns"), std::string::npos) << s.error_message();

  // A watch of a sweep this big carries its counts and the runs in flight only (runs_in_flight).
  const int64_t w = Register("w", "cpu", 0, /*slots=*/2);
  const int64_t a = LeaseRun(w).lease().run_id(), b = LeaseRun(w).lease().run_id();
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + admin_);
  v1::WatchSweepRequest watch;
  watch.mutable_sweep()->set_id(sweep);
  auto reader = SweepStub()->WatchSweep(&ctx, watch);
  v1::SweepUpdate frame;
  ASSERT_TRUE(reader->Read(&frame));
  EXPECT_EQ(frame.sweep().counts().leased(), 2);
  ASSERT_EQ(frame.runs_size(), 2);
  EXPECT_EQ(frame.runs(0).id(), std::min(a, b));  // queue order
  EXPECT_EQ(frame.runs(1).id(), std::max(a, b));
  ctx.TryCancel();
  while (reader->Read(&frame)) {
  }
  reader->Finish();
}

}  // namespace
}  // namespace ablate::testing
