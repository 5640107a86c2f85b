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

// The base config of each sweep whose runs' configs are stored as deltas (run_spec_base,
// migration 0014), by sweep id.
using BaseConfigs = absl::flat_hash_map<int64_t, v1::RunConfig>;
// Those of the sweeps in `rows` (runs_page's columns) that RunFromRow needs, read in one query.
absl::StatusOr<BaseConfigs> LoadBaseConfigs(pqxx::transaction_base& tx, const pqxx::result& rows);

// A Run from a row of the columns runs_page (server/store/sql/runs_page.sql) selects; a config
// stored as a delta is merged over its sweep's base config from `bases`.
absl::StatusOr<v1::Run> RunFromRow(const pqxx::row& row, const BaseConfigs& bases);

// What keeps a sweep's work from running (sweep_holds.sql, fleet_can_lease.sql).
struct SweepHolds {
  bool counted = false;        // the next three were read (GetSweep; ListSweeps leaves them 0)
  int64_t unfittable = 0;      // queued runs no live worker's device memory can hold
  int64_t preemptions = 0;     // attempts its runs lost to lease expiry
  int64_t worker_faults = 0;   // attempts its runs lost to worker-side failures
  int64_t lost_in_flight = 0;  // its leases held by lost (or stopped) workers
  int64_t can_lease = -1;      // workers that may lease now; -1: not read
  int64_t benched = 0;         // live workers benched now
};

// eta_basis of a sweep that cannot finish as things are ("held: budget reached"); its
// eta_seconds is then -1.
inline constexpr std::string_view kEtaHeld = "held: ";

// A Sweep, counts and ETA included, from a row of the columns sweep_get
// (server/store/sql/sweep_get.sql) selects. With `holds` (GetSweep), the counts gain unfittable,
// preemptions and worker_faults, and the ETA counts only work that can run; without, only a
// budget holds it.
v1::Sweep SweepFromRow(const pqxx::row& row, const SweepHolds* holds = nullptr);

double OrZero(const pqxx::field& field);

}  // namespace ablate::server::pg
