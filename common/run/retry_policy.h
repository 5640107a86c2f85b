// Which runs a retry may requeue (README, `ablate retry`; RetryRuns). The one list the CLI and
// the server both check, so a new retryable state is one line in kRetryableStates.
#pragma once

#include <string>

#include "ablate/v1/ablate.pb.h"
#include "absl/strings/str_cat.h"
#include "common/run/run_state.h"

namespace ablate::util {

// Failed and cancelled runs have no result, so running them again loses nothing. Succeeded and
// diverged runs are results of the experiment (a divergence is a finding, not a fault): retrying
// them would throw a finished result away, so they are refused. Skipped runs (pruned above
// divergence) were never run, so asking for them runs them after all; a bare retry leaves them
// alone (kDefaultRetryStates), since pruning them was the sweep's own choice.
inline constexpr v1::RunState kRetryableStates[] = {v1::FAILED, v1::CANCELLED, v1::SKIPPED};
inline constexpr v1::RunState kDefaultRetryStates[] = {v1::FAILED, v1::CANCELLED};

inline bool IsRetryable(v1::RunState state) {
  for (v1::RunState s : kRetryableStates) {
    if (s == state) return true;
  }
  return false;
}

// "failed or cancelled": what the refusals say a retry takes.
inline std::string RetryableList() {
  std::string out;
  const size_t n = std::size(kRetryableStates);
  for (size_t i = 0; i < n; ++i) {
    absl::StrAppend(&out, i == 0 ? "" : (i + 1 == n ? " or " : ", "),
                    std::string(RunStateName(kRetryableStates[i])));
  }
  return out;
}

// Why a run in `state` is not retried; "" when it is.
inline std::string RetryRefusal(v1::RunState state) {
  if (IsRetryable(state)) return "";
  const std::string name(RunStateName(state));
  if (state == v1::SUCCEEDED || state == v1::DIVERGED) {
    return absl::StrCat(name,
                        " runs are finished results and are kept, never retried (a retry "
                        "requeues ",
                        RetryableList(), " runs)");
  }
  return absl::StrCat(name, " runs have not finished; a retry requeues ", RetryableList(), " runs");
}

}  // namespace ablate::util
