#include "server/store/migrator.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace ablate::server {
namespace {

// An arbitrary constant that names "ablate schema migration" among advisory locks.
constexpr int64_t kMigrationLock = 0x61626c6174650001;

}  // namespace

absl::StatusOr<std::vector<std::string>> Migrate(Db* db, const std::vector<Migration>& migrations) {
  std::vector<std::string> applied;
  for (const Migration& m : migrations) {
    auto done = db->Tx<bool>(
        absl::StrCat("migration ", m.version), [&](pqxx::work& tx) -> absl::StatusOr<bool> {
          // Transaction-scoped: released at commit or rollback, even if
          // this process dies halfway.
          pg::Exec(tx, "migration_lock", kMigrationLock);
          pg::Exec(tx, "migration_table");
          pqxx::result r = pg::Exec(tx, "migration_applied", std::string(m.version));
          if (!r.empty()) return false;
          tx.exec(m.sql);
          pg::Exec(tx, "migration_record", std::string(m.version));
          return true;
        });
    if (!done.ok()) return done.status();
    if (*done) applied.push_back(m.version);
  }
  return applied;
}

}  // namespace ablate::server
