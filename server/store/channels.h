// LISTEN/NOTIFY channels. Notifications are hints that wake long-polls on every replica; a lost
// one costs latency (the poll re-checks at its deadline), never correctness.
#pragma once

namespace ablate::server::channels {

// Payload: the device of the runs that became leasable ("auto", "cpu", "cuda", "mps").
inline constexpr char kQueue[] = "ablate_queue";
// Payload: a sweep id whose runs or state changed.
inline constexpr char kSweep[] = "ablate_sweep";
// Payload: a run id that got metric points or changed state.
inline constexpr char kRun[] = "ablate_run";

}  // namespace ablate::server::channels
