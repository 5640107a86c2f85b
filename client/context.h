// What every CLI command gets: a connected SweepService stub, the output mode, and one helper
// for unary calls that turns gRPC failures into actionable messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "ablate/v1/ablate.grpc.pb.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/rpc/channel.h"

namespace ablate::cli {

struct Context {
  rpc::ClientConfig conn;
  std::unique_ptr<v1::SweepService::Stub> stub;
  bool json = false;
  double timeout_seconds = 30;

  void Prepare(grpc::ClientContext* ctx, double timeout = 0) const {
    rpc::Authorize(ctx, conn.token);
    if (timeout >= 0) {
      ctx->set_deadline(
          std::chrono::system_clock::now() +
          std::chrono::milliseconds(int64_t(1000 * (timeout > 0 ? timeout : timeout_seconds))));
    }
  }

  template <typename Req, typename Resp>
  absl::StatusOr<Resp> Call(const char* what,
                            grpc::Status (v1::SweepService::Stub::*method)(grpc::ClientContext*,
                                                                           const Req&, Resp*),
                            const Req& req) const {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    Resp resp;
    absl::Status s = rpc::ToAbsl((stub.get()->*method)(&ctx, req, &resp), what, conn.server);
    if (!s.ok()) return s;
    return resp;
  }
};

// "12" -> id 12; anything else is a sweep name (the newest sweep of that name).
v1::SweepRef ParseSweepRef(const std::string& text);

// Exit codes (README "Exit codes"): 0 ok, 1 error, 2 invalid input, 3 not authorised,
// 4 not found, 5 server unreachable, 6 refused in the current state.
int ExitCode(const absl::Status& status);

}  // namespace ablate::cli
