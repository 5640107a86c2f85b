// What every synchronous RPC handler does before and after its own work, written once: time the
// call (ablate_rpc_duration_seconds{method}), authorize the caller for the service's role
// (docs/architecture.md#security), and turn the handler's absl::Status into a grpc::Status.
//
// Why a helper and not a gRPC server interceptor: handlers need the authorized Caller (Submit
// records who submitted, Register binds the worker to its token), which an interceptor could only
// pass through the call's context; and an interceptor would also time the streams and the Lease
// long-poll, which the metric has never covered that way (Lease times itself up to its reply;
// WatchSweep and GetRunMetrics are not timed), so the series would change.
#pragma once

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "server/auth.h"
#include "server/grpc_status.h"
#include "server/metrics.h"

namespace ablate::server {

class RpcGuard {
 public:
  RpcGuard(Authenticator* auth, ServerMetrics* metrics, Surface surface)
      : auth_(auth), metrics_(metrics), surface_(surface) {}

  // `method` is the RPC's name as the metric labels it ("GetSweep"); a refusal names it with
  // its service ("SweepService.GetSweep needs role user or admin").
  absl::StatusOr<Caller> Authorize(const grpc::ServerContextBase& ctx, const char* method) const {
    const std::string qualified =
        absl::StrCat(surface_ == Surface::kWorker ? "WorkerService." : "SweepService.", method);
    return auth_->Check(ctx, surface_, qualified.c_str());
  }

  // Times the whole call, authorizes, then runs `body(const Caller&) -> absl::Status`.
  template <typename Body>
  grpc::Status Run(const grpc::ServerContextBase& ctx, const char* method, Body&& body) const {
    RpcTimer timer(metrics_, method);
    auto caller = Authorize(ctx, method);
    if (!caller.ok()) return ToGrpc(caller.status());
    return ToGrpc(std::forward<Body>(body)(*caller));
  }

 private:
  Authenticator* auth_;
  ServerMetrics* metrics_;
  Surface surface_;
};

}  // namespace ablate::server
