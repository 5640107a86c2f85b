// `ablate-server token create|list|revoke`: manage bearer tokens directly in the database
// (an operator with database access is the root of trust; no RPC can mint tokens).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ablate::server {

absl::Status TokenCreate(const std::string& database_url, const std::string& role,
                         const std::string& name);
absl::Status TokenList(const std::string& database_url);
absl::Status TokenRevoke(const std::string& database_url, int64_t id);
absl::Status RunMigrations(const std::string& database_url);

}  // namespace ablate::server
