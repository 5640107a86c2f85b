// Schema migrations: migrations/NNNN_what.sql, compiled into the binary (so a deployed server
// cannot run against a schema it was not built for), applied in name order.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/store/db.h"

namespace ablate::server {

struct Migration {
  const char* version;  // file name without .sql, e.g. "0001_initial"
  const char* sql;
};

// Every migration built into this binary, in order (generated from migrations/).
const std::vector<Migration>& BuiltinMigrations();

// Applies the migrations not yet recorded in schema_migrations, each in its own transaction
// under an advisory lock, so replicas starting together apply each exactly once. Returns the
// versions applied by this call (empty when up to date).
absl::StatusOr<std::vector<std::string>> Migrate(Db* db, const std::vector<Migration>& migrations);

}  // namespace ablate::server
