// Reading a statement's result by column name. The store never reads a column by position: a
// statement's columns are named in its .sql file (server/store/sql), and code reads them by
// those names, so adding, dropping or reordering a column cannot shift another's meaning
// (scripts/check-store-rows fails on a positional read in server/).
//
//   One row:  pqxx::row row = pg::Exec1(tx, "sweep_get", id);  row["name"].as<std::string>()
//   Pages:    pg::ByName col(result);  for (const auto& row : result) col(row, "id").as<...>()
//
// A name the statement does not return is an error at the read (pqxx::argument_error "Unknown
// column name", which Db::Tx turns into INTERNAL naming the operation); integration.sql_coverage
// fails unless every statement is run by some test, so every read is exercised.
#pragma once

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "pqxx/pqxx"

namespace ablate::server::pg {

// A result's column numbers by name, looked up once per result rather than once per field
// (row["name"] is a linear search of the columns on every read; a 100,000-run page reads
// millions of fields).
class ByName {
 public:
  explicit ByName(const pqxx::result& result) {
    for (pqxx::row::size_type i = 0; i < static_cast<pqxx::row::size_type>(result.columns()); ++i) {
      index_.emplace(result.column_name(i), i);
    }
  }

  // The field `column` of `row`, a row of the result this was made from.
  pqxx::field operator()(const pqxx::row& row, absl::string_view column) const {
    auto it = index_.find(column);
    if (it == index_.end()) {
      throw pqxx::argument_error("Unknown column name: '" + std::string(column) + "'");
    }
    return row[it->second];
  }

  bool has(absl::string_view column) const { return index_.contains(column); }

 private:
  absl::flat_hash_map<std::string, pqxx::row::size_type> index_;
};

}  // namespace ablate::server::pg
