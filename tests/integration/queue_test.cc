// The lease lifecycle over real gRPC + PostgreSQL: submit -> lease -> heartbeat -> report ->
// complete, expiry and fencing, resume without duplicate or missing steps, cancel, release.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/sweep/sweep.h"
#include "common/util/sha256.h"
#include "google/protobuf/util/message_differencer.h"
#include "pqxx/pqxx"
#include "server/store/pg_codec.h"
#include "server/store/pqxx_compat.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

using v1::RunState;

class QueueTest : public ServerFixture {
 protected:
  // Leases are long enough that a slow CI machine never loses one by accident; tests that
  // want an expiry force it with ExpireLease, and the reaper (every 0.2 s) does the rest.
  void Configure(server::ServerOptions* o) override {
    o->lease_seconds = 30;
    o->reap_interval_seconds = 0.2;
  }

  grpc::Status Report(int64_t run, int attempt, int64_t from, int64_t to, double offset = 0) {
    v1::ReportMetricsRequest req;
    req.set_run_id(run);
    req.set_attempt(attempt);
    req.set_lease_token(LeaseToken(run, attempt));
    for (int64_t s = from; s <= to; ++s) {
      auto* p = req.add_points();
      p->set_step(s);
      p->set_name("train_loss");
      p->set_value(10.0 - s * 0.01 + offset);
      p->set_time(1.0 * s);
    }
    v1::ReportMetricsResponse resp;
    return WorkerStub()->ReportMetrics(Ctx().get(), req, &resp);
  }

  v1::HeartbeatResponse Beat(int64_t worker, int64_t run, int attempt, int64_t step = 0) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_run_id(run);
    req.set_attempt(attempt);
    req.set_lease_token(LeaseToken(run, attempt));
    req.set_step(step);
    v1::HeartbeatResponse resp;
    auto s = WorkerStub()->Heartbeat(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  grpc::Status Complete(int64_t run, int attempt, RunState state = v1::SUCCEEDED) {
    v1::CompleteRequest req;
    req.set_run_id(run);
    req.set_attempt(attempt);
    req.set_lease_token(LeaseToken(run, attempt));
    req.set_state(state);
    req.mutable_result()->set_final_val_loss(1.5);
    req.mutable_result()->set_steps_done(100);
    v1::CompleteResponse resp;
    return WorkerStub()->Complete(Ctx().get(), req, &resp);
  }

  // Waits (bounded) until the run reaches `state`; the reaper runs every 0.2 s.
  v1::Run WaitForState(int64_t sweep, int64_t run, RunState state) {
    v1::Run found;
    for (int i = 0; i < 100; ++i) {
      const auto got = GetSweep(sweep);
      for (const auto& r : got.runs()) {
        if (r.id() == run) found = r;
      }
      if (found.state() == state) return found;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "run " << run << " never reached " << v1::RunState_Name(state) << " (is "
                  << v1::RunState_Name(found.state()) << ")";
    return found;
  }
};

TEST_F(QueueTest, SubmitLeaseHeartbeatReportComplete) {
  auto sub = Submit(SweepYaml("lifecycle", 2, 1));
  ASSERT_EQ(sub.runs(), 2);
  EXPECT_EQ(sub.sweep().counts().queued(), 2);
  const int64_t w = Register("w1");

  auto lease = Lease(w);
  ASSERT_TRUE(lease.has_run());
  const int64_t run = lease.spec().run_id();
  EXPECT_EQ(lease.lease().attempt(), 1);
  EXPECT_EQ(lease.spec().sweep_id(), sub.sweep().id());
  EXPECT_EQ(lease.spec().sweep_name(), "lifecycle");
  EXPECT_DOUBLE_EQ(lease.spec().config().lr(), 0.001);  // queue order: first grid point first
  EXPECT_FALSE(lease.has_resume_from());

  auto hb = Beat(w, run, 1, 5);
  EXPECT_FALSE(hb.cancel());
  EXPECT_FALSE(hb.lease_lost());
  // The lease now runs until lease_seconds (30) from this heartbeat.
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  EXPECT_NEAR(hb.expires_at(), now + 30, 5);
  EXPECT_NEAR(lease.lease().expires_at(), now + 30, 5);

  ASSERT_TRUE(Report(run, 1, 0, 9).ok());
  auto points = Points(run);
  ASSERT_EQ(points.size(), 10u);
  EXPECT_EQ(points.front().step(), 0);
  EXPECT_DOUBLE_EQ(points.back().value(), 10.0 - 0.09);

  auto mid = GetSweep(sub.sweep().id());
  EXPECT_EQ(mid.sweep().counts().running(), 1);

  ASSERT_TRUE(Complete(run, 1).ok());
  // A retried Complete (reply lost) is accepted, not fenced.
  EXPECT_TRUE(Complete(run, 1).ok());

  auto second = Lease(w);
  ASSERT_TRUE(second.has_run());
  EXPECT_NE(second.spec().run_id(), run);
  ASSERT_TRUE(Complete(second.spec().run_id(), 1, v1::DIVERGED).ok());

  auto done = GetSweep(sub.sweep().id());
  EXPECT_EQ(done.sweep().state(), "finished");
  EXPECT_EQ(done.sweep().counts().succeeded(), 1);
  EXPECT_EQ(done.sweep().counts().diverged(), 1);
  for (const auto& r : done.runs()) {
    if (r.id() == run) {
      EXPECT_EQ(r.state(), v1::SUCCEEDED);
      EXPECT_DOUBLE_EQ(r.result().final_val_loss(), 1.5);
      EXPECT_EQ(r.worker(), "w1");
      EXPECT_DOUBLE_EQ(r.latest_train_loss(), 10.0 - 0.09);
    }
  }
  EXPECT_FALSE(Lease(w).has_run());

  v1::ListRunEventsRequest ev;
  ev.set_run_id(run);
  v1::ListRunEventsResponse events;
  ASSERT_TRUE(SweepStub()->ListRunEvents(Ctx().get(), ev, &events).ok());
  std::vector<std::string> kinds;
  for (const auto& e : events.events()) kinds.push_back(e.kind());
  EXPECT_EQ(kinds, (std::vector<std::string>{"leased", "started", "completed"}));
}

// A run's spec is stored as what it has apart from its sweep's first run (migration 0014). What
// a worker leases, and the config and grid values ListRuns and ListCells show, are still exactly
// the runs the sweep file expands to: runs that differ from the first in the LR, the depth, the
// QK-norm, the dropout (0.1 first, 0 after) and the seed, and runs of a sweep stored whole, as
// every sweep was before the migration (no base row).
TEST_F(QueueTest, LeasedSpecsAreTheSweepFilesExpansionWithTheSharedPartStoredOnce) {
  auto yaml = [](const std::string& name, const std::string& extra_axes) {
    return "name: " + name +
           "\n"
           "data: {train: \"synthetic:50\", val: \"synthetic:10\", tokenizer: {type: bpe, vocab: "
           "512}}\n"
           "fixed: {n_embd: 32, n_head: 2, block_size: 32, batch_size: 4, steps: 100, warmup: 10}\n"
           "grid:\n  lr: {logspace: {min: 1.0e-3, max: 1.0e-1, per_decade: 1}}\n  seed: [0, 1]\n" +
           extra_axes + "divergence: {loss_above_init_by: 2.0, patience: 7}\n";
  };
  const std::string narrow =
      yaml("narrow", "  n_layer: [1, 2]\n  qk_norm: [none, layernorm]\n  dropout: [0.1, 0.0]\n");
  const std::string whole = yaml("whole", "");
  const int64_t narrow_id = Submit(narrow).sweep().id();
  const int64_t whole_id = Submit(whole).sweep().id();
  std::map<std::string, v1::RunSpec> want;  // by sweep name, cell and seed
  for (const std::string* text : {&narrow, &whole}) {
    auto parsed = sweep::ParseSweep(*text, "sweep.yaml");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    auto runs = sweep::Expand(*parsed);
    ASSERT_TRUE(runs.ok()) << runs.status();
    for (const auto& r : *runs) {
      want[r.sweep_name() + "/" + r.cell() + "/" + r.grid_values().at("seed")] = r;
    }
  }
  ASSERT_EQ(want.size(), 48u + 6u);
  {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    // Stored narrow: the first run holds nothing of its own, the others a fraction of the base.
    pqxx::row sizes = server::pg::ExecText(
        tx,
        "SELECT (SELECT length(spec::text) FROM run_spec_base WHERE sweep_id = $1), "
        "max(length(s.own::text)), min(length(s.own::text)), count(s.spec) "
        "FROM run_specs s JOIN runs r ON r.id = s.run_id WHERE r.sweep_id = $1",
        narrow_id)[0];
    EXPECT_LT(sizes[1].as<int>() * 3, sizes[0].as<int>());
    EXPECT_EQ(sizes[2].as<int>(), 2);  // "{}"
    EXPECT_EQ(sizes[3].as<int>(), 0);  // no whole spec: an older replica finds none
    // The other sweep as an older server stored it: whole specs and no base.
    for (const auto& row : server::pg::ExecText(
             tx, "SELECT id, cell, seed FROM runs WHERE sweep_id = $1", whole_id)) {
      const v1::RunSpec& spec = want.at(
          absl::StrCat("whole/", row["cell"].as<std::string>(), "/", row["seed"].as<int64_t>()));
      server::pg::ExecText(tx,
                           "UPDATE run_specs SET spec = $2::jsonb, own = NULL WHERE run_id = $1",
                           row["id"].as<int64_t>(), server::pg::ToJson(spec));
    }
    server::pg::ExecText(tx, "DELETE FROM run_spec_base WHERE sweep_id = $1", whole_id);
    tx.commit();
  }
  auto key = [](const std::string& sweep, const std::string& cell,
                const google::protobuf::Map<std::string, std::string>& grid) {
    return sweep + "/" + cell + "/" + grid.at("seed");
  };
  // ListRuns merges a run's spec over its sweep's base (pg::MergeRunSpec, as Lease does),
  // ListCells reads the grid point in SQL (run_spec_part).
  std::map<int64_t, v1::Run> listed;  // by run id
  for (const auto& [sweep, name] : {std::pair{narrow_id, "narrow"}, std::pair{whole_id, "whole"}}) {
    v1::ListRunsRequest lr;
    lr.mutable_sweep()->set_id(sweep);
    lr.set_limit(1000);
    v1::ListRunsResponse runs;
    ASSERT_TRUE(SweepStub()->ListRuns(Ctx().get(), lr, &runs).ok());
    ASSERT_EQ(runs.runs_size(), name == std::string("narrow") ? 48 : 6);
    for (const auto& r : runs.runs()) {
      listed[r.id()] = r;
      const auto it = want.find(key(name, r.cell(), r.grid_values()));
      ASSERT_NE(it, want.end()) << r.cell();
      EXPECT_TRUE(
          google::protobuf::util::MessageDifferencer::Equals(r.config(), it->second.config()))
          << r.cell() << ": " << r.config().ShortDebugString();
    }
    v1::ListCellsRequest lc;
    lc.mutable_sweep()->set_id(sweep);
    v1::ListCellsResponse cells;
    ASSERT_TRUE(SweepStub()->ListCells(Ctx().get(), lc, &cells).ok());
    ASSERT_EQ(cells.cells_size(), name == std::string("narrow") ? 24 : 3);
    for (const auto& c : cells.cells()) {
      auto grid = c.grid_values();
      grid["seed"] = "0";
      const auto it = want.find(key(name, c.cell(), grid));
      ASSERT_NE(it, want.end()) << c.cell();
      grid.erase("seed");
      auto expected = it->second.grid_values();
      expected.erase("seed");
      using Sorted = std::map<std::string, std::string>;
      EXPECT_EQ(Sorted(grid.begin(), grid.end()), Sorted(expected.begin(), expected.end()));
    }
  }
  // What workers lease: every run once, each exactly its expansion.
  const int64_t w = Register("w-specs");
  std::set<std::string> leased;
  for (;;) {
    auto l = Lease(w);
    if (!l.has_run()) break;
    v1::RunSpec got = l.spec();
    const std::string k = key(got.sweep_name(), got.cell(), got.grid_values());
    EXPECT_TRUE(leased.insert(k).second) << k;
    const auto it = want.find(k);
    ASSERT_NE(it, want.end()) << k;
    got.set_run_id(0);
    got.set_sweep_id(0);
    std::string diff;
    google::protobuf::util::MessageDifferencer differ;
    differ.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differ.Compare(it->second, got)) << k << ":\n" << diff;
    // The same run as ListRuns showed it: one merge serves both.
    const v1::Run& shown = listed.at(l.spec().run_id());
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(shown.config(), got.config()))
        << k;
    using Sorted = std::map<std::string, std::string>;
    EXPECT_EQ(Sorted(shown.grid_values().begin(), shown.grid_values().end()),
              Sorted(got.grid_values().begin(), got.grid_values().end()))
        << k;
    ASSERT_TRUE(Complete(l.spec().run_id(), l.lease().attempt()).ok());
  }
  EXPECT_EQ(leased.size(), want.size());

  // A field the base has and a run does not is stored as null, and read back as unset.
  const auto it = want.find("narrow/" + want.begin()->second.cell() + "/1");
  ASSERT_NE(it, want.end());
  {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    server::pg::ExecText(tx,
                         "UPDATE run_specs s SET own = jsonb_set(s.own, '{config}', "
                         "coalesce(s.own->'config', '{}') || '{\"dropout\": null}') FROM runs r "
                         "WHERE r.id = s.run_id AND r.sweep_id = $1 AND r.cell = $2 AND r.seed = 1",
                         narrow_id, it->second.cell());
    tx.commit();
  }
  v1::ListRunsRequest lr;
  lr.mutable_sweep()->set_id(narrow_id);
  lr.set_limit(1000);
  v1::ListRunsResponse runs;
  ASSERT_TRUE(SweepStub()->ListRuns(Ctx().get(), lr, &runs).ok());
  int checked = 0;
  for (const auto& r : runs.runs()) {
    v1::RunConfig expected = want.at(key("narrow", r.cell(), r.grid_values())).config();
    if (r.cell() == it->second.cell() && r.seed() == 1) {
      expected.clear_dropout();
      EXPECT_FALSE(r.config().has_dropout());
      ++checked;
    }
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(r.config(), expected))
        << r.cell() << "/" << r.seed() << ": " << r.config().ShortDebugString();
  }
  EXPECT_EQ(checked, 1);
}

// ablate-worker --slots N holds up to N leases at once. Each is its own: a second Lease, an
// empty one, a heartbeat or a Complete of one run never fences or hides the others, and the
// worker lists as busy with every run it holds.
TEST_F(QueueTest, OneWorkerHoldsSeveralLeases) {
  auto sub = Submit(SweepYaml("slots", 2, 1));
  ASSERT_EQ(sub.runs(), 2);
  // Three slots: after two leases a free slot asks again and finds the queue empty.
  const int64_t w = Register("w1", "cpu", 0, 3);
  auto a = Lease(w);
  auto b = Lease(w);
  ASSERT_TRUE(a.has_run());
  ASSERT_TRUE(b.has_run());
  const int64_t ra = a.spec().run_id(), rb = b.spec().run_id();
  ASSERT_NE(ra, rb);
  EXPECT_FALSE(Lease(w).has_run());  // a free slot asks again and finds the queue empty
  for (int64_t run : {ra, rb}) {
    auto hb = Beat(w, run, 1, 3);
    EXPECT_FALSE(hb.lease_lost()) << run;
    EXPECT_FALSE(hb.cancel()) << run;
    ASSERT_TRUE(Report(run, 1, 0, 3).ok()) << run;
  }
  auto worker = [&] {
    v1::ListWorkersResponse resp;
    EXPECT_TRUE(SweepStub()->ListWorkers(Ctx().get(), v1::ListWorkersRequest(), &resp).ok());
    EXPECT_EQ(resp.workers_size(), 1);
    return resp.workers_size() > 0 ? resp.workers(0) : v1::Worker();
  };
  auto held = [](const v1::Worker& x) {
    return std::vector<int64_t>(x.held_run_ids().begin(), x.held_run_ids().end());
  };
  const int64_t first = std::min(ra, rb), second = std::max(ra, rb);
  v1::Worker both = worker();
  EXPECT_EQ(both.state(), "busy");
  EXPECT_EQ(held(both), (std::vector<int64_t>{first, second}));
  EXPECT_EQ(both.current_run_id(), first);

  ASSERT_TRUE(Complete(ra, 1).ok());
  v1::Worker one = worker();
  EXPECT_EQ(one.state(), "busy");
  EXPECT_EQ(held(one), (std::vector<int64_t>{rb}));
  EXPECT_FALSE(Beat(w, rb, 1, 4).lease_lost());
  ASSERT_TRUE(Report(rb, 1, 4, 5).ok());
  ASSERT_TRUE(Complete(rb, 1).ok());
  v1::Worker none = worker();
  EXPECT_EQ(none.state(), "idle");
  EXPECT_TRUE(held(none).empty());
  EXPECT_EQ(none.current_run_id(), 0);
  EXPECT_EQ(none.runs_completed(), 2);
  EXPECT_EQ(Points(ra).size(), 4u);  // each run's metrics stored once
  EXPECT_EQ(Points(rb).size(), 6u);
}

TEST_F(QueueTest, RacingWorkersNeverShareARun) {
  auto sub = Submit(SweepYaml("race", 10, 6));
  ASSERT_EQ(sub.runs(), 60);
  std::mutex mu;
  std::vector<int64_t> got;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      // As many slots as a worker may declare: each racer leases until the queue is empty.
      const int64_t w = Register(absl::StrCat("racer", t), "cpu", 0, 64);
      for (;;) {
        auto l = Lease(w);
        if (!l.has_run()) return;
        std::lock_guard<std::mutex> lock(mu);
        got.push_back(l.spec().run_id());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> unique(got.begin(), got.end());
  EXPECT_EQ(got.size(), 60u);
  EXPECT_EQ(unique.size(), 60u);
}

TEST_F(QueueTest, ExpiredLeaseRequeuesBumpsAttemptAndFencesTheStaleWorker) {
  auto sub = Submit(SweepYaml("expiry", 1, 1));
  const int64_t stale = Register("stale");
  const int64_t fresh = Register("fresh");
  auto first = Lease(stale);
  ASSERT_TRUE(first.has_run());
  const int64_t run = first.spec().run_id();
  ASSERT_TRUE(Report(run, 1, 0, 4).ok());

  // The worker stops heartbeating: its lease lapses and the reaper requeues the run.
  ExpireLease(run);
  WaitForState(sub.sweep().id(), run, v1::QUEUED);
  auto second = Lease(fresh);
  ASSERT_TRUE(second.has_run());
  EXPECT_EQ(second.spec().run_id(), run);
  EXPECT_EQ(second.lease().attempt(), 2);
  // Without a checkpoint the new attempt starts over: the stale attempt's points are gone.
  EXPECT_TRUE(Points(run).empty());

  auto refused = Report(run, 1, 5, 9);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(refused.error_message(),
            absl::StrCat("lease lost: run ", run,
                         " attempt 1 does not hold the run's lease (re-leased, released, expired, "
                         "cancelled or finished)"));
  EXPECT_EQ(Complete(run, 1).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(Beat(stale, run, 1).lease_lost());
  EXPECT_FALSE(Beat(fresh, run, 2).lease_lost());
  ASSERT_TRUE(Complete(run, 2).ok());

  v1::ListRunEventsRequest ev;
  ev.set_run_id(run);
  v1::ListRunEventsResponse events;
  ASSERT_TRUE(SweepStub()->ListRunEvents(Ctx().get(), ev, &events).ok());
  bool expired = false;
  for (const auto& e : events.events()) expired |= e.kind() == "preempted" && e.attempt() == 1;
  EXPECT_TRUE(expired);
}

// A server that fails a run at its `n`-th lease expiry (--max-preemptions n).
template <int n>
class PreemptionsTest : public QueueTest {
 protected:
  void Configure(server::ServerOptions* o) override {
    QueueTest::Configure(o);
    o->faults.max_preemptions = n;
  }
};
using TwoPreemptionsTest = PreemptionsTest<2>;
using OnePreemptionTest = PreemptionsTest<1>;

// Lease expiry (a preempted or vanished worker) is its own allowance: with max_attempts 1 the run
// still gets a second attempt, and it fails only at the server's --max-preemptions.
TEST_F(TwoPreemptionsTest, RunFailsAfterItsPreemptionAllowanceAndRetryRequeuesIt) {
  auto sub = Submit(SweepYaml("attempts", 1, 1, "", "max_attempts: 1\n"));
  const int64_t w = Register("flaky");
  auto a1 = Lease(w);
  ASSERT_TRUE(a1.has_run());
  const int64_t run = a1.spec().run_id();
  ExpireLease(run);
  WaitForState(sub.sweep().id(), run, v1::QUEUED);
  auto a2 = Lease(w);
  ASSERT_EQ(a2.lease().attempt(), 2);
  ExpireLease(run);
  auto failed = WaitForState(sub.sweep().id(), run, v1::FAILED);
  EXPECT_EQ(failed.error(),
            "lease expired 2 times (preempted or vanished workers); the last on attempt 2");
  EXPECT_FALSE(Lease(w).has_run());

  v1::RetryRunsRequest retry;
  retry.mutable_sweep()->set_name("attempts");
  v1::RetryRunsResponse requeued;
  ASSERT_TRUE(SweepStub()->RetryRuns(Ctx().get(), retry, &requeued).ok());
  EXPECT_EQ(requeued.requeued(), 1);
  auto a3 = Lease(w);
  ASSERT_TRUE(a3.has_run());
  EXPECT_EQ(a3.lease().attempt(), 3);  // the attempt counter is history, kept across retries
  ASSERT_TRUE(Complete(run, 3, v1::DIVERGED).ok());
  // Diverged is an experimental result: nothing requeues it.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_EQ(GetSweep(sub.sweep().id()).runs(0).state(), v1::DIVERGED);
}

TEST_F(QueueTest, ResumedAttemptLeavesNoDuplicateOrMissingSteps) {
  auto sub = Submit(SweepYaml("resume", 1, 1));
  const int64_t w1 = Register("first");
  const int64_t w2 = Register("second");
  auto a1 = Lease(w1);
  const int64_t run = a1.spec().run_id();
  ASSERT_TRUE(Report(run, 1, 0, 59, /*offset=*/100).ok());

  // Checkpoint at step 40, streamed in three chunks.
  const std::string blob = std::string(300000, 'c') + "end";
  {
    v1::PutCheckpointResponse stored;
    auto ctx = Ctx();
    auto writer = WorkerStub()->PutCheckpoint(ctx.get(), &stored);
    v1::CheckpointChunk header;
    header.set_run_id(run);
    header.set_attempt(1);
    header.set_lease_token(LeaseToken(run, 1));
    header.mutable_ref()->set_step(40);
    header.mutable_ref()->set_sha256(Sha256Hex(blob));
    header.mutable_ref()->set_size_bytes(static_cast<int64_t>(blob.size()));
    ASSERT_TRUE(writer->Write(header));
    for (size_t off = 0; off < blob.size(); off += 100001) {
      v1::CheckpointChunk c;
      c.set_data(blob.substr(off, 100001));
      ASSERT_TRUE(writer->Write(c));
    }
    writer->WritesDone();
    auto s = writer->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(stored.stored().step(), 40);
  }

  ExpireLease(run);
  WaitForState(sub.sweep().id(), run, v1::QUEUED);
  auto a2 = Lease(w2);
  ASSERT_TRUE(a2.has_run());
  ASSERT_EQ(a2.lease().attempt(), 2);
  ASSERT_TRUE(a2.has_resume_from());
  EXPECT_EQ(a2.resume_from().step(), 40);
  EXPECT_EQ(a2.resume_from().sha256(), Sha256Hex(blob));

  // The resuming worker fetches the checkpoint and gets the same bytes.
  {
    v1::GetCheckpointRequest req;
    req.set_run_id(run);
    req.set_attempt(2);
    req.set_lease_token(LeaseToken(run, 2));
    auto ctx = Ctx();
    auto reader = WorkerStub()->GetCheckpoint(ctx.get(), req);
    std::string got;
    v1::CheckpointChunk c;
    while (reader->Read(&c)) got += c.data();
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(got, blob);
  }

  // Points after the checkpoint's step were dropped with the lease.
  auto kept = Points(run);
  ASSERT_EQ(kept.size(), 41u);
  EXPECT_EQ(kept.back().step(), 40);

  ASSERT_TRUE(Report(run, 2, 41, 99).ok());
  ASSERT_TRUE(Complete(run, 2).ok());
  auto series = Points(run);
  ASSERT_EQ(series.size(), 100u);
  for (int64_t s = 0; s < 100; ++s) {
    EXPECT_EQ(series[s].step(), s);
    // Steps up to the checkpoint come from attempt 1, the rest from attempt 2.
    EXPECT_DOUBLE_EQ(series[s].value(), 10.0 - s * 0.01 + (s <= 40 ? 100 : 0));
  }
}

// `ablate cancel --run ID` with no sweep: run ids are global, so the server finds each run's
// sweep, cancels only the runs named (across sweeps), and names an id that is no run.
TEST_F(QueueTest, CancelByRunIdsAloneFindsEachRunsSweep) {
  auto a = Submit(SweepYaml("cancel-a", 2, 1));
  auto b = Submit(SweepYaml("cancel-b", 2, 1));
  const int64_t a_run = GetSweep(a.sweep().id()).runs(1).id();
  const int64_t b_run = GetSweep(b.sweep().id()).runs(0).id();
  v1::CancelSweepRequest req;
  req.add_run_ids(a_run);
  req.add_run_ids(b_run);
  v1::CancelSweepResponse resp;
  ASSERT_TRUE(SweepStub()->CancelSweep(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.cancelled(), 2);
  for (const auto& sweep : {GetSweep(a.sweep().id()), GetSweep(b.sweep().id())}) {
    EXPECT_EQ(sweep.sweep().counts().cancelled(), 1);
    EXPECT_EQ(sweep.sweep().counts().queued(), 1);
    EXPECT_EQ(sweep.sweep().state(), "active");
  }
  v1::CancelSweepRequest unknown;
  unknown.add_run_ids(a_run);
  unknown.add_run_ids(b_run + 1000);
  auto st = SweepStub()->CancelSweep(Ctx().get(), unknown, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(st.error_message().find(absl::StrCat("no run with id ", b_run + 1000)),
            std::string::npos)
      << st.error_message();
  // Neither a sweep nor runs: still an error, not "cancel everything".
  EXPECT_EQ(SweepStub()->CancelSweep(Ctx().get(), v1::CancelSweepRequest{}, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(QueueTest, CancelReachesTheWorkerAndRefusesItsWrites) {
  auto sub = Submit(SweepYaml("cancel", 3, 1));
  const int64_t w = Register("busy");
  auto l = Lease(w);
  const int64_t run = l.spec().run_id();
  EXPECT_FALSE(Beat(w, run, 1).cancel());

  v1::CancelSweepRequest req;
  req.mutable_sweep()->set_id(sub.sweep().id());
  v1::CancelSweepResponse resp;
  ASSERT_TRUE(SweepStub()->CancelSweep(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.cancelled(), 3);

  auto hb = Beat(w, run, 1);
  EXPECT_TRUE(hb.cancel());
  EXPECT_FALSE(hb.lease_lost());
  EXPECT_EQ(Report(run, 1, 0, 3).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Complete(run, 1).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_FALSE(Lease(w).has_run());
  auto s = GetSweep(sub.sweep().id());
  EXPECT_EQ(s.sweep().state(), "cancelled");
  EXPECT_EQ(s.sweep().counts().cancelled(), 3);
}

// A sweep is finished by whichever transition ends its last unfinished run (Complete, a cancel
// of some runs, the reaper failing an expired run), and Retry makes it active again.
TEST_F(OnePreemptionTest, SweepFinishesWhenItsLastUnfinishedRunEnds) {
  auto sub = Submit(SweepYaml("last-run", 2, 1, "", "max_attempts: 1\n"));
  const int64_t sweep = sub.sweep().id();
  const int64_t w = Register("closer");
  auto first = Lease(w);
  ASSERT_TRUE(first.has_run());
  ASSERT_TRUE(Complete(first.spec().run_id(), 1).ok());
  EXPECT_EQ(GetSweep(sweep).sweep().state(), "active");  // one run still queued

  auto second = Lease(w);
  ASSERT_TRUE(second.has_run());
  const int64_t run = second.spec().run_id();
  v1::CancelSweepRequest cancel;
  cancel.mutable_sweep()->set_id(sweep);
  cancel.add_run_ids(run);
  v1::CancelSweepResponse cancelled;
  ASSERT_TRUE(SweepStub()->CancelSweep(Ctx().get(), cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.cancelled(), 1);
  EXPECT_EQ(GetSweep(sweep).sweep().state(), "finished");  // not "cancelled": one run succeeded

  v1::RetryRunsRequest retry;
  retry.mutable_sweep()->set_id(sweep);
  v1::RetryRunsResponse requeued;
  ASSERT_TRUE(SweepStub()->RetryRuns(Ctx().get(), retry, &requeued).ok());
  EXPECT_EQ(requeued.requeued(), 1);
  EXPECT_EQ(GetSweep(sweep).sweep().state(), "active");

  auto again = Lease(w);
  ASSERT_TRUE(again.has_run());
  ASSERT_EQ(again.spec().run_id(), run);
  ExpireLease(run);  // its first preemption, and this server allows one: the reaper fails it
  WaitForState(sweep, run, v1::FAILED);
  v1::GetSweepResponse got;
  for (int i = 0; i < 100; ++i) {
    got = GetSweep(sweep, /*runs=*/false);
    if (got.sweep().state() != "active") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(got.sweep().state(), "finished");
  EXPECT_GT(got.sweep().finished_at(), 0);
}

TEST_F(QueueTest, ReleaseRequeuesAtOnceWithoutSpendingAnAttempt) {
  auto sub = Submit(SweepYaml("release", 1, 1, "", "max_attempts: 1\n"));
  const int64_t w = Register("leaving");
  auto l = Lease(w);
  const int64_t run = l.spec().run_id();
  v1::ReleaseRequest req;
  req.set_run_id(run);
  req.set_attempt(1);
  req.set_lease_token(LeaseToken(run, 1));
  req.set_reason("worker shutting down (SIGTERM)");
  v1::ReleaseResponse resp;
  ASSERT_TRUE(WorkerStub()->Release(Ctx().get(), req, &resp).ok());
  auto r = GetSweep(sub.sweep().id()).runs(0);
  EXPECT_EQ(r.state(), v1::QUEUED);
  EXPECT_EQ(r.max_attempts(), 2);  // max_attempts 1, yet a second attempt is allowed
  auto again = Lease(w);
  ASSERT_TRUE(again.has_run());
  EXPECT_EQ(again.lease().attempt(), 2);
  // The released attempt is fenced like any other stale one.
  EXPECT_EQ(Report(run, 1, 0, 1).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

// A mixed fleet (a CPU box, an MPS laptop, a rented CUDA GPU): a run pinned to a device kind
// goes to a worker of that kind only, however early in the queue it sits; `auto` goes to any.
TEST_F(QueueTest, WorkersOnlyLeaseRunsTheirDeviceCanRun) {
  // Queue order: the mps-pinned run first, then the cuda-pinned one, so each worker of the
  // wrong kind has a pinned run at the head of the queue that it must skip.
  Submit(SweepYaml("laptop-only", 1, 1, ", device: mps"));
  Submit(SweepYaml("gpu-only", 1, 1, ", device: cuda, dtype: bfloat16"));
  const int64_t cpu = Register("box", "cpu", 0, 4);
  const int64_t mps = Register("laptop", "mps", 0, 4);
  const int64_t gpu = Register("rented", "cuda", 0, 4);

  EXPECT_FALSE(Lease(cpu).has_run());  // neither pinned run is for a CPU
  auto on_gpu = Lease(gpu);            // skips the mps run ahead of it
  ASSERT_TRUE(on_gpu.has_run());
  EXPECT_EQ(on_gpu.spec().config().device(), "cuda");
  EXPECT_EQ(on_gpu.spec().config().dtype(), "bfloat16");  // the pinned dtype travels with it
  EXPECT_FALSE(Lease(gpu).has_run());                     // the mps run is not for a GPU

  // Requeue the cuda run: now it waits behind the mps run for the laptop, which must skip it.
  v1::ReleaseRequest release;
  release.set_run_id(on_gpu.spec().run_id());
  release.set_attempt(on_gpu.lease().attempt());
  release.set_lease_token(on_gpu.lease().token());
  release.set_reason("requeued by the test");
  v1::ReleaseResponse released;
  ASSERT_TRUE(WorkerStub()->Release(Ctx().get(), release, &released).ok());
  auto on_laptop = Lease(mps);
  ASSERT_TRUE(on_laptop.has_run());
  EXPECT_EQ(on_laptop.spec().config().device(), "mps");
  EXPECT_FALSE(Lease(mps).has_run());  // the cuda run is not for the laptop
  EXPECT_FALSE(Lease(cpu).has_run());  // nor for the CPU box
  auto again = Lease(gpu);
  ASSERT_TRUE(again.has_run());
  EXPECT_EQ(again.spec().run_id(), on_gpu.spec().run_id());

  // `device: auto` runs on any kind of worker.
  Submit(SweepYaml("anywhere", 3, 1, ", device: auto"));
  for (const int64_t w : {cpu, mps, gpu}) {
    auto l = Lease(w);
    ASSERT_TRUE(l.has_run()) << "worker " << w;
    EXPECT_EQ(l.spec().config().device(), "auto");
  }
}

// A worker's queue is two: runs pinned to its device kind and `auto` runs. The lease takes the
// head of each (migration 0012's index led by device) and hands out the better by priority,
// then sweep, then grid order, so the merged order is the one a single queue would give.
TEST_F(QueueTest, PinnedAndAutoRunsLeaseInOneQueueOrder) {
  Submit(SweepYaml("auto-first", 2, 1, ", device: auto"));
  Submit(SweepYaml("cuda-second", 2, 1, ", device: cuda"));
  Submit(SweepYaml("mps-urgent", 1, 1, ", device: mps", "priority: 9\n"));
  Submit(SweepYaml("cuda-urgent", 1, 1, ", device: cuda", "priority: 5\n"));
  const int64_t gpu = Register("rented", "cuda", 0, 8);
  std::vector<std::string> order;
  for (;;) {
    auto l = Lease(gpu);
    if (!l.has_run()) break;
    order.push_back(absl::StrCat(l.spec().sweep_name(), " ", l.spec().config().lr()));
  }
  // The mps sweep's priority 9 does not matter to a cuda worker; cuda-urgent's 5 does.
  EXPECT_EQ(order,
            (std::vector<std::string>{"cuda-urgent 0.001", "auto-first 0.001", "auto-first 0.002",
                                      "cuda-second 0.001", "cuda-second 0.002"}));
}

TEST_F(QueueTest, LongPollWakesWhenASweepArrives) {
  const int64_t w = Register("idle");
  v1::LeaseResponse got;
  std::thread waiter([&] { got = Lease(w, /*wait=*/10); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Submit(SweepYaml("wake", 1, 1));
  waiter.join();
  EXPECT_TRUE(got.has_run());  // woken by NOTIFY; a timeout would have answered has_run=false
}

TEST_F(QueueTest, UnknownWorkerIsToldToRegister) {
  v1::LeaseRequest req;
  req.set_worker_id(424242);
  v1::LeaseResponse resp;
  auto s = WorkerStub()->Lease(Ctx().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(),
            "worker 424242 is not registered with this token (call Register first)");
}

}  // namespace
}  // namespace ablate::testing
