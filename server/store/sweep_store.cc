#include "server/store/sweep_store.h"

#include <exception>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/util/run_state.h"
#include "nlohmann/json.hpp"
#include "server/store/notify_batcher.h"
#include "server/store/pg_codec.h"

namespace ablate::server {
namespace {

// ListRuns(limit <= 0) for the server's own readers (GetSweep, WatchSweep): no sweep is larger.
constexpr int kAllRuns = 1000000;

v1::Sweep SweepFromRow(const pqxx::row& row) {
  v1::Sweep s;
  s.set_id(row[0].as<int64_t>());
  s.set_name(row[1].as<std::string>());
  s.set_state(row[2].as<std::string>());
  s.set_spec_yaml(row[3].as<std::string>());
  s.set_file_name(row[4].as<std::string>());
  s.set_created_at(pg::OrZero(row[5]));
  s.set_finished_at(pg::OrZero(row[6]));
  s.set_priority(row[7].as<int>());
  for (const auto& axis : nlohmann::json::parse(row[8].as<std::string>(), nullptr, false)) {
    if (axis.is_string()) s.add_axes(axis.get<std::string>());
  }
  s.set_submitted_by(row[9].as<std::string>());
  auto* c = s.mutable_counts();
  c->set_queued(row[10].as<int>());
  c->set_leased(row[11].as<int>());
  c->set_running(row[12].as<int>());
  c->set_succeeded(row[13].as<int>());
  c->set_diverged(row[14].as<int>());
  c->set_failed(row[15].as<int>());
  c->set_cancelled(row[16].as<int>());
  c->set_total(row[17].as<int>());
  c->set_skipped(row[19].as<int>());
  c->set_refined(row[20].as<int>());
  if (!row[22].is_null()) {
    // Written by Insert from a parsed sweep file; an unreadable value leaves refine unset.
    if (pg::FromJson(row[22].as<std::string>(), s.mutable_refine()).ok()) {
      s.mutable_refine()->set_new_runs(c->refined());
      s.mutable_refine()->set_rounds(row[21].as<int>());
    } else {
      s.clear_refine();
    }
  }
  s.set_prune_above_divergence(row[23].as<bool>());
  // ETA: runs left times the mean duration of finished runs, divided by the runs in flight
  // (a proxy for the workers on this sweep). Crude while few runs have finished; -1 until one has.
  const int remaining = c->queued() + c->leased() + c->running();
  if (s.state() != "active" || remaining == 0) {
    s.set_eta_seconds(0);
  } else if (row[18].is_null()) {
    s.set_eta_seconds(-1);
  } else {
    const int parallel = std::max(1, c->leased() + c->running());
    s.set_eta_seconds(row[18].as<double>() * remaining / parallel);
  }
  return s;
}

// Runs go to PostgreSQL this many at a time: ~5 MB of JSON per statement keeps a 100,000-run
// sweep to one chunk in memory, while each round trip still carries thousands of rows.
constexpr int kRunsPerInsert = 5000;

// One statement's worth of runs, as the array literals the INSERT unnest()s. The run specs' JSON
// is the bulk (~1 KB a run): it goes straight into its literal rather than into a vector of
// strings joined afterwards (two copies at the peak).
struct RunChunk {
  std::vector<std::string> cells, devices;
  std::vector<int64_t> seeds, orders, steps;
  std::string specs = "{";
  int size = 0;

  void Add(const v1::RunSpec& run, int64_t order, const std::string& device) {
    cells.push_back(run.cell());
    seeds.push_back(run.config().seed());
    orders.push_back(order);
    devices.push_back(device);
    pg::AppendTextArrayElement(&specs, pg::ToJson(run));
    steps.push_back(run.config().steps());
    ++size;
  }
  void Clear() {
    cells.clear();
    devices.clear();
    seeds.clear();
    orders.clear();
    steps.clear();
    // clear() keeps the buffer for the next chunk (assigning "{" trips GCC 12's -Wrestrict).
    specs.clear();
    specs.push_back('{');
    size = 0;
  }
};

// Inserts the chunk's runs and their specs, then empties it. order_index is the run's position in
// the whole expansion; ids come from the sequence in array order, so chunks inserted in turn keep
// them ascending in queue order.
void InsertRunChunk(pqxx::work& tx, int64_t sweep_id, const NewSweep& sweep, RunChunk* chunk) {
  chunk->specs += '}';
  pg::Exec(tx, "sweep_insert_runs", sweep_id, sweep.priority, sweep.max_attempts,
           pg::TextArray(chunk->cells), pg::Int64Array(chunk->seeds), pg::Int64Array(chunk->orders),
           pg::TextArray(chunk->devices), chunk->specs, pg::Int64Array(chunk->steps));
  chunk->Clear();
}

}  // namespace

absl::StatusOr<v1::Sweep> SweepStore::Insert(const NewSweep& sweep,
                                             const std::vector<DatasetRecord>& datasets) {
  return db_->Tx<v1::Sweep>("submit sweep", [&](pqxx::work& tx) -> absl::StatusOr<v1::Sweep> {
    pqxx::row s = pg::Exec1(
        tx, "sweep_insert", sweep.name, sweep.spec_yaml, sweep.file_name, sweep.priority,
        sweep.max_attempts, pg::TextArray(sweep.axes), sweep.submitted_by,
        sweep.refine ? pg::ToJson(*sweep.refine) : std::string(), sweep.prune_above_divergence);
    const int64_t id = s[0].as<int64_t>();
    RunChunk chunk;
    int64_t count = 0;
    std::set<std::string> distinct_devices;
    // A pqxx exception thrown by a flush inside the walk is carried out of it (the walk is
    // common/sweep code, not written to be unwound through) and rethrown here, where Db::Tx
    // turns it into a status or a retry.
    std::exception_ptr failed;
    auto flush = [&]() -> absl::Status {
      if (chunk.size == 0) return absl::OkStatus();
      try {
        InsertRunChunk(tx, id, sweep, &chunk);
      } catch (...) {
        failed = std::current_exception();
        return absl::AbortedError("run insert failed");
      }
      return absl::OkStatus();
    };
    absl::Status walked = sweep.for_each_run([&](v1::RunSpec&& run) -> absl::Status {
      const std::string device = run.config().device().empty() ? "auto" : run.config().device();
      distinct_devices.insert(device);
      chunk.Add(run, count++, device);
      return chunk.size >= kRunsPerInsert ? flush() : absl::OkStatus();
    });
    if (walked.ok()) walked = flush();
    if (failed) std::rethrow_exception(failed);
    if (!walked.ok()) return walked;
    if (count != sweep.run_count) {
      return absl::InternalError(absl::StrCat("submit sweep: the grid expanded to ", count,
                                              " runs, expected ", sweep.run_count));
    }
    std::vector<std::string> shas, paths;
    std::vector<int64_t> sizes;
    std::set<std::string> seen;
    for (const auto& d : datasets) {
      // train and val may be the same file (or two files with the same bytes): one row, since
      // ON CONFLICT DO UPDATE cannot touch a row twice in one statement.
      if (!seen.insert(d.sha256).second) continue;
      shas.push_back(d.sha256);
      paths.push_back(d.path);
      sizes.push_back(d.size_bytes);
    }
    if (!shas.empty()) {
      pg::Exec(tx, "sweep_insert_datasets", pg::TextArray(shas), pg::TextArray(paths),
               pg::Int64Array(sizes));
    }
    // A big sweep can change the runs table more than autovacuum's statistics know for up to a
    // minute; with stale row counts the planner may sort every queued run on each Lease instead
    // of walking the queue index in order. ANALYZE samples a bounded number of rows, so it
    // costs tens of milliseconds here rather than seconds on every lease.
    if (count >= 1000) pg::Exec(tx, "sweep_analyze_runs");
    // submit -> queued (docs/architecture.md#the-run-state-machine): the runs are born queued.
    Notices notices;
    for (const auto& d : distinct_devices) notices.Queue(d);
    notices.SendQueue(tx);
    pqxx::result r = pg::Exec(tx, "sweep_get", id);
    return SweepFromRow(r[0]);
  });
}

absl::StatusOr<int64_t> SweepStore::Resolve(const v1::SweepRef& ref) {
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
    return r[0][0].as<int64_t>();
  });
}

absl::StatusOr<v1::Sweep> SweepStore::Get(int64_t sweep_id) {
  return db_->Tx<v1::Sweep>("get sweep", [&](pqxx::work& tx) -> absl::StatusOr<v1::Sweep> {
    pqxx::result r = pg::Exec(tx, "sweep_get", sweep_id);
    if (r.empty()) return absl::NotFoundError(absl::StrCat("no sweep with id ", sweep_id));
    return SweepFromRow(r[0]);
  });
}

absl::StatusOr<std::vector<v1::Sweep>> SweepStore::List(int limit, bool active_only) {
  using Out = std::vector<v1::Sweep>;
  return db_->Tx<Out>("list sweeps", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "sweep_list", active_only, limit > 0 ? limit : 100);
    Out out;
    for (const auto& row : r) out.push_back(SweepFromRow(row));
    return out;
  });
}

absl::StatusOr<std::vector<v1::Run>> SweepStore::ListRuns(int64_t sweep_id,
                                                          const std::vector<v1::RunState>& states,
                                                          int limit) {
  using Out = std::vector<v1::Run>;
  return db_->Tx<Out>("list runs", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "runs_list", sweep_id, pg::TextArray(pg::StateNames(states)),
                              limit > 0 ? limit : kAllRuns);
    Out out;
    out.reserve(r.size());
    for (const auto& row : r) {
      auto run = pg::RunFromRow(row);
      if (!run.ok()) return run.status();
      out.push_back(*std::move(run));
    }
    return out;
  });
}

absl::StatusOr<v1::GetRunMetricsResponse> SweepStore::Metrics(int64_t run_id,
                                                              const std::vector<std::string>& names,
                                                              int64_t after_step, int64_t after_seq,
                                                              int64_t* max_seq) {
  using Out = v1::GetRunMetricsResponse;
  return db_->Tx<Out>("get run metrics", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result run = pg::Exec(tx, "run_state", run_id);
    if (run.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
    Out out;
    out.set_state(util::RunStateFromName(run[0][0].as<std::string>()));
    pqxx::result r =
        pg::Exec(tx, "run_metrics", run_id, after_step, pg::TextArray(names), after_seq);
    *max_seq = after_seq;
    for (const auto& row : r) {
      auto* p = out.add_points();
      p->set_step(row[0].as<int64_t>());
      p->set_name(row[1].as<std::string>());
      p->set_value(row[2].as<double>());
      p->set_time(row[3].as<double>());
      *max_seq = std::max(*max_seq, row[4].as<int64_t>());
    }
    return out;
  });
}

absl::StatusOr<std::vector<v1::RunEvent>> SweepStore::Events(int64_t run_id) {
  using Out = std::vector<v1::RunEvent>;
  return db_->Tx<Out>("list run events", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    // An unknown run is an error, not an empty history (`ablate logs 999`).
    if (pg::Exec(tx, "run_exists", run_id).empty()) {
      return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
    }
    pqxx::result r = pg::Exec(tx, "run_events", run_id);
    Out out;
    for (const auto& row : r) {
      v1::RunEvent e;
      e.set_time(row[0].as<double>());
      e.set_kind(row[1].as<std::string>());
      e.set_attempt(row[2].as<int>());
      e.set_worker(row[3].as<std::string>());
      e.set_message(row[4].as<std::string>());
      out.push_back(std::move(e));
    }
    return out;
  });
}

absl::StatusOr<std::vector<v1::Worker>> SweepStore::Workers(bool include_offline) {
  using Out = std::vector<v1::Worker>;
  return db_->Tx<Out>("list workers", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    // Offline = stopped cleanly (Deregister), or not seen for two lease periods: a worker
    // heartbeats every third of one, so that is several missed beats, not one slow reply. Busy and
    // the runs held come from the runs' leases, not workers.current_run_id: a worker with --slots
    // holds several at once, and current_run_id only says which it last leased or heartbeated. The
    // held runs are few and the runs_leases partial index covers exactly them.
    pqxx::result r = pg::Exec(tx, "workers_list", 2 * lease_seconds_, include_offline);
    Out out;
    for (const auto& row : r) {
      v1::Worker w;
      w.set_id(row[0].as<int64_t>());
      absl::Status s = pg::FromJson(row[1].as<std::string>(), w.mutable_info());
      if (!s.ok()) return s;
      w.set_state(row[2].as<std::string>());
      w.set_registered_at(row[3].as<double>());
      w.set_last_seen_at(row[4].as<double>());
      w.set_current_run_id(row[5].as<int64_t>());
      w.set_runs_completed(row[6].as<int>());
      for (absl::string_view id :
           absl::StrSplit(row[7].as<std::string>(), ',', absl::SkipEmpty())) {
        int64_t v = 0;
        if (absl::SimpleAtoi(id, &v)) w.add_held_run_ids(v);
      }
      w.set_open_data_claims(row[8].as<int>());
      out.push_back(std::move(w));
    }
    return out;
  });
}

absl::StatusOr<RunLogPage> SweepStore::RunLogs(int64_t run_id, int64_t after_seq) {
  return db_->Tx<RunLogPage>("get run logs", [&](pqxx::work& tx) -> absl::StatusOr<RunLogPage> {
    pqxx::result run = pg::Exec(tx, "run_state", run_id);
    if (run.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
    RunLogPage out;
    out.state = util::RunStateFromName(run[0][0].as<std::string>());
    out.max_seq = after_seq;
    // At most kMaxLogLinesPerRun rows exist per run (ReportLogs trims), so this is bounded.
    pqxx::result r = pg::Exec(tx, "run_logs", run_id, after_seq);
    for (const auto& row : r) {
      out.max_seq = std::max(out.max_seq, row[0].as<int64_t>());
      v1::LogLine l;
      l.set_step(row[1].as<int64_t>());
      l.set_attempt(row[2].as<int>());
      l.set_time(row[3].as<double>());
      l.set_text(row[4].as<std::string>());
      out.lines.push_back(std::move(l));
    }
    return out;
  });
}

absl::StatusOr<v1::CheckpointRef> SweepStore::FinalCheckpoint(int64_t run_id) {
  using Out = v1::CheckpointRef;
  return db_->Tx<Out>("get final checkpoint", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "run_final_checkpoint", run_id);
    if (r.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
    const std::string state = r[0][0].as<std::string>();
    if (state != "succeeded" && state != "diverged") {
      return absl::NotFoundError(absl::StrCat("run ", run_id, " is ", state,
                                              ": only a finished (succeeded or diverged) run "
                                              "has final weights"));
    }
    if (r[0][2].is_null()) {
      return absl::NotFoundError(absl::StrCat(
          "run ", run_id,
          " kept no final checkpoint (its sweep says keep_final: false, or it finished "
          "before the server recorded final checkpoints)"));
    }
    Out ref;
    ref.set_step(r[0][2].as<int64_t>());
    ref.set_size_bytes(r[0][3].as<int64_t>());
    ref.set_sha256(r[0][4].as<std::string>());
    return ref;
  });
}

}  // namespace ablate::server
