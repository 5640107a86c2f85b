// Bearer-token authentication and role checks (docs/architecture.md#security): `worker` may call
// WorkerService, `user` SweepService, `admin` both. Tokens are looked up by SHA-256 digest.
//
// Trade-off: verified tokens are cached for a few seconds so a Lease -> Complete loop does not
// cost a database query per call; a revoked token therefore keeps working on each replica for
// up to that long.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "server/store/token_store.h"

namespace ablate::server {

enum class Surface { kWorker, kSweep };

struct Caller {
  std::string name;  // token name; "anonymous" with --auth none
  Role role = Role::kAdmin;
  int64_t token_id = 0;  // 0 with --auth none
};

class Authenticator {
 public:
  // With `enabled` false every call is admin (only allowed on loopback; checked at startup).
  Authenticator(TokenStore* tokens, bool enabled) : tokens_(tokens), enabled_(enabled) {}

  absl::StatusOr<Caller> Check(const grpc::ServerContextBase& context, Surface surface,
                               const char* method);

 private:
  TokenStore* tokens_;
  bool enabled_;
  std::mutex mu_;
  std::map<std::string, std::pair<TokenInfo, std::chrono::steady_clock::time_point>> cache_;
};

}  // namespace ablate::server
