// A small pool of PostgreSQL connections and the one place where pqxx exceptions become
// absl::Status. Every store method runs its SQL through Db::Tx.
//
// Error mapping (what the caller can do about it):
//   connection lost / server shutting down / commit outcome unknown -> UNAVAILABLE (retry; every
//     worker write is idempotent under its (run, attempt) fence, so a retry after an unknown
//     commit cannot double-apply);
//   serialization failure / deadlock, or a connection found broken before commit -> retried here
//     on a fresh connection, then UNAVAILABLE;
//   unique violation -> ALREADY_EXISTS; anything else -> INTERNAL with the statement's purpose.
// PostgreSQL's own text never reaches a client: the status says what failed ("submit sweep:
// internal database error (error id 3f9a0c12)") and the full text goes to the log at error level
// under that id.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pqxx/pqxx"
#include "server/store/pqxx_compat.h"

namespace ablate::server {

// The status for a database error: `summary` and a short random id for the client ("submit sweep:
// internal database error (error id 3f9a0c12)"), `detail` (PostgreSQL's own text, which can name
// constraints and echo values) only in the server log, at error level under that id.
absl::Status HiddenDatabaseError(absl::StatusCode code, const std::string& what,
                                 absl::string_view summary, absl::string_view detail);

class Db {
 public:
  // Connections open lazily, so a server can start while PostgreSQL is still coming up.
  Db(std::string url, int pool_size);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  const std::string& url() const { return url_; }

  // Runs `fn` in a read-committed transaction and commits if it returns OK; rolls back otherwise.
  // `what` names the operation in error messages ("lease", "submit sweep").
  template <typename T>
  absl::StatusOr<T> Tx(const std::string& what,
                       const std::function<absl::StatusOr<T>(pqxx::work&)>& fn);

  // Checks that a connection can be made now (startup, readiness).
  absl::Status Ping();
  // Opens every connection of the pool now, each with every statement registered
  // (pg::RegisterAll), so the process starts at the memory its pool keeps rather than growing
  // toward it as load opens connections and meets statements one by one (docs/soak.md), and no
  // request waits for a connection to open. Call it once the schema is migrated. A connection
  // that cannot be opened stays lazy, opened by the first transaction that needs it; the first
  // failure is returned.
  absl::Status Fill();

 private:
  struct Lease;
  std::unique_ptr<pqxx::connection>* Acquire();
  void Release(std::unique_ptr<pqxx::connection>* slot, bool broken);
  // Converts the exception in flight into a status; sets *retry for transient conflicts and
  // *broken when the connection must be discarded.
  static absl::Status Convert(const std::string& what, bool* retry, bool* broken);

  std::string url_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<pqxx::connection>> slots_;
  std::vector<std::unique_ptr<pqxx::connection>*> free_;
};

template <typename T>
absl::StatusOr<T> Db::Tx(const std::string& what,
                         const std::function<absl::StatusOr<T>(pqxx::work&)>& fn) {
  constexpr int kAttempts = 4;
  absl::Status last;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::unique_ptr<pqxx::connection>* slot = Acquire();
    bool retry = false;
    bool broken = false;
    try {
      if (*slot == nullptr) {
        *slot = std::make_unique<pqxx::connection>(url_);
        pg::ForgetConnection(**slot);  // nothing is prepared on a new connection
      }
      std::optional<absl::StatusOr<T>> out;
      {
        pqxx::work tx(**slot);
        out.emplace(fn(tx));
        if (out->ok()) {
          tx.commit();
        } else {
          tx.abort();
        }
      }
      // The transaction is over (committed or rolled back) before the connection goes back to
      // the pool: a rollback left to ~work() after Release ran on a connection another thread
      // already had, and two threads on one libpq connection hang in PQgetResult.
      Release(slot, false);
      return *std::move(out);
    } catch (...) {
      last = Convert(what, &retry, &broken);
    }
    Release(slot, broken);
    if (!retry) return last;
  }
  return last;
}

}  // namespace ablate::server
