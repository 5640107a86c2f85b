// Runs RunTransitions::Reap periodically. Every replica runs one; SKIP LOCKED lets them share the
// work. What it can get wrong: a worker alive but partitioned from the server for longer than
// its lease loses the run, and the run may briefly train twice (the fence keeps only one
// attempt's writes). A lease shorter than a heartbeat gap would make that common, so workers
// heartbeat every third of a lease.
#pragma once

#include <chrono>

#include "server/metrics.h"
#include "server/periodic.h"
#include "server/store/run_transitions.h"

namespace ablate::server {

class Reaper {
 public:
  Reaper(RunTransitions* runs, ServerMetrics* metrics, std::chrono::milliseconds interval)
      : runs_(runs), metrics_(metrics), interval_(interval) {}

  void Start();
  void Stop() { loop_.Stop(); }

 private:
  void Pass();

  RunTransitions* runs_;
  ServerMetrics* metrics_;
  std::chrono::milliseconds interval_;
  Periodic loop_;
};

}  // namespace ablate::server
