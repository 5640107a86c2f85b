#include "worker/run_session.h"

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/util/log.h"
#include "common/util/status_macros.h"
#include "worker/fleet_data.h"
#include "worker/spool.h"
#include "worker/train/trainer.h"

namespace ablate::worker {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr size_t kMetricBatch = 500;
constexpr std::chrono::milliseconds kRetryPeriod{1000};  // heartbeats while the server is away

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Shared state between the training thread (observer callbacks) and the background threads.
class Session : public train::TrainObserver {
 public:
  Session(Coordinator* c, int64_t worker_id, const v1::LeaseResponse& lease,
          const SessionOptions& opts, SessionStats* stats)
      : c_(c),
        worker_id_(worker_id),
        run_id_(lease.spec().run_id()),
        attempt_(lease.lease().attempt()),
        lease_token_(lease.lease().token()),
        opts_(opts),
        stats_(stats) {}

  SessionOutcome Run(const v1::LeaseResponse& lease);

  // TrainObserver (training thread).
  void OnMetrics(const std::vector<v1::MetricPoint>& points) override {
    auto s = spool_->Append(points);
    if (!s.ok()) spdlog::error("run {}: {}", run_id_, s.message());
    stats_->spooled_points = spool_->pending();
    wake_.notify_all();
  }
  void OnCheckpoint(int64_t step, const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    pending_checkpoint_ = std::make_pair(step, path);
    wake_.notify_all();
  }
  void OnProgress(int64_t step, int64_t /*total*/, double tps) override {
    const auto now = Clock::now();
    if (last_progress_step_ >= 0 && step > last_progress_step_) {
      stats_->step_seconds = Seconds(last_progress_, now) / double(step - last_progress_step_);
    }
    last_progress_ = now;
    last_progress_step_ = step;
    stats_->step = step;
    stats_->tokens_per_second = tps;
  }
  bool ShouldStop() override {
    return cancelled_ || lease_lost_ || (opts_.shutdown != nullptr && opts_.shutdown->load());
  }

 private:
  absl::Status FetchInputs(v1::RunSpec* spec, const v1::LeaseResponse& lease,
                           std::string* resume_path);
  // Retries `fn` while the server is unreachable, until it succeeds, fails for real, or we shut
  // down (then the last transient error is returned).
  template <typename Fn>
  absl::Status Retrying(Fn fn, const char* what);
  void HeartbeatLoop();
  absl::StatusOr<v1::HeartbeatResponse> HeartbeatOnce();
  // Takes in what a heartbeat answer says about the run: cancelled, or another attempt owns it.
  void ApplyHeartbeat(const v1::HeartbeatResponse& resp);
  void SenderLoop();
  // Sends every spooled point; false if fenced or shutting down before done.
  bool DrainMetrics(Clock::time_point deadline);
  // Sends one batch from the spool. Logs once when the server stops answering (points stay
  // spooled) and once when it answers again (they are replayed), whichever path sends them.
  absl::Status SendBatch();
  // A fenced call (FAILED_PRECONDITION) says only that this attempt may no longer write. Whether
  // the run was cancelled or re-leased to another attempt is asked of the heartbeat, whose answer
  // says which, so a cancelled run ends as cancelled whichever call learns of it first.
  void NoteFenced(const absl::Status& s);

  Coordinator* c_;
  const int64_t worker_id_;
  const int64_t run_id_;
  const int32_t attempt_;
  const std::string lease_token_;
  const SessionOptions& opts_;
  SessionStats* stats_;
  std::unique_ptr<MetricSpool> spool_;

  std::mutex mu_;
  std::condition_variable wake_;
  std::optional<std::pair<int64_t, std::string>> pending_checkpoint_;  // guarded by mu_
  std::atomic<bool> done_{false};                                      // ends the heartbeat thread
  std::atomic<bool> sender_stop_{false};  // ends the sender thread (training is over)
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> lease_lost_{false};
  // Set by the heartbeat thread when a heartbeat gets through after one that did not: the
  // sender leaves its back-off at once instead of sleeping through the rest of it.
  std::atomic<bool> reachable_again_{false};
  // The last metric send failed transiently (sender thread, then the drain after it is joined).
  bool unreachable_ = false;
  Clock::time_point last_progress_ = Clock::now();
  int64_t last_progress_step_ = -1;
};

template <typename Fn>
absl::Status Session::Retrying(Fn fn, const char* what) {
  double backoff = 0.2;
  while (true) {
    absl::Status s = fn();
    if (s.ok() || !rpc::IsTransient(s)) return s;
    if (opts_.shutdown != nullptr && opts_.shutdown->load()) return s;
    spdlog::warn("run {}: {} failed, retrying in {:.1f}s: {}", run_id_, what, backoff, s.message());
    std::this_thread::sleep_for(std::chrono::milliseconds(int(backoff * 1000)));
    backoff = std::min(backoff * 2, 10.0);
  }
}

absl::Status Session::FetchInputs(v1::RunSpec* spec, const v1::LeaseResponse& lease,
                                  std::string* resume_path) {
  auto local_copy = [&](std::string* path, const std::string& sha) -> absl::Status {
    if (absl::StartsWith(*path, "synthetic:")) return absl::OkStatus();
    if (sha.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("data file ", *path, " has no content hash; the server must serve it"));
    }
    const std::string local = (fs::path(opts_.work_dir) / "datasets" / (sha + ".txt")).string();
    if (!fs::exists(local)) {
      spdlog::info("run {}: fetching data set {} ({})", run_id_, *path, sha.substr(0, 12));
      RETURN_IF_ERROR(Retrying([&] { return c_->GetDataset(sha, local); }, "data set download"));
    }
    *path = local;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(local_copy(spec->mutable_data()->mutable_train(), spec->data().train_sha256()));
  RETURN_IF_ERROR(local_copy(spec->mutable_data()->mutable_val(), spec->data().val_sha256()));
  if (lease.has_resume_from() && !lease.resume_from().sha256().empty()) {
    const auto& ref = lease.resume_from();
    *resume_path = (fs::path(opts_.work_dir) / "checkpoints" / std::to_string(run_id_) /
                    (ref.sha256() + ".ckpt"))
                       .string();
    if (!fs::exists(*resume_path)) {
      spdlog::info("run {}: fetching checkpoint at step {}", run_id_, ref.step());
      RETURN_IF_ERROR(Retrying(
          [&] { return c_->GetCheckpoint(run_id_, attempt_, lease_token_, ref, *resume_path); },
          "checkpoint download"));
    }
  }
  return absl::OkStatus();
}

void Session::HeartbeatLoop() {
  const auto period = std::chrono::milliseconds(int(opts_.heartbeat_seconds * 1000));
  bool failing = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!done_) {
    lock.unlock();
    auto resp = HeartbeatOnce();
    if (resp.ok()) {
      ApplyHeartbeat(*resp);
      if (failing) {
        failing = false;
        spdlog::info("run {}: heartbeat got through again", run_id_);
        reachable_again_ = true;
        wake_.notify_all();
      }
    } else {
      NoteFenced(resp.status());
      if (!absl::IsFailedPrecondition(resp.status())) {
        failing = true;
        spdlog::warn("run {}: heartbeat: {} (training continues)", run_id_,
                     resp.status().message());
      }
    }
    lock.lock();
    // While heartbeats fail, try every second: the lease runs out `lease` after the last one
    // that got through, so the first chance after an outage must not wait a whole period.
    wake_.wait_for(lock,
                   failing ? std::min<std::chrono::milliseconds>(period, kRetryPeriod) : period,
                   [&] { return done_.load(); });
  }
}

absl::StatusOr<v1::HeartbeatResponse> Session::HeartbeatOnce() {
  v1::HeartbeatRequest req;
  req.set_worker_id(worker_id_);
  req.set_run_id(run_id_);
  req.set_attempt(attempt_);
  req.set_lease_token(lease_token_);
  req.set_step(stats_->step);
  req.set_tokens_per_second(stats_->tokens_per_second);
  return c_->Heartbeat(req);
}

void Session::ApplyHeartbeat(const v1::HeartbeatResponse& resp) {
  if (resp.cancel() && !cancelled_.exchange(true)) {
    spdlog::info("run {}: cancelled by the server", run_id_);
  }
  if (resp.lease_lost() && !lease_lost_.exchange(true)) {
    spdlog::warn("run {}: lease lost (attempt {} is no longer current)", run_id_, attempt_);
  }
}

void Session::NoteFenced(const absl::Status& s) {
  if (!absl::IsFailedPrecondition(s) || cancelled_ || lease_lost_) return;
  // The server answered a moment ago, so a transient failure here is brief: a few quick tries.
  for (int i = 0; i < 5; ++i) {
    auto resp = HeartbeatOnce();
    if (resp.ok()) {
      ApplyHeartbeat(*resp);
      if (cancelled_ || lease_lost_) return;
      break;  // the run looks live again to the heartbeat: the fence still stands
    }
    if (!rpc::IsTransient(resp.status())) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!lease_lost_.exchange(true)) spdlog::warn("run {}: {}", run_id_, s.message());
}

absl::Status Session::SendBatch() {
  auto batch = spool_->Peek(kMetricBatch);
  if (!batch.ok()) return batch.status();
  if (batch->empty()) return absl::OkStatus();
  auto s = c_->ReportMetrics(run_id_, attempt_, lease_token_, *batch);
  if (!s.ok()) {
    NoteFenced(s);
    if (rpc::IsTransient(s) && !unreachable_) {
      spdlog::warn(
          "run {}: metrics: {} (spooling to disk; they are replayed in order once the server "
          "answers)",
          run_id_, s.message());
      unreachable_ = true;
    }
    return s;
  }
  if (unreachable_) {
    spdlog::info("run {}: server reachable again; replaying {} spooled points", run_id_,
                 spool_->pending());
    unreachable_ = false;
  }
  spool_->Ack(batch->size());
  stats_->spooled_points = spool_->pending();
  return absl::OkStatus();
}

void Session::SenderLoop() {
  double backoff = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!sender_stop_ && !lease_lost_ && !cancelled_) {
    wake_.wait_for(lock, std::chrono::milliseconds(backoff > 0 ? int(backoff * 1000) : 500), [&] {
      return sender_stop_ || reachable_again_ ||
             (backoff == 0 && (pending_checkpoint_ || spool_->pending() >= int64_t(kMetricBatch)));
    });
    if (sender_stop_) break;
    reachable_again_ = false;
    auto ckpt = std::move(pending_checkpoint_);
    pending_checkpoint_.reset();
    lock.unlock();
    bool failed = false;
    // Metrics first: a resumed attempt must never find a checkpoint newer than its metrics.
    while (spool_->pending() > 0) {
      if (!SendBatch().ok()) {
        failed = true;
        break;
      }
    }
    if (ckpt && !failed && !lease_lost_) {
      auto s = c_->PutCheckpoint(run_id_, attempt_, lease_token_, ckpt->first, ckpt->second);
      if (!s.ok()) {
        NoteFenced(s);
        failed = true;
      }
    }
    lock.lock();
    if (failed && ckpt && !pending_checkpoint_) pending_checkpoint_ = std::move(ckpt);
    backoff = failed ? std::min(std::max(backoff * 2, 0.5), 10.0) : 0;
  }
}

bool Session::DrainMetrics(Clock::time_point deadline) {
  double backoff = 0.2;
  while (spool_->pending() > 0) {
    if (lease_lost_ || cancelled_ || Clock::now() > deadline) return false;
    auto s = SendBatch();
    if (s.ok()) {
      backoff = 0.2;
      continue;
    }
    if (!rpc::IsTransient(s)) return false;
    // Back off, but retry at once when a heartbeat gets through again.
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, std::chrono::milliseconds(int(backoff * 1000)),
                   [&] { return reachable_again_.load(); });
    if (reachable_again_.exchange(false))
      backoff = 0.2;
    else
      backoff = std::min(backoff * 2, 10.0);
  }
  stats_->spooled_points = 0;
  return true;
}

SessionOutcome Session::Run(const v1::LeaseResponse& lease) {
  const auto t_start = Clock::now();
  SessionOutcome out{SessionEnd::kCompleted, "", 0, 0, {}, {}};
  Clock::time_point train_started{};
  const std::string run_dir =
      (fs::path(opts_.work_dir) / "runs" / absl::StrCat(run_id_, "-a", attempt_)).string();
  auto spool = MetricSpool::Create(
      (fs::path(opts_.work_dir) / "spool" / absl::StrCat(run_id_, "-a", attempt_, ".spool"))
          .string());
  if (!spool.ok())
    return {SessionEnd::kAbandoned, std::string(spool.status().message()), 0, 0, {}, {}};
  spool_ = *std::move(spool);

  v1::RunSpec spec = lease.spec();
  std::string resume_path;
  std::thread heartbeat([this] { HeartbeatLoop(); });
  auto finish_threads = [&] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    wake_.notify_all();
    heartbeat.join();
  };

  v1::CompleteRequest complete;
  complete.set_run_id(run_id_);
  complete.set_attempt(attempt_);
  complete.set_lease_token(lease_token_);
  absl::Status fetched = FetchInputs(&spec, lease, &resume_path);
  if (fetched.ok()) {
    // The tokenizer and token files: this worker's cache, else the fleet's (worker/fleet_data.h).
    FleetDataOptions fleet;
    fleet.worker_id = worker_id_;
    fleet.cache_dir = (fs::path(opts_.work_dir) / "cache").string();
    fleet.run_id = run_id_;
    fleet.should_stop = [this] { return ShouldStop(); };
    auto source = EnsureFleetData(c_, spec.data(), fleet);
    if (source.ok()) CountFleetData(*source, stats_);
    fetched = source.status();
  }
  absl::StatusOr<train::TrainResult> trained =
      fetched.ok() ? absl::StatusOr<train::TrainResult>(absl::CancelledError("not started"))
                   : absl::StatusOr<train::TrainResult>(fetched);
  double train_seconds = 0;
  if (fetched.ok() && !ShouldStop()) {
    std::thread sender([this] { SenderLoop(); });
    train::TrainOptions topts;
    topts.device = opts_.device;
    topts.out_dir = run_dir;
    topts.cache_dir = (fs::path(opts_.work_dir) / "cache").string();
    topts.resume_from = resume_path;
    topts.threads = opts_.threads;
    spdlog::info(
        "run {} attempt {}: {} seed {}{}", run_id_, attempt_, spec.cell(), spec.config().seed(),
        resume_path.empty() ? ""
                            : absl::StrCat(" (resuming at step ", lease.resume_from().step(), ")"));
    const auto t0 = Clock::now();
    train_started = t0;
    trained = train::Train(spec, topts, this);
    train_seconds = Seconds(t0, Clock::now());
    {
      std::lock_guard<std::mutex> lock(mu_);
      sender_stop_ = true;  // the heartbeat keeps the lease alive through what follows
    }
    wake_.notify_all();
    sender.join();
  }

  const bool shutting_down = opts_.shutdown != nullptr && opts_.shutdown->load();
  if (cancelled_) {
    out = {SessionEnd::kCancelled, "cancelled by the server", 0, 0, {}, {}};
  } else if (lease_lost_) {
    out = {SessionEnd::kLeaseLost, "lease lost", 0, 0, {}, {}};
  } else if (!trained.ok() && shutting_down) {
    // Stopped before or while fetching inputs: nothing to save, hand the run straight back.
    const bool handed = c_->Release(run_id_, attempt_, lease_token_, "worker shutting down").ok();
    out = {handed ? SessionEnd::kReleased : SessionEnd::kAbandoned,
           handed ? "handed back" : std::string(trained.status().message()),
           0,
           0,
           {},
           {}};
  } else if (trained.ok() && trained->outcome == train::Outcome::kStopped) {
    // Shutting down: the trainer wrote a checkpoint at the current step. Upload it, flush the
    // metrics up to it, and hand the run back so another worker resumes at once.
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    bool handed = DrainMetrics(deadline);
    if (handed && !trained->last_checkpoint.empty()) {
      handed = c_->PutCheckpoint(run_id_, attempt_, lease_token_, trained->last_step,
                                 trained->last_checkpoint)
                   .ok();
    }
    if (handed) handed = c_->Release(run_id_, attempt_, lease_token_, "worker shutting down").ok();
    out = {handed ? SessionEnd::kReleased : SessionEnd::kAbandoned,
           handed ? "handed back" : "could not hand back; the lease will expire",
           0,
           0,
           {},
           {}};
  } else {
    if (trained.ok()) {
      complete.set_state(trained->outcome == train::Outcome::kDiverged ? v1::DIVERGED
                                                                       : v1::SUCCEEDED);
      *complete.mutable_result() = trained->result;
    } else {
      complete.set_state(v1::FAILED);
      complete.set_error(std::string(trained.status().message()));
      spdlog::error("run {}: failed: {}", run_id_, trained.status().message());
    }
    // A completed run's metrics must all be stored before it is marked complete, however long
    // the server is away; Complete follows only once the spool is empty.
    const bool drained = DrainMetrics(Clock::time_point::max());
    absl::Status s = drained
                         ? Retrying([&] { return c_->Complete(complete); }, "complete")
                         : absl::FailedPreconditionError("lease lost before metrics were stored");
    if (drained) NoteFenced(s);
    if (s.ok()) {
      out = {SessionEnd::kCompleted, v1::RunState_Name(complete.state()), 0, 0, {}, {}};
    } else if (cancelled_) {
      out = {SessionEnd::kCancelled, "cancelled by the server", 0, 0, {}, {}};
    } else if (absl::IsFailedPrecondition(s) || lease_lost_) {
      out = {SessionEnd::kLeaseLost, std::string(s.message()), 0, 0, {}, {}};
    } else {
      out = {SessionEnd::kAbandoned, std::string(s.message()), 0, 0, {}, {}};
    }
  }
  finish_threads();
  out.ended = Clock::now();
  out.train_started = train_started;
  out.train_seconds = train_seconds;
  out.overhead_seconds = Seconds(t_start, Clock::now()) - train_seconds;
  // Keep only what a later attempt on this machine could reuse: the data sets and cache.
  std::error_code ec;
  fs::remove_all(run_dir, ec);
  if (out.end != SessionEnd::kAbandoned) {
    fs::remove_all(fs::path(opts_.work_dir) / "checkpoints" / std::to_string(run_id_), ec);
  }
  return out;
}

}  // namespace

SessionOutcome RunSession(Coordinator* coordinator, int64_t worker_id,
                          const v1::LeaseResponse& lease, const SessionOptions& options,
                          SessionStats* stats) {
  Session session(coordinator, worker_id, lease, options, stats);
  stats->run_id = lease.spec().run_id();
  SessionOutcome out = session.Run(lease);
  stats->run_id = 0;
  stats->step = 0;
  return out;
}

}  // namespace ablate::worker
