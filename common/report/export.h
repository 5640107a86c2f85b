// The export format of `ablate export DIR` and `ablate report --from DIR`: a sweep's results
// without the server, for re-analysis and sharing.
//
//   DIR/sweep.json   ablate.v1.Sweep as proto JSON (field names as in the .proto)
//   DIR/runs.jsonl   one ablate.v1.Run per line, proto JSON except `state`, lower case as in
//                    every output ("succeeded"); older exports' enum names ("SUCCEEDED") still read
//   DIR/metrics.csv  run_id,step,name,value (not written with --no-metrics; optional on read)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ablate::report {

struct MetricRow {
  int64_t run_id = 0;
  int64_t step = 0;
  std::string name;
  double value = 0;
};

struct Export {
  ablate::v1::Sweep sweep;
  std::vector<ablate::v1::Run> runs;
  std::vector<MetricRow> metrics;
  // false (`ablate export --no-metrics`): no metrics.csv is written, and one left in the
  // directory by an earlier export is removed, so `report --from` never reads stale points.
  bool with_metrics = true;
};

// Creates `dir` if needed and writes the three files (replacing earlier ones).
absl::Status WriteExport(const Export& data, const std::string& dir);

// Reads an export; errors name the file and line. A missing metrics.csv reads as no metrics.
absl::StatusOr<Export> ReadExport(const std::string& dir);

}  // namespace ablate::report
