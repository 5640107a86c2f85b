// The one place where libpqxx 6 (Debian 12) and libpqxx 7 (Debian 13, Homebrew) differ for us.
// libpqxx 7 deprecates exec_params/exec_params1/exec_prepared and notification_receiver (they go
// away in 8), and sends PREPARE as soon as prepare() is called, where 6 only registered the name.
// Store code calls these functions and never the version-specific members.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "pqxx/pqxx"
#include "server/store/statements.h"

namespace ablate::server::pg {

// GCC 14 (Debian 13, not 12) reports -Wmaybe-uninitialized inside libstdc++'s <variant> as
// inlined through libpqxx 7's pqxx::params (params.hxx: `entry{to_string(value)}`, a variant
// whose nullptr_t alternative has no bytes to initialise) into Exec and ExecText below. Those
// frames are system headers, but GCC still reports a middle-end warning when any function in the
// inlining chain is ours; it also honours a diagnostic pragma at any location in that chain, so
// the warning is switched off around the two library calls that build params, and nowhere else.
// (A false positive in the library's code, not ours: nothing in our code can initialise it.)
#if PQXX_VERSION_MAJOR >= 7 && defined(__GNUC__) && !defined(__clang__)
#define ABLATE_PQXX_PARAMS_BEGIN \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define ABLATE_PQXX_PARAMS_END _Pragma("GCC diagnostic pop")
#else
#define ABLATE_PQXX_PARAMS_BEGIN
#define ABLATE_PQXX_PARAMS_END
#endif

// What a transaction's conn() returns.
#if PQXX_VERSION_MAJOR >= 7
using Connection = pqxx::connection;
#else
using Connection = pqxx::connection_base;
#endif

// Whether `name` is prepared on `conn`; MarkPrepared records that it now is. A connection's
// record is dropped by ForgetConnection when a connection is opened (a new connection may reuse a
// dead one's address).
bool IsPrepared(const Connection& conn, const std::string& name);
void MarkPrepared(const Connection& conn, const std::string& name);
void ForgetConnection(const Connection& conn);
// libpqxx 6: registers every statement of server/store/sql on `conn` as Exec would one at a time
// (6 keeps each statement's text on the client and sends PREPARE at first use), so a
// connection's client-side memory is whole from the start. libpqxx 7 keeps nothing on the client
// and would PREPARE each at once on the server: there it does nothing, and Exec prepares a
// statement when it is first run.
void RegisterAll(Connection& conn);

// Runs the named statement (server/store/sql/<name>.sql, statements.h) with $1..$n bound to
// `args`, preparing it under its name once per connection: a statement is parsed and planned
// once per connection (and again only when ANALYZE changes the statistics), which matters most
// for the hot CTEs (lease, complete, report_metrics) whose planning costs more than their
// execution. A name without a file does not compile.
template <typename... Args>
pqxx::result Exec(pqxx::transaction_base& tx, sql::Name name, Args&&... args) {
  const std::string id(name.name());
  if (!IsPrepared(tx.conn(), id)) {
    tx.conn().prepare(id, std::string(name.text()));
    MarkPrepared(tx.conn(), id);
  }
#if PQXX_VERSION_MAJOR >= 7
  ABLATE_PQXX_PARAMS_BEGIN
  pqxx::result r = tx.exec(pqxx::prepped{id}, pqxx::params{std::forward<Args>(args)...});
  ABLATE_PQXX_PARAMS_END
#else
  pqxx::result r = tx.exec_prepared(id, std::forward<Args>(args)...);
#endif
  sql::MarkExecuted(name.index());
  return r;
}

// As Exec, for a statement that returns exactly one row (else pqxx::unexpected_rows).
template <typename... Args>
pqxx::row Exec1(pqxx::transaction_base& tx, sql::Name name, Args&&... args) {
  pqxx::result r = Exec(tx, name, std::forward<Args>(args)...);
  if (r.size() != 1) {
    throw pqxx::unexpected_rows("expected 1 row from " + std::string(name.name()) + ", got " +
                                std::to_string(r.size()));
  }
  return r[0];
}

// `sql` text with $1..$n bound to `args`, unprepared: for tests that inspect the database.
// Server code runs named statements only (Exec).
template <typename... Args>
pqxx::result ExecText(pqxx::transaction_base& tx, const std::string& sql, Args&&... args) {
#if PQXX_VERSION_MAJOR >= 7
  ABLATE_PQXX_PARAMS_BEGIN
  return tx.exec(pqxx::zview(sql), pqxx::params{std::forward<Args>(args)...});
  ABLATE_PQXX_PARAMS_END
#else
  return tx.exec_params(sql, std::forward<Args>(args)...);
#endif
}

// Calls fn(channel, payload) for every NOTIFY on `channel` that `conn` receives while the
// returned handle (and the connection) live. LISTEN may be sent lazily: run any statement on the
// connection before relying on it.
using NotifyFn = std::function<void(const std::string& channel, const std::string& payload)>;
std::shared_ptr<void> Listen(pqxx::connection& conn, const std::string& channel, NotifyFn fn);

}  // namespace ablate::server::pg
