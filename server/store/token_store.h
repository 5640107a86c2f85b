// Bearer tokens (docs/architecture.md#security). Only SHA-256 digests are stored: a database dump
// leaks no token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/store/db.h"

namespace ablate::server {

enum class Role { kWorker, kUser, kAdmin };

absl::StatusOr<Role> ParseRole(const std::string& name);
std::string RoleName(Role role);

struct TokenInfo {
  int64_t id = 0;
  std::string name;
  Role role = Role::kUser;
  double created_at = 0;
  bool revoked = false;
};

struct NewToken {
  TokenInfo info;
  std::string secret;  // shown once; only its digest is kept
};

class TokenStore {
 public:
  explicit TokenStore(Db* db) : db_(db) {}

  absl::StatusOr<NewToken> Create(Role role, const std::string& name);
  absl::StatusOr<std::vector<TokenInfo>> List();
  // NOT_FOUND when no token has that id; revoking twice is fine.
  absl::Status Revoke(int64_t id);
  // The live (not revoked) token with this digest, or nullopt.
  absl::StatusOr<std::optional<TokenInfo>> Lookup(const std::string& sha256);

 private:
  Db* db_;
};

}  // namespace ablate::server
