// What a running attempt streams in about its run: metric points (ReportMetrics) and progress
// lines (ReportLogs). Neither changes the run's state; both are fenced writes, refused unless the
// caller holds the run's lease (the fence is RunTransitions', run_transitions.h), and both are
// the server's bulk write path, which is why they live apart from the state machine: how points
// reach the tables can change here without touching a transition.
//
// Metric points take PostgreSQL's bulk path (docs/architecture.md#metric-ingest): concurrent
// ReportMetrics calls queue here, and a few writer threads, each on its own connection of a Db
// of the writers' own (so ingest never waits for, nor starves, the server's pool; Db's retry and
// error mapping all the same), take everything queued as one batch: one Db::Tx transaction, one
// fence UPDATE for every request in it (ingest_fence.sql), one binary COPY of all their points
// (copy.h), one commit. A request the fence refused hears why from the same transaction. Under load
// a batch holds many requests (group commit); alone, a request is written at once. A COPY that
// meets points already stored (a worker re-sending a report whose answer it lost) rolls its
// transaction back, and the batch is written again with an upsert instead (ingest_upsert.sql), so
// each (run, name, step) is stored once, with its newest value. A batch never holds two requests
// for one run, and a run is in at most one batch at a time.
//
// What a run stores is bounded (IngestLimits, docs/server.md#hostile-input): after the fence has
// locked the batch's runs, the batch's new points are checked against each run's counted series
// (run_metric_series, migration 0033); a request that would take its run past a bound is refused
// (OUT_OF_RANGE, naming the flag), and the batch is written again without it, so its run's
// latest values stay as they were. The rare case costs a rolled-back transaction; the common
// one, two statements more (the check and the count).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "server/store/db.h"
#include "server/store/notify_batcher.h"

namespace ablate::server {

// Progress lines kept per run (run_logs): the newest ones; a 100,000-step run logging every step
// keeps its last 2,000 steps' lines (about 200 kB), which is what following a live run needs.
inline constexpr int kMaxLogLinesPerRun = 2000;

// Writer threads (and database connections) per server process for metric points. Two keep one
// batch being written while the next one gathers; more would only split the batches.
inline constexpr int kIngestWriters = 2;

// The most points one batch takes (a request larger than this is a batch of its own).
inline constexpr int kMaxIngestBatchPoints = 50000;

// What one run may store (the server's --max-points-per-run, --max-points-per-name,
// --max-metric-names).
struct IngestLimits {
  int64_t points_per_run = 10'000'000;
  int64_t points_per_name = 1'000'000;
  int names_per_run = 4096;
};

class IngestStore {
 public:
  // `notes` wakes the run's watchers after commit (ablate_run; see NotifyBatcher). The metric
  // writers have a Db of their own on db->url(), `writers` connections opened lazily (and again
  // after PostgreSQL restarts).
  IngestStore(Db* db, NotifyBatcher* notes, IngestLimits limits = {}, int writers = kIngestWriters);
  // Writes what is queued (or fails it, UNAVAILABLE, if the database is gone), then stops.
  ~IngestStore();
  IngestStore(const IngestStore&) = delete;
  IngestStore& operator=(const IngestStore&) = delete;

  // Stores points keyed (run, name, step) and the run's latest_* columns. Returns how many were
  // stored. INVALID_ARGUMENT names a point past the run's last step; OUT_OF_RANGE a report that
  // would take the run past one of the limits.
  absl::StatusOr<int> ReportMetrics(const v1::ReportMetricsRequest& request);

  // Appends a run's progress lines and trims the run to its newest kMaxLogLinesPerRun lines.
  // Returns how many were stored.
  absl::StatusOr<int> ReportLogs(const v1::LogReportRequest& request);

  // One request in a metric batch (defined in ingest_store.cc).
  struct Pending;

 private:
  // Runs `fn` as one transaction and, once it has committed, wakes run `run_id`'s watchers.
  absl::StatusOr<int> Ingest(const std::string& what, int64_t run_id,
                             const std::function<absl::StatusOr<int>(pqxx::work&)>& fn);
  // Writes `batch` as one transaction (retried by Db::Tx while nothing can have been committed);
  // sets each request's `accepted`, and its `status` when refused or when the batch failed.
  void Write(const std::vector<Pending*>& batch);
  // Takes the next batch from the queue (blocking); empty when stopping with nothing queued.
  std::vector<Pending*> NextBatch();
  void Finish(const std::vector<Pending*>& batch);

  Db* db_;
  NotifyBatcher* notes_;
  IngestLimits limits_;
  Db copy_db_;  // the metric writers' connections
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending*> queue_;
  std::set<int64_t> in_flight_;  // runs in a batch being written
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ablate::server
