// Prometheus /metrics: the names of docs/architecture.md#observability, per-run series labelled
// for the dashboards while the sweep is active, and removed when it ends.

#include <functional>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/generic/generic_stub.h"
#include "pqxx/pqxx"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

// The line of `text` for `metric` whose labels contain every `needle`.
std::string Line(const std::string& text, const std::string& metric,
                 const std::vector<std::string>& needles) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, metric + "{") && !absl::StartsWith(line, metric + " ")) continue;
    bool all = true;
    for (const auto& n : needles) all &= absl::StrContains(line, n);
    if (all) return std::string(line);
  }
  return "";
}

class MetricsTest : public ServerFixture {
 protected:
  void Configure(server::ServerOptions* o) override {
    port_ = FreePort();
    o->metrics_listen = absl::StrCat("127.0.0.1:", port_);
    o->stats_interval_seconds = 0.2;
  }
  // Scrapes until `metric` with `needles` appears (or disappears), bounded.
  std::string WaitFor(const std::string& metric, const std::vector<std::string>& needles,
                      bool present = true) {
    return WaitUntil(
        [&](const std::string& text) { return Line(text, metric, needles).empty() != present; },
        absl::StrCat(metric, present ? " appear" : " go away"));
  }
  // The first /metrics page of which `holds` is true. A refresh reads its series in several
  // transactions, so one page may show a change in some series and not yet in others: a test
  // that checks several series together waits for a page that shows it in all of them.
  std::string WaitUntil(const std::function<bool(const std::string&)>& holds,
                        const std::string& what) {
    std::string text;
    for (int i = 0; i < 50; ++i) {
      text = HttpGet(port_, "/metrics");
      if (holds(text)) return text;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "never saw " << what << "\n" << text;
    return text;
  }
  // Reports one train_loss point for `l`'s run so its per-run series exist.
  void ReportOne(const v1::LeaseResponse& l) {
    v1::ReportMetricsRequest rep;
    rep.set_run_id(l.spec().run_id());
    rep.set_attempt(l.lease().attempt());
    rep.set_lease_token(l.lease().token());
    auto* p = rep.add_points();
    p->set_name("train_loss");
    p->set_step(1);
    p->set_value(3.0);
    v1::ReportMetricsResponse rr;
    ASSERT_TRUE(WorkerStub()->ReportMetrics(Ctx().get(), rep, &rr).ok());
  }
  int port_ = 0;
};

TEST_F(MetricsTest, ExportsQueueFleetAndPerRunSeries) {
  auto sub = Submit(SweepYaml("metered", 1, 1, ", qk_norm: layernorm, n_layer: 3"));
  const int64_t w = Register("gauge-worker");
  auto l = Lease(w);
  const int64_t run = l.spec().run_id();
  v1::HeartbeatRequest hb;
  hb.set_worker_id(w);
  hb.set_run_id(run);
  hb.set_attempt(1);
  hb.set_lease_token(l.lease().token());
  hb.set_step(7);
  hb.set_tokens_per_second(1234);
  v1::HeartbeatResponse hr;
  ASSERT_TRUE(WorkerStub()->Heartbeat(Ctx().get(), hb, &hr).ok());
  v1::ReportMetricsRequest rep;
  rep.set_run_id(run);
  rep.set_attempt(1);
  rep.set_lease_token(l.lease().token());
  for (const char* name : {"train_loss", "val_loss", "max_attn_logit"}) {
    auto* p = rep.add_points();
    p->set_name(name);
    p->set_step(7);
    p->set_value(2.5);
  }
  v1::ReportMetricsResponse rr;
  ASSERT_TRUE(WorkerStub()->ReportMetrics(Ctx().get(), rep, &rr).ok());

  const std::vector<std::string> labels = {
      "sweep=\"metered\"",     absl::StrCat("run=\"", run, "\""),
      "qk_norm=\"layernorm\"", "lr=\"0.001\"",
      "n_layer=\"3\"",         "seed=\"0\""};
  // The run's series, its sweep's count and its worker's state come from three statements.
  std::string text = WaitUntil(
      [&](const std::string& t) {
        return !Line(t, "ablate_run_train_loss", labels).empty() &&
               absl::EndsWith(Line(t, "ablate_runs", {"sweep=\"metered\"", "state=\"running\""}),
                              " 1") &&
               absl::EndsWith(Line(t, "ablate_workers", {"state=\"busy\"", "device=\"cpu\""}),
                              " 1");
      },
      "the running run, its sweep and its worker");
  EXPECT_TRUE(absl::EndsWith(Line(text, "ablate_run_step", labels), " 7"));
  EXPECT_TRUE(absl::EndsWith(Line(text, "ablate_run_val_loss", labels), " 2.5"));
  EXPECT_TRUE(absl::EndsWith(Line(text, "ablate_run_max_attn_logit", labels), " 2.5"));
  EXPECT_TRUE(absl::EndsWith(Line(text, "ablate_run_tokens_per_second", labels), " 1234"));
  EXPECT_TRUE(
      absl::EndsWith(Line(text, "ablate_runs", {"sweep=\"metered\"", "state=\"running\""}), " 1"));
  EXPECT_TRUE(
      absl::EndsWith(Line(text, "ablate_workers", {"state=\"busy\"", "device=\"cpu\""}), " 1"));
  EXPECT_TRUE(absl::EndsWith(Line(text, "ablate_leases_granted_total", {}), " 1"));
  EXPECT_TRUE(absl::EndsWith(Line(text, "ablate_metric_points_total", {}), " 3"));
  EXPECT_FALSE(Line(text, "ablate_leases_expired_total", {}).empty());
  EXPECT_FALSE(Line(text, "ablate_rpc_duration_seconds_count", {"method=\"Lease\""}).empty());
  EXPECT_TRUE(
      absl::EndsWith(Line(text, "ablate_sweep_progress_ratio", {"sweep=\"metered\""}), " 0"));
  EXPECT_FALSE(Line(text, "ablate_sweep_eta_seconds", {"sweep=\"metered\""}).empty());

  v1::CompleteRequest c;
  c.set_run_id(run);
  c.set_attempt(1);
  c.set_lease_token(l.lease().token());
  c.set_state(v1::SUCCEEDED);
  v1::CompleteResponse cr;
  ASSERT_TRUE(WorkerStub()->Complete(Ctx().get(), c, &cr).ok());
  // The sweep finished: its per-run and per-sweep series go away.
  WaitUntil(
      [](const std::string& t) {
        return Line(t, "ablate_run_train_loss", {"sweep=\"metered\""}).empty() &&
               Line(t, "ablate_runs", {"sweep=\"metered\""}).empty() &&
               Line(t, "ablate_sweep_progress_ratio", {"sweep=\"metered\""}).empty();
      },
      "the finished sweep without its series");
}

// server/rpc_guard.h times every synchronous call under its method name, refused or failed calls
// included, as the handlers' own timers did.
TEST_F(MetricsTest, EveryGuardedCallIsTimedUnderItsMethodNameEvenWhenItFails) {
  const std::string before = HttpGet(port_, "/metrics");
  for (const char* method : {"ListWorkers", "Heartbeat"}) {
    EXPECT_TRUE(
        Line(before, "ablate_rpc_duration_seconds_count", {absl::StrCat("method=\"", method, "\"")})
            .empty())
        << method;
  }
  v1::ListWorkersRequest lw;
  v1::ListWorkersResponse lwr;
  ASSERT_TRUE(SweepStub()->ListWorkers(Ctx().get(), lw, &lwr).ok());
  v1::HeartbeatRequest hb;
  hb.set_worker_id(987654);  // never registered
  v1::HeartbeatResponse hr;
  EXPECT_EQ(WorkerStub()->Heartbeat(Ctx().get(), hb, &hr).error_code(),
            grpc::StatusCode::NOT_FOUND);
  const std::string after = HttpGet(port_, "/metrics");
  for (const char* method : {"ListWorkers", "Heartbeat"}) {
    EXPECT_TRUE(absl::EndsWith(
        Line(after, "ablate_rpc_duration_seconds_count", {absl::StrCat("method=\"", method, "\"")}),
        " 1"))
        << method;
  }
}

TEST_F(MetricsTest, PerRunSeriesCarryTheSweepsOwnAxes) {
  // A sweep over pos x attn_softcap (qk_norm fixed): its runs differ only in those axes.
  auto sub =
      Submit(SweepYaml("axes", 1, 1, "", "  pos: [learned, rope]\n  attn_softcap: [0, 30]\n"));
  ASSERT_EQ(sub.runs(), 4);
  const int64_t w = Register("axes-worker");
  std::set<std::string> variants;
  for (int i = 0; i < 4; ++i) {
    auto l = Lease(w);
    ASSERT_TRUE(l.has_run());
    ReportOne(l);
    const auto& g = l.spec().grid_values();
    const std::string variant =
        absl::StrCat("attn_softcap=", g.at("attn_softcap"), ",pos=", g.at("pos"));
    variants.insert(variant);
    std::string text = WaitFor(
        "ablate_run_train_loss",
        {absl::StrCat("run=\"", l.spec().run_id(), "\""), absl::StrCat("pos=\"", g.at("pos"), "\""),
         absl::StrCat("attn_softcap=\"", g.at("attn_softcap"), "\""),
         absl::StrCat("variant=\"", variant, "\""), "qk_norm=\"none\"", "n_layer=\"4\"",
         "sweep=\"axes\""});
    // Complete it so the worker can lease the next one (one run per worker at a time).
    v1::CompleteRequest c;
    c.set_run_id(l.spec().run_id());
    c.set_attempt(l.lease().attempt());
    c.set_lease_token(l.lease().token());
    c.set_state(v1::SUCCEEDED);
    v1::CompleteResponse cr;
    if (i < 3) {
      ASSERT_TRUE(WorkerStub()->Complete(Ctx().get(), c, &cr).ok());
    }
  }
  EXPECT_EQ(variants.size(), 4u);
}

// Issue #22: a finished run leaves the per-run series while its sweep is still live; its cell
// (seeds folded, in the database) carries its loss and logit, so the series of a big sweep are
// its cells and the runs in flight, not every run it has started.
TEST_F(MetricsTest, FinishedRunsFoldIntoTheirCellsSeries) {
  auto sub = Submit(SweepYaml("folded", 2, 2));
  ASSERT_EQ(sub.runs(), 4);
  const int64_t w = Register("fold-worker", "cpu", 0, /*slots=*/4);
  auto report = [&](const v1::LeaseResponse& l, double val, double logit) {
    v1::ReportMetricsRequest rep;
    rep.set_run_id(l.spec().run_id());
    rep.set_attempt(l.lease().attempt());
    rep.set_lease_token(l.lease().token());
    for (const auto& [name, value] : {std::pair<const char*, double>{"train_loss", val},
                                      {"val_loss", val},
                                      {"max_attn_logit", logit}}) {
      auto* p = rep.add_points();
      p->set_name(name);
      p->set_step(5);
      p->set_value(value);
    }
    v1::ReportMetricsResponse rr;
    ASSERT_TRUE(WorkerStub()->ReportMetrics(Ctx().get(), rep, &rr).ok());
  };
  // All four leased; the first cell's two seeds: one finishes (final loss 2.0, logit 10), one
  // trains on (4.0, 20). The other cell's runs report nothing.
  std::vector<v1::LeaseResponse> first, other;
  for (int i = 0; i < 4; ++i) {
    auto l = Lease(w);
    ASSERT_TRUE(l.has_run());
    (l.spec().grid_values().at("lr") == "0.001" ? first : other).push_back(l);
  }
  ASSERT_EQ(first.size(), 2u);
  const v1::LeaseResponse& a = first[0];
  const v1::LeaseResponse& b = first[1];
  const std::string lr = "lr=\"0.001\"";
  report(a, 3.0, 10);
  report(b, 4.0, 20);
  const std::string run_a = absl::StrCat("run=\"", a.spec().run_id(), "\"");
  const std::string run_b = absl::StrCat("run=\"", b.spec().run_id(), "\"");
  WaitFor("ablate_run_val_loss", {run_a});
  v1::CompleteRequest c;
  c.set_run_id(a.spec().run_id());
  c.set_attempt(a.lease().attempt());
  c.set_lease_token(a.lease().token());
  c.set_state(v1::SUCCEEDED);
  c.mutable_result()->set_final_val_loss(2.0);
  v1::CompleteResponse cr;
  ASSERT_TRUE(WorkerStub()->Complete(Ctx().get(), c, &cr).ok());
  std::string text = WaitFor("ablate_run_val_loss", {run_a}, /*present=*/false);
  EXPECT_TRUE(absl::EndsWith(Line(text, "ablate_run_val_loss", {run_b}), " 4")) << text;
  // The cell: the mean of a's final loss and b's latest, the higher logit, no run or seed label.
  text = WaitFor("ablate_cell_val_loss", {"sweep=\"folded\"", lr, "variant=\"all\""});
  const std::string cell = Line(text, "ablate_cell_val_loss", {"sweep=\"folded\"", lr});
  EXPECT_TRUE(absl::EndsWith(cell, " 3")) << cell;
  EXPECT_FALSE(absl::StrContains(cell, "run=")) << cell;
  EXPECT_FALSE(absl::StrContains(cell, "seed=")) << cell;
  EXPECT_TRUE(
      absl::EndsWith(Line(text, "ablate_cell_max_attn_logit", {"sweep=\"folded\"", lr}), " 20"))
      << text;
  // The other cell has no run with a loss or logit yet: no series.
  EXPECT_EQ(Line(text, "ablate_cell_val_loss", {"sweep=\"folded\"", "lr=\"0.002\""}), "") << text;
  // A cell refinement added says so, whether or not its runs have reported anything.
  pqxx::connection conn(url_);
  pqxx::work tx(conn);
  tx.exec(absl::StrCat("UPDATE runs SET refine_round = 1 WHERE id IN (", other[0].spec().run_id(),
                       ", ", other[1].spec().run_id(), ")"));
  tx.commit();
  text = WaitFor("ablate_cell_refine_round", {"sweep=\"folded\"", "lr=\"0.002\""});
  EXPECT_TRUE(absl::EndsWith(
      Line(text, "ablate_cell_refine_round", {"sweep=\"folded\"", "lr=\"0.002\""}), " 1"));
  EXPECT_EQ(Line(text, "ablate_cell_refine_round", {"sweep=\"folded\"", lr}), "") << text;
}

TEST_F(MetricsTest, ASecondSweepOfALiveSweepsNameDoesNotRenameIt) {
  auto first = Submit(SweepYaml("twin", 1, 1));
  const int64_t w = Register("twin-worker");
  auto l = Lease(w);
  ASSERT_TRUE(l.has_run());
  ReportOne(l);
  const std::string run = absl::StrCat("run=\"", l.spec().run_id(), "\"");
  WaitFor("ablate_run_train_loss", {run, "sweep=\"twin\""});
  // The same name again, while the first is live: the newcomer is told apart by its id.
  auto second = Submit(SweepYaml("twin", 1, 1));
  const std::string second_label = absl::StrCat("sweep=\"twin#", second.sweep().id(), "\"");
  std::string text = WaitFor("ablate_sweep_progress_ratio", {second_label});
  EXPECT_FALSE(Line(text, "ablate_run_train_loss", {run, "sweep=\"twin\""}).empty()) << text;
  EXPECT_FALSE(Line(text, "ablate_sweep_progress_ratio", {"sweep=\"twin\""}).empty()) << text;
  EXPECT_TRUE(
      Line(text, "ablate_run_train_loss", {absl::StrCat("sweep=\"twin#", first.sweep().id())})
          .empty())
      << text;
  // Still so after more refreshes (every 0.2 s here).
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  text = HttpGet(port_, "/metrics");
  EXPECT_FALSE(Line(text, "ablate_run_train_loss", {run, "sweep=\"twin\""}).empty()) << text;
  EXPECT_FALSE(Line(text, "ablate_sweep_progress_ratio", {second_label}).empty()) << text;
}

// A worker with worker-side failures, benched: its attempts counted by device (stats_workers), and
// the worker named while benched (stats_workers_faulted); unbenched, the faults stay counted.
TEST_F(MetricsTest, FaultedWorkersAreCountedByDeviceAndNamedWhileBenched) {
  const int64_t w = Register("flaky-gauge");
  auto sql = [&](const std::string& text) {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    tx.exec(text);
    tx.commit();
  };
  sql(
      absl::StrCat("UPDATE workers SET benched_until = now() + interval '300 seconds', "
                   "runs_faulted = 4 WHERE id = ",
                   w));
  const std::vector<std::string> benched = {"worker=\"flaky-gauge\"", "device=\"cpu\""};
  // Named, counted by device, and counted as benched (three series, two statements).
  WaitUntil(
      [&](const std::string& text) {
        return absl::EndsWith(Line(text, "ablate_worker_benched", benched), " 1") &&
               absl::EndsWith(Line(text, "ablate_worker_faults_total", {"device=\"cpu\""}), " 4") &&
               absl::EndsWith(Line(text, "ablate_workers", {"state=\"benched\"", "device=\"cpu\""}),
                              " 1");
      },
      "the benched worker with its 4 faults");

  sql(absl::StrCat("UPDATE workers SET benched_until = NULL WHERE id = ", w));
  const std::string text = WaitFor("ablate_worker_benched", benched, /*present=*/false);
  EXPECT_TRUE(absl::EndsWith(Line(text, "ablate_worker_faults_total", {"device=\"cpu\""}), " 4"))
      << text;
}

TEST_F(MetricsTest, HealthServiceSaysServing) {
  // grpc.health.v1.Health/Check with an empty request; the reply's field 1 is the status
  // (1 = SERVING), i.e. the bytes 08 01. Spoken through the generic stub so the test needs no
  // generated health proto.
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", servers_[0]->port()),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::Slice empty{std::string()};
  grpc::ByteBuffer request(&empty, 1), reply;
  grpc::Status status;
  bool done = false;
  std::mutex mu;
  std::condition_variable cv;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &reply,
                 [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = std::move(s);
                   done = true;
                   cv.notify_one();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(reply.Dump(&slices).ok());
  std::string bytes;
  for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

}  // namespace
}  // namespace ablate::testing
