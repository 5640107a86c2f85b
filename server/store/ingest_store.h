// What a running attempt streams in about its run: metric points (ReportMetrics) and progress
// lines (ReportLogs). Neither changes the run's state; both are fenced writes, refused unless the
// caller holds the run's lease (the fence is RunTransitions', run_transitions.h), and both are
// the server's bulk write path, which is why they live apart from the state machine: how points
// reach the tables can change here without touching a transition.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "server/store/db.h"
#include "server/store/notify_batcher.h"

namespace ablate::server {

// Progress lines kept per run (run_logs): the newest ones; a 100,000-step run logging every step
// keeps its last 2,000 steps' lines (about 200 kB), which is what following a live run needs.
inline constexpr int kMaxLogLinesPerRun = 2000;

class IngestStore {
 public:
  // `notes` wakes the run's watchers after commit (ablate_run; see NotifyBatcher).
  IngestStore(Db* db, NotifyBatcher* notes) : db_(db), notes_(notes) {}

  // Upserts points keyed (run, name, step) and the run's latest_* columns. Returns how many were
  // stored. INVALID_ARGUMENT names a point past the run's last step.
  absl::StatusOr<int> ReportMetrics(const v1::ReportMetricsRequest& request);

  // Appends a run's progress lines and trims the run to its newest kMaxLogLinesPerRun lines.
  // Returns how many were stored.
  absl::StatusOr<int> ReportLogs(const v1::LogReportRequest& request);

 private:
  // Runs `fn` as one transaction and, once it has committed, wakes run `run_id`'s watchers.
  absl::StatusOr<int> Ingest(const std::string& what, int64_t run_id,
                             const std::function<absl::StatusOr<int>(pqxx::work&)>& fn);

  Db* db_;
  NotifyBatcher* notes_;
};

}  // namespace ablate::server
