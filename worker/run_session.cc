#include "worker/run_session.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/channel.h"
#include "common/run/run_state.h"
#include "common/util/backoff.h"
#include "common/util/file.h"
#include "common/util/log.h"
#include "common/util/progress_line.h"
#include "common/util/status_macros.h"
#include "worker/failure_class.h"
#include "worker/metric_sender.h"
#include "worker/spool.h"

namespace ablate::worker {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// On shutdown, how long flushing the metrics before handing the run back may take: past it the
// run is abandoned to lease expiry rather than holding up the worker's exit.
constexpr std::chrono::seconds kHandBackDeadline{20};
// While the work dir is full, a paused run tries its write again this often.
constexpr std::chrono::seconds kSpaceRetry{2};
// How long a worker that cannot go on with a run keeps trying to release it while the server is
// away: past it the lease is left to expire (the server then requeues the run all the same).
constexpr std::chrono::seconds kReleaseDeadline{20};

// How many sessions of each run this process has open. With --slots, a run whose lease ran out
// while this worker was cut off can be leased again to another of its slots while the old
// session is still ending; both use the run's checkpoint directory (the new one downloads its
// resume checkpoint there), so only the last one out may remove it.
class OpenRuns {
 public:
  void Enter(int64_t run) {
    std::lock_guard<std::mutex> lock(mu_);
    ++open_[run];
  }
  // True when no other session of `run` is open.
  bool Leave(int64_t run) {
    std::lock_guard<std::mutex> lock(mu_);
    if (--open_[run] > 0) return false;
    open_.erase(run);
    return true;
  }

 private:
  std::mutex mu_;
  std::map<int64_t, int> open_;
};

OpenRuns& OpenSessions() {
  static OpenRuns* runs = new OpenRuns();
  return *runs;
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

SessionOutcome Ended(SessionEnd end, std::string detail) {
  SessionOutcome out;
  out.end = end;
  out.detail = std::move(detail);
  return out;
}

// How a session ends, decided once from what training returned and what the server said
// meanwhile (the flags), in this order of precedence.
enum class Ending {
  kCancelled,    // the server cancelled the run: nothing more is sent for it
  kLeaseLost,    // another attempt owns the run: nothing more is sent for it
  kWorkerFault,  // the worker cannot go on (its spool, run dir, a thread): Release at once
  kHandBack,     // shutting down: flush, upload the checkpoint, Release
  kComplete,     // trained to the end (succeeded or diverged) or failed: flush, then Complete
};

// Shared state between the training thread (observer callbacks) and the background threads.
class Session : public train::TrainObserver {
 public:
  Session(RunClient* c, int64_t worker_id, const v1::LeaseResponse& leased,
          const SessionOptions& opts, SessionStats* stats)
      : c_(c), worker_id_(worker_id), lease_(leased.lease()), opts_(opts), stats_(stats) {}

  SessionOutcome Run(const v1::LeaseResponse& leased);

  // TrainObserver (training thread).
  void OnMetrics(const std::vector<v1::MetricPoint>& points) override {
    // A full disk pauses training here rather than dropping points the server has not stored.
    auto s = spool_->Append(points);
    while (absl::IsResourceExhausted(s) && WaitForSpace(s)) s = spool_->Append(points);
    if (s.ok()) {
      SpaceAgain();
    } else if (absl::IsResourceExhausted(s)) {
      spdlog::error("run {}: {}", lease_.run_id(), s.message());  // stopping while the disk is full
    } else {
      // Any other failure to write the spool would lose the points for good: the worker lets
      // the run go rather than train on without recording it.
      NoteWorkerFault(s);
    }
    if (s.ok()) sender_->Spooled();
    if (std::string line = util::ProgressLine(points); !line.empty()) {
      spdlog::info("run {}: {}", lease_.run_id(), line);
      v1::LogLine l;
      l.set_step(points.front().step());
      l.set_attempt(lease_.attempt());
      l.set_time(points.front().time());
      l.set_text(std::move(line));
      sender_->Log(std::move(l));
    }
  }
  void OnCheckpoint(int64_t step, const std::string& path) override {
    SpaceAgain();
    sender_->Checkpoint(step, path);
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
  bool ShouldStop() override { return LeaseEnded() || ShuttingDown() || has_worker_fault_; }
  // The spool or a checkpoint could not be written for lack of space: training waits (the
  // heartbeats keep the lease, the sender keeps sending what is spooled) and the write is tried
  // again every kSpaceRetry, until it goes through or the run is to stop.
  bool WaitForSpace(const absl::Status& error) override {
    if (ShouldStop()) return false;
    if (!paused_since_) {
      paused_since_ = Clock::now();
      stats_->paused_for_space = true;
      spdlog::warn(
          "run {}: no space left in the work dir ({}); training paused, retrying every {}s",
          lease_.run_id(), error.message(), kSpaceRetry.count());
    }
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, kSpaceRetry, [&] { return ShouldStop(); });
    return !ShouldStop();
  }

 private:
  // The attempt may write nothing more: the server cancelled the run, or the lease was lost
  // (another attempt owns the run).
  bool LeaseEnded() const { return cancelled_ || lease_lost_; }
  // A write that waited for space went through: training resumes (training thread).
  void SpaceAgain() {
    if (!paused_since_) return;
    spdlog::info("run {}: space in the work dir again; training resumes after {:.0f}s paused",
                 lease_.run_id(), Seconds(*paused_since_, Clock::now()));
    paused_since_.reset();
    stats_->paused_for_space = false;
  }
  bool ShuttingDown() const { return opts_.shutdown != nullptr && opts_.shutdown->load(); }
  // The worker cannot go on with the run (`cause`: its spool, its run dir, a thread it could not
  // start, an exception on one of its threads): training stops at its next step and the session
  // ends in a Release with FAULT_WORKER. The first cause is kept.
  void NoteWorkerFault(const absl::Status& cause);
  absl::Status WorkerFault() const;
  // Runs one of the session's threads' loops; whatever it throws becomes a worker fault instead
  // of ending the daemon (std::terminate).
  void Guarded(const char* what, const std::function<void()>& loop);

  // Fetches the inputs and trains, with the sender thread running while training does. An error
  // fetching the inputs is returned as the run's error; CANCELLED if it stopped before training.
  absl::StatusOr<train::TrainResult> FetchAndTrain(const v1::LeaseResponse& leased);
  // The trainer, with the fault file consulted first and an exception it throws made a status.
  absl::StatusOr<train::TrainResult> CallTrainer(const v1::RunSpec& spec,
                                                 const train::TrainOptions& topts);
  absl::Status FetchInputs(v1::RunSpec* spec, const v1::LeaseResponse& leased,
                           std::string* resume_path);
  // Retries `fn` while the server is unreachable, until it succeeds, fails for real, or we shut
  // down (then the last transient error is returned).
  template <typename Fn>
  absl::Status Retrying(Fn fn, const char* what);

  Ending Decide(const absl::StatusOr<train::TrainResult>& trained) const;
  SessionOutcome End(const absl::StatusOr<train::TrainResult>& trained);
  // One function per ending; each builds its outcome.
  SessionOutcome EndCancelled() const;
  SessionOutcome EndLeaseLost(std::string detail) const;
  SessionOutcome EndHandBack(const absl::StatusOr<train::TrainResult>& trained);
  SessionOutcome EndWorkerFault();
  SessionOutcome EndComplete(const absl::StatusOr<train::TrainResult>& trained);

  void HeartbeatLoop();
  absl::StatusOr<v1::HeartbeatResponse> HeartbeatOnce();
  // Takes in what a heartbeat answer says about the run: cancelled, or another attempt owns it.
  void ApplyHeartbeat(const v1::HeartbeatResponse& resp);
  // A call the fence refused (FAILED_PRECONDITION) says only that this attempt may no longer write.
  // Whether the run was cancelled or re-leased to another attempt is asked of the heartbeat, whose
  // answer says which, so a cancelled run ends as cancelled whichever call learns of it first.
  void NoteRefused(const absl::Status& s);

  RunClient* c_;
  const int64_t worker_id_;
  // This attempt's lease: every fenced call gets it whole (the client stamps the request).
  const RunLease lease_;
  const SessionOptions& opts_;
  SessionStats* stats_;
  std::unique_ptr<MetricSpool> spool_;
  // Sends the spool, the progress lines and the checkpoints (worker/metric_sender.h); made once
  // the spool is.
  std::unique_ptr<MetricSender> sender_;
  std::string run_dir_;
  Clock::time_point train_started_{};
  double train_seconds_ = 0;

  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<bool> done_{false};  // ends the heartbeat thread
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> lease_lost_{false};
  Clock::time_point last_progress_ = Clock::now();
  int64_t last_progress_step_ = -1;
  // Since when training waits for space in the work dir (training thread only).
  std::optional<Clock::time_point> paused_since_;
  // Where the attempt is (training thread): what an error it returns is classified under.
  FaultStage stage_ = FaultStage::kFetchInputs;
  // What a worker-side or unknown failure of the attempt points at (SessionOutcome::area).
  FaultArea area_ = FaultArea::kOther;
  // NoteWorkerFault's cause (guarded by fault_mu_) and whether there is one.
  mutable std::mutex fault_mu_;
  absl::Status worker_fault_;
  std::atomic<bool> has_worker_fault_{false};
};

void Session::NoteWorkerFault(const absl::Status& cause) {
  {
    std::lock_guard<std::mutex> lock(fault_mu_);
    if (has_worker_fault_) return;
    worker_fault_ = cause;
    has_worker_fault_ = true;
  }
  spdlog::error("run {}: {}; this worker cannot go on with the run and releases it",
                lease_.run_id(), cause.message());
  wake_.notify_all();
  if (sender_) sender_->Wake();
}

absl::Status Session::WorkerFault() const {
  std::lock_guard<std::mutex> lock(fault_mu_);
  return worker_fault_;
}

void Session::Guarded(const char* what, const std::function<void()>& loop) {
  try {
    loop();
  } catch (const std::exception& e) {
    NoteWorkerFault(absl::InternalError(absl::StrCat(what, " thread failed: ", e.what())));
  } catch (...) {
    NoteWorkerFault(
        absl::InternalError(absl::StrCat(what, " thread failed: an exception of unknown type")));
  }
}

template <typename Fn>
absl::Status Session::Retrying(Fn fn, const char* what) {
  return util::Retry(
      util::kRunCallBackoff, fn, rpc::IsTransient, [this] { return ShuttingDown(); },
      [&](const absl::Status& s, std::chrono::milliseconds wait) {
        spdlog::warn("run {}: {} failed, retrying in {:.1f}s: {}", lease_.run_id(), what,
                     double(wait.count()) / 1000, s.message());
      });
}

absl::Status Session::FetchInputs(v1::RunSpec* spec, const v1::LeaseResponse& leased,
                                  std::string* resume_path) {
  auto local_copy = [&](std::string* path, const std::string& sha) -> absl::Status {
    if (absl::StartsWith(*path, "synthetic:")) return absl::OkStatus();
    if (sha.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("data file ", *path, " has no content hash; the server must serve it"));
    }
    const std::string local = (fs::path(opts_.work_dir) / "datasets" / (sha + ".txt")).string();
    std::error_code ec;
    if (!fs::exists(local, ec)) {
      spdlog::info("run {}: fetching data set {} ({})", lease_.run_id(), *path, sha.substr(0, 12));
      RETURN_IF_ERROR(Retrying([&] { return c_->GetDataset(sha, local); }, "data set download"));
    }
    *path = local;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(local_copy(spec->mutable_data()->mutable_train(), spec->data().train_sha256()));
  RETURN_IF_ERROR(local_copy(spec->mutable_data()->mutable_val(), spec->data().val_sha256()));
  if (leased.has_resume_from() && !leased.resume_from().sha256().empty()) {
    const auto& ref = leased.resume_from();
    *resume_path = (fs::path(opts_.work_dir) / "checkpoints" / std::to_string(lease_.run_id()) /
                    (ref.sha256() + ".ckpt"))
                       .string();
    std::error_code ec;
    if (!fs::exists(*resume_path, ec)) {
      spdlog::info("run {}: fetching checkpoint at step {}", lease_.run_id(), ref.step());
      RETURN_IF_ERROR(Retrying([&] { return c_->GetCheckpoint(lease_, ref, *resume_path); },
                               "checkpoint download"));
    }
  }
  return absl::OkStatus();
}

void Session::HeartbeatLoop() {
  const auto period = std::chrono::milliseconds(int(opts_.heartbeat_seconds * 1000));
  const auto retry_period = std::min(period, kHeartbeatRetryPeriod);
  bool failing = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!done_) {
    lock.unlock();
    auto resp = HeartbeatOnce();
    if (resp.ok()) {
      ApplyHeartbeat(*resp);
      if (failing) {
        failing = false;
        spdlog::info("run {}: heartbeat got through again", lease_.run_id());
        if (sender_) sender_->ReachableAgain();
      }
    } else {
      NoteRefused(resp.status());
      if (!absl::IsFailedPrecondition(resp.status())) {
        failing = true;
        spdlog::warn("run {}: heartbeat: {} (training continues)", lease_.run_id(),
                     resp.status().message());
      }
    }
    lock.lock();
    wake_.wait_for(lock, failing ? retry_period : period, [&] { return done_.load(); });
  }
}

absl::StatusOr<v1::HeartbeatResponse> Session::HeartbeatOnce() {
  v1::HeartbeatRequest req;
  req.set_worker_id(worker_id_);
  req.set_step(stats_->step);
  req.set_tokens_per_second(stats_->tokens_per_second);
  return c_->Heartbeat(lease_, std::move(req));
}

void Session::ApplyHeartbeat(const v1::HeartbeatResponse& resp) {
  if (resp.cancel() && !cancelled_.exchange(true)) {
    spdlog::info("run {}: cancelled by the server", lease_.run_id());
  }
  if (resp.lease_lost() && !lease_lost_.exchange(true)) {
    spdlog::warn("run {}: lease lost (attempt {} is no longer current)", lease_.run_id(),
                 lease_.attempt());
  }
}

void Session::NoteRefused(const absl::Status& s) {
  if (!absl::IsFailedPrecondition(s) || LeaseEnded()) return;
  auto resp = util::Retry(
      util::kFenceProbeBackoff, [this] { return HeartbeatOnce(); }, rpc::IsTransient,
      [] { return false; }, [](const absl::Status&, std::chrono::milliseconds) {});
  if (resp.ok()) {
    ApplyHeartbeat(*resp);
    if (LeaseEnded()) return;
    // Otherwise the run looks live to the heartbeat, yet the fence still stands.
  }
  if (!lease_lost_.exchange(true)) spdlog::warn("run {}: {}", lease_.run_id(), s.message());
}

absl::StatusOr<train::TrainResult> Session::FetchAndTrain(const v1::LeaseResponse& leased) {
  v1::RunSpec spec = leased.spec();
  std::string resume_path;
  stage_ = FaultStage::kFetchInputs;
  RETURN_IF_ERROR(FetchInputs(&spec, leased, &resume_path));
  if (opts_.prepare_data) {
    // The tokenizer and token files: this worker's cache, else the fleet's (worker/fleet_data.h).
    RETURN_IF_ERROR(
        opts_.prepare_data(spec.data(), lease_.run_id(), [this] { return ShouldStop(); }));
  }
  if (ShouldStop()) return absl::CancelledError("not started");
  if (!opts_.train) return absl::InternalError("the session was given no trainer");
  // The run dir is made here rather than by the trainer, so a work dir this worker can no longer
  // write is told apart from a run's own error: the worker lets the run go.
  stage_ = FaultStage::kRunDir;
  RETURN_IF_ERROR(util::MakeDirs(run_dir_));
  stage_ = FaultStage::kThread;
  std::thread sender;
  try {
    sender = std::thread([this] { Guarded("metric sender", [this] { sender_->Loop(); }); });
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start the metric sender thread: ", e.what()));
  }
  stage_ = FaultStage::kTrain;
  train::TrainOptions topts;
  topts.device = opts_.device;
  topts.out_dir = run_dir_;
  topts.cache_dir = (fs::path(opts_.work_dir) / "cache").string();
  topts.resume_from = resume_path;
  topts.threads = opts_.threads;
  topts.min_step_seconds = opts_.min_step_seconds;
  spdlog::info("run {} attempt {}: {} seed {}{}", lease_.run_id(), lease_.attempt(), spec.cell(),
               spec.config().seed(),
               resume_path.empty()
                   ? ""
                   : absl::StrCat(" (resuming at step ", leased.resume_from().step(), ")"));
  train_started_ = Clock::now();
  auto trained = CallTrainer(spec, topts);
  train_seconds_ = Seconds(train_started_, Clock::now());
  sender_->Stop();  // the heartbeat keeps the lease alive through what follows
  sender.join();
  return trained;
}

absl::StatusOr<train::TrainResult> Session::CallTrainer(const v1::RunSpec& spec,
                                                        const train::TrainOptions& topts) {
  if (InjectedCrash(opts_.fault_file)) {
    spdlog::error(
        "run {}: the worker process dies in training while {} says crash: "
        "(--test-fault-file)",
        lease_.run_id(), opts_.fault_file);
    std::terminate();
  }
  if (auto injected = InjectedFault(opts_.fault_file)) {
    spdlog::warn("run {}: failing at step 0 while {} exists (--test-fault-file)", lease_.run_id(),
                 opts_.fault_file);
    return *std::move(injected);
  }
  try {
    return opts_.train(spec, topts, this);
  } catch (const std::exception& e) {
    return WithFault(absl::AbortedError(absl::StrCat("the trainer crashed: ", e.what())),
                     v1::FAULT_WORKER);
  } catch (...) {
    return WithFault(absl::AbortedError("the trainer crashed: an exception of unknown type"),
                     v1::FAULT_WORKER);
  }
}

Ending Session::Decide(const absl::StatusOr<train::TrainResult>& trained) const {
  if (cancelled_) return Ending::kCancelled;
  if (lease_lost_) return Ending::kLeaseLost;
  if (has_worker_fault_) return Ending::kWorkerFault;
  // The trainer stops early only when asked to, and with neither flag set that means shutdown;
  // an error while shutting down (or a stop before training began) is handed back too.
  const bool stopped = trained.ok() && trained->outcome == train::Outcome::kStopped;
  if (stopped || (!trained.ok() && ShuttingDown())) return Ending::kHandBack;
  return Ending::kComplete;
}

SessionOutcome Session::End(const absl::StatusOr<train::TrainResult>& trained) {
  switch (Decide(trained)) {
    case Ending::kCancelled:
      return EndCancelled();
    case Ending::kLeaseLost:
      return EndLeaseLost("lease lost");
    case Ending::kWorkerFault:
      return EndWorkerFault();
    case Ending::kHandBack:
      return EndHandBack(trained);
    case Ending::kComplete:
      break;
  }
  if (!trained.ok() && (stage_ == FaultStage::kRunDir || stage_ == FaultStage::kThread)) {
    // Failed before training began, in what is the worker's own: let the run go at once.
    NoteWorkerFault(trained.status());
    return EndWorkerFault();
  }
  return EndComplete(trained);
}

SessionOutcome Session::EndWorkerFault() {
  const absl::Status cause = WorkerFault();
  const std::string reason(cause.message());
  area_ = AreaOf(cause, stage_);
  const auto deadline = Clock::now() + kReleaseDeadline;
  const absl::Status s = util::Retry(
      util::kRunCallBackoff, [&] { return c_->Release(lease_, reason, v1::FAULT_WORKER); },
      rpc::IsTransient, [&] { return ShuttingDown() || Clock::now() > deadline; },
      [&](const absl::Status& e, std::chrono::milliseconds wait) {
        spdlog::warn("run {}: release failed, retrying in {:.1f}s: {}", lease_.run_id(),
                     double(wait.count()) / 1000, e.message());
      });
  if (s.ok()) {
    spdlog::info("run {}: released for another worker (worker fault: {})", lease_.run_id(), reason);
    return Ended(SessionEnd::kWorkerFault, absl::StrCat("released (worker fault): ", reason));
  }
  NoteRefused(s);
  if (cancelled_) return EndCancelled();
  if (lease_lost_) return EndLeaseLost(std::string(s.message()));
  return Ended(SessionEnd::kAbandoned,
               absl::StrCat("could not release (", s.message(), "); the lease will expire"));
}

SessionOutcome Session::EndCancelled() const {
  return Ended(SessionEnd::kCancelled, "cancelled by the server");
}

SessionOutcome Session::EndLeaseLost(std::string detail) const {
  return Ended(SessionEnd::kLeaseLost, std::move(detail));
}

SessionOutcome Session::EndHandBack(const absl::StatusOr<train::TrainResult>& trained) {
  if (!trained.ok()) {
    // Stopped before or while fetching inputs: nothing to save, hand the run straight back.
    const bool handed =
        c_->Release(lease_, "worker shutting down", v1::FAULT_CLASS_UNSPECIFIED).ok();
    return handed ? Ended(SessionEnd::kReleased, "handed back")
                  : Ended(SessionEnd::kAbandoned, std::string(trained.status().message()));
  }
  // The trainer wrote a checkpoint at the current step. Upload it, flush the metrics up to it,
  // and hand the run back so another worker resumes at once.
  const auto deadline = Clock::now() + kHandBackDeadline;
  bool handed = sender_
                    ->SendSpool(&util::kRunCallBackoff,
                                [&] { return LeaseEnded() || Clock::now() > deadline; })
                    .ok();
  if (handed && !trained->last_checkpoint.empty()) {
    // A server whose store is full refuses it: hand the run back all the same, to resume from
    // the newest checkpoint it has.
    const absl::Status s =
        c_->PutCheckpoint(lease_, trained->last_step, trained->last_checkpoint, nullptr);
    handed = s.ok() || absl::IsResourceExhausted(s);
  }
  if (handed)
    handed = c_->Release(lease_, "worker shutting down", v1::FAULT_CLASS_UNSPECIFIED).ok();
  return handed ? Ended(SessionEnd::kReleased, "handed back")
                : Ended(SessionEnd::kAbandoned, "could not hand back; the lease will expire");
}

SessionOutcome Session::EndComplete(const absl::StatusOr<train::TrainResult>& trained) {
  v1::CompleteRequest complete;
  if (trained.ok()) {
    complete.set_state(trained->outcome == train::Outcome::kDiverged ? v1::DIVERGED
                                                                     : v1::SUCCEEDED);
    *complete.mutable_result() = trained->result;
  } else {
    const v1::FaultClass fault = ClassifyFailure(trained.status(), stage_);
    if (fault != v1::FAULT_RUN) area_ = AreaOf(trained.status(), stage_);
    complete.set_state(v1::FAILED);
    complete.set_error(std::string(trained.status().message()));
    complete.set_fault(fault);
    spdlog::error("run {}: failed ({}'s fault): {}", lease_.run_id(), FaultClassName(fault),
                  trained.status().message());
  }
  if (opts_.peak_memory_bytes && complete.result().peak_memory_bytes() == 0) {
    complete.mutable_result()->set_peak_memory_bytes(opts_.peak_memory_bytes());
  }
  // A completed run's metrics must all be stored before it is marked complete, however long
  // the server is away; Complete follows only once the spool is empty.
  if (!sender_
           ->SendSpool(&util::kRunCallBackoff, [this] { return LeaseEnded() || has_worker_fault_; })
           .ok()) {
    if (has_worker_fault_ && !LeaseEnded()) return EndWorkerFault();
    return cancelled_ ? EndCancelled() : EndLeaseLost("lease lost before metrics were stored");
  }
  // The last progress lines go before Complete, so a follower sees them before the end. They
  // are for watching only: one that will not go through does not hold the run up.
  if (!sender_->SendLogs())
    spdlog::warn("run {}: some progress lines were not sent to the server", lease_.run_id());
  // The final weights (sweep keep_final): uploaded, then named in the result. A run whose
  // upload fails for good still completes, without them, rather than being retrained.
  if (trained.ok() && !trained->final_checkpoint.empty() && !LeaseEnded()) {
    v1::CheckpointRef stored;
    const absl::Status up = Retrying(
        [&] {
          return c_->PutCheckpoint(lease_, trained->last_step, trained->final_checkpoint, &stored);
        },
        "final checkpoint upload");
    if (up.ok()) {
      *complete.mutable_result()->mutable_final_checkpoint() = stored;
    } else {
      NoteRefused(up);
      spdlog::warn("run {}: final checkpoint not kept: {}", lease_.run_id(), up.message());
      if (absl::IsFailedPrecondition(up)) {
        return cancelled_ ? EndCancelled() : EndLeaseLost(std::string(up.message()));
      }
    }
  }
  const absl::Status s = Retrying([&] { return c_->Complete(lease_, complete); }, "complete");
  NoteRefused(s);
  if (s.ok())
    return Ended(SessionEnd::kCompleted, std::string(util::RunStateName(complete.state())));
  if (cancelled_) return EndCancelled();
  if (absl::IsFailedPrecondition(s) || lease_lost_) return EndLeaseLost(std::string(s.message()));
  return Ended(SessionEnd::kAbandoned, std::string(s.message()));
}

SessionOutcome Session::Run(const v1::LeaseResponse& leased) {
  const auto t_start = Clock::now();
  run_dir_ =
      (fs::path(opts_.work_dir) / "runs" / absl::StrCat(lease_.run_id(), "-a", lease_.attempt()))
          .string();
  auto spool = MetricSpool::Create((fs::path(opts_.work_dir) / "spool" /
                                    absl::StrCat(lease_.run_id(), "-a", lease_.attempt(), ".spool"))
                                       .string());
  if (!spool.ok()) {
    NoteWorkerFault(
        absl::Status(spool.status().code(), absl::StrCat("spool: ", spool.status().message())));
    SessionOutcome out = EndWorkerFault();
    out.area = FaultArea::kDisk;  // the spool is in the work dir
    out.ended = Clock::now();
    out.overhead_seconds = Seconds(t_start, out.ended);
    return out;
  }
  spool_ = *std::move(spool);
  sender_ = std::make_unique<MetricSender>(
      c_, lease_, spool_.get(), &stats_->spooled_points,
      MetricSender::Session{
          .stopped = [this] { return LeaseEnded() || has_worker_fault_; },
          .lease_lost = [this] { return lease_lost_.load(); },
          .refused = [this](const absl::Status& s) { NoteRefused(s); },
          .worker_fault = [this](const absl::Status& s) { NoteWorkerFault(s); },
      });
  OpenSessions().Enter(lease_.run_id());

  std::thread heartbeat;
  try {
    heartbeat = std::thread([this] { Guarded("heartbeat", [this] { HeartbeatLoop(); }); });
  } catch (const std::system_error& e) {
    NoteWorkerFault(absl::ResourceExhaustedError(
        absl::StrCat("cannot start the heartbeat thread: ", e.what())));
  }
  SessionOutcome out = has_worker_fault_ ? EndWorkerFault() : End(FetchAndTrain(leased));
  out.area = area_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  wake_.notify_all();
  if (heartbeat.joinable()) heartbeat.join();

  out.ended = Clock::now();
  out.train_started = train_started_;
  out.train_seconds = train_seconds_;
  out.overhead_seconds = Seconds(t_start, Clock::now()) - train_seconds_;
  // Keep only what a later attempt on this machine could reuse: the data sets and cache.
  std::error_code ec;
  fs::remove_all(run_dir_, ec);
  if (OpenSessions().Leave(lease_.run_id()) && out.end != SessionEnd::kAbandoned) {
    fs::remove_all(fs::path(opts_.work_dir) / "checkpoints" / std::to_string(lease_.run_id()), ec);
  }
  return out;
}

}  // namespace

double HeartbeatSeconds(double lease_seconds) {
  return std::max(0.2, (lease_seconds > 0 ? lease_seconds : 60) / kHeartbeatsPerLease);
}

SessionOutcome RunSession(RunClient* client, int64_t worker_id, const v1::LeaseResponse& lease,
                          const SessionOptions& options, SessionStats* stats) {
  Session session(client, worker_id, lease, options, stats);
  stats->run_id = lease.lease().run_id();
  SessionOutcome out = session.Run(lease);
  stats->run_id = 0;
  stats->step = 0;
  stats->paused_for_space = false;
  return out;
}

}  // namespace ablate::worker
