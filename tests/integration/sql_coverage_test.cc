// Every named statement (server/store/sql/*.sql) ran at least once against a real PostgreSQL:
// each integration test process lists the statements it ran in $ABLATE_SQL_COVERAGE_DIR
// (harness.cc), and this test, which ctest runs after all of them (the sql_coverage fixture in
// CMakeLists.txt), fails naming any statement none of them ran. A new .sql file therefore needs
// an integration test that reaches it.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "server/store/statements.h"

namespace ablate::testing {
namespace {

TEST(SqlCoverageTest, IntegrationTestsRanEveryNamedStatement) {
  const char* dir = std::getenv("ABLATE_SQL_COVERAGE_DIR");
  ASSERT_TRUE(dir != nullptr && *dir != 0) << "ABLATE_SQL_COVERAGE_DIR is not set: run under ctest";
  ASSERT_TRUE(std::filesystem::is_directory(dir))
      << dir << " does not exist: run the integration tests first (ctest -L integration)";
  std::set<std::string> ran;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    ++files;
    for (std::string name; std::getline(in, name);) ran.insert(name);
  }
  ASSERT_GT(files, 0) << "no integration test wrote to " << dir;
  std::string missing;
  for (const auto& statement : server::sql::kStatements) {
    if (ran.count(std::string(statement.name)) == 0) {
      missing += "\n  server/store/sql/" + std::string(statement.name) + ".sql";
    }
  }
  EXPECT_TRUE(missing.empty()) << "no integration test ran these statements (" << files
                               << " test processes reported):" << missing;
}

}  // namespace
}  // namespace ablate::testing
