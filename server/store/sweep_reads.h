// Sweeps as the CLI sees them: inspect, list, runs, metrics, events, progress lines, workers, final
// weights. Read only: the writes are the submit (sweep_store.h), the transitions
// (run_transitions.h) and what workers stream in (ingest_store.h). /metrics reads active sweeps
// here too.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "server/store/db.h"
#include "server/store/pg_codec.h"

namespace ablate::server {

// A page of a run's progress lines (run_logs), oldest first, after a cursor.
struct RunLogPage {
  v1::RunState state = v1::RUN_STATE_UNSPECIFIED;
  std::vector<v1::LogLine> lines;
  int64_t max_seq = 0;  // the cursor for the next page (the given one when there is nothing new)
};

// A page of ListRuns and how many runs match in all.
struct RunPage {
  std::vector<v1::Run> runs;
  int64_t total = 0;
};

class SweepReads {
 public:
  // `lease_seconds` is the server's lease period, which says when a silent worker is lost (one)
  // and offline (two).
  SweepReads(Db* db, double lease_seconds) : db_(db), lease_seconds_(lease_seconds) {}

  // NOT_FOUND names the reference when no sweep matches.
  absl::StatusOr<int64_t> Resolve(const v1::SweepRef& ref);
  // The given runs grouped by their sweep (run ids are global); NOT_FOUND naming the first id
  // that is no run.
  absl::StatusOr<std::map<int64_t, std::vector<int64_t>>> SweepsOfRuns(
      const std::vector<int64_t>& run_ids);
  absl::StatusOr<v1::Sweep> Get(int64_t sweep_id);
  absl::StatusOr<std::vector<v1::Sweep>> List(int limit, bool active_only);
  // Every run, in queue order (sweep, then order_index).
  absl::StatusOr<std::vector<v1::Run>> ListRuns(int64_t sweep_id,  // 0: every sweep
                                                const std::vector<v1::RunState>& states);
  // The runs holding a lease (leased, running), in queue order: a big sweep's live view. Read
  // through their own index, however many runs the sweep has.
  absl::StatusOr<std::vector<v1::Run>> InFlight(int64_t sweep_id);
  // What the CLI lists: newest first (as List orders sweeps), `limit` runs after `offset`.
  absl::StatusOr<RunPage> RunsPage(int64_t sweep_id, const std::vector<v1::RunState>& states,
                                   int limit, int offset);
  // The sweep's cells after `after_cell` in key order, `limit` of them, each folded from its runs
  // in the database (ListCells); next_after_cell is set when more follow.
  absl::StatusOr<v1::ListCellsResponse> CellsPage(int64_t sweep_id, const std::string& after_cell,
                                                  int limit);

  // Where GetRunMetrics is in a run's points: changes after `seq_lo` are still to send; within a
  // pass (seq_hi > 0: up to that change) the points after (name, step) in (name, step) order.
  struct MetricsCursor {
    int64_t seq_lo = 0;
    int64_t seq_hi = 0;  // 0: between passes
    std::string name;
    int64_t step = -1;
    bool pass_saw_terminal = false;  // the run had ended when this pass began
  };
  // One page of at most `limit` points with step > after_step (of `names`, all when empty), from
  // `*cursor`, which moves past them; *more is true while the pass has points left. A pass ends
  // at the newest change there was when it began, so a follower's next pass sends what changed
  // meanwhile (a resumed attempt's rewrites included).
  absl::StatusOr<v1::GetRunMetricsResponse> Metrics(int64_t run_id,
                                                    const std::vector<std::string>& names,
                                                    int64_t after_step, int limit,
                                                    MetricsCursor* cursor, bool* more);
  // The names run `run_id` has points under, in order, and its state (NOT_FOUND if no such run).
  absl::StatusOr<std::vector<std::string>> MetricNames(int64_t run_id, v1::RunState* state);
  // The run's events with id > after_id, oldest first (NOT_FOUND if no such run); *max_id
  // receives the newest id read (after_id when none): the next call's after_id.
  absl::StatusOr<std::vector<v1::RunEvent>> Events(int64_t run_id, int64_t after_id = 0,
                                                   int64_t* max_id = nullptr);
  // Live workers, every one with include_offline, else also those gone offline within the last
  // recent_offline_seconds.
  absl::StatusOr<std::vector<v1::Worker>> Workers(bool include_offline,
                                                  double recent_offline_seconds = 0);
  // Lifts worker `name`'s bench (`ablate workers unbench`, docs/server.md#failures): it may lease
  // at once, without its self-check, its fault streak from 0. Returns the worker as Workers lists
  // it; NOT_FOUND naming it when no worker has that name.
  absl::StatusOr<v1::Worker> Unbench(const std::string& name);

  // The run's progress lines with seq > after_seq, and its state (NOT_FOUND if no such run).
  absl::StatusOr<RunLogPage> RunLogs(int64_t run_id, int64_t after_seq);
  // The final checkpoint a finished run kept (RunResult.final_checkpoint), checked against the
  // run's recorded checkpoints; NOT_FOUND, saying why, when there is none.
  absl::StatusOr<v1::CheckpointRef> FinalCheckpoint(int64_t run_id);
  // The run's state and the checkpoints kept for it, by step (NOT_FOUND if no such run).
  absl::StatusOr<v1::ListArtifactsResponse> Artifacts(int64_t run_id);

 private:
  // The workers that may lease now and those benched (pg::SweepHolds' fleet half).
  pg::SweepHolds FleetHolds(pqxx::work& tx);

  Db* db_;
  double lease_seconds_;
};

}  // namespace ablate::server
