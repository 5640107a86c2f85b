// The submit transition: a sweep, its runs (born queued) and its data sets, in one transaction.
#include "server/store/sweep_store.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/cost/flops.h"
#include "common/cost/memory.h"
#include "common/util/status_macros.h"
#include "server/store/notify_batcher.h"
#include "server/store/pg_codec.h"
#include "server/store/proto_json.h"

namespace ablate::server {
namespace {

// Runs go to PostgreSQL this many at a time: a few MB per statement, so a 100,000-run sweep is
// never whole in memory, while each round trip still carries thousands of rows.
constexpr int kRunsPerInsert = 5000;

// One statement's worth of runs, as the array literals the INSERT unnest()s. Each run's spec is
// written as what it has apart from the sweep's first run (pg::JsonDelta, migration 0014: a
// hundred bytes or so where the whole spec is ~1 KB), straight into its literal.
struct RunChunk {
  std::vector<std::string> cells, devices, dtypes;
  std::vector<int64_t> seeds, orders, steps, memory;
  std::vector<double> flops, flops_per_token;
  std::string specs = "{";
  std::string own;   // scratch: one run's delta
  std::string base;  // the first chunk only: the sweep's base spec (run_spec_base)
  int size = 0;
  // Filled by Seal: the literals the statement takes.
  std::string cells_text, seeds_text, orders_text, devices_text, steps_text, flops_text,
      flops_per_token_text, dtypes_text, memory_text;

  // False when the delta cannot be written (a message shape proto_json does not handle).
  bool Add(const v1::RunSpec& run, const pg::JsonDelta& delta, int64_t order,
           const std::string& device) {
    own.clear();
    if (!delta.Append(run, &own)) return false;
    cells.push_back(run.cell());
    seeds.push_back(run.config().seed());
    orders.push_back(order);
    devices.push_back(device);
    pg::AppendTextArrayElement(&specs, own);
    steps.push_back(run.config().steps());
    const int64_t vocab = cost::VocabOf(run.data());
    flops.push_back(cost::RunFlops(run.config(), vocab));
    flops_per_token.push_back(cost::FlopsPerToken(run.config(), vocab));
    memory.push_back(cost::RunMemoryBytes(run.config(), vocab));
    dtypes.push_back(run.config().dtype());
    ++size;
    return true;
  }
  // Writes the literals (on the walk's thread, so the inserting thread only sends them).
  void Seal() {
    specs += '}';
    cells_text = pg::TextArray(cells);
    seeds_text = pg::Int64Array(seeds);
    orders_text = pg::Int64Array(orders);
    devices_text = pg::TextArray(devices);
    steps_text = pg::Int64Array(steps);
    flops_text = pg::DoubleArray(flops);
    flops_per_token_text = pg::DoubleArray(flops_per_token);
    dtypes_text = pg::TextArray(dtypes);
    memory_text = pg::Int64Array(memory);
  }
};

// Inserts the chunk's runs and their specs. order_index is the run's position in the whole
// expansion; ids come from the sequence in array order, so chunks inserted in turn keep them
// ascending in queue order.
void InsertRunChunk(pqxx::work& tx, int64_t sweep_id, const NewSweep& sweep,
                    const RunChunk& chunk) {
  if (!chunk.base.empty()) pg::Exec(tx, "run_spec_base_insert", sweep_id, chunk.base);
  pg::Exec(tx, "sweep_insert_runs", sweep_id, sweep.priority, sweep.max_attempts, chunk.cells_text,
           chunk.seeds_text, chunk.orders_text, chunk.devices_text, chunk.specs, chunk.steps_text,
           chunk.flops_text, chunk.flops_per_token_text, chunk.dtypes_text, chunk.memory_text);
}

// Chunks from the walk's thread to the inserting one, at most two waiting: the expansion, the
// specs' JSON and the literals (server CPU) overlap PostgreSQL's inserting of the chunk before,
// where a submit used to take their sum.
class ChunkPipe {
 public:
  // The walk's side. False once the inserting side has stopped: the walk should end.
  bool Push(RunChunk&& chunk) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return stopped_ || queue_.size() < 2; });
    if (stopped_) return false;
    queue_.push_back(std::move(chunk));
    cv_.notify_all();
    return true;
  }
  void Close(absl::Status walked) {
    std::lock_guard lock(mu_);
    closed_ = true;
    walked_ = std::move(walked);
    cv_.notify_all();
  }
  // The inserting side: the next chunk, or nullopt once the walk has ended or failed (walked()
  // says how).
  std::optional<RunChunk> Pop() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || closed_; });
    if (queue_.empty() || !walked_.ok()) return std::nullopt;
    RunChunk chunk = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return chunk;
  }
  void Stop() {
    std::lock_guard lock(mu_);
    stopped_ = true;
    cv_.notify_all();
  }
  absl::Status walked() {
    std::lock_guard lock(mu_);
    return walked_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RunChunk> queue_;
  bool closed_ = false, stopped_ = false;
  absl::Status walked_;
};

}  // namespace

absl::StatusOr<v1::Sweep> SweepStore::Insert(const NewSweep& sweep,
                                             const std::vector<DatasetRecord>& datasets) {
  return db_->Tx<v1::Sweep>("submit sweep", [&](pqxx::work& tx) -> absl::StatusOr<v1::Sweep> {
    pqxx::row s = pg::Exec1(
        tx, "sweep_insert", sweep.name, sweep.spec_yaml, sweep.file_name, sweep.priority,
        sweep.max_attempts, pg::TextArray(sweep.axes), sweep.submitted_by,
        sweep.refine ? pg::ToJson(*sweep.refine) : std::string(), sweep.prune_above_divergence,
        sweep.budget ? sweep.budget->gpu_hours() : 0.0, sweep.budget ? sweep.budget->usd() : 0.0);
    const int64_t id = s["id"].as<int64_t>();
    // The walk runs on a thread of its own; the sweep's runs are inserted here as it hands them
    // over. Written by the walk, read here once it has been joined:
    int64_t count = 0;
    std::set<std::string> distinct_devices;
    ChunkPipe pipe;
    std::thread walker([&] {
      RunChunk chunk;
      // The sweep's first run is the base its runs' specs are stored against.
      std::optional<pg::JsonDelta> delta;
      absl::Status walked = sweep.for_each_run([&](v1::RunSpec&& run) -> absl::Status {
        const std::string device = run.config().device().empty() ? "auto" : run.config().device();
        distinct_devices.insert(device);
        if (count == 0) {
          delta = pg::JsonDelta::Make(run, "config");
          if (delta) chunk.base = pg::ToJson(run);
        }
        if (!delta || !chunk.Add(run, *delta, count++, device)) {
          return absl::InternalError(
              "submit sweep: a run spec has a field the store cannot write as JSON");
        }
        if (chunk.size < kRunsPerInsert) return absl::OkStatus();
        chunk.Seal();
        if (!pipe.Push(std::move(chunk))) return absl::CancelledError("submit sweep: stopped");
        chunk = RunChunk();
        return absl::OkStatus();
      });
      if (walked.ok() && chunk.size > 0) {
        chunk.Seal();
        if (!pipe.Push(std::move(chunk))) walked = absl::CancelledError("submit sweep: stopped");
      }
      pipe.Close(std::move(walked));
    });
    // Joined on every way out, a pqxx exception from an insert included (Db::Tx turns it into a
    // status or a retry, which walks the grid again from the start).
    absl::Cleanup join = [&] {
      pipe.Stop();
      walker.join();
    };
    while (std::optional<RunChunk> chunk = pipe.Pop()) InsertRunChunk(tx, id, sweep, *chunk);
    std::move(join).Invoke();
    RETURN_IF_ERROR(pipe.walked());
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
    return pg::SweepFromRow(pg::ByName(r), r.front());
  });
}

absl::StatusOr<int64_t> SweepStore::CompactRunCounts() {
  return db_->Tx<int64_t>("compact run counts", [&](pqxx::work& tx) -> absl::StatusOr<int64_t> {
    return pg::Exec1(tx, "run_counts_compact")["compacted"].as<int64_t>();
  });
}

}  // namespace ablate::server
