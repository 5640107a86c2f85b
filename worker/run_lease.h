// The lease one attempt holds on a run, as the worker keeps it: the three things the server's
// fence (`Fenced()` in server/store/run_transitions.cc) checks on every fenced call — this run,
// this attempt, this token. The run session holds one RunLease and hands it whole to every fenced
// RunClient call; the client puts it into the request with Stamp(). So a fenced request
// cannot go out without its token, or with the attempt of one lease and the token of another.
#pragma once

#include <cstdint>
#include <string>

#include "ablate/v1/ablate.pb.h"

namespace ablate::worker {

// A WorkerService request the server fences: it names (run, attempt) and carries the lease token.
// HeartbeatRequest, ReportMetricsRequest, CheckpointChunk (the header), LogReportRequest,
// GetCheckpointRequest, CompleteRequest and ReleaseRequest.
template <typename Request>
concept FencedRequest = requires(Request* request, int64_t run_id, int32_t attempt,
                                 const std::string& token) {
  request->set_run_id(run_id);
  request->set_attempt(attempt);
  request->set_lease_token(token);
};

class RunLease {
 public:
  // From LeaseResponse.lease. Its expiry is not kept: heartbeats move it, and the server alone
  // decides when it has passed.
  explicit RunLease(const v1::Lease& lease)
      : run_id_(lease.run_id()), attempt_(lease.attempt()), token_(lease.token()) {}

  int64_t run_id() const { return run_id_; }
  int32_t attempt() const { return attempt_; }

  // Sets the request's run_id, attempt and lease_token to this lease's, whatever they were. Every
  // fenced request the worker sends gets them here; the token leaves the lease no other way.
  template <FencedRequest Request>
  void Stamp(Request* request) const {
    request->set_run_id(run_id_);
    request->set_attempt(attempt_);
    request->set_lease_token(token_);
  }

 private:
  int64_t run_id_;
  int32_t attempt_;
  std::string token_;  // Lease.token: 256 random bits, hex; the server keeps only its SHA-256
};

}  // namespace ablate::worker
