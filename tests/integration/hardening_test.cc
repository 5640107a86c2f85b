// The third hostile round (docs/server.md#hostile-input), a sibling of surface_test: what a
// hostile client, a dying box and a restarting server could still do to a sweep, each kept as a
// check with the answer the server must give now. Liveness: cancelled long-polls that swallowed
// wake-ups, a faulted run held by a worker that never leases, a crashed worker counted as
// preempted and refused by its own dead lease, Lease -> Release without end. Bad values and
// unbounded growth: a heartbeat of step 2^63 - 1 or NaN tokens/s, metric points and names without
// limit, final_probes without limit, a benchmark of 5e-324 FLOP/s, an older step overwriting the
// latest loss, one token registering any number of names. Display: a seed-only sweep's cells, a
// cuda run held while only cpu workers are live, names that match no metric, an unbench that
// lifts nothing.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"
#include "gmock/gmock.h"
#include "tests/integration/harness.h"
#include "tests/integration/hostile_client.h"

namespace ablate::testing {
namespace {

using grpc::StatusCode;
using ::testing::HasSubstr;

// A sweep of `lrs` tiny runs of `steps` steps each.
std::string Yaml(const std::string& name, int lrs, int64_t steps) {
  std::string lr_list;
  for (int i = 0; i < lrs; ++i) absl::StrAppend(&lr_list, i ? ", " : "", 0.001 * (i + 1));
  return absl::StrCat("name: ", name,
                      "\ndata: {train: \"synthetic:50\", val: \"synthetic:10\", tokenizer: "
                      "{type: bpe, vocab: 512}}\nfixed: {n_embd: 32, n_head: 2, block_size: 32, "
                      "batch_size: 4, steps: ",
                      steps, "}\ngrid:\n  lr: [", lr_list, "]\n");
}

std::string CodeName(StatusCode c) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(c));
}

#define EXPECT_CODE(status, code)                                                                \
  do {                                                                                           \
    const grpc::Status s_ = (status);                                                            \
    EXPECT_EQ(s_.error_code(), code) << "want " << CodeName(code) << ", got "                    \
                                     << CodeName(s_.error_code()) << ": " << s_.error_message(); \
  } while (0)

class HardeningTest : public ServerFixture {
 protected:
  void Configure(server::ServerOptions* o) override {
    o->reap_interval_seconds = 0.2;
    Limits(o);
  }
  virtual void Limits(server::ServerOptions* /*o*/) {}

  grpc::Status Heartbeat(int64_t worker, const v1::LeaseResponse& l, int64_t step, double tps,
                         v1::HeartbeatResponse* resp = nullptr) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_run_id(l.lease().run_id());
    req.set_attempt(l.lease().attempt());
    req.set_lease_token(l.lease().token());
    req.set_step(step);
    req.set_tokens_per_second(tps);
    v1::HeartbeatResponse ignored;
    return WorkerStub()->Heartbeat(Ctx().get(), req, resp != nullptr ? resp : &ignored);
  }

  // ReportMetrics of `points` (name, step, value) under `l`.
  grpc::Status Report(const v1::LeaseResponse& l,
                      const std::vector<std::tuple<std::string, int64_t, double>>& points,
                      double time = 1.7e9) {
    v1::ReportMetricsRequest req;
    req.set_run_id(l.lease().run_id());
    req.set_attempt(l.lease().attempt());
    req.set_lease_token(l.lease().token());
    for (const auto& [name, step, value] : points) {
      auto* p = req.add_points();
      p->set_name(name);
      p->set_step(step);
      p->set_value(value);
      p->set_time(time);
    }
    v1::ReportMetricsResponse resp;
    return WorkerStub()->ReportMetrics(Ctx().get(), req, &resp);
  }

  grpc::Status Complete(const v1::LeaseResponse& l, v1::RunState state, const v1::RunResult& r,
                        v1::FaultClass fault = v1::FAULT_CLASS_UNSPECIFIED) {
    v1::CompleteRequest req;
    req.set_state(state);
    *req.mutable_result() = r;
    req.set_fault(fault);
    if (state == v1::FAILED) req.set_error("CUDA error: an illegal memory access");
    return CompleteLease(l, req);
  }

  grpc::Status Release(const v1::LeaseResponse& l) {
    v1::ReleaseRequest req;
    req.set_run_id(l.lease().run_id());
    req.set_attempt(l.lease().attempt());
    req.set_lease_token(l.lease().token());
    req.set_reason("worker shutting down (SIGTERM)");
    v1::ReleaseResponse resp;
    return WorkerStub()->Release(Ctx().get(), req, &resp);
  }

  grpc::Status RegisterAs(const std::string& token, const v1::RegisterRequest& req,
                          int64_t* id = nullptr) {
    v1::RegisterResponse resp;
    auto s = WorkerStub()->Register(Ctx(token).get(), req, &resp);
    if (id != nullptr) *id = resp.worker_id();
    return s;
  }

  v1::RegisterRequest Info(const std::string& name) {
    v1::RegisterRequest req;
    req.mutable_info()->set_name(name);
    req.mutable_info()->set_device_kind("cpu");
    req.mutable_info()->set_slots(1);
    return req;
  }

  v1::Sweep SweepOf(int64_t id) { return GetSweep(id, false).sweep(); }

  grpc::Status Cells(int64_t sweep, v1::ListCellsResponse* resp) {
    v1::ListCellsRequest req;
    req.mutable_sweep()->set_id(sweep);
    return SweepStub()->ListCells(Ctx().get(), req, resp);
  }

  // Waits up to `seconds` for `pred`.
  template <typename Pred>
  static bool WaitUntil(Pred pred, double seconds = 20) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    while (std::chrono::steady_clock::now() < until) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return pred();
  }
};

// ---- Liveness ------------------------------------------------------------------------------

// Item 1: a worker parks and cancels hundreds of Lease polls; each leaves the broker's list at
// once, and a live worker parked behind them gets the next run that is queued (not at its
// deadline: its Lease answers with the run).
TEST_F(HardeningTest, CancelledLongPollsLeaveAtOnceAndPassNoWakeUpToNobody) {
  const std::string wa = Token(server::Role::kWorker, "canceller");
  const std::string wb = Token(server::Role::kWorker, "live");
  int64_t a = 0, b = 0;
  ASSERT_TRUE(RegisterAs(wa, Info("canceller"), &a).ok());
  ASSERT_TRUE(RegisterAs(wb, Info("live"), &b).ok());
  constexpr int kPolls = 400;
  grpc::CompletionQueue cq;
  auto stub = WorkerStub();
  std::vector<std::unique_ptr<grpc::ClientContext>> ctxs;
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<v1::LeaseResponse>>> calls;
  std::vector<v1::LeaseResponse> resps(kPolls);
  std::vector<grpc::Status> statuses(kPolls);
  v1::LeaseRequest req;
  req.set_worker_id(a);
  req.set_wait_seconds(9);
  for (int i = 0; i < kPolls; ++i) {
    ctxs.push_back(Ctx(wa, 60));
    calls.push_back(stub->AsyncLease(ctxs.back().get(), req, &cq));
    calls.back()->Finish(&resps[i], &statuses[i],
                         reinterpret_cast<void*>(static_cast<intptr_t>(i + 1)));
  }
  ASSERT_TRUE(WaitUntil([&] { return servers_[0]->waiting_leases() == kPolls; }))
      << servers_[0]->waiting_leases() << " parked";
  for (auto& c : ctxs) c->TryCancel();
  // Each leaves the list as its cancel arrives, well before its 9 s deadline.
  EXPECT_TRUE(WaitUntil([&] { return servers_[0]->waiting_leases() == 0; }, 6))
      << servers_[0]->waiting_leases() << " cancelled polls still parked";
  for (int i = 0; i < kPolls; ++i) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
  }
  // The live worker parks (its wait far longer than the test needs); a run is queued.
  std::atomic<bool> answered{false};
  v1::LeaseResponse got;
  std::thread live([&] {
    got = Lease(b, /*wait=*/9, 0, wb);
    answered = true;
  });
  ASSERT_TRUE(WaitUntil([&] { return servers_[0]->waiting_leases() == 1; }));
  Submit(SweepYaml("after-cancels", 1, 1));
  live.join();
  EXPECT_TRUE(got.has_run()) << "the live worker's parked Lease never heard of the new run";
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
}

// Item 2: a run that faulted on a worker waits for another worker only while one that leases
// could take it, and at most --fault-hold-seconds; status says it is held and why.
TEST_F(HardeningTest, AFaultedRunWaitsOnlyForALeasingWorkerAndForABoundedTime) {
  const int64_t sweep = Submit(SweepYaml("held-by-fault", 1, 1)).sweep().id();
  const int64_t bad = Register("bad");
  const int64_t idle = Register("heartbeats-only");
  auto l = Lease(bad);
  ASSERT_TRUE(l.has_run());
  ASSERT_TRUE(Complete(l, v1::FAILED, {}, v1::FAULT_WORKER).ok());
  // The other worker heartbeats but never leases: it cannot take the run, so it holds nothing.
  v1::HeartbeatRequest hb;
  hb.set_worker_id(idle);
  v1::HeartbeatResponse hr;
  ASSERT_TRUE(WorkerStub()->Heartbeat(Ctx().get(), hb, &hr).ok());
  auto back = Lease(bad);
  ASSERT_TRUE(back.has_run()) << "a faulted run waited for a worker that never leases";
  EXPECT_EQ(back.lease().run_id(), l.lease().run_id());
  ASSERT_TRUE(Complete(back, v1::FAILED, {}, v1::FAULT_WORKER).ok());

  // A worker that leases (asked a moment ago): the run waits for it, and status says so.
  const int64_t leasing = Register("leasing");
  Sql(absl::StrCat("UPDATE workers SET last_lease_at = now() WHERE id = ", leasing));
  EXPECT_FALSE(Lease(bad).has_run());
  const v1::Sweep held = SweepOf(sweep);
  EXPECT_EQ(held.counts().fault_held(), 1);
  EXPECT_GT(held.counts().fault_held_until(), static_cast<double>(std::time(nullptr)));
  // The hold is bounded: once it ends, the worker it faulted on may take it again.
  Sql(absl::StrCat("UPDATE runs SET fault_hold_until = now() - interval '1 second' WHERE id = ",
                   l.lease().run_id()));
  EXPECT_EQ(SweepOf(sweep).counts().fault_held(), 0);
  EXPECT_TRUE(Lease(bad).has_run());
}

// Item 3: the worker's next process reports how the last one died: a worker-side failure with
// its cause (requeued elsewhere, toward the bench); the leases it held without a report are
// released at Register (a preemption), so the new process is not refused by its own dead lease;
// a Register that is not a new process (the self-check) releases nothing.
TEST_F(HardeningTest, ARestartedWorkerReportsItsCrashAndIsNotRefusedByItsDeadLease) {
  const int64_t sweep = Submit(SweepYaml("crashing", 4, 1)).sweep().id();
  const std::string token = Token(server::Role::kWorker, "box");
  int64_t w = 0;
  ASSERT_TRUE(RegisterAs(token, Info("capped"), &w).ok());
  auto first = Lease(w, 0, 0, token);
  ASSERT_TRUE(first.has_run());
  // The process dies (aborted in training); before the fix the new one was refused:
  // RESOURCE_EXHAUSTED "already holds 1 run lease(s)" until the dead lease expired.
  v1::RegisterRequest restart = Info("capped");
  restart.set_new_process(true);
  auto* crashed = restart.add_crashed();
  crashed->set_run_id(first.lease().run_id());
  crashed->set_attempt(first.lease().attempt());
  crashed->set_lease_token(first.lease().token());
  crashed->set_cause("the worker process died of signal 6 (SIGABRT: aborted)");
  ASSERT_TRUE(RegisterAs(token, restart).ok());
  v1::Run r = RunOf(sweep, first.lease().run_id());
  EXPECT_EQ(r.state(), v1::QUEUED);
  EXPECT_EQ(r.worker_faults(), 1);
  EXPECT_EQ(r.preemptions(), 0);
  bool faulted = false;
  for (const auto& e : Events(r.id())) {
    faulted |= e.kind() == "faulted" && e.fault() == "worker" && e.worker() == "capped" &&
               absl::StrContains(e.message(), "SIGABRT");
  }
  EXPECT_TRUE(faulted);
  EXPECT_EQ(Sql(absl::StrCat("SELECT fault_streak FROM workers WHERE id = ", w)), "1");

  // A lease held with no report (another boot, an older worker): released as a preemption.
  auto second = Lease(w, 0, 0, token);
  ASSERT_TRUE(second.has_run());
  v1::RegisterRequest plain = Info("capped");
  // The self-check's Register (not a new process) leaves the lease alone.
  ASSERT_TRUE(RegisterAs(token, plain).ok());
  EXPECT_EQ(RunOf(sweep, second.lease().run_id()).state(), v1::LEASED);
  plain.set_new_process(true);
  ASSERT_TRUE(RegisterAs(token, plain).ok());
  const v1::Run released = RunOf(sweep, second.lease().run_id());
  EXPECT_EQ(released.state(), v1::QUEUED);
  EXPECT_EQ(released.preemptions(), 1);
  auto held = Lease(w, 0, 0, token);
  ASSERT_TRUE(held.has_run()) << "refused by its own dead lease";

  // The usual streak benches it: two more crashes in a row make three.
  for (int i = 0; i < 2; ++i) {
    if (i > 0) {
      held = Lease(w, 0, 0, token);
      ASSERT_TRUE(held.has_run()) << i;
    }
    v1::RegisterRequest again = Info("capped");
    again.set_new_process(true);
    auto* c = again.add_crashed();
    c->set_run_id(held.lease().run_id());
    c->set_attempt(held.lease().attempt());
    c->set_lease_token(held.lease().token());
    c->set_cause("the worker process ended without a trace: killed by SIGKILL");
    ASSERT_TRUE(RegisterAs(token, again).ok());
  }
  auto benched = Lease(w, 0, 0, token);
  EXPECT_FALSE(benched.has_run());
  EXPECT_GT(benched.benched_until(), static_cast<double>(std::time(nullptr)));
  EXPECT_THAT(benched.bench_reason(), HasSubstr("killed by SIGKILL"));

  // Another token's worker cannot report a crash of a lease it does not hold: nothing changes.
  const std::string other = Token(server::Role::kWorker, "other");
  Sql(
      absl::StrCat("UPDATE workers SET benched_until = NULL, self_check_due = false, "
                   "fault_streak = 0 WHERE id = ",
                   w));
  auto victim = Lease(w, 0, 0, token);
  ASSERT_TRUE(victim.has_run());
  v1::RegisterRequest forged = Info("forger");
  forged.set_new_process(true);
  auto* f = forged.add_crashed();
  f->set_run_id(victim.lease().run_id());
  f->set_attempt(victim.lease().attempt());
  f->set_lease_token(Sha256Hex("a guess"));
  f->set_cause("forged");
  ASSERT_TRUE(RegisterAs(other, forged).ok());
  EXPECT_EQ(RunOf(sweep, victim.lease().run_id()).state(), v1::LEASED);
  // And the report is checked like every field: 65 attempts, a token that is no token.
  v1::RegisterRequest many = Info("forger");
  for (int i = 0; i < 65; ++i) {
    auto* m = many.add_crashed();
    m->set_run_id(1);
    m->set_attempt(1);
    m->set_lease_token(Sha256Hex("x"));
  }
  EXPECT_CODE(RegisterAs(other, many), StatusCode::INVALID_ARGUMENT);
  v1::RegisterRequest bad_token = Info("forger");
  auto* bt = bad_token.add_crashed();
  bt->set_run_id(1);
  bt->set_attempt(1);
  bt->set_lease_token("../../etc/passwd");
  EXPECT_CODE(RegisterAs(other, bad_token), StatusCode::INVALID_ARGUMENT);
}

// Item 6: Release spends no attempt, so a lease-and-release loop is bounded by --max-releases.
class ReleaseBound : public HardeningTest {
  void Limits(server::ServerOptions* o) override { o->faults.max_releases = 5; }
};

TEST_F(ReleaseBound, LeaseAndReleaseEndsAtMaxReleases) {
  const int64_t sweep = Submit(SweepYaml("released", 1, 1)).sweep().id();
  const int64_t w = Register("looper");
  int64_t run = 0;
  for (int i = 0; i < 5; ++i) {
    auto l = Lease(w);
    ASSERT_TRUE(l.has_run()) << i;
    run = l.lease().run_id();
    ASSERT_TRUE(Release(l).ok()) << i;
  }
  const v1::Run r = RunOf(sweep, run);
  EXPECT_EQ(r.state(), v1::FAILED);
  EXPECT_EQ(r.error(), "handed back 5 times (--max-releases); the last on attempt 5");
  EXPECT_FALSE(Lease(w).has_run());
  EXPECT_LE(Events(run).size(), 11u);
  EXPECT_EQ(SweepOf(sweep).state(), "finished");
}

// ---- Bad values and unbounded growth ---------------------------------------------------------

// Item 7: every number a worker sends is checked at the edge, and the read path copes with what
// older rows hold.
TEST_F(HardeningTest, NumbersFromAWorkerAreCheckedAndOldRowsStillRead) {
  const int64_t sweep = Submit(SweepYaml("numbers", 2, 1)).sweep().id();
  const int64_t w = Register("w");
  auto l = Lease(w);
  ASSERT_TRUE(l.has_run());
  const auto bad = StatusCode::INVALID_ARGUMENT;
  EXPECT_CODE(Heartbeat(w, l, std::numeric_limits<int64_t>::max(), 10), bad);
  EXPECT_CODE(Heartbeat(w, l, -1, 10), bad);
  EXPECT_CODE(Heartbeat(w, l, 5, std::nan("")), bad);
  EXPECT_CODE(Heartbeat(w, l, 5, std::numeric_limits<double>::infinity()), bad);
  EXPECT_CODE(Heartbeat(w, l, 5, -3), bad);
  ASSERT_TRUE(Heartbeat(w, l, 5, 1234).ok());
  // A step past the run's own steps is kept to them.
  ASSERT_TRUE(Heartbeat(w, l, int64_t{1} << 40, 1234).ok());
  EXPECT_EQ(RunOf(sweep, l.lease().run_id()).step(), 100);
  EXPECT_CODE(Report(l, {{"train_loss", 1, 2.0}}, std::nan("")), bad);
  EXPECT_CODE(Report(l, {{"train_loss", int64_t{1} << 60, 2.0}}), bad);
  // A loss is a measurement: a diverged run's may be infinite.
  EXPECT_TRUE(Report(l, {{"train_loss", 2, std::numeric_limits<double>::infinity()}}).ok());
  v1::RunResult r;
  r.set_wall_seconds(std::numeric_limits<double>::infinity());
  EXPECT_CODE(Complete(l, v1::SUCCEEDED, r), bad);
  r.Clear();
  r.set_steps_done(-5);
  EXPECT_CODE(Complete(l, v1::SUCCEEDED, r), bad);
  r.Clear();
  r.set_diverged_step(-2);  // -1 is the trainer's "did not diverge"
  EXPECT_CODE(Complete(l, v1::SUCCEEDED, r), bad);
  r.Clear();
  r.set_tokens_per_second(std::nan(""));
  EXPECT_CODE(Complete(l, v1::SUCCEEDED, r), bad);
  r.Clear();
  r.set_peak_memory_bytes(-1);
  EXPECT_CODE(Complete(l, v1::SUCCEEDED, r), bad);
  v1::WorkerInfo info;
  info.set_device_memory_bytes(-1);
  HostileClient k(grpc::CreateChannel(absl::StrCat("127.0.0.1:", servers_[0]->port()),
                                      grpc::InsecureChannelCredentials()));
  EXPECT_CODE(k.RegisterWith(admin_, "negative-memory", info), bad);
  info.Clear();
  info.set_host_key("not a key");
  EXPECT_CODE(k.RegisterWith(admin_, "bad-key", info), bad);

  // Rows from before the checks: a running run at step 2^63 - 1 and NaN tokens/s, another with
  // infinite tokens/s. The cells, the sweep and its runs still read.
  auto l2 = Lease(Register("w2"));
  ASSERT_TRUE(l2.has_run());
  Sql(
      absl::StrCat("UPDATE runs SET state = 'running', step = 9223372036854775807, "
                   "tokens_per_second = 'NaN' WHERE id = ",
                   l.lease().run_id()));
  Sql(
      absl::StrCat("UPDATE runs SET state = 'running', step = 9223372036854775807, "
                   "tokens_per_second = 'Infinity' WHERE id = ",
                   l2.lease().run_id()));
  v1::ListCellsResponse cells;
  const grpc::Status listed = Cells(sweep, &cells);
  ASSERT_TRUE(listed.ok()) << listed.error_message();
  ASSERT_EQ(cells.cells_size(), 2);
  for (const auto& c : cells.cells()) EXPECT_EQ(c.running_steps(), c.running_total_steps());
  v1::GetSweepRequest get;
  get.mutable_sweep()->set_id(sweep);
  get.set_include_runs(true);
  v1::GetSweepResponse got;
  const grpc::Status read = SweepStub()->GetSweep(Ctx().get(), get, &got);
  EXPECT_TRUE(read.ok()) << read.error_message();
}

// Item 9: a benchmark must be a figure a machine can have; one an older row holds is left out of
// the estimate rather than making it infinite.
TEST_F(HardeningTest, AnAbsurdBenchmarkIsRefusedAndAnOldOneIgnored) {
  HostileClient k(grpc::CreateChannel(absl::StrCat("127.0.0.1:", servers_[0]->port()),
                                      grpc::InsecureChannelCredentials()));
  v1::WorkerInfo info;
  auto* b = info.add_benchmarks();
  b->set_dtype("float32");
  b->set_flops_per_second(5e-324);
  EXPECT_CODE(k.RegisterWith(admin_, "denormal", info), StatusCode::INVALID_ARGUMENT);
  b->set_flops_per_second(1e30);
  EXPECT_CODE(k.RegisterWith(admin_, "too-fast", info), StatusCode::INVALID_ARGUMENT);
  b->set_flops_per_second(2e9);
  ASSERT_TRUE(k.RegisterWith(admin_, "sane", info).ok());
  // A row from before the check says 5e-324: the estimate leaves that benchmark out.
  Sql("UPDATE workers SET info = jsonb_set(info, '{benchmarks,0,flops_per_second}', "
      "'5e-324'::jsonb) WHERE name = 'sane'");
  ASSERT_EQ(Sql("SELECT (info->'benchmarks'->0->>'flops_per_second')::float8 < 1e-300 FROM "
                "workers WHERE name = 'sane'"),
            "t");
  Register("another");  // the server reads the fleet afresh
  v1::SubmitSweepRequest dry;
  dry.set_spec_yaml(SweepYaml("estimate", 2, 1));
  dry.set_dry_run(true);
  v1::SubmitSweepResponse est;
  ASSERT_TRUE(SweepStub()->SubmitSweep(Ctx().get(), dry, &est).ok());
  EXPECT_FALSE(std::isinf(est.estimate().wall_seconds_base()));
  EXPECT_FALSE(std::isinf(est.estimate().device_seconds_base()));
}

// Item 10: a latest value moves only to a newer step.
TEST_F(HardeningTest, AnOlderStepDoesNotOverwriteTheLatestLoss) {
  const int64_t sweep = Submit(Yaml("latest", 1, 1000)).sweep().id();
  auto l = Lease(Register("w"));
  ASSERT_TRUE(l.has_run());
  ASSERT_TRUE(Report(l, {{"val_loss", 900, 1.5}, {"train_loss", 900, 1.4}}).ok());
  ASSERT_TRUE(Report(l, {{"val_loss", 300, 9.0}, {"train_loss", 300, 9.1}}).ok());
  v1::Run r = RunOf(sweep, l.lease().run_id());
  EXPECT_EQ(r.latest_val_loss(), 1.5);
  EXPECT_EQ(r.latest_train_loss(), 1.4);
  ASSERT_TRUE(Report(l, {{"val_loss", 950, 1.2}}).ok());
  EXPECT_EQ(RunOf(sweep, l.lease().run_id()).latest_val_loss(), 1.2);
  // A new attempt starts from its resume step: its first values show at once.
  ExpireLease(l.lease().run_id());
  ASSERT_TRUE(WaitUntil([&] { return RunOf(sweep, l.lease().run_id()).state() == v1::QUEUED; }));
  auto again = Lease(Register("w2"));
  ASSERT_TRUE(again.has_run());
  ASSERT_TRUE(Report(again, {{"val_loss", 100, 4.0}}).ok());
  EXPECT_EQ(RunOf(sweep, l.lease().run_id()).latest_val_loss(), 4.0);
}

// Item 8: what one run stores is bounded, each bound a flag; a refused report leaves the run as
// it was; re-sent points are not counted twice; a new attempt counts its run again.
class StoreBounds : public HardeningTest {
  void Limits(server::ServerOptions* o) override {
    o->max_points_per_run = 1000;
    o->max_points_per_name = 300;
    o->max_metric_names = 5;
    o->max_final_probes = 16;
  }
};

TEST_F(StoreBounds, PointsNamesAndProbesPerRunAreBounded) {
  const int64_t sweep = Submit(Yaml("bounded", 1, 1000)).sweep().id();
  auto l = Lease(Register("w"));
  ASSERT_TRUE(l.has_run());
  auto series = [](const std::string& name, int64_t from, int64_t n) {
    std::vector<std::tuple<std::string, int64_t, double>> out;
    for (int64_t s = from; s < from + n; ++s) out.emplace_back(name, s, 1.0);
    return out;
  };
  // Per name: 300 fit, the 301st does not.
  ASSERT_TRUE(Report(l, series("train_loss", 0, 300)).ok());
  grpc::Status s = Report(l, series("train_loss", 300, 1));
  EXPECT_CODE(s, StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(s.error_message(), HasSubstr("--max-points-per-name 300"));
  // Re-sent points are stored once and counted once.
  ASSERT_TRUE(Report(l, series("train_loss", 0, 10)).ok());
  EXPECT_EQ(Sql(absl::StrCat("SELECT points FROM run_metric_series WHERE run_id = ",
                             l.lease().run_id(), " AND name = 'train_loss'")),
            "300");
  // Names: five fit, a sixth does not; the refused report's loss is not the latest.
  for (const char* name : {"lr", "grad_norm", "val_loss", "val_ppl"}) {
    ASSERT_TRUE(Report(l, series(name, 0, 100)).ok()) << name;
  }
  s = Report(l, {{"val_loss", 500, 7.0}, {"made_up_name", 500, 1.0}});
  EXPECT_CODE(s, StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(s.error_message(), HasSubstr("--max-metric-names 5"));
  EXPECT_EQ(RunOf(sweep, l.lease().run_id()).latest_val_loss(), 1.0);
  // The run: 700 points so far, 300 more fit, then none.
  ASSERT_TRUE(Report(l, series("lr", 100, 200)).ok());
  ASSERT_TRUE(Report(l, series("grad_norm", 100, 100)).ok());
  s = Report(l, series("val_ppl", 100, 1));
  EXPECT_CODE(s, StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(s.error_message(), HasSubstr("--max-points-per-run 1000"));
  EXPECT_EQ(Points(l.lease().run_id()).size(), 1000u);
  // final_probes past its cap.
  v1::RunResult r;
  for (int i = 0; i < 17; ++i) (*r.mutable_final_probes())[absl::StrCat("p", i)] = 1;
  s = Complete(l, v1::SUCCEEDED, r);
  EXPECT_CODE(s, StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("--max-final-probes"));
  // A new attempt without a checkpoint starts over: its run is counted again, from nothing.
  ExpireLease(l.lease().run_id());
  ASSERT_TRUE(WaitUntil([&] { return RunOf(sweep, l.lease().run_id()).state() == v1::QUEUED; }));
  auto again = Lease(Register("w2"));
  ASSERT_TRUE(again.has_run());
  EXPECT_EQ(Sql(absl::StrCat("SELECT count(*) FROM run_metric_series WHERE run_id = ",
                             l.lease().run_id())),
            "0");
  EXPECT_TRUE(Report(again, series("train_loss", 0, 300)).ok());
}

// Item 8: a read of a run's metrics comes a page at a time, every point once, by name and step.
class BigReads : public HardeningTest {
  void Limits(server::ServerOptions* o) override { o->max_points_per_report = 50000; }
};

TEST_F(BigReads, MetricsAreReadPageByPage) {
  Submit(Yaml("pages", 1, 100000));
  auto l = Lease(Register("w"));
  ASSERT_TRUE(l.has_run());
  for (const char* name : {"train_loss", "lr"}) {
    std::vector<std::tuple<std::string, int64_t, double>> pts;
    for (int64_t s = 0; s < 25000; ++s) pts.emplace_back(name, s, static_cast<double>(s));
    ASSERT_TRUE(Report(l, pts).ok());
  }
  v1::GetRunMetricsRequest req;
  req.set_run_id(l.lease().run_id());
  req.set_after_step(-1);
  auto ctx = Ctx();
  auto reader = SweepStub()->GetRunMetrics(ctx.get(), req);
  v1::GetRunMetricsResponse msg;
  std::vector<std::pair<std::string, int64_t>> seen;
  int messages = 0;
  while (reader->Read(&msg)) {
    ++messages;
    EXPECT_LE(msg.points_size(), 20000);
    for (const auto& p : msg.points()) seen.emplace_back(p.name(), p.step());
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_EQ(seen.size(), 50000u);
  EXPECT_GE(messages, 3);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
}

// Item 11: one token holds at most --max-worker-names live names; a benched box that registers
// under a new name (same token, same host key) keeps its bench.
class NameBound : public HardeningTest {
  void Limits(server::ServerOptions* o) override { o->max_worker_names = 3; }
};

TEST_F(NameBound, OneTokenHoldsBoundedNamesAndARenameKeepsTheBench) {
  const std::string token = Token(server::Role::kWorker, "fleet");
  int64_t ids[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(RegisterAs(token, Info(absl::StrCat("w", i)), &ids[i]).ok()) << i;
  }
  const grpc::Status fourth = RegisterAs(token, Info("w3"));
  EXPECT_CODE(fourth, StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(fourth.error_message(), HasSubstr("--max-worker-names 3"));
  EXPECT_TRUE(RegisterAs(token, Info("w1")).ok()) << "a live name registers again";
  EXPECT_TRUE(RegisterAs(Token(server::Role::kWorker, "other"), Info("x0")).ok())
      << "another token has its own";
  v1::CliDeregisterRequest stop;
  stop.set_worker_id(ids[2]);
  v1::CliDeregisterResponse stopped;
  ASSERT_TRUE(WorkerStub()->Deregister(Ctx(token).get(), stop, &stopped).ok());
  EXPECT_TRUE(RegisterAs(token, Info("w3")).ok()) << "a stopped worker's name frees a place";

  // w0 is benched; the same box registers as "renamed": benched too, and w0's row is stopped.
  const std::string key = Sha256Hex("machine-id\0/var/lib/ablate-worker");
  v1::RegisterRequest w0 = Info("w0");
  w0.mutable_info()->set_host_key(key);
  ASSERT_TRUE(RegisterAs(token, w0).ok());
  Sql(
      absl::StrCat("UPDATE workers SET benched_until = now() + interval '300 seconds', "
                   "bench_reason = 'CUDA error', self_check_due = true, fault_streak = 3 "
                   "WHERE id = ",
                   ids[0]));
  v1::RegisterRequest renamed = Info("renamed");
  renamed.mutable_info()->set_host_key(key);
  // Room: w1 and w3 are live besides it, w0 was the third.
  v1::CliDeregisterRequest stop1;
  stop1.set_worker_id(ids[1]);
  ASSERT_TRUE(WorkerStub()->Deregister(Ctx(token).get(), stop1, &stopped).ok());
  int64_t r = 0;
  ASSERT_TRUE(RegisterAs(token, renamed, &r).ok());
  auto leased = Lease(r, 0, 0, token);
  EXPECT_FALSE(leased.has_run());
  EXPECT_EQ(leased.bench_reason(), "CUDA error");
  EXPECT_EQ(Sql(absl::StrCat("SELECT stopped_at IS NOT NULL FROM workers WHERE id = ", ids[0])),
            "t");
  // Another token with the same key inherits nothing.
  v1::RegisterRequest stranger = Info("stranger");
  stranger.mutable_info()->set_host_key(key);
  int64_t st = 0;
  ASSERT_TRUE(RegisterAs(Token(server::Role::kWorker, "stranger"), stranger, &st).ok());
  EXPECT_EQ(Sql(absl::StrCat("SELECT benched_until IS NULL FROM workers WHERE id = ", st)), "t");
}

// ---- Display ---------------------------------------------------------------------------------

// Item 13: a sweep whose only axis is the seed has one cell (the empty key), and lists it.
TEST_F(HardeningTest, ASeedOnlySweepListsItsCell) {
  const int64_t sweep = Submit(
                            "name: seeds\ndata: {train: \"synthetic:50\", val: \"synthetic:10\"}\n"
                            "fixed: {n_embd: 32, n_head: 2, block_size: 32, batch_size: 4, "
                            "steps: 100}\ngrid:\n  seed: [1, 2, 3]\n")
                            .sweep()
                            .id();
  v1::ListCellsResponse cells;
  ASSERT_TRUE(Cells(sweep, &cells).ok());
  ASSERT_EQ(cells.cells_size(), 1);
  EXPECT_EQ(cells.cells(0).counts().total(), 3);
  EXPECT_EQ(cells.cells(0).counts().queued(), 3);
  EXPECT_EQ(cells.next_after_cell(), "");
}

// Item 14: what holds a run is judged per device kind: a cuda run fits no cpu worker, whatever
// memory the cpu worker has.
TEST_F(HardeningTest, ACudaRunWithOnlyCpuWorkersLiveIsHeld) {
  const int64_t sweep = Submit(SweepYaml("cuda-only", 2, 1, ", device: cuda")).sweep().id();
  const int64_t cpu = Register("big-cpu");
  Sql(absl::StrCat("UPDATE workers SET memory_per_slot = 1000000000000 WHERE id = ", cpu));
  Sql(absl::StrCat("UPDATE runs SET memory_bytes = 1000000 WHERE sweep_id = ", sweep));
  const v1::Sweep s = SweepOf(sweep);
  EXPECT_EQ(s.counts().unfittable(), 2);
  EXPECT_EQ(s.eta_basis(), "held: 2 runs fit no live worker's device memory");
  // A cuda worker that holds them: not held.
  const int64_t gpu = Register("gpu", "cuda");
  Sql(absl::StrCat("UPDATE workers SET memory_per_slot = 8000000000 WHERE id = ", gpu));
  EXPECT_EQ(SweepOf(sweep).counts().unfittable(), 0);
}

// Item 15: a metric name that matches nothing is an error naming what there is; an unbench that
// lifts nothing says so.
TEST_F(HardeningTest, NamesThatMatchNothingAndUnbenchesThatLiftNothingAreErrors) {
  const int64_t sweep = Submit(SweepYaml("names", 1, 1)).sweep().id();
  const int64_t w = Register("w");
  auto l = Lease(w);
  ASSERT_TRUE(l.has_run());
  ASSERT_TRUE(Report(l, {{"val_loss", 10, 3.0}, {"train_loss", 10, 3.1}}).ok());
  auto read = [&](const std::string& name, bool follow = false) {
    v1::GetRunMetricsRequest req;
    req.set_run_id(l.lease().run_id());
    req.set_after_step(-1);
    req.add_names(name);
    req.set_follow(follow);
    auto ctx = Ctx(admin_, 5);
    auto reader = SweepStub()->GetRunMetrics(ctx.get(), req);
    v1::GetRunMetricsResponse msg;
    int n = 0;
    while (reader->Read(&msg)) n += msg.points_size();
    const grpc::Status s = reader->Finish();
    return std::make_pair(s, n);
  };
  auto [typo, none] = read("val_los");
  EXPECT_CODE(typo, StatusCode::NOT_FOUND);
  EXPECT_THAT(typo.error_message(), HasSubstr("has no metric \"val_los\" (did you mean "));
  EXPECT_THAT(typo.error_message(), HasSubstr("it has train_loss, val_loss"));
  EXPECT_EQ(read("val_loss").second, 1);
  // A metric the trainer reports but this live run has not yet: not an error.
  EXPECT_TRUE(read("val_ppl").first.ok());
  // Finished, it never will.
  ASSERT_TRUE(Complete(l, v1::SUCCEEDED, {}).ok());
  EXPECT_CODE(read("val_ppl").first, StatusCode::NOT_FOUND);
  (void)sweep;

  v1::UnbenchWorkerRequest unbench;
  unbench.set_name("w");
  v1::UnbenchWorkerResponse resp;
  const grpc::Status s = SweepStub()->UnbenchWorker(Ctx().get(), unbench, &resp);
  EXPECT_CODE(s, StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("is not benched"));
  v1::SetBudgetRequest zero;
  zero.mutable_sweep()->set_id(sweep);
  zero.set_raise(0);
  v1::SetBudgetResponse raised;
  EXPECT_CODE(SweepStub()->SetBudget(Ctx().get(), zero, &raised), StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace ablate::testing
