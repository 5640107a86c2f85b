// The submit transition: a sweep, its runs (born queued) and its data sets, in one transaction.
#include "server/store/sweep_store.h"

#include <exception>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cost/flops.h"
#include "server/store/notify_batcher.h"
#include "server/store/pg_codec.h"

namespace ablate::server {
namespace {

// Runs go to PostgreSQL this many at a time: ~5 MB of JSON per statement keeps a 100,000-run
// sweep to one chunk in memory, while each round trip still carries thousands of rows.
constexpr int kRunsPerInsert = 5000;

// One statement's worth of runs, as the array literals the INSERT unnest()s. The run specs' JSON
// is the bulk (~1 KB a run): it goes straight into its literal rather than into a vector of
// strings joined afterwards (two copies at the peak).
struct RunChunk {
  std::vector<std::string> cells, devices, dtypes;
  std::vector<int64_t> seeds, orders, steps;
  std::vector<double> flops, flops_per_token;
  std::string specs = "{";
  int size = 0;

  void Add(const v1::RunSpec& run, int64_t order, const std::string& device) {
    cells.push_back(run.cell());
    seeds.push_back(run.config().seed());
    orders.push_back(order);
    devices.push_back(device);
    pg::AppendTextArrayElement(&specs, pg::ToJson(run));
    steps.push_back(run.config().steps());
    const int64_t vocab = cost::VocabOf(run.data());
    flops.push_back(cost::RunFlops(run.config(), vocab));
    flops_per_token.push_back(cost::FlopsPerToken(run.config(), vocab));
    dtypes.push_back(run.config().dtype());
    ++size;
  }
  void Clear() {
    cells.clear();
    devices.clear();
    seeds.clear();
    orders.clear();
    steps.clear();
    flops.clear();
    flops_per_token.clear();
    dtypes.clear();
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
           pg::TextArray(chunk->devices), chunk->specs, pg::Int64Array(chunk->steps),
           pg::DoubleArray(chunk->flops), pg::DoubleArray(chunk->flops_per_token),
           pg::TextArray(chunk->dtypes));
  chunk->Clear();
}

}  // namespace

absl::StatusOr<v1::Sweep> SweepStore::Insert(const NewSweep& sweep,
                                             const std::vector<DatasetRecord>& datasets) {
  return db_->Tx<v1::Sweep>("submit sweep", [&](pqxx::work& tx) -> absl::StatusOr<v1::Sweep> {
    pqxx::row s = pg::Exec1(
        tx, "sweep_insert", sweep.name, sweep.spec_yaml, sweep.file_name, sweep.priority,
        sweep.max_attempts, pg::TextArray(sweep.axes), sweep.submitted_by,
        sweep.refine ? pg::ToJson(*sweep.refine) : std::string(), sweep.prune_above_divergence,
        sweep.budget ? sweep.budget->gpu_hours() : 0.0, sweep.budget ? sweep.budget->usd() : 0.0);
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
    return pg::SweepFromRow(r[0]);
  });
}

absl::StatusOr<int64_t> SweepStore::CompactRunCounts() {
  return db_->Tx<int64_t>("compact run counts", [&](pqxx::work& tx) -> absl::StatusOr<int64_t> {
    return pg::Exec1(tx, "run_counts_compact")[0].as<int64_t>();
  });
}

}  // namespace ablate::server
