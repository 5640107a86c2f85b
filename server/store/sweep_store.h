// Sweeps as the CLI sees them: submit, inspect, metrics, events, workers. Cancel and retry change
// run states, so they are in server/store/run_transitions.h with the other transitions.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/store/db.h"

namespace ablate::server {

struct NewSweep {
  std::string name;
  std::string file_name;
  std::string spec_yaml;
  std::string submitted_by;
  int priority = 0;
  int max_attempts = 3;
  std::vector<std::string> axes;
  std::optional<v1::RefineStatus> refine;  // the sweep file's `refine:`
  bool prune_above_divergence = false;
  // The runs are walked rather than held: a 256-byte file can expand to 100,000 runs (~150 MB
  // of RunSpecs). `for_each_run` calls its visitor with each run in queue order and stops at the
  // first error the visitor returns. Insert may call it more than once (Db::Tx retries a
  // conflicted transaction), so every call must yield the same `run_count` runs.
  using RunVisitor = std::function<absl::Status(v1::RunSpec&&)>;
  std::function<absl::Status(const RunVisitor&)> for_each_run;
  int64_t run_count = 0;
};

struct DatasetRecord {
  std::string sha256;
  std::string path;
  int64_t size_bytes = 0;
};

// A page of a run's progress lines (run_logs), oldest first, after a cursor.
struct RunLogPage {
  v1::RunState state = v1::RUN_STATE_UNSPECIFIED;
  std::vector<v1::LogLine> lines;
  int64_t max_seq = 0;  // the cursor for the next page (the given one when there is nothing new)
};

class SweepStore {
 public:
  SweepStore(Db* db, double lease_seconds) : db_(db), lease_seconds_(lease_seconds) {}

  // Inserts the sweep, its runs and its data sets in one transaction (all or nothing). Runs go
  // in a few thousand at a time, so a big sweep never has all its rows in memory at once.
  absl::StatusOr<v1::Sweep> Insert(const NewSweep& sweep,
                                   const std::vector<DatasetRecord>& datasets);

  // NOT_FOUND names the reference when no sweep matches.
  absl::StatusOr<int64_t> Resolve(const v1::SweepRef& ref);
  absl::StatusOr<v1::Sweep> Get(int64_t sweep_id);
  absl::StatusOr<std::vector<v1::Sweep>> List(int limit, bool active_only);
  absl::StatusOr<std::vector<v1::Run>> ListRuns(int64_t sweep_id,  // 0: every sweep
                                                const std::vector<v1::RunState>& states, int limit);

  // Points with step > after_step and, when after_seq > 0, changed since after_seq (ordered by
  // step). *max_seq receives the newest change seen: the next call's after_seq.
  absl::StatusOr<v1::GetRunMetricsResponse> Metrics(int64_t run_id,
                                                    const std::vector<std::string>& names,
                                                    int64_t after_step, int64_t after_seq,
                                                    int64_t* max_seq);
  absl::StatusOr<std::vector<v1::RunEvent>> Events(int64_t run_id);
  absl::StatusOr<std::vector<v1::Worker>> Workers(bool include_offline);

  // The run's progress lines with seq > after_seq, and its state (NOT_FOUND if no such run).
  absl::StatusOr<RunLogPage> RunLogs(int64_t run_id, int64_t after_seq);
  // The final checkpoint a finished run kept (RunResult.final_checkpoint), checked against the
  // run's recorded checkpoints; NOT_FOUND, saying why, when there is none.
  absl::StatusOr<v1::CheckpointRef> FinalCheckpoint(int64_t run_id);

 private:
  Db* db_;
  double lease_seconds_;
};

}  // namespace ablate::server
