// absl::Status -> grpc::Status at the edge of the server: every handler and stream ends with
// it. The codes are the same numbers in both (absl's are gRPC's canonical codes), so the
// conversion keeps the code and the message as they are.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace ablate::server {

inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace ablate::server
