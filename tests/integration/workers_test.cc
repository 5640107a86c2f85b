// The read side of failure attribution (issue #38) and of issue #39's state and ETA: what
// `ablate workers` lists (lost within a lease period, benched with its reason and end, runs
// completed and attempts faulted), `ablate workers unbench`, the runs' and sweeps' new counts,
// an ETA only for work that can run ("held: why" when none can), and the Prometheus series.

#include <chrono>
#include <cmath>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cost/flops.h"
#include "common/sweep/sweep.h"
#include "gmock/gmock.h"
#include "pqxx/pqxx"
#include "server/store/pqxx_compat.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class WorkersTest : public ServerFixture {
 protected:
  // A long lease: the tests move a worker's last_seen_at or bench in SQL rather than wait.
  void Configure(server::ServerOptions* o) override {
    o->lease_seconds = 30;
    o->reap_interval_seconds = 0.2;
  }

  std::vector<v1::Worker> List(bool all = false) {
    v1::ListWorkersRequest req;
    req.set_include_offline(all);
    v1::ListWorkersResponse resp;
    auto s = SweepStub()->ListWorkers(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return {resp.workers().begin(), resp.workers().end()};
  }

  v1::Worker Find(const std::string& name, bool all = false) {
    for (const auto& w : List(all)) {
      if (w.info().name() == name) return w;
    }
    ADD_FAILURE() << "no worker " << name << " listed";
    return {};
  }

  grpc::Status Unbench(const std::string& name, v1::UnbenchWorkerResponse* resp,
                       const std::string& token = "") {
    v1::UnbenchWorkerRequest req;
    req.set_name(name);
    return SweepStub()->UnbenchWorker(token.empty() ? Ctx().get() : Ctx(token).get(), req, resp);
  }

  grpc::Status Complete(int64_t run, int attempt, v1::RunState state = v1::SUCCEEDED) {
    v1::CompleteRequest req;
    req.set_run_id(run);
    req.set_attempt(attempt);
    req.set_lease_token(LeaseToken(run, attempt));
    req.set_state(state);
    req.mutable_result()->set_final_val_loss(1.5);
    req.mutable_result()->set_steps_done(10);
    v1::CompleteResponse resp;
    return WorkerStub()->Complete(Ctx().get(), req, &resp);
  }

  v1::Sweep Sweep(int64_t id) { return GetSweep(id, false).sweep(); }

  v1::Sweep Listed(int64_t id) {
    v1::ListSweepsRequest req;
    v1::ListSweepsResponse resp;
    EXPECT_TRUE(SweepStub()->ListSweeps(Ctx().get(), req, &resp).ok());
    for (const auto& s : resp.sweeps()) {
      if (s.id() == id) return s;
    }
    ADD_FAILURE() << "sweep " << id << " not listed";
    return {};
  }
};

// A worker silent for over a lease period is lost (its heartbeats stopped), and offline after two;
// its neighbour that keeps beating stays idle.
class LostTest : public WorkersTest {
 protected:
  void Configure(server::ServerOptions* o) override {
    o->lease_seconds = 1.5;
    o->reap_interval_seconds = 0.2;
  }
};

TEST_F(LostTest, AWorkerWhoseHeartbeatsStopIsLostWithinALeasePeriod) {
  const int64_t alive = Register("alive");
  Register("silent");
  EXPECT_EQ(Find("silent").state(), "idle");
  auto beat = [&] {
    v1::HeartbeatRequest req;
    req.set_worker_id(alive);
    v1::HeartbeatResponse resp;
    EXPECT_TRUE(WorkerStub()->Heartbeat(Ctx().get(), req, &resp).ok());
  };
  const auto start = std::chrono::steady_clock::now();
  std::string state = "idle";
  double lost_after = -1;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    beat();
    state = Find("silent").state();
    if (state == "lost") {
      lost_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(state, "lost");
  // Registered just before `start`: lost once its silence passed one lease period (1.5 s), well
  // before two.
  EXPECT_GE(lost_after, 1.2);
  EXPECT_LT(lost_after, 2.5);
  EXPECT_EQ(Find("alive").state(), "idle");
  // Two lease periods: offline, listed only with --all (or as recently gone).
  std::this_thread::sleep_for(std::chrono::milliseconds(1800));
  beat();
  EXPECT_EQ(Find("silent", /*all=*/true).state(), "offline");
  EXPECT_EQ(Find("alive").state(), "idle");
}

TEST_F(WorkersTest, BenchedShowsItsReasonAndEndAndUnbenchLiftsIt) {
  Submit(SweepYaml("bench", 1, 1));
  const int64_t w = Register("flaky");
  Sql(absl::StrCat(
      "UPDATE workers SET benched_until = now() + interval '300 seconds', bench_reason = '3 "
      "attempts in a row failed for worker-side causes; last (run 1): CUDA error: out of memory', "
      "self_check_due = true, fault_streak = 3, bench_count = 1, runs_faulted = 4 WHERE id = ",
      w));
  const double now = static_cast<double>(std::time(nullptr));
  v1::Worker benched = Find("flaky");
  EXPECT_EQ(benched.state(), "benched");
  EXPECT_THAT(benched.bench_reason(), HasSubstr("CUDA error: out of memory"));
  EXPECT_NEAR(benched.benched_until(), now + 300, 5);
  EXPECT_TRUE(benched.self_check_due());
  EXPECT_EQ(benched.fault_streak(), 3);
  EXPECT_EQ(benched.runs_faulted(), 4);

  // The bench ran out but the self-check is still due: benched until it registers again.
  Sql(absl::StrCat("UPDATE workers SET benched_until = now() - interval '1 second' WHERE id = ",
                   w));
  EXPECT_EQ(Find("flaky").state(), "benched");
  EXPECT_TRUE(Find("flaky").self_check_due());
  Sql(absl::StrCat("UPDATE workers SET benched_until = now() + interval '300 seconds' WHERE id = ",
                   w));

  // Only an operator's token lifts it: a worker's may not.
  v1::UnbenchWorkerResponse resp;
  EXPECT_EQ(Unbench("flaky", &resp, Token(server::Role::kWorker, "a-worker")).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Find("flaky").state(), "benched");
  auto s = Unbench("flaky", &resp, Token(server::Role::kUser, "operator"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.worker().info().name(), "flaky");
  EXPECT_EQ(resp.worker().state(), "idle");
  EXPECT_EQ(resp.worker().benched_until(), 0);
  EXPECT_EQ(resp.worker().bench_reason(), "");
  EXPECT_FALSE(resp.worker().self_check_due());
  EXPECT_EQ(resp.worker().fault_streak(), 0);
  EXPECT_EQ(resp.worker().runs_faulted(), 4);  // history stays
  {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    const pqxx::row row = server::pg::ExecText(
        tx,
        "SELECT benched_until IS NULL, bench_reason, self_check_due, fault_streak, bench_count "
        "FROM workers WHERE id = $1",
        w)[0];
    EXPECT_TRUE(row[0].as<bool>());
    EXPECT_EQ(row[1].as<std::string>(), "");
    EXPECT_FALSE(row[2].as<bool>());
    EXPECT_EQ(row[3].as<int>(), 0);
    EXPECT_EQ(row[4].as<int>(), 0);
  }
  EXPECT_EQ(Find("flaky").state(), "idle");
  EXPECT_TRUE(Lease(w).has_run());  // it leases at once
  EXPECT_EQ(Find("flaky").state(), "busy");

  // An unknown name: NOT_FOUND, naming it.
  s = Unbench("nobody", &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("no worker named \"nobody\""));
  // A name no worker could have registered is refused before SQL.
  EXPECT_EQ(Unbench("bad\nname", &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Unbench("", &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// The real path (the write side, docs/server.md#failures): three attempts in a row that failed
// for worker-side causes bench the worker; `ablate workers` reads the bench the server wrote.
TEST_F(WorkersTest, AWorkerThatKeepsFailingIsListedBenchedWithTheServersReason) {
  Submit(SweepYaml("broken", 3, 1));
  const int64_t w = Register("broken-box");
  for (int i = 0; i < 3; ++i) {
    auto l = Lease(w);
    ASSERT_TRUE(l.has_run()) << "attempt " << i;
    v1::CompleteRequest req;
    req.set_run_id(l.spec().run_id());
    req.set_attempt(l.lease().attempt());
    req.set_lease_token(LeaseToken(l.spec().run_id(), l.lease().attempt()));
    req.set_state(v1::FAILED);
    req.set_error("CUDA error: an illegal memory access was encountered");
    req.set_fault(v1::FAULT_WORKER);
    v1::CompleteResponse resp;
    auto st = WorkerStub()->Complete(Ctx().get(), req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  const double now = static_cast<double>(std::time(nullptr));
  const v1::Worker benched = Find("broken-box");
  EXPECT_EQ(benched.state(), "benched");
  EXPECT_THAT(benched.bench_reason(), HasSubstr("illegal memory access"));
  EXPECT_GT(benched.benched_until(), now);
  EXPECT_TRUE(benched.self_check_due());
  EXPECT_EQ(benched.fault_streak(), 3);
  EXPECT_EQ(benched.runs_faulted(), 3);
  EXPECT_EQ(benched.runs_completed(), 0);
  EXPECT_FALSE(Lease(w).has_run());
  v1::UnbenchWorkerResponse resp;
  ASSERT_TRUE(Unbench("broken-box", &resp).ok());
  EXPECT_EQ(resp.worker().state(), "idle");
  EXPECT_TRUE(Lease(w).has_run());
}

// DONE counts the runs a worker completed: two that trained to their end count, an attempt that
// only lost its lease does not.
TEST_F(WorkersTest, DoneCountsCompletedRunsAndNotExpiredLeases) {
  Submit(SweepYaml("done", 3, 1));
  const int64_t w = Register("steady");
  auto a = Lease(w);
  ASSERT_TRUE(a.has_run());
  ASSERT_TRUE(Complete(a.spec().run_id(), a.lease().attempt()).ok());
  auto b = Lease(w);
  ASSERT_TRUE(b.has_run());
  ASSERT_TRUE(Complete(b.spec().run_id(), b.lease().attempt(), v1::DIVERGED).ok());
  EXPECT_EQ(Find("steady").runs_completed(), 2);
  auto c = Lease(w);
  ASSERT_TRUE(c.has_run());
  ExpireLease(c.spec().run_id());
  for (int i = 0; i < 100 && Find("steady").state() == "busy"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Find("steady").state(), "idle");
  EXPECT_EQ(Find("steady").runs_completed(), 2);
}

// Runs carry their memory estimate, preemptions, worker-side failures and the names of the
// workers those failed on; the sweep sums them, its events say whose fault ended an attempt.
TEST_F(WorkersTest, RunsAndSweepCountPreemptionsAndWorkerFaults) {
  const int64_t sweep = Submit(SweepYaml("faults", 2, 1)).sweep().id();
  const int64_t bad = Register("bad-box");
  const int64_t worse = Register("worse-box");
  auto l = Lease(bad);
  ASSERT_TRUE(l.has_run());
  const int64_t run = l.spec().run_id();
  Sql(
      absl::StrCat("UPDATE runs SET memory_bytes = 123456789, preemptions = 2, worker_faults = 1, "
                   "faulted_workers = ARRAY[",
                   worse, ", ", bad, "]::bigint[] WHERE id = ", run));
  Sql(
      absl::StrCat("INSERT INTO run_events (run_id, kind, attempt, worker, message, fault) "
                   "VALUES (",
                   run, ", 'faulted', 1, 'bad-box', 'CUDA error; requeued', 'worker')"));
  const v1::GetSweepResponse got = GetSweep(sweep, true);
  bool seen = false;
  for (const auto& r : got.runs()) {
    if (r.id() != run) continue;
    seen = true;
    EXPECT_EQ(r.memory_bytes(), 123456789);
    EXPECT_EQ(r.preemptions(), 2);
    EXPECT_EQ(r.worker_faults(), 1);
    EXPECT_THAT(r.faulted_workers(), ElementsAre("bad-box", "worse-box"));
  }
  EXPECT_TRUE(seen);
  EXPECT_EQ(got.sweep().counts().preemptions(), 2);
  EXPECT_EQ(got.sweep().counts().worker_faults(), 1);

  v1::ListRunsRequest lr;
  lr.mutable_sweep()->set_id(sweep);
  lr.add_states(v1::LEASED);
  v1::ListRunsResponse page;
  ASSERT_TRUE(SweepStub()->ListRuns(Ctx().get(), lr, &page).ok());
  ASSERT_EQ(page.runs_size(), 1);
  EXPECT_THAT(page.runs(0).faulted_workers(), ElementsAre("bad-box", "worse-box"));

  v1::ListRunEventsRequest ev;
  ev.set_run_id(run);
  v1::ListRunEventsResponse events;
  ASSERT_TRUE(SweepStub()->ListRunEvents(Ctx().get(), ev, &events).ok());
  std::string fault;
  for (const auto& e : events.events()) {
    if (e.kind() == "faulted") fault = e.fault();
  }
  EXPECT_EQ(fault, "worker");
}

// Queued runs whose estimate is above every live worker's device memory per slot are unfittable;
// when they are all that is left the sweep is held and says why, with no ETA.
TEST_F(WorkersTest, UnfittableRunsAreCountedAndHoldTheSweep) {
  const int64_t sweep = Submit(SweepYaml("big", 2, 1)).sweep().id();
  // No live worker: none is unfittable (there is nothing to compare with), the sweep is held.
  EXPECT_EQ(Sweep(sweep).counts().unfittable(), 0);
  EXPECT_EQ(Sweep(sweep).eta_seconds(), -1);
  EXPECT_EQ(Sweep(sweep).eta_basis(), "held: no live worker");
  EXPECT_EQ(Listed(sweep).eta_basis(), "held: no live worker");

  const int64_t w = Register("small-gpu");
  Sql(absl::StrCat("UPDATE runs SET memory_bytes = 8000000000 WHERE sweep_id = ", sweep));
  // A worker that reported no device memory may lease any run.
  Sql(absl::StrCat("UPDATE workers SET memory_per_slot = 0 WHERE id = ", w));
  EXPECT_EQ(Sweep(sweep).counts().unfittable(), 0);
  EXPECT_THAT(Sweep(sweep).eta_basis(), Not(StartsWith("held")));

  Sql(absl::StrCat("UPDATE workers SET memory_per_slot = 4000000000 WHERE id = ", w));
  v1::Sweep s = Sweep(sweep);
  EXPECT_EQ(s.counts().unfittable(), 2);
  EXPECT_EQ(s.eta_seconds(), -1);
  EXPECT_EQ(s.eta_basis(), "held: 2 runs fit no live worker's device memory");
  EXPECT_FALSE(Lease(w).has_run());

  // One fits: not held, and only that one is counted as work that can run.
  Sql(
      absl::StrCat("UPDATE runs SET memory_bytes = 1000000000 WHERE id = (SELECT min(id) FROM runs "
                   "WHERE sweep_id = ",
                   sweep, ")"));
  s = Sweep(sweep);
  EXPECT_EQ(s.counts().unfittable(), 1);
  EXPECT_THAT(s.eta_basis(), Not(StartsWith("held")));
}

// No ETA while nothing can run: every live worker benched, or the only worker lost with the
// sweep's lease (its run makes no progress until the reaper requeues it).
TEST_F(WorkersTest, EtaIsHeldWhileNoWorkerCanRun) {
  const int64_t sweep = Submit(SweepYaml("eta", 3, 1)).sweep().id();
  const int64_t w = Register("only");
  auto a = Lease(w);
  ASSERT_TRUE(a.has_run());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(Complete(a.spec().run_id(), a.lease().attempt()).ok());
  ASSERT_TRUE(Lease(w).has_run());
  v1::Sweep s = Sweep(sweep);
  EXPECT_GE(s.eta_seconds(), 0);
  EXPECT_THAT(s.eta_basis(), Not(StartsWith("held")));

  // Its heartbeats stop: lost, holding the lease; no one else may lease.
  Sql(absl::StrCat("UPDATE workers SET last_seen_at = now() - interval '40 seconds' WHERE id = ",
                   w));
  EXPECT_EQ(Find("only").state(), "lost");
  s = Sweep(sweep);
  EXPECT_EQ(s.eta_seconds(), -1);
  EXPECT_EQ(s.eta_basis(), "held: no live worker");

  // A live worker beside it: the lost lease is work that will run again.
  const int64_t other = Register("other");
  s = Sweep(sweep);
  EXPECT_GE(s.eta_seconds(), 0);
  EXPECT_THAT(s.eta_basis(), Not(StartsWith("held")));

  // That one benched: nothing can run.
  Sql(
      absl::StrCat("UPDATE workers SET benched_until = now() + interval '300 seconds', "
                   "self_check_due = true WHERE id = ",
                   other));
  s = Sweep(sweep);
  EXPECT_EQ(s.eta_seconds(), -1);
  EXPECT_EQ(s.eta_basis(), "held: every live worker is benched");
  EXPECT_EQ(Listed(sweep).eta_basis(), "held: every live worker is benched");
}

// A budget that stopped the sweep: `budget reached`, no ETA, in GetSweep (status, watch) and
// ListSweeps (ls).
TEST_F(WorkersTest, ABudgetReachedHoldsTheSweep) {
  const std::string yaml = SweepYaml("capped", 2, 2, "", "budget: {usd: 0.06}\n");
  auto parsed = sweep::ParseSweep(yaml, "s.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto runs = sweep::Expand(*parsed);
  ASSERT_TRUE(runs.ok() && !runs->empty());
  const double flops = cost::RunFlops(runs->front().config(), cost::VocabOf(runs->front().data()));
  // $0.025 a run (25 device-seconds at $3.60 an hour): 0.06 holds two, not three.
  v1::RegisterRequest reg;
  reg.mutable_info()->set_name("priced");
  reg.mutable_info()->set_device_kind("cpu");
  reg.mutable_info()->set_device_name("Xeon");
  reg.mutable_info()->set_slots(4);
  reg.mutable_info()->set_price_per_hour(3.6);
  auto* bench = reg.mutable_info()->add_benchmarks();
  bench->set_dtype("float32");
  bench->set_flops_per_second(flops / 100);
  v1::RegisterResponse registered;
  ASSERT_TRUE(WorkerStub()->Register(Ctx().get(), reg, &registered).ok());
  const int64_t w = registered.worker_id();
  const int64_t sweep = Submit(yaml).sweep().id();
  ASSERT_TRUE(Lease(w).has_run());
  ASSERT_TRUE(Lease(w).has_run());
  v1::Sweep s;
  for (int i = 0; i < 50 && !s.budget().reached(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s = Sweep(sweep);
  }
  ASSERT_TRUE(s.budget().reached());
  EXPECT_EQ(s.counts().queued(), 2);
  EXPECT_EQ(s.eta_seconds(), -1);
  EXPECT_EQ(s.eta_basis(), "held: budget reached");
  const v1::Sweep listed = Listed(sweep);
  EXPECT_EQ(listed.eta_seconds(), -1);
  EXPECT_EQ(listed.eta_basis(), "held: budget reached");
}

// The value of the series `prefix` ("name{labels}") in `text`; NaN when absent.
double Value(const std::string& text, const std::string& prefix) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    const size_t space = line.rfind(' ');
    return std::stod(std::string(line.substr(space + 1)));
  }
  return std::nan("");
}

class WorkerMetricsTest : public WorkersTest {
 protected:
  void Configure(server::ServerOptions* o) override {
    WorkersTest::Configure(o);
    port_ = FreePort();
    o->metrics_listen = absl::StrCat("127.0.0.1:", port_);
    o->stats_interval_seconds = 0.2;
  }
  // Scrapes until `prefix` has `value` (NaN: is absent), bounded; returns the last scrape.
  std::string WaitFor(const std::string& prefix, double value) {
    std::string text;
    for (int i = 0; i < 100; ++i) {
      text = HttpGet(port_, "/metrics");
      const double v = Value(text, prefix);
      if (std::isnan(value) ? std::isnan(v) : v == value) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return text;
  }
  int port_ = 0;
};

// ablate_workers counts benched and lost workers, ablate_worker_benched names the benched one
// while its bench holds, and ablate_worker_faults_total counts worker-side failures.
TEST_F(WorkerMetricsTest, BenchedAndLostWorkersAndFaultsAreExported) {
  const int64_t bad = Register("bad");
  const int64_t gone = Register("gone");
  Register("fine");
  Sql(
      absl::StrCat("UPDATE workers SET benched_until = now() + interval '300 seconds', "
                   "bench_reason = 'out of memory', runs_faulted = 3 WHERE id = ",
                   bad));
  Sql(
      absl::StrCat("UPDATE workers SET last_seen_at = now() - interval '40 seconds', "
                   "runs_faulted = 1 WHERE id = ",
                   gone));
  // The second update shows last: then both do.
  std::string text = WaitFor("ablate_workers{device=\"cpu\",state=\"lost\"}", 1);
  EXPECT_EQ(Value(text, "ablate_worker_benched{device=\"cpu\",worker=\"bad\"}"), 1) << text;
  EXPECT_EQ(Value(text, "ablate_workers{device=\"cpu\",state=\"benched\"}"), 1) << text;
  EXPECT_EQ(Value(text, "ablate_workers{device=\"cpu\",state=\"lost\"}"), 1) << text;
  EXPECT_EQ(Value(text, "ablate_workers{device=\"cpu\",state=\"idle\"}"), 1) << text;
  EXPECT_EQ(Value(text, "ablate_worker_faults_total{device=\"cpu\"}"), 4) << text;

  v1::UnbenchWorkerResponse resp;
  ASSERT_TRUE(Unbench("bad", &resp).ok());
  text = WaitFor("ablate_worker_benched{device=\"cpu\",worker=\"bad\"}", std::nan(""));
  EXPECT_TRUE(std::isnan(Value(text, "ablate_worker_benched{device=\"cpu\",worker=\"bad\"}")))
      << text;
  EXPECT_TRUE(std::isnan(Value(text, "ablate_workers{device=\"cpu\",state=\"benched\"}"))) << text;
  EXPECT_EQ(Value(text, "ablate_worker_faults_total{device=\"cpu\"}"), 4) << text;
}

}  // namespace
}  // namespace ablate::testing
