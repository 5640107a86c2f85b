// COPY ... FROM STDIN in PostgreSQL's binary format, inside a Db::Tx transaction: the bulk path
// of metric ingest (ingest_store.h). libpqxx offers COPY only as text (stream_to, tablewriter);
// binary keeps doubles exact without printing and parsing them, and costs PostgreSQL less per
// row. So the rows go through libpq's PQputCopyData on the transaction's own connection, and a
// failure is thrown as the pqxx exception libpqxx would throw for it, so Db::Tx retries and maps
// it like any other statement's (a unique violation is pqxx::unique_violation, a lost connection
// pqxx::broken_connection).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "pqxx/pqxx"
#include "server/store/statements.h"

namespace ablate::server::pg {

// Rows in COPY's binary format (header, tuples, trailer), built field by field.
class CopyRows {
 public:
  CopyRows();

  // Starts a row of `fields` fields; each field follows as one call below.
  void Row(int16_t fields) { Big(fields); }
  void Int64(int64_t value) { Field(value); }
  void Double(double value) { Field(value); }
  void Text(std::string_view value) {
    Big(static_cast<int32_t>(value.size()));
    data_.append(value);
  }

  // The whole stream, trailer included.
  std::string Finish() &&;

 private:
  // Big-endian, as COPY's binary format (and the network) wants.
  template <typename T>
  void Big(T value) {
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    char bytes[sizeof(T)];
    for (size_t i = 0; i < sizeof(T); ++i) {
      bytes[i] = static_cast<char>(bits >> (8 * (sizeof(T) - 1 - i)));
    }
    data_.append(bytes, sizeof(T));
  }
  template <typename T>
  void Field(T value) {
    Big(static_cast<int32_t>(sizeof(T)));
    Big(value);
  }

  std::string data_;
};

// Runs statement `name` (server/store/sql/<name>.sql: a COPY ... FROM STDIN (FORMAT binary)) in
// `tx` with `rows` as its data, and returns the rows PostgreSQL took in. Throws as pg::Exec does.
int64_t Copy(pqxx::dbtransaction& tx, sql::Name name, std::string rows);

}  // namespace ablate::server::pg
