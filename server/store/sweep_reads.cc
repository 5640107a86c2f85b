// What the CLI (and /metrics) reads, one transaction a call; nothing here writes.
#include "server/store/sweep_reads.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/run/run_state.h"
#include "common/util/status_macros.h"
#include "server/store/pg_codec.h"

namespace ablate::server {
namespace {

// ListRuns, for the server's own readers (GetSweep, WatchSweep): no sweep is larger.
constexpr int kAllRuns = 1000000;

absl::StatusOr<std::vector<v1::Run>> Runs(pqxx::work& tx, const pqxx::result& r) {
  ASSIGN_OR_RETURN(const pg::BaseSpecs bases, pg::LoadBaseSpecs(tx, r));
  const pg::ByName col(r);
  std::vector<v1::Run> out;
  out.reserve(r.size());
  for (const auto& row : r) {
    auto run = pg::RunFromRow(col, row, bases);
    if (!run.ok()) return run.status();
    out.push_back(*std::move(run));
  }
  return out;
}

absl::StatusOr<std::vector<v1::Run>> Page(pqxx::work& tx, int64_t sweep_id,
                                          const std::vector<v1::RunState>& states, int limit,
                                          int offset) {
  return Runs(tx, pg::Exec(tx, "runs_page", sweep_id, pg::TextArray(pg::StateNames(states)), limit,
                           offset));
}

// workers_list's rows.
absl::StatusOr<std::vector<v1::Worker>> WorkersFromRows(const pqxx::result& r) {
  const pg::ByName col(r);
  std::vector<v1::Worker> out;
  for (const auto& row : r) {
    v1::Worker w;
    w.set_id(col(row, "id").as<int64_t>());
    RETURN_IF_ERROR(pg::FromJson(col(row, "info").as<std::string>(), w.mutable_info()));
    w.set_state(col(row, "state").as<std::string>());
    w.set_registered_at(col(row, "registered_at").as<double>());
    w.set_last_seen_at(col(row, "last_seen_at").as<double>());
    w.set_current_run_id(col(row, "current_run_id").as<int64_t>());
    w.set_runs_completed(col(row, "runs_completed").as<int>());
    for (absl::string_view id :
         absl::StrSplit(col(row, "held_run_ids").as<std::string>(), ',', absl::SkipEmpty())) {
      int64_t v = 0;
      if (absl::SimpleAtoi(id, &v)) w.add_held_run_ids(v);
    }
    w.set_open_data_claims(col(row, "open_data_claims").as<int>());
    // The bench only while it holds (a bench that ran out with its self-check passed is history).
    if (w.state() == "benched") {
      w.set_benched_until(col(row, "benched_until").as<double>());
      w.set_bench_reason(col(row, "bench_reason").as<std::string>());
      w.set_self_check_due(col(row, "self_check_due").as<bool>());
    }
    w.set_fault_streak(col(row, "fault_streak").as<int>());
    w.set_runs_faulted(col(row, "runs_faulted").as<int>());
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace

absl::StatusOr<int64_t> SweepReads::Resolve(const v1::SweepRef& ref) {
  if (ref.id() == 0 && ref.name().empty()) {
    return absl::InvalidArgumentError("sweep: give an id or a name");
  }
  return db_->Tx<int64_t>("find sweep", [&](pqxx::work& tx) -> absl::StatusOr<int64_t> {
    pqxx::result r = ref.id() != 0 ? pg::Exec(tx, "sweep_resolve_id", ref.id())
                                   : pg::Exec(tx, "sweep_resolve_name", ref.name());
    if (r.empty()) {
      return absl::NotFoundError(ref.id() != 0
                                     ? absl::StrCat("no sweep with id ", ref.id())
                                     : absl::StrCat("no sweep named \"", ref.name(), "\""));
    }
    return r[0]["id"].as<int64_t>();
  });
}

absl::StatusOr<std::map<int64_t, std::vector<int64_t>>> SweepReads::SweepsOfRuns(
    const std::vector<int64_t>& run_ids) {
  using BySweep = std::map<int64_t, std::vector<int64_t>>;
  return db_->Tx<BySweep>("find runs' sweeps", [&](pqxx::work& tx) -> absl::StatusOr<BySweep> {
    pqxx::result r = pg::Exec(tx, "runs_sweeps", pg::Int64Array(run_ids));
    const pg::ByName col(r);
    BySweep by_sweep;
    std::set<int64_t> found;
    for (const auto& row : r) {
      const int64_t id = col(row, "id").as<int64_t>();
      found.insert(id);
      by_sweep[col(row, "sweep_id").as<int64_t>()].push_back(id);
    }
    for (int64_t id : run_ids) {
      if (!found.contains(id)) return absl::NotFoundError(absl::StrCat("no run with id ", id));
    }
    return by_sweep;
  });
}

absl::StatusOr<v1::Sweep> SweepReads::Get(int64_t sweep_id) {
  return db_->Tx<v1::Sweep>("get sweep", [&](pqxx::work& tx) -> absl::StatusOr<v1::Sweep> {
    pqxx::result r = pg::Exec(tx, "sweep_get", sweep_id);
    if (r.empty()) return absl::NotFoundError(absl::StrCat("no sweep with id ", sweep_id));
    pg::SweepHolds holds = FleetHolds(tx);
    const pqxx::row h = pg::Exec1(tx, "sweep_holds", sweep_id, lease_seconds_);
    holds.counted = true;
    holds.unfittable = h["unfittable"].as<int64_t>();
    holds.preemptions = h["preemptions"].as<int64_t>();
    holds.worker_faults = h["worker_faults"].as<int64_t>();
    holds.lost_in_flight = h["lost_in_flight"].as<int64_t>();
    holds.fault_held = h["fault_held"].as<int64_t>();
    holds.fault_held_until = h["fault_held_until"].as<double>();
    return pg::SweepFromRow(pg::ByName(r), r.front(), &holds);
  });
}

absl::StatusOr<std::vector<v1::Sweep>> SweepReads::List(int limit, bool active_only) {
  using Out = std::vector<v1::Sweep>;
  return db_->Tx<Out>("list sweeps", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "sweep_list", active_only, limit > 0 ? limit : 100);
    // The fleet once for every sweep, and the leases lost workers hold (a few rows); unfittable
    // runs are GetSweep's, so a list stays a read of run_counts.
    const pg::SweepHolds fleet = FleetHolds(tx);
    std::map<int64_t, int64_t> lost;
    const pqxx::result lr = pg::Exec(tx, "runs_lost_leases", lease_seconds_);
    const pg::ByName lost_col(lr);
    for (const auto& row : lr) {
      lost[lost_col(row, "sweep_id").as<int64_t>()] = lost_col(row, "lost").as<int64_t>();
    }
    const pg::ByName col(r);
    Out out;
    for (const auto& row : r) {
      pg::SweepHolds holds = fleet;
      auto it = lost.find(col(row, "id").as<int64_t>());
      if (it != lost.end()) holds.lost_in_flight = it->second;
      out.push_back(pg::SweepFromRow(col, row, &holds));
    }
    return out;
  });
}

pg::SweepHolds SweepReads::FleetHolds(pqxx::work& tx) {
  const pqxx::row f = pg::Exec1(tx, "fleet_can_lease", lease_seconds_);
  pg::SweepHolds holds;
  holds.can_lease = f["can_lease"].as<int64_t>();
  holds.benched = f["benched"].as<int64_t>();
  return holds;
}

absl::StatusOr<std::vector<v1::Run>> SweepReads::ListRuns(int64_t sweep_id,
                                                          const std::vector<v1::RunState>& states) {
  using Out = std::vector<v1::Run>;
  return db_->Tx<Out>("list runs", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    ASSIGN_OR_RETURN(Out out, Page(tx, sweep_id, states, kAllRuns, 0));
    std::reverse(out.begin(), out.end());  // the page is newest first
    return out;
  });
}

absl::StatusOr<std::vector<v1::Run>> SweepReads::InFlight(int64_t sweep_id) {
  using Out = std::vector<v1::Run>;
  return db_->Tx<Out>("list runs in flight", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    return Runs(tx, pg::Exec(tx, "runs_in_flight", sweep_id));
  });
}

absl::StatusOr<RunPage> SweepReads::RunsPage(int64_t sweep_id,
                                             const std::vector<v1::RunState>& states, int limit,
                                             int offset) {
  return db_->Tx<RunPage>("list runs", [&](pqxx::work& tx) -> absl::StatusOr<RunPage> {
    RunPage out;
    ASSIGN_OR_RETURN(out.runs, Page(tx, sweep_id, states, limit, std::max(offset, 0)));
    out.total =
        pg::Exec1(tx, "runs_count", sweep_id, pg::TextArray(pg::StateNames(states)))["total"]
            .as<int64_t>();
    return out;
  });
}

absl::StatusOr<v1::ListCellsResponse> SweepReads::CellsPage(int64_t sweep_id,
                                                            const std::string& after_cell,
                                                            int limit) {
  using Out = v1::ListCellsResponse;
  return db_->Tx<Out>("list cells", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    // One cell more than the page: whether another page follows, without a call that finds none.
    pqxx::result r = pg::Exec(tx, "cells_page", sweep_id, after_cell, limit + 1);
    const int n = std::min<int>(static_cast<int>(r.size()), limit);
    const pg::ByName col(r);
    Out out;
    for (const auto& row : r) {
      if (out.cells_size() == n) break;  // the one past the page
      v1::CellSummary* c = out.add_cells();
      c->set_cell(col(row, "cell").as<std::string>());
      RETURN_IF_ERROR(pg::GridValuesFromJson(col(row, "grid_values"), c->mutable_grid_values()));
      c->set_refine_round(col(row, "round").as<int>());
      v1::SweepCounts* counts = c->mutable_counts();
      counts->set_queued(col(row, "queued").as<int>());
      counts->set_leased(col(row, "leased").as<int>());
      counts->set_running(col(row, "running").as<int>());
      counts->set_succeeded(col(row, "succeeded").as<int>());
      counts->set_diverged(col(row, "diverged").as<int>());
      counts->set_failed(col(row, "failed").as<int>());
      counts->set_cancelled(col(row, "cancelled").as<int>());
      counts->set_skipped(col(row, "skipped").as<int>());
      counts->set_total(col(row, "total").as<int>());
      counts->set_refined(col(row, "refined").as<int>());
      const int loss_runs = col(row, "loss_n").as<int>();
      c->set_loss_runs(loss_runs);
      if (loss_runs > 0) c->set_mean_val_loss(col(row, "loss_sum").as<double>() / loss_runs);
      c->set_running_steps(col(row, "steps").as<int64_t>());
      c->set_running_total_steps(col(row, "total_steps").as<int64_t>());
    }
    if (static_cast<int>(r.size()) > limit && n > 0) {
      out.set_next_after_cell(out.cells(n - 1).cell());
    }
    return out;
  });
}

absl::StatusOr<v1::GetRunMetricsResponse> SweepReads::Metrics(int64_t run_id,
                                                              const std::vector<std::string>& names,
                                                              int64_t after_step, int limit,
                                                              MetricsCursor* cursor, bool* more) {
  using Out = v1::GetRunMetricsResponse;
  MetricsCursor c = *cursor;
  bool page_full = false;
  auto out = db_->Tx<Out>("get run metrics", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    c = *cursor;
    pqxx::result run = pg::Exec(tx, "run_state", run_id);
    if (run.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
    Out out;
    out.set_state(util::RunStateFromName(run[0]["state"].as<std::string>()));
    if (c.seq_hi == 0) {
      // A new pass: up to the newest change now (a run's batches commit in seq order, since each
      // takes the run's row lock before its number).
      c.seq_hi = pg::Exec1(tx, "run_metrics_newest", run_id)["seq"].as<int64_t>();
      c.name.clear();
      c.step = -1;
      c.pass_saw_terminal = util::IsTerminal(out.state());
    }
    if (c.seq_hi > c.seq_lo) {
      pqxx::result r = pg::Exec(tx, "run_metrics", run_id, after_step, pg::TextArray(names),
                                c.seq_lo, c.seq_hi, c.name, c.step, limit);
      const pg::ByName col(r);
      for (const auto& row : r) {
        auto* p = out.add_points();
        p->set_step(col(row, "step").as<int64_t>());
        p->set_name(col(row, "name").as<std::string>());
        p->set_value(col(row, "value").as<double>());
        p->set_time(col(row, "time").as<double>());
      }
      page_full = static_cast<int>(r.size()) >= limit;
    }
    return out;
  });
  if (!out.ok()) return out;
  if (page_full) {
    c.name = out->points(out->points_size() - 1).name();
    c.step = out->points(out->points_size() - 1).step();
  } else {
    c.seq_lo = std::max(c.seq_lo, c.seq_hi);
    c.seq_hi = 0;
  }
  *more = page_full;
  *cursor = c;
  return out;
}

absl::StatusOr<std::vector<std::string>> SweepReads::MetricNames(int64_t run_id,
                                                                 v1::RunState* state) {
  using Out = std::vector<std::string>;
  return db_->Tx<Out>("list metric names", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result run = pg::Exec(tx, "run_state", run_id);
    if (run.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
    *state = util::RunStateFromName(run[0]["state"].as<std::string>());
    pqxx::result r = pg::Exec(tx, "run_metric_names", run_id);
    Out out;
    for (const auto& row : r) out.push_back(row["name"].as<std::string>());
    return out;
  });
}

absl::StatusOr<std::vector<v1::RunEvent>> SweepReads::Events(int64_t run_id, int64_t after_id,
                                                             int64_t* max_id) {
  using Out = std::vector<v1::RunEvent>;
  return db_->Tx<Out>("list run events", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    // An unknown run is an error, not an empty history (`ablate logs 999`).
    if (pg::Exec(tx, "run_exists", run_id).empty()) {
      return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
    }
    pqxx::result r = pg::Exec(tx, "run_events_after", run_id, after_id);
    const pg::ByName col(r);
    Out out;
    if (max_id != nullptr) *max_id = after_id;
    for (const auto& row : r) {
      if (max_id != nullptr) *max_id = std::max(*max_id, col(row, "id").as<int64_t>());
      v1::RunEvent e;
      e.set_time(col(row, "time").as<double>());
      e.set_kind(col(row, "kind").as<std::string>());
      e.set_attempt(col(row, "attempt").as<int>());
      e.set_worker(col(row, "worker").as<std::string>());
      e.set_message(col(row, "message").as<std::string>());
      e.set_fault(col(row, "fault").as<std::string>());
      out.push_back(std::move(e));
    }
    return out;
  });
}

absl::StatusOr<std::vector<v1::Worker>> SweepReads::Workers(bool include_offline,
                                                            double recent_offline_seconds) {
  using Out = std::vector<v1::Worker>;
  return db_->Tx<Out>("list workers", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    // Offline = stopped cleanly (Deregister), or not seen for two lease periods: a worker
    // heartbeats every third of one, so that is several missed beats, not one slow reply. Lost =
    // not seen for one (issue #39: a dead worker shows as such within a lease period, while its
    // leases still wait for the reaper). Busy and the runs held come from the runs' leases, not
    // workers.current_run_id: a worker with --slots holds several at once, and current_run_id
    // only says which it last leased or heartbeated. The held runs are few and the runs_leases
    // partial index covers exactly them.
    return WorkersFromRows(pg::Exec(tx, "workers_list", lease_seconds_, include_offline,
                                    std::max(recent_offline_seconds, 0.0), int64_t{0}));
  });
}

absl::StatusOr<v1::Worker> SweepReads::Unbench(const std::string& name) {
  return db_->Tx<v1::Worker>("unbench worker", [&](pqxx::work& tx) -> absl::StatusOr<v1::Worker> {
    pqxx::result r = pg::Exec(tx, "worker_unbench", name);
    if (r.empty()) {
      return absl::NotFoundError(
          absl::StrCat("no worker named \"", name, "\" (`ablate workers --all` lists every one)"));
    }
    ASSIGN_OR_RETURN(std::vector<v1::Worker> w,
                     WorkersFromRows(pg::Exec(tx, "workers_list", lease_seconds_, true, 0.0,
                                              r[0]["id"].as<int64_t>())));
    if (w.empty()) return absl::InternalError(absl::StrCat("worker \"", name, "\" vanished"));
    if (!r[0]["benched"].as<bool>()) {
      // Nothing to lift: saying it was lifted would hide a misspelt or mistaken name.
      return absl::FailedPreconditionError(
          absl::StrCat("worker \"", name, "\" is not benched (it is ", w.front().state(),
                       "); there is no bench to lift"));
    }
    return w.front();
  });
}

absl::StatusOr<RunLogPage> SweepReads::RunLogs(int64_t run_id, int64_t after_seq) {
  return db_->Tx<RunLogPage>("get run logs", [&](pqxx::work& tx) -> absl::StatusOr<RunLogPage> {
    pqxx::result run = pg::Exec(tx, "run_state", run_id);
    if (run.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
    RunLogPage out;
    out.state = util::RunStateFromName(run[0]["state"].as<std::string>());
    out.max_seq = after_seq;
    // At most kMaxLogLinesPerRun rows exist per run (ReportLogs trims, ingest_store.h), so this
    // is bounded.
    pqxx::result r = pg::Exec(tx, "run_logs", run_id, after_seq);
    const pg::ByName col(r);
    for (const auto& row : r) {
      out.max_seq = std::max(out.max_seq, col(row, "seq").as<int64_t>());
      v1::LogLine l;
      l.set_step(col(row, "step").as<int64_t>());
      l.set_attempt(col(row, "attempt").as<int>());
      l.set_time(col(row, "time").as<double>());
      l.set_text(col(row, "line").as<std::string>());
      out.lines.push_back(std::move(l));
    }
    return out;
  });
}

absl::StatusOr<v1::CheckpointRef> SweepReads::FinalCheckpoint(int64_t run_id) {
  using Out = v1::CheckpointRef;
  return db_->Tx<Out>("get final checkpoint", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "run_final_checkpoint", run_id);
    if (r.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
    const pqxx::row row = r.front();
    const std::string state = row["state"].as<std::string>();
    if (state != "succeeded" && state != "diverged") {
      return absl::NotFoundError(absl::StrCat("run ", run_id, " is ", state,
                                              ": only a finished (succeeded or diverged) run "
                                              "has final weights"));
    }
    if (row["step"].is_null()) {
      return absl::NotFoundError(absl::StrCat(
          "run ", run_id,
          " kept no final checkpoint (its sweep says keep_final: false, or it finished "
          "before the server recorded final checkpoints)"));
    }
    Out ref;
    ref.set_step(row["step"].as<int64_t>());
    ref.set_size_bytes(row["size_bytes"].as<int64_t>());
    ref.set_sha256(row["sha256"].as<std::string>());
    return ref;
  });
}

absl::StatusOr<v1::ListArtifactsResponse> SweepReads::Artifacts(int64_t run_id) {
  using Out = v1::ListArtifactsResponse;
  return db_->Tx<Out>("list artifacts", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "run_artifacts", run_id);
    if (r.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
    const pg::ByName col(r);
    Out out;
    out.set_state(util::RunStateFromName(r[0]["state"].as<std::string>()));
    for (const auto& row : r) {
      if (col(row, "step").is_null()) continue;  // no checkpoint kept
      v1::Artifact* a = out.add_artifacts();
      // Only a finished run's final checkpoint is served as "final" (FinalCheckpoint).
      a->set_name(col(row, "final").as<bool>() && util::HasOutcome(out.state()) ? "final"
                                                                                : "checkpoint");
      a->mutable_ref()->set_step(col(row, "step").as<int64_t>());
      a->mutable_ref()->set_sha256(col(row, "sha256").as<std::string>());
      a->mutable_ref()->set_size_bytes(col(row, "size_bytes").as<int64_t>());
      a->set_attempt(col(row, "attempt").as<int>());
      a->set_created_at(col(row, "created_at").as<double>());
    }
    return out;
  });
}

}  // namespace ablate::server
