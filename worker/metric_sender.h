// The sender thread of a run session (worker/run_session.h): it sends what the trainer spooled
// (worker/spool.h), the progress lines, and the checkpoints, in that order, so a resumed attempt
// never finds a checkpoint newer than its metrics. A run's points coalesce into requests by size
// and age (SendDue): a request costs the server and PostgreSQL about what 100 points do (issue
// #37: ~375 us server + ~430 us PostgreSQL a request, ~6 us a point), and a slot logging at the
// study's rates produces ~100 points a second. Sending every half second, as the sender did,
// made 50-point requests: ~0.4 of a raw COPY's rate in bench/queue, against ~0.95 for the
// 500-point requests these constants make ("the size a real worker sends", 2026-12-04).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/status.h"
#include "common/util/backoff.h"
#include "worker/run_client.h"
#include "worker/run_lease.h"
#include "worker/spool.h"

namespace ablate::worker {

// The most points one ReportMetrics carries, and the number pending at which they go at once.
inline constexpr size_t kMetricBatch = 500;
// The age past which the oldest unsent point goes, however few are pending: how far `ablate
// watch`, `ablate logs --follow` and the dashboards lag a live run at most (plus the round trip;
// the heartbeat carries the step meanwhile). Five seconds keeps a watched run moving every few
// seconds while a slot at the study's rates fills a whole request (kMetricBatch); shorter sends
// smaller requests, which cost more a point (above).
inline constexpr std::chrono::milliseconds kSenderMaxAge{5000};

// Whether `pending` unsent points, the oldest of them `oldest_age` old, are due to be sent. A
// checkpoint to upload and the end of the run send whatever is pending regardless.
inline bool SendDue(int64_t pending, std::chrono::steady_clock::duration oldest_age) {
  return pending >= static_cast<int64_t>(kMetricBatch) ||
         (pending > 0 && oldest_age >= kSenderMaxAge);
}

// Sends one attempt's spool, progress lines and checkpoints under its lease. The training thread
// tells it what arrived (Spooled, Log, Checkpoint); Loop runs on the sender thread until Stop; the
// session's ending flushes with SendSpool and SendLogs once the thread is joined.
class MetricSender {
 public:
  // What the sender asks of, and tells, its session.
  struct Session {
    // Whether the sender thread is to stop: the attempt may write nothing more, or the worker
    // cannot go on with the run.
    std::function<bool()> stopped;
    // Whether the lease is lost (another attempt owns the run): nothing more is sent.
    std::function<bool()> lease_lost;
    // A call failed: FAILED_PRECONDITION (the fence refused it) is the session's to look into.
    std::function<void(const absl::Status&)> refused;
    // The spool cannot be read back: the worker cannot go on with the run.
    std::function<void(const absl::Status&)> worker_fault;
  };

  MetricSender(RunClient* client, const RunLease& lease, MetricSpool* spool,
               std::atomic<int64_t>* spooled_points, Session session)
      : c_(client),
        lease_(lease),
        spool_(spool),
        spooled_points_(spooled_points),
        session_(std::move(session)) {}

  // Training thread: points went into the spool; a progress line to send; a checkpoint to upload
  // after the metrics before it (a newer one replaces one not yet uploaded).
  void Spooled();
  void Log(v1::LogLine line);
  void Checkpoint(int64_t step, std::string path);
  // Heartbeat thread: a heartbeat got through after one that did not. A back-off ends at once.
  void ReachableAgain();
  // The session: anything that may end the loop happened (a fault, a lost lease).
  void Wake() { wake_.notify_all(); }

  // The sender thread: sends when SendDue says so or a checkpoint waits, until Stop or
  // session.stopped(). A failed send is retried after kSenderBackoff.
  void Loop();
  void Stop();

  // Sends the spool, oldest point first, until it is empty (OK). Without `retry` the first failed
  // send ends it with that error; with it, a transient failure is retried after the policy's
  // back-off (cut short when a heartbeat gets through again) and any other failure ends it.
  // `give_up`, asked before each send, ends it early (the last error, or CANCELLED).
  absl::Status SendSpool(const util::BackoffPolicy* retry, const std::function<bool()>& give_up);
  // Sends the pending progress lines, kLogBatch at a time; false if a send failed (the unsent
  // lines stay pending).
  bool SendLogs();

 private:
  // Sends one request from the spool. Logs once when the server stops answering (points stay
  // spooled) and once when it answers again (they are replayed), whichever path sends them.
  absl::Status SendBatch();
  std::chrono::steady_clock::duration OldestUnsentAge() const;  // mu_ held

  RunClient* c_;
  const RunLease& lease_;
  MetricSpool* spool_;
  std::atomic<int64_t>* spooled_points_;
  const Session session_;

  std::mutex mu_;
  std::condition_variable wake_;
  std::optional<std::pair<int64_t, std::string>> pending_checkpoint_;  // guarded by mu_
  // When the oldest point not yet sent was spooled (guarded by mu_; unset: none known).
  std::optional<std::chrono::steady_clock::time_point> oldest_unsent_;
  // Unsent progress lines with a serial number each (guarded by mu_).
  std::deque<std::pair<uint64_t, v1::LogLine>> pending_logs_;
  uint64_t log_serial_ = 0;
  bool stop_ = false;  // guarded by mu_
  // Set when a heartbeat gets through after one that did not: the sender leaves its back-off at
  // once instead of sleeping through the rest of it.
  std::atomic<bool> reachable_again_{false};
  // The last send failed transiently (sender thread, then the drain after it is joined).
  bool unreachable_ = false;
  // The server refused points for the run's bounds (OUT_OF_RANGE) and that was logged.
  bool over_bound_ = false;
};

}  // namespace ablate::worker
