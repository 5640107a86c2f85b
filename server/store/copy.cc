#include "server/store/copy.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

namespace ablate::server::pg {
namespace {

// libpqxx hands its libpq connection out only to large objects: a protected static of
// pqxx::largeobject, in libpqxx 6 and 7 alike (pqxx_compat.h). This class is never made.
class RawConnection : public pqxx::largeobject {
 public:
  RawConnection() = delete;
  static PGconn* Of(const pqxx::dbtransaction& tx) { return largeobject::raw_connection(tx); }
};

using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;

// A transaction_rollback: libpqxx 6 constructs one from its message alone, 7 wants the query too.
template <typename Rollback>
[[noreturn]] void ThrowRollback(const std::string& message, const std::string& query,
                                const char* state) {
#if PQXX_VERSION_MAJOR >= 7
  throw Rollback(message, query, state);
#else
  (void)query, (void)state;
  throw Rollback(message);
#endif
}

// The exception libpqxx throws for the error `r` reports (or for a lost connection, when there is
// no result or the connection broke), so that Db::Convert maps it.
[[noreturn]] void Throw(PGconn* conn, const PGresult* r, const std::string& query) {
  if (r == nullptr || PQstatus(conn) != CONNECTION_OK) {
    throw pqxx::broken_connection(PQerrorMessage(conn));
  }
  const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  const std::string message = PQresultErrorMessage(r);
  const std::string code = state != nullptr ? state : "";
  if (code == "23505") throw pqxx::unique_violation(message, query, state);
  if (code == "40001") ThrowRollback<pqxx::serialization_failure>(message, query, state);
  if (code == "40P01") ThrowRollback<pqxx::deadlock_detected>(message, query, state);
  throw pqxx::sql_error(message, query, state);
}

}  // namespace

CopyRows::CopyRows() : data_("PGCOPY\n\377\r\n\0", 11) {
  Big<int32_t>(0);  // flags
  Big<int32_t>(0);  // header extension
}

std::string CopyRows::Finish() && {
  Big<int16_t>(-1);
  return std::move(data_);
}

int64_t Copy(pqxx::dbtransaction& tx, sql::Name name, std::string rows) {
  PGconn* conn = RawConnection::Of(tx);
  const std::string query(name.text());
  Result start(PQexec(conn, query.c_str()), PQclear);
  if (PQresultStatus(start.get()) != PGRES_COPY_IN) Throw(conn, start.get(), query);
  constexpr size_t kChunk = 1 << 18;
  for (size_t at = 0; at < rows.size(); at += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, rows.size() - at));
    if (PQputCopyData(conn, rows.data() + at, n) != 1) Throw(conn, nullptr, query);
  }
  if (PQputCopyEnd(conn, nullptr) != 1) Throw(conn, nullptr, query);
  // Every result is read, so the connection is idle again whatever happened.
  Result first(PQgetResult(conn), PQclear);
  while (PGresult* more = PQgetResult(conn)) PQclear(more);
  if (PQresultStatus(first.get()) != PGRES_COMMAND_OK) Throw(conn, first.get(), query);
  sql::MarkExecuted(name.index());
  return std::strtoll(PQcmdTuples(first.get()), nullptr, 10);
}

}  // namespace ablate::server::pg
