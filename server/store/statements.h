// Every SQL statement the server runs, by name: server/store/sql/<name>.sql, compiled in by
// server/CMakeLists.txt as migrations/ are (docs/server.md#sql). Store code runs a statement with
// pg::Exec(tx, "name", args...) (pqxx_compat.h), which prepares it by that name once per
// connection; runtime code holds no SQL text of its own (tests/unit/sql_literals_test.py).
#pragma once

#include <cstddef>
#include <iterator>
#include <string_view>

namespace ablate::server::sql {

struct Statement {
  std::string_view name;  // the file name without .sql
  std::string_view text;
};

// kStatements: every statement, sorted by name.
#include "sql_statements.inc"

inline constexpr size_t kStatementCount = std::size(kStatements);

// Deliberately not constexpr: reached from Name's constructor, it makes a name without a file a
// compile error ("call to non-'constexpr' function UnknownStatementName").
void UnknownStatementName();

// A statement's name, checked at compile time against the files.
class Name {
 public:
  // Implicit, so call sites read pg::Exec(tx, "lease", ...).
  consteval Name(const char* name) : index_(Find(name)) {}  // NOLINT(google-explicit-constructor)

  constexpr size_t index() const { return index_; }
  constexpr std::string_view name() const { return kStatements[index_].name; }
  constexpr std::string_view text() const { return kStatements[index_].text; }

 private:
  static consteval size_t Find(std::string_view name) {
    for (size_t i = 0; i < kStatementCount; ++i) {
      if (kStatements[i].name == name) return i;
    }
    UnknownStatementName();
    return 0;
  }

  size_t index_;
};

// Records that statement `index` ran to completion in this process, and asks whether it has: the
// integration tests report which statements they ran (tests/integration/sql_coverage_test.cc).
void MarkExecuted(size_t index);
bool Executed(size_t index);

}  // namespace ablate::server::sql
