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

namespace ablate::server::pg {

// What a transaction's conn() returns.
#if PQXX_VERSION_MAJOR >= 7
using Connection = pqxx::connection;
#else
using Connection = pqxx::connection_base;
#endif

// `sql` with $1..$n bound to `args`.
template <typename... Args>
pqxx::result Exec(pqxx::work& tx, const std::string& sql, Args&&... args) {
#if PQXX_VERSION_MAJOR >= 7
  return tx.exec(pqxx::zview(sql), pqxx::params{std::forward<Args>(args)...});
#else
  return tx.exec_params(sql, std::forward<Args>(args)...);
#endif
}

// As Exec, for a statement that returns exactly one row (else pqxx::unexpected_rows).
template <typename... Args>
pqxx::row Exec1(pqxx::work& tx, const std::string& sql, Args&&... args) {
#if PQXX_VERSION_MAJOR >= 7
  return tx.exec(pqxx::zview(sql), pqxx::params{std::forward<Args>(args)...}).one_row();
#else
  return tx.exec_params1(sql, std::forward<Args>(args)...);
#endif
}

// Whether `name` is prepared on `conn`; MarkPrepared records that it now is. A connection's
// record is dropped by ForgetConnection when the pool opens a connection (a new connection may
// reuse a dead one's address).
bool IsPrepared(const Connection& conn, const std::string& name);
void MarkPrepared(const Connection& conn, const std::string& name);
void ForgetConnection(const Connection& conn);

// Runs `sql` as the prepared statement `name` on the transaction's connection, preparing it once
// per connection. The hot statements (lease, complete, report) are CTEs whose planning costs
// more than their execution; a prepared statement is planned once per connection (and again
// only when ANALYZE changes the statistics).
template <typename... Args>
pqxx::result ExecPrepared(pqxx::work& tx, const std::string& name, const std::string& sql,
                          Args&&... args) {
  if (!IsPrepared(tx.conn(), name)) {
    tx.conn().prepare(name, sql);
    MarkPrepared(tx.conn(), name);
  }
#if PQXX_VERSION_MAJOR >= 7
  return tx.exec(pqxx::prepped{name}, pqxx::params{std::forward<Args>(args)...});
#else
  return tx.exec_prepared(name, std::forward<Args>(args)...);
#endif
}

// Calls fn(channel, payload) for every NOTIFY on `channel` that `conn` receives while the
// returned handle (and the connection) live. LISTEN may be sent lazily: run any statement on the
// connection before relying on it.
using NotifyFn = std::function<void(const std::string& channel, const std::string& payload)>;
std::shared_ptr<void> Listen(pqxx::connection& conn, const std::string& channel, NotifyFn fn);

}  // namespace ablate::server::pg
