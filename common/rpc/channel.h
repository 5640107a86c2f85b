// Client-side plumbing shared by ablate-worker and the ablate CLI: dialling the server (TLS or
// plaintext), bearer tokens, and gRPC -> absl::Status conversion with messages a user can act on.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace ablate::rpc {

struct ClientConfig {
  std::string server = "127.0.0.1:7070";  // host:port
  std::string token;                      // bearer token; empty sends none
  std::string tls_ca;                     // PEM file of the CA; set => TLS
  bool tls = false;                       // TLS with the system roots when tls_ca is empty
};

// Creates a channel to `config.server`. Reads the CA file, so it can fail.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientConfig& config);

// Adds `authorization: Bearer <token>` when the token is non-empty.
void Authorize(grpc::ClientContext* context, const std::string& token);

// Maps a gRPC status to absl, prefixing what was being done. UNAVAILABLE gets a hint that names
// the server address, UNAUTHENTICATED one about tokens of `role` (the CLI needs a user token,
// ablate-worker a worker token).
absl::Status ToAbsl(const grpc::Status& status, std::string_view what, std::string_view server = "",
                    std::string_view role = "user");

// True for errors worth retrying later (server down, network blip, deadline).
bool IsTransient(const absl::Status& status);

}  // namespace ablate::rpc
