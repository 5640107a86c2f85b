// What the server allows for failures that are not a run's own (issue #38).
#pragma once

namespace ablate::server {

// How failures not the run's own are allowed for (docs/server.md#failures). Defaults are what a
// shared fleet of rented GPUs wants: a box that fails 3 attempts in a row stops leasing for a
// minute, then 2, 4, ... up to an hour while it keeps failing; a run fails for worker-side causes
// only once 3 different workers could not train it; lease expiry (preemption) is forgiven 10
// times a run.
struct FaultPolicy {
  int bench_after = 3;        // worker-side or unknown failures in a row that bench it
  double bench_seconds = 60;  // the first bench; doubled for each further one in a row
  double bench_max_seconds = 3600;
  int run_fault_workers = 3;  // different workers a run may fail on for worker causes
  int max_preemptions = 10;   // lease expiries a run may have before it fails
  // How long a run that faulted on a worker waits for another leasing worker before the one it
  // faulted on may take it again (a fleet of one finishes it at once: no other worker leases).
  double fault_hold_seconds = 600;
  // Releases (hand-backs without a fault: a worker shutting down) a run may have before it fails;
  // each is free, so without a bound a lease-and-release loop would never end.
  int max_releases = 100;
};

}  // namespace ablate::server
