// The progress line a run prints for one batch of a step's points, e.g.
//   "step     40  loss 3.2100  ema 3.3000  lr 0.001  |g| 0.52  5200 tok/s  val 3.31"
// `ablate-worker train` prints it, the daemon logs it and sends it to the server (ablate logs -f),
// so the line reads the same wherever it is seen. Header-only: the daemon's torch-free tests use
// it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ablate/v1/ablate.pb.h"
#include "absl/strings/str_format.h"
#include "common/run/metric_names.h"

namespace ablate::util {

// "" when the batch holds nothing a line shows.
inline std::string ProgressLine(const std::vector<v1::MetricPoint>& points) {
  if (points.empty()) return "";
  std::map<std::string, double> v;
  for (const auto& p : points) v[p.name()] = p.value();
  std::string line = absl::StrFormat("step %6d", points.front().step());
  const size_t bare = line.size();
  if (v.contains(metric::kTrainLoss)) {
    absl::StrAppendFormat(&line, "  loss %.4f  ema %.4f  lr %.3g", v[metric::kTrainLoss],
                          v[metric::kTrainLossEma], v[metric::kLr]);
  }
  if (v.contains(metric::kGradNorm)) {
    absl::StrAppendFormat(&line, "  |g| %.3g", v[metric::kGradNorm]);
  }
  if (v.contains(metric::kTokensPerSecond)) {
    absl::StrAppendFormat(&line, "  %.0f tok/s", v[metric::kTokensPerSecond]);
  }
  if (v.contains(metric::kValLoss)) absl::StrAppendFormat(&line, "  val %.4f", v[metric::kValLoss]);
  if (v.contains(metric::kMaxAttnLogit)) {
    absl::StrAppendFormat(&line, "  max_logit %.2f", v[metric::kMaxAttnLogit]);
  }
  return line.size() > bare ? line : "";
}

}  // namespace ablate::util
