#include "worker/metric_sender.h"

#include <optional>
#include <utility>

#include "common/rpc/channel.h"
#include "common/util/log.h"

namespace ablate::worker {
namespace {

using Clock = std::chrono::steady_clock;

// Progress lines wait in memory for the sender (not in the spool: they are for watching a run,
// not for the record); past this many unsent, the oldest are dropped while the server is away.
constexpr size_t kMaxPendingLogLines = 1000;
constexpr size_t kLogBatch = 100;  // the server's per-report cap

}  // namespace

void MetricSender::Spooled() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!oldest_unsent_) oldest_unsent_ = Clock::now();
  }
  *spooled_points_ = spool_->pending();
  wake_.notify_all();
}

void MetricSender::Log(v1::LogLine line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_logs_.size() >= kMaxPendingLogLines) pending_logs_.pop_front();
  pending_logs_.emplace_back(++log_serial_, std::move(line));
}

void MetricSender::Checkpoint(int64_t step, std::string path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_checkpoint_ = std::make_pair(step, std::move(path));
  }
  wake_.notify_all();
}

void MetricSender::ReachableAgain() {
  reachable_again_ = true;
  wake_.notify_all();
}

void MetricSender::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
}

Clock::duration MetricSender::OldestUnsentAge() const {
  return oldest_unsent_ ? Clock::now() - *oldest_unsent_ : Clock::duration::zero();
}

absl::Status MetricSender::SendBatch() {
  auto batch = spool_->Peek(kMetricBatch);
  if (!batch.ok()) {
    session_.worker_fault(batch.status());  // the spool cannot be read back: its points are lost
    return batch.status();
  }
  if (batch->empty()) return absl::OkStatus();
  auto s = c_->ReportMetrics(lease_, *batch);
  if (absl::IsOutOfRange(s)) {
    // The run holds as many points as the server keeps for one run (its --max-points-per-run,
    // --max-points-per-name, --max-metric-names): these will never be stored. Dropped, so the
    // spool drains and the run trains on and completes; said once.
    if (!over_bound_) {
      spdlog::warn(
          "run {}: the server keeps no more of this run's metric points ({}); dropping "
          "the points it refuses",
          lease_.run_id(), s.message());
      over_bound_ = true;
    }
    spool_->Ack(batch->size());
    *spooled_points_ = spool_->pending();
    return absl::OkStatus();
  }
  if (!s.ok()) {
    session_.refused(s);
    if (rpc::IsTransient(s) && !unreachable_) {
      spdlog::warn(
          "run {}: metrics: {} (spooling to disk; they are replayed in order once the server "
          "answers)",
          lease_.run_id(), s.message());
      unreachable_ = true;
    }
    return s;
  }
  if (unreachable_) {
    spdlog::info("run {}: server reachable again; replaying {} spooled points", lease_.run_id(),
                 spool_->pending());
    unreachable_ = false;
  }
  spool_->Ack(batch->size());
  *spooled_points_ = spool_->pending();
  return absl::OkStatus();
}

absl::Status MetricSender::SendSpool(const util::BackoffPolicy* retry,
                                     const std::function<bool()>& give_up) {
  std::optional<util::Backoff> backoff;
  if (retry != nullptr) backoff.emplace(*retry);
  absl::Status last = absl::OkStatus();
  while (spool_->pending() > 0) {
    if (give_up()) return last.ok() ? absl::CancelledError("metrics not all sent") : last;
    last = SendBatch();
    if (last.ok()) {
      if (backoff) backoff->Reset();
      continue;
    }
    if (!backoff || !rpc::IsTransient(last)) return last;
    // Back off, but retry at once when a heartbeat gets through again.
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait_for(lock, backoff->Next(), [&] { return reachable_again_.load(); });
    if (reachable_again_.exchange(false)) backoff->Reset();
  }
  return absl::OkStatus();
}

bool MetricSender::SendLogs() {
  while (true) {
    std::vector<v1::LogLine> batch;
    uint64_t last = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < pending_logs_.size() && i < kLogBatch; ++i) {
        batch.push_back(pending_logs_[i].second);
        last = pending_logs_[i].first;
      }
    }
    if (batch.empty()) return true;
    auto s = c_->ReportLogs(lease_, batch);
    if (!s.ok()) {
      session_.refused(s);
      return false;
    }
    // Log may have appended (or dropped from the front) meanwhile: drop what was sent.
    std::lock_guard<std::mutex> lock(mu_);
    while (!pending_logs_.empty() && pending_logs_.front().first <= last) pending_logs_.pop_front();
  }
}

void MetricSender::Loop() {
  // Failures here are retried by the loop itself rather than inside SendSpool: while it waits, a
  // newer checkpoint may arrive and replace the one that failed.
  util::Backoff backoff(util::kSenderBackoff);
  bool backing_off = false;
  Clock::time_point retry_at{};
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && !session_.stopped()) {
    const bool due = backing_off
                         ? Clock::now() >= retry_at
                         : pending_checkpoint_ || SendDue(spool_->pending(), OldestUnsentAge());
    if (!due && !reachable_again_) {
      // Points arriving, a checkpoint and Stop notify; the oldest point coming of age and the end
      // of a back-off are waited for.
      wake_.wait_until(lock, backing_off      ? retry_at
                             : oldest_unsent_ ? *oldest_unsent_ + kSenderMaxAge
                                              : Clock::now() + kSenderMaxAge);
      continue;
    }
    reachable_again_ = false;
    auto ckpt = std::move(pending_checkpoint_);
    pending_checkpoint_.reset();
    lock.unlock();
    // Metrics first: a resumed attempt must never find a checkpoint newer than its metrics.
    bool failed = !SendSpool(nullptr, [] { return false; }).ok();
    if (!failed && !session_.lease_lost()) failed = !SendLogs();
    if (ckpt && !failed && !session_.lease_lost()) {
      auto s = c_->PutCheckpoint(lease_, ckpt->first, ckpt->second, nullptr);
      if (absl::IsResourceExhausted(s)) {
        // The server's store is full. Training goes on; the next checkpoint is offered in turn,
        // and a resume meanwhile starts from the newest one the server did store.
        spdlog::warn("run {}: checkpoint at step {} not stored by the server ({}); skipped",
                     lease_.run_id(), ckpt->first, s.message());
        ckpt.reset();
      } else if (!s.ok()) {
        session_.refused(s);
        failed = true;
      }
    }
    lock.lock();
    if (failed && ckpt && !pending_checkpoint_) pending_checkpoint_ = std::move(ckpt);
    if (!failed) {
      // What arrived while sending is at most a send old: aged from now.
      oldest_unsent_.reset();
      if (spool_->pending() > 0) oldest_unsent_ = Clock::now();
    }
    backing_off = failed;
    if (failed) {
      retry_at = Clock::now() + backoff.Next();
    } else {
      backoff.Reset();
    }
  }
}

}  // namespace ablate::worker
