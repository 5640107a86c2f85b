// The hostile client against every RPC of a running ablate-server (token auth): each attack is
// one call that must be refused with a given status code, grouped by the rule it probes: roles,
// no or revoked token, another worker's identity or lease, sizes and counts, names that look
// like paths, refine/prune input. Then bursts that abuse memory, with the server's RSS after each.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace ablate::bench {

struct SurfaceTokens {
  std::string admin, user, worker_a, worker_b, revoked;
};

// Runs every attack and burst against the server at `channel` (process `server` for its RSS).
// Prints one line per attack and per burst; returns how many attacks were NOT refused as
// expected (0: the surface held).
int RunSurfaceAttacks(const std::shared_ptr<grpc::Channel>& channel, const SurfaceTokens& tokens,
                      pid_t server);

// A /proc/PID/status figure in MB ("VmHWM", "VmRSS").
double StatusMb(pid_t pid, const std::string& key);

}  // namespace ablate::bench
