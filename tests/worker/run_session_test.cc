// The run session's endings against an in-process RunClient and a scripted trainer: what it
// sends, in which order, and how it ends when the server completes, fences, cancels, goes away
// or the worker shuts down. No torch, no server: the real ones are in tests/e2e.
#include "worker/run_session.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "worker/failure_class.h"
#include "worker/metric_sender.h"

namespace ablate::worker {
namespace {

using std::chrono::milliseconds;

constexpr int64_t kRunId = 7;
constexpr int32_t kAttempt = 2;
constexpr char kToken[] = "lease-token";

absl::Status Unreachable() { return absl::UnavailableError("server unreachable"); }
absl::Status Refused() {
  return absl::FailedPreconditionError("lease lost: run 7 attempt 2 is no longer current");
}

// The server as the session sees it. Scripted by the test (under mu_), it records every call.
class FakeRunClient : public RunClient {
 public:
  struct Script {
    bool down = false;                  // every call fails UNAVAILABLE
    int fail_reports = 0;               // the next N ReportMetrics fail UNAVAILABLE
    bool lose_lease_on_report = false;  // another attempt takes the run at the next report
    bool cancel_on_report = false;      // the user cancels the run at the next report
    int store_full = 0;  // the next N PutCheckpoint fail RESOURCE_EXHAUSTED (the store is full)
  };
  struct Record {
    std::vector<int64_t> stored_steps;   // every point stored, in order
    std::vector<size_t> stored_reports;  // the points of each report stored, in order
    std::vector<int64_t> log_steps;      // the step of every progress line stored, in order
    int reports_refused = 0;
    int reports_unreachable = 0;
    int heartbeats_ok = 0;
    int heartbeats_failed = 0;
    int heartbeats_ok_after_failure = 0;
    std::vector<std::pair<int64_t, size_t>> checkpoints;  // (step, points stored before it)
    std::vector<int64_t> checkpoints_refused;             // steps refused for a full store
    std::optional<v1::CompleteRequest> complete;
    size_t stored_at_complete = 0;
    std::optional<std::string> release_reason;
    v1::FaultClass release_fault = v1::FAULT_CLASS_UNSPECIFIED;
    size_t stored_at_release = 0;
  };

  void Change(const std::function<void(Script*)>& f) {
    std::lock_guard<std::mutex> lock(mu_);
    f(&script_);
  }
  Record record() const {
    std::lock_guard<std::mutex> lock(mu_);
    return record_;
  }
  void ClearRecord() {
    std::lock_guard<std::mutex> lock(mu_);
    record_ = {};
  }

  // Each call stamps the lease into the request it stands for, as the real ServerClient does, and
  // fences what the server would receive.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const RunLease& lease,
                                                  v1::HeartbeatRequest req) override {
    lease.Stamp(&req);
    std::lock_guard<std::mutex> lock(mu_);
    if (script_.down) {
      ++record_.heartbeats_failed;
      return Unreachable();
    }
    EXPECT_EQ(req.worker_id(), 3);
    EXPECT_EQ(req.run_id(), kRunId);
    EXPECT_EQ(req.attempt(), kAttempt);
    EXPECT_EQ(req.lease_token(), kToken);
    if (record_.heartbeats_failed > 0) ++record_.heartbeats_ok_after_failure;
    ++record_.heartbeats_ok;
    v1::HeartbeatResponse resp;
    resp.set_cancel(cancelled_);
    resp.set_lease_lost(lease_lost_);
    return resp;
  }

  absl::Status ReportMetrics(const RunLease& lease,
                             const std::vector<v1::MetricPoint>& points) override {
    v1::ReportMetricsRequest req;
    lease.Stamp(&req);
    std::lock_guard<std::mutex> lock(mu_);
    if (script_.down) return Unreachable();
    if (script_.fail_reports > 0) {
      --script_.fail_reports;
      ++record_.reports_unreachable;
      return Unreachable();
    }
    if (script_.lose_lease_on_report) lease_lost_ = true;
    if (script_.cancel_on_report) cancelled_ = true;
    if (auto s = Fence(req); !s.ok()) {
      ++record_.reports_refused;
      return s;
    }
    for (const auto& p : points) record_.stored_steps.push_back(p.step());
    record_.stored_reports.push_back(points.size());
    return absl::OkStatus();
  }

  absl::Status PutCheckpoint(const RunLease& lease, int64_t step, const std::string& /*path*/,
                             v1::CheckpointRef* /*stored*/) override {
    v1::CheckpointChunk header;
    lease.Stamp(&header);
    std::lock_guard<std::mutex> lock(mu_);
    if (script_.down) return Unreachable();
    if (auto s = Fence(header); !s.ok()) return s;
    if (script_.store_full > 0) {
      --script_.store_full;
      record_.checkpoints_refused.push_back(step);
      return absl::ResourceExhaustedError("checkpoint: the server's store is full");
    }
    record_.checkpoints.emplace_back(step, record_.stored_steps.size());
    return absl::OkStatus();
  }

  absl::Status ReportLogs(const RunLease& lease, const std::vector<v1::LogLine>& lines) override {
    v1::LogReportRequest req;
    lease.Stamp(&req);
    std::lock_guard<std::mutex> lock(mu_);
    if (script_.down) return Unreachable();
    if (auto s = Fence(req); !s.ok()) return s;
    for (const auto& l : lines) record_.log_steps.push_back(l.step());
    return absl::OkStatus();
  }

  absl::Status GetCheckpoint(const RunLease&, const v1::CheckpointRef&,
                             const std::string&) override {
    return absl::UnimplementedError("these runs start fresh");
  }
  absl::Status GetDataset(const std::string&, const std::string&) override {
    return absl::UnimplementedError("these runs train on synthetic data");
  }

  absl::Status Complete(const RunLease& lease, v1::CompleteRequest req) override {
    lease.Stamp(&req);
    std::lock_guard<std::mutex> lock(mu_);
    if (script_.down) return Unreachable();
    if (auto s = Fence(req); !s.ok()) return s;
    record_.complete = req;
    record_.stored_at_complete = record_.stored_steps.size();
    return absl::OkStatus();
  }

  absl::Status Release(const RunLease& lease, const std::string& reason,
                       v1::FaultClass fault) override {
    v1::ReleaseRequest req;
    lease.Stamp(&req);
    std::lock_guard<std::mutex> lock(mu_);
    if (script_.down) return Unreachable();
    if (auto s = Fence(req); !s.ok()) return s;
    record_.release_reason = reason;
    record_.release_fault = fault;
    record_.stored_at_release = record_.stored_steps.size();
    return absl::OkStatus();
  }

 private:
  // The server's fence: the same refusal whatever did not match, as in run_transitions.
  template <typename Request>
  absl::Status Fence(const Request& req) const {
    if (req.run_id() != kRunId || req.attempt() != kAttempt || req.lease_token() != kToken ||
        lease_lost_ || cancelled_) {
      return Refused();
    }
    return absl::OkStatus();
  }

  mutable std::mutex mu_;
  Script script_;
  Record record_;
  bool lease_lost_ = false;
  bool cancelled_ = false;
};

std::vector<v1::MetricPoint> Points(int64_t from, int64_t to) {
  std::vector<v1::MetricPoint> out;
  for (int64_t s = from; s <= to; ++s) {
    v1::MetricPoint p;
    p.set_step(s);
    p.set_name("train_loss");
    p.set_value(10.0 / double(s));
    out.push_back(p);
  }
  return out;
}

std::vector<int64_t> Steps(int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (int64_t s = from; s <= to; ++s) out.push_back(s);
  return out;
}

// Waits for something another thread does. The bound only keeps a broken session from hanging
// the test: the scripted trainer then returns an error, and the test fails on the outcome.
bool Eventually(const std::function<bool()>& done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

train::TrainResult Finished(train::Outcome outcome, int64_t step) {
  train::TrainResult r;
  r.outcome = outcome;
  r.last_step = step;
  r.result.set_steps_done(step);
  return r;
}

class RunSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    work_dir_ = std::filesystem::path(::testing::TempDir()) /
                ("run-session-" + std::to_string(::getpid()) + "-" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(work_dir_);
    lease_.mutable_spec()->set_run_id(kRunId);
    lease_.mutable_spec()->mutable_data()->set_train("synthetic:100");
    lease_.mutable_spec()->mutable_data()->set_val("synthetic:10");
    lease_.mutable_lease()->set_run_id(kRunId);
    lease_.mutable_lease()->set_attempt(kAttempt);
    lease_.mutable_lease()->set_token(kToken);
    options_.work_dir = work_dir_.string();
    // One heartbeat at the start and then only those a test provokes, unless it asks for more.
    options_.heartbeat_seconds = 3600;
    options_.shutdown = &shutdown_;
  }
  void TearDown() override { std::filesystem::remove_all(work_dir_); }

  SessionOutcome Run(TrainFn train) {
    trainer_calls_ = 0;
    options_.train = [this, train](const v1::RunSpec& spec, const train::TrainOptions& topts,
                                   train::TrainObserver* observer) {
      ++trainer_calls_;
      return train(spec, topts, observer);
    };
    SessionStats stats;
    SessionOutcome out = RunSession(&server_, /*worker_id=*/3, lease_, options_, &stats);
    EXPECT_EQ(stats.run_id.load(), 0) << "the session clears its run from the stats when it ends";
    return out;
  }

  std::filesystem::path work_dir_;
  v1::LeaseResponse lease_;
  SessionOptions options_;
  std::atomic<bool> shutdown_{false};
  FakeRunClient server_;
  int trainer_calls_ = 0;
};

TEST_F(RunSessionTest, CompletesOnlyOnceEveryPointIsStored) {
  SessionOutcome out = Run([&](const v1::RunSpec&, const train::TrainOptions&,
                               train::TrainObserver* obs) -> absl::StatusOr<train::TrainResult> {
    obs->OnMetrics(Points(1, 600));
    obs->OnCheckpoint(600, "ckpt-600");
    if (!Eventually([&] { return !server_.record().checkpoints.empty(); })) {
      return absl::DeadlineExceededError("the checkpoint was never uploaded");
    }
    obs->OnMetrics(Points(601, 1234));
    return Finished(train::Outcome::kSucceeded, 1234);
  });
  EXPECT_EQ(out.end, SessionEnd::kCompleted);
  EXPECT_EQ(out.detail, "succeeded");
  const auto rec = server_.record();
  EXPECT_EQ(rec.stored_steps, Steps(1, 1234));
  // One progress line per reported batch, all sent before Complete.
  EXPECT_EQ(rec.log_steps, (std::vector<int64_t>{1, 601}));
  ASSERT_EQ(rec.checkpoints.size(), 1u);
  EXPECT_EQ(rec.checkpoints[0].first, 600);
  EXPECT_GE(rec.checkpoints[0].second, 600u) << "a checkpoint is uploaded after its metrics";
  ASSERT_TRUE(rec.complete.has_value());
  EXPECT_EQ(rec.complete->state(), v1::SUCCEEDED);
  EXPECT_EQ(rec.complete->result().steps_done(), 1234);
  EXPECT_EQ(rec.stored_at_complete, 1234u);
  EXPECT_FALSE(rec.release_reason.has_value());
}

TEST_F(RunSessionTest, PointsWaitUntilAFullRequestIsPendingAndTheEndSendsTheRest) {
  bool sent_early = true;
  SessionOutcome out = Run([&](const v1::RunSpec&, const train::TrainOptions&,
                               train::TrainObserver* obs) -> absl::StatusOr<train::TrainResult> {
    obs->OnMetrics(Points(1, 300));
    // Fewer than kMetricBatch, and younger than kSenderMaxAge: they wait (the sender once sent
    // whatever was spooled every half second).
    std::this_thread::sleep_for(milliseconds(700));
    sent_early = !server_.record().stored_steps.empty();
    obs->OnMetrics(Points(301, 700));  // a full request pending: sent at once
    if (!Eventually([&] { return server_.record().stored_steps.size() >= kMetricBatch; })) {
      return absl::DeadlineExceededError("a full request was never sent");
    }
    obs->OnMetrics(Points(701, 720));
    return Finished(train::Outcome::kSucceeded, 720);
  });
  EXPECT_EQ(out.end, SessionEnd::kCompleted);
  EXPECT_FALSE(sent_early) << "300 points 0.7 s old were sent before they were due";
  const auto rec = server_.record();
  EXPECT_EQ(rec.stored_steps, Steps(1, 720));
  ASSERT_FALSE(rec.stored_reports.empty());
  EXPECT_EQ(rec.stored_reports[0], kMetricBatch) << "the first request is a full one";
}

TEST(SendDue, AFullRequestOrAnOldEnoughPointIsDueAndNothingElse) {
  using std::chrono::seconds;
  EXPECT_TRUE(SendDue(kMetricBatch, seconds(0)));
  EXPECT_FALSE(SendDue(kMetricBatch - 1, kSenderMaxAge - milliseconds(1)));
  EXPECT_TRUE(SendDue(1, kSenderMaxAge));
  EXPECT_FALSE(SendDue(0, kSenderMaxAge * 10)) << "nothing pending is never due";
}

TEST_F(RunSessionTest, ACheckpointTheFullStoreRefusesIsSkippedAndTheNextOneStored) {
  server_.Change([](FakeRunClient::Script* s) { s->store_full = 1; });
  SessionOutcome out = Run([&](const v1::RunSpec&, const train::TrainOptions&,
                               train::TrainObserver* obs) -> absl::StatusOr<train::TrainResult> {
    obs->OnMetrics(Points(1, 200));
    obs->OnCheckpoint(200, "ckpt-200");
    if (!Eventually([&] { return !server_.record().checkpoints_refused.empty(); })) {
      return absl::DeadlineExceededError("the checkpoint was never offered");
    }
    obs->OnMetrics(Points(201, 400));
    obs->OnCheckpoint(400, "ckpt-400");
    if (!Eventually([&] { return !server_.record().checkpoints.empty(); })) {
      return absl::DeadlineExceededError("the next checkpoint was never uploaded");
    }
    return Finished(train::Outcome::kSucceeded, 400);
  });
  EXPECT_EQ(out.end, SessionEnd::kCompleted);
  const auto rec = server_.record();
  EXPECT_EQ(rec.checkpoints_refused, std::vector<int64_t>{200}) << "refused once, not retried";
  ASSERT_EQ(rec.checkpoints.size(), 1u);
  EXPECT_EQ(rec.checkpoints[0].first, 400);
  EXPECT_EQ(rec.stored_steps, Steps(1, 400));
}

TEST_F(RunSessionTest, TrainingWaitsForSpaceUntilTheRunIsToStop) {
  // The trainer asks whether to wait for space after a checkpoint write found the disk full:
  // yes while the run goes on (the write is tried again), no once it is cancelled.
  int waits = 0;
  SessionOutcome out = Run([&](const v1::RunSpec&, const train::TrainOptions&,
                               train::TrainObserver* obs) -> absl::StatusOr<train::TrainResult> {
    obs->OnMetrics(Points(1, 10));
    const absl::Status full = absl::ResourceExhaustedError("checkpoint: no space left on device");
    if (obs->WaitForSpace(full)) ++waits;
    server_.Change([](FakeRunClient::Script* s) { s->cancel_on_report = true; });
    obs->OnMetrics(Points(11, 20));
    if (!Eventually([&] { return obs->ShouldStop(); })) {
      return absl::DeadlineExceededError("the cancel never reached the session");
    }
    if (!obs->WaitForSpace(full)) return full;
    return Finished(train::Outcome::kSucceeded, 20);
  });
  EXPECT_EQ(waits, 1);
  EXPECT_EQ(out.end, SessionEnd::kCancelled);
}

TEST_F(RunSessionTest, DivergedAndFailedRunsCompleteWithTheirState) {
  SessionOutcome diverged =
      Run([](const v1::RunSpec&, const train::TrainOptions&, train::TrainObserver* obs) {
        obs->OnMetrics(Points(1, 10));
        return absl::StatusOr<train::TrainResult>(Finished(train::Outcome::kDiverged, 10));
      });
  EXPECT_EQ(diverged.end, SessionEnd::kCompleted);
  EXPECT_EQ(diverged.detail, "diverged");
  ASSERT_TRUE(server_.record().complete.has_value());
  EXPECT_EQ(server_.record().complete->state(), v1::DIVERGED);

  SessionOutcome failed = Run([](const v1::RunSpec&, const train::TrainOptions&,
                                 train::TrainObserver*) -> absl::StatusOr<train::TrainResult> {
    return absl::InvalidArgumentError("data file too short for block_size");
  });
  EXPECT_EQ(failed.end, SessionEnd::kCompleted);
  EXPECT_EQ(failed.detail, "failed");
  const auto rec = server_.record();
  EXPECT_EQ(rec.complete->state(), v1::FAILED);
  EXPECT_EQ(rec.complete->error(), "data file too short for block_size");
  EXPECT_EQ(rec.complete->fault(), v1::FAULT_RUN) << "the trainer refused the run's data";
}

TEST_F(RunSessionTest, AFailureCarriesItsClassAndThePeakMemory) {
  options_.peak_memory_bytes = [] { return int64_t{3} << 30; };
  SessionOutcome out = Run([](const v1::RunSpec&, const train::TrainOptions&,
                              train::TrainObserver*) -> absl::StatusOr<train::TrainResult> {
    return absl::ResourceExhaustedError(
        "out of memory on cuda: CUDA out of memory (peak 3.00 GiB held, device memory 4.00 GiB)");
  });
  EXPECT_EQ(out.end, SessionEnd::kCompleted);
  const auto rec = server_.record();
  ASSERT_TRUE(rec.complete.has_value());
  EXPECT_EQ(rec.complete->state(), v1::FAILED);
  EXPECT_EQ(rec.complete->fault(), v1::FAULT_WORKER);
  EXPECT_EQ(rec.complete->result().peak_memory_bytes(), int64_t{3} << 30);
  EXPECT_FALSE(rec.release_reason.has_value());
}

TEST_F(RunSessionTest, ATrainerThatThrowsFailsTheAttemptAsTheWorkers) {
  SessionOutcome out = Run([](const v1::RunSpec&, const train::TrainOptions&,
                              train::TrainObserver*) -> absl::StatusOr<train::TrainResult> {
    throw std::runtime_error("boom");
  });
  EXPECT_EQ(out.end, SessionEnd::kCompleted);
  const auto rec = server_.record();
  ASSERT_TRUE(rec.complete.has_value());
  EXPECT_EQ(rec.complete->fault(), v1::FAULT_WORKER);
  EXPECT_EQ(rec.complete->error(), "the trainer crashed: boom");
}

TEST_F(RunSessionTest, TheFaultFileFailsEveryAttemptAtStepZeroUntilItIsRemoved) {
  options_.fault_file = (work_dir_.parent_path() / (work_dir_.filename().string() + ".fault"));
  auto train = [](const v1::RunSpec&, const train::TrainOptions&, train::TrainObserver* obs) {
    obs->OnMetrics(Points(1, 10));
    return absl::StatusOr<train::TrainResult>(Finished(train::Outcome::kSucceeded, 10));
  };
  std::ofstream(options_.fault_file) << "";
  Run(train);
  EXPECT_EQ(trainer_calls_, 0);
  auto rec = server_.record();
  ASSERT_TRUE(rec.complete.has_value());
  EXPECT_EQ(rec.complete->state(), v1::FAILED);
  EXPECT_EQ(rec.complete->fault(), v1::FAULT_WORKER);
  EXPECT_EQ(rec.complete->error(), kDefaultInjectedFault);

  std::ofstream(options_.fault_file) << "run: token file invalid (injected)\n";
  Run(train);
  rec = server_.record();
  EXPECT_EQ(rec.complete->fault(), v1::FAULT_RUN);
  EXPECT_EQ(rec.complete->error(), "token file invalid (injected)");

  std::filesystem::remove(options_.fault_file);
  Run(train);
  EXPECT_EQ(trainer_calls_, 1) << "healed";
  EXPECT_EQ(server_.record().complete->state(), v1::SUCCEEDED);
}

// The work dir turned unwritable after the worker registered: a file where one of its
// directories should be (the tests run as root, whom permissions would not stop). The run is
// released at once, blamed on the worker, instead of being held until its lease expires.
TEST_F(RunSessionTest, AnUnwritableSpoolOrRunDirReleasesTheRunAsTheWorkersFault) {
  for (const auto& [dir, reason] : {std::pair<std::string, std::string>{"spool", "spool: "},
                                    {"runs", "/runs/7-a2: cannot create directory"}}) {
    std::filesystem::remove_all(work_dir_);
    std::filesystem::create_directories(work_dir_);
    std::ofstream(work_dir_ / dir) << "a file where a directory should be";
    server_.ClearRecord();
    SessionOutcome out = Run([](const v1::RunSpec&, const train::TrainOptions&,
                                train::TrainObserver*) -> absl::StatusOr<train::TrainResult> {
      return Finished(train::Outcome::kSucceeded, 1);
    });
    EXPECT_EQ(out.end, SessionEnd::kWorkerFault) << dir << ": " << out.detail;
    EXPECT_EQ(trainer_calls_, 0) << dir;
    const auto rec = server_.record();
    EXPECT_EQ(rec.release_fault, v1::FAULT_WORKER) << dir;
    EXPECT_NE(rec.release_reason.value_or("").find(reason), std::string::npos)
        << dir << ": " << rec.release_reason.value_or("not released");
    EXPECT_FALSE(rec.complete.has_value()) << dir;
  }
}

// Training must stop once the session learns it may no longer write; this script trains until
// told to stop, as the trainer does (one step at a time, polling ShouldStop).
absl::StatusOr<train::TrainResult> TrainUntilStopped(train::TrainObserver* obs) {
  obs->OnMetrics(Points(1, 500));  // a full batch wakes the sender at once
  if (!Eventually([&] { return obs->ShouldStop(); })) {
    return absl::DeadlineExceededError("the session never asked the trainer to stop");
  }
  return Finished(train::Outcome::kStopped, 500);
}

TEST_F(RunSessionTest, AFencedWriteEndsTheRunAsLeaseLost) {
  server_.Change([](FakeRunClient::Script* s) { s->lose_lease_on_report = true; });
  SessionOutcome out = Run([](const v1::RunSpec&, const train::TrainOptions&,
                              train::TrainObserver* obs) { return TrainUntilStopped(obs); });
  EXPECT_EQ(out.end, SessionEnd::kLeaseLost);
  const auto rec = server_.record();
  EXPECT_EQ(rec.reports_refused, 1) << "nothing more is sent once fenced";
  EXPECT_TRUE(rec.stored_steps.empty());
  EXPECT_FALSE(rec.complete.has_value());
  EXPECT_FALSE(rec.release_reason.has_value());
  EXPECT_TRUE(rec.checkpoints.empty());
}

TEST_F(RunSessionTest, ACancelLearntFromARefusedWriteEndsAsCancelled) {
  // The periodic heartbeat is an hour away: only the heartbeat the refused report provokes can
  // tell the session that the refusal was a cancel rather than a lost lease.
  server_.Change([](FakeRunClient::Script* s) { s->cancel_on_report = true; });
  SessionOutcome out = Run([](const v1::RunSpec&, const train::TrainOptions&,
                              train::TrainObserver* obs) { return TrainUntilStopped(obs); });
  EXPECT_EQ(out.end, SessionEnd::kCancelled);
  EXPECT_EQ(out.detail, "cancelled by the server");
  const auto rec = server_.record();
  EXPECT_EQ(rec.reports_refused, 1);
  EXPECT_FALSE(rec.complete.has_value());
  EXPECT_FALSE(rec.release_reason.has_value());
}

TEST_F(RunSessionTest, HeartbeatsKeepTryingThroughAnOutageAndTheSpoolIsReplayed) {
  options_.heartbeat_seconds = 0.05;
  SessionOutcome out = Run([&](const v1::RunSpec&, const train::TrainOptions&,
                               train::TrainObserver* obs) -> absl::StatusOr<train::TrainResult> {
    obs->OnMetrics(Points(1, 100));
    server_.Change([](FakeRunClient::Script* s) { s->down = true; });
    if (!Eventually([&] { return server_.record().heartbeats_failed >= 3; })) {
      return absl::DeadlineExceededError("heartbeats stopped while the server was away");
    }
    obs->OnMetrics(Points(101, 900));  // training goes on; these wait in the spool
    server_.Change([](FakeRunClient::Script* s) { s->down = false; });
    if (!Eventually([&] { return server_.record().heartbeats_ok_after_failure >= 1; })) {
      return absl::DeadlineExceededError("no heartbeat got through after the outage");
    }
    return Finished(train::Outcome::kSucceeded, 900);
  });
  EXPECT_EQ(out.end, SessionEnd::kCompleted) << out.detail;
  const auto rec = server_.record();
  EXPECT_EQ(rec.stored_steps, Steps(1, 900)) << "every point once, in order";
  EXPECT_EQ(rec.stored_at_complete, 900u);
}

TEST_F(RunSessionTest, ASendFailureLeavesThePointsSpooledUntilTheyAreReplayed) {
  server_.Change([](FakeRunClient::Script* s) { s->fail_reports = 3; });
  SessionOutcome out =
      Run([](const v1::RunSpec&, const train::TrainOptions&, train::TrainObserver* obs) {
        obs->OnMetrics(Points(1, 700));
        obs->OnMetrics(Points(701, 1500));
        return absl::StatusOr<train::TrainResult>(Finished(train::Outcome::kSucceeded, 1500));
      });
  EXPECT_EQ(out.end, SessionEnd::kCompleted) << out.detail;
  const auto rec = server_.record();
  EXPECT_EQ(rec.reports_unreachable, 3);
  EXPECT_EQ(rec.stored_steps, Steps(1, 1500)) << "no point lost or sent twice";
  EXPECT_EQ(rec.stored_at_complete, 1500u);
}

TEST_F(RunSessionTest, ShutdownUploadsTheCheckpointAfterItsMetricsAndHandsTheRunBack) {
  SessionOutcome out = Run([&](const v1::RunSpec&, const train::TrainOptions&,
                               train::TrainObserver* obs) -> absl::StatusOr<train::TrainResult> {
    obs->OnMetrics(Points(1, 321));
    shutdown_ = true;
    if (!obs->ShouldStop()) return absl::InternalError("shutdown did not stop training");
    train::TrainResult r = Finished(train::Outcome::kStopped, 321);
    r.last_checkpoint = "ckpt-321";
    return r;
  });
  EXPECT_EQ(out.end, SessionEnd::kReleased);
  EXPECT_EQ(out.detail, "handed back");
  const auto rec = server_.record();
  EXPECT_EQ(rec.stored_steps, Steps(1, 321));
  ASSERT_FALSE(rec.checkpoints.empty());
  EXPECT_EQ(rec.checkpoints.back().first, 321);
  EXPECT_EQ(rec.checkpoints.back().second, 321u);
  EXPECT_EQ(rec.release_reason.value_or("none"), "worker shutting down");
  EXPECT_EQ(rec.release_fault, v1::FAULT_CLASS_UNSPECIFIED) << "a clean hand-back is no fault";
  EXPECT_EQ(rec.stored_at_release, 321u);
  EXPECT_FALSE(rec.complete.has_value());
}

TEST_F(RunSessionTest, ShutdownBeforeTrainingHandsTheRunStraightBack) {
  shutdown_ = true;
  SessionOutcome out = Run([](const v1::RunSpec&, const train::TrainOptions&,
                              train::TrainObserver*) -> absl::StatusOr<train::TrainResult> {
    return Finished(train::Outcome::kSucceeded, 1);
  });
  EXPECT_EQ(out.end, SessionEnd::kReleased);
  EXPECT_EQ(trainer_calls_, 0);
  const auto rec = server_.record();
  EXPECT_EQ(rec.release_reason.value_or("none"), "worker shutting down");
  EXPECT_FALSE(rec.complete.has_value());
}

TEST_F(RunSessionTest, ShutdownWhileTheServerIsAwayAbandonsTheRunToLeaseExpiry) {
  SessionOutcome out = Run([&](const v1::RunSpec&, const train::TrainOptions&,
                               train::TrainObserver* obs) -> absl::StatusOr<train::TrainResult> {
    server_.Change([](FakeRunClient::Script* s) { s->down = true; });
    shutdown_ = true;
    if (!obs->ShouldStop()) return absl::InternalError("shutdown did not stop training");
    return Finished(train::Outcome::kStopped, 5);
  });
  EXPECT_EQ(out.end, SessionEnd::kAbandoned);
  EXPECT_FALSE(server_.record().release_reason.has_value());
}

// The seven requests the server fences are the ones RunLease::Stamp accepts; no other is.
static_assert(FencedRequest<v1::HeartbeatRequest>);
static_assert(FencedRequest<v1::ReportMetricsRequest>);
static_assert(FencedRequest<v1::CheckpointChunk>);
static_assert(FencedRequest<v1::LogReportRequest>);
static_assert(FencedRequest<v1::GetCheckpointRequest>);
static_assert(FencedRequest<v1::CompleteRequest>);
static_assert(FencedRequest<v1::ReleaseRequest>);
static_assert(!FencedRequest<v1::GetDatasetRequest>);
static_assert(!FencedRequest<v1::LeaseRequest>);

TEST(RunLease, StampsAllThreeFieldsOverWhateverTheRequestHad) {
  v1::Lease granted;
  granted.set_run_id(kRunId);
  granted.set_attempt(kAttempt);
  granted.set_expires_at(1e9);
  granted.set_token(kToken);
  const RunLease lease(granted);
  EXPECT_EQ(lease.run_id(), kRunId);
  EXPECT_EQ(lease.attempt(), kAttempt);

  v1::CompleteRequest req;
  req.set_run_id(kRunId + 1);
  req.set_attempt(kAttempt + 1);
  req.set_lease_token("another attempt's token");
  req.set_state(v1::SUCCEEDED);
  lease.Stamp(&req);
  EXPECT_EQ(req.run_id(), kRunId);
  EXPECT_EQ(req.attempt(), kAttempt);
  EXPECT_EQ(req.lease_token(), kToken);
  EXPECT_EQ(req.state(), v1::SUCCEEDED) << "only the lease fields are set";
}

TEST(HeartbeatSeconds, FourPerLeaseAndNeverBelowAFifthOfASecond) {
  EXPECT_DOUBLE_EQ(HeartbeatSeconds(60), 60 / kHeartbeatsPerLease);
  EXPECT_DOUBLE_EQ(HeartbeatSeconds(0), 60 / kHeartbeatsPerLease);
  EXPECT_DOUBLE_EQ(HeartbeatSeconds(0.1), 0.2);
}

}  // namespace
}  // namespace ablate::worker
