// The submit transition: a sweep and its runs, born queued (the "submit -> queued" edge of
// docs/architecture.md#the-run-state-machine). What the CLI reads back is in sweep_reads.h; cancel
// and retry change run states, so they are in run_transitions.h with the other transitions.
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
  std::optional<v1::Budget> budget;  // the sweep file's `budget:` (limits only)
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

class SweepStore {
 public:
  explicit SweepStore(Db* db) : db_(db) {}

  // Inserts the sweep, its runs and its data sets in one transaction (all or nothing). Runs go
  // in a few thousand at a time, so a big sweep never has all its rows in memory at once.
  absl::StatusOr<v1::Sweep> Insert(const NewSweep& sweep,
                                   const std::vector<DatasetRecord>& datasets);

  // Folds the run_counts deltas that the triggers of migration 0011 append into one row per
  // (sweep, shape); returns how many rows it folded. The sums, hence every count read, are the
  // same before and after: this only keeps the rows a count reads few. Every replica may run
  // it at once.
  absl::StatusOr<int64_t> CompactRunCounts();

 private:
  Db* db_;
};

}  // namespace ablate::server
