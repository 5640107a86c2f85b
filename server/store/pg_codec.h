// Conversions between PostgreSQL values and the wire protos, shared by the stores.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "pqxx/pqxx"
#include "server/store/rows.h"

namespace ablate::server::pg {

// Array literals for `unnest($n::text[])`: one round trip carries a whole batch, and the values
// still travel as a bind parameter, never spliced into SQL text.
std::string TextArray(const std::vector<std::string>& values);
// Builds the same literal one element at a time (start with "{", finish with "}"), so a caller
// with 100,000 large values need not hold them as a vector and as the literal at once.
void AppendTextArrayElement(std::string* literal, const std::string& value);
std::string Int64Array(const std::vector<int64_t>& values);
std::string DoubleArray(const std::vector<double>& values);  // NaN and ±Infinity allowed

// Protobuf <-> JSON text (JSONB columns keep runs and results queryable with plain SQL).
std::string ToJson(const google::protobuf::Message& message);
absl::Status FromJson(const std::string& json, google::protobuf::Message* message);

// The runs.state names of `states`, for `state = ANY($n::text[])`.
std::vector<std::string> StateNames(const std::vector<v1::RunState>& states);

// A spec's grid_values object ({"axis": "value"}) into `out` (left empty when the field is NULL):
// a map field is parsed through its owning message, which FromJson clears first.
absl::Status GridValuesFromJson(const pqxx::field& field,
                                google::protobuf::Map<std::string, std::string>* out);

// A run's spec is stored as a delta from its sweep's base spec (run_spec_base, migration 0014),
// or whole for a row stored before that. This is the one place the two are merged, for Lease,
// ListRuns and refinement alike: `base` (nullptr: the sweep has none), then the run's
// `spec_whole` and `spec_own` columns (run_rows, lease.sql, refine_template_data.sql). The
// delta's fields replace the base's, and its config's fields the base config's (what jsonb
// `base || own` with `||` of the two configs gives; MergeDeltaJson in proto_json.h).
absl::StatusOr<v1::RunSpec> MergeRunSpec(const v1::RunSpec* base, const pqxx::field& whole,
                                         const pqxx::field& own);

// The base spec of each sweep that has one, by sweep id, each parsed once per read.
using BaseSpecs = absl::flat_hash_map<int64_t, v1::RunSpec>;
// Those of the sweeps in `rows` (run_rows) whose runs are stored as deltas, in one query. Only
// what RunFromRow reads of them is kept (the config and the grid point).
absl::StatusOr<BaseSpecs> LoadBaseSpecs(pqxx::transaction_base& tx, const pqxx::result& rows);

// A Run from a row of run_rows (migration 0019: runs_page, runs_in_flight, refine_load_runs),
// its config and grid point merged over its sweep's base from `bases` (MergeRunSpec).
absl::StatusOr<v1::Run> RunFromRow(const ByName& col, const pqxx::row& row, const BaseSpecs& bases);

// What keeps a sweep's work from running (sweep_holds.sql, fleet_can_lease.sql).
struct SweepHolds {
  bool counted = false;         // the next three were read (GetSweep; ListSweeps leaves them 0)
  int64_t unfittable = 0;       // queued runs no live worker of their device kind can hold
  int64_t preemptions = 0;      // attempts its runs lost to lease expiry
  int64_t worker_faults = 0;    // attempts its runs lost to worker-side failures
  int64_t lost_in_flight = 0;   // its leases held by lost (or stopped) workers
  int64_t can_lease = -1;       // workers that may lease now; -1: not read
  int64_t benched = 0;          // live workers benched now
  int64_t fault_held = 0;       // queued runs waiting for a worker they did not fault on
  double fault_held_until = 0;  // when the last of those holds ends (unix seconds)
};

// eta_basis of a sweep that cannot finish as things are ("held: budget reached"); its
// eta_seconds is then -1.
inline constexpr std::string_view kEtaHeld = "held: ";

// A Sweep, counts and ETA included, from a row of sweep_rows (migration 0019: sweep_get,
// sweep_list). With `holds` (GetSweep), the counts gain unfittable,
// preemptions and worker_faults, and the ETA counts only work that can run; without, only a
// budget holds it.
v1::Sweep SweepFromRow(const ByName& col, const pqxx::row& row, const SweepHolds* holds = nullptr);

double OrZero(const pqxx::field& field);

}  // namespace ablate::server::pg
