// `ablate-server migrate`: idempotent, recorded in schema_migrations, safe when replicas race.
// And the pool a server opens once the schema is there (Db::Fill).
#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pqxx/pqxx"
#include "server/store/db.h"
#include "server/store/migrator.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

TEST(MigrateTest, AppliesOnceAndIsIdempotent) {
  const std::string url = FreshDatabase();
  ASSERT_FALSE(url.empty());
  server::Db db(url, 1);
  auto first = server::Migrate(&db, server::BuiltinMigrations());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size(), server::BuiltinMigrations().size());
  auto second = server::Migrate(&db, server::BuiltinMigrations());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->empty());
}

TEST(MigrateTest, ConcurrentReplicasApplyEachMigrationExactlyOnce) {
  const std::string url = FreshDatabase();
  ASSERT_FALSE(url.empty());
  std::vector<std::thread> threads;
  std::atomic<int> applied{0}, failures{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      server::Db db(url, 1);
      auto r = server::Migrate(&db, server::BuiltinMigrations());
      if (!r.ok()) {
        ++failures;
      } else {
        applied += static_cast<int>(r->size());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(applied.load(), static_cast<int>(server::BuiltinMigrations().size()));
  pqxx::connection conn(url);
  pqxx::work tx(conn);
  EXPECT_EQ(tx.exec("SELECT count(*) FROM schema_migrations")[0][0].as<size_t>(),
            server::BuiltinMigrations().size());
}

// A server fills its pool at start: every connection open, each with every statement registered
// (what it would otherwise reach one request at a time). A pool that cannot open stays usable:
// every slot is back, and a later transaction says why it fails rather than waiting.
TEST(MigrateTest, FillOpensEveryConnectionAndAFailureLeavesThePoolUsable) {
  const std::string url = FreshDatabase();
  ASSERT_FALSE(url.empty());
  server::Db setup(url, 1);
  ASSERT_TRUE(server::Migrate(&setup, server::BuiltinMigrations()).ok());
  pqxx::connection watcher(url);
  auto connections = [&] {
    pqxx::nontransaction tx(watcher);
    return tx
        .exec(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()")[0][0]
        .as<int>();
  };
  const int before = connections();
  server::Db db(url, 5);
  EXPECT_EQ(connections(), before) << "a pool opens nothing until asked";
  absl::Status filled = db.Fill();
  ASSERT_TRUE(filled.ok()) << filled;
  EXPECT_EQ(connections(), before + 5);
  EXPECT_TRUE(db.Fill().ok()) << "filling a full pool again opens nothing more";
  EXPECT_EQ(connections(), before + 5);
  EXPECT_TRUE(db.Ping().ok());

  server::Db nowhere("postgresql://127.0.0.1:1/nothing?connect_timeout=2", 3);
  absl::Status failed = nowhere.Fill();
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("open the connection pool"), std::string::npos) << failed;
  EXPECT_FALSE(nowhere.Ping().ok());  // answers (slots released), does not hang
}

TEST(MigrateTest, AFailingMigrationLeavesNoTrace) {
  const std::string url = FreshDatabase();
  ASSERT_FALSE(url.empty());
  server::Db db(url, 1);
  std::vector<server::Migration> bad = {
      {"0001_ok", "CREATE TABLE a (x int);"},
      {"0002_broken", "CREATE TABLE b (x int); SELECT no_such_function();"}};
  auto r = server::Migrate(&db, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("migration 0002_broken"), std::string::npos);
  pqxx::connection conn(url);
  pqxx::work tx(conn);
  EXPECT_EQ(tx.exec("SELECT version FROM schema_migrations")[0][0].as<std::string>(), "0001_ok");
  EXPECT_TRUE(tx.exec("SELECT 1 FROM pg_tables WHERE tablename = 'b'").empty());
}

// 0016: a budget raised before it had a 1e12 limit in the other unit too (the raise statement's
// least() over NULL); the migration takes it off and leaves every other budget as it was.
TEST(MigrateTest, TheBudgetRaiseRepairLeavesEachBudgetOneLimit) {
  const std::string url = FreshDatabase();
  ASSERT_FALSE(url.empty());
  server::Db db(url, 1);
  const std::string repair = "0016_budget_raise_keeps_its_unit";
  std::vector<server::Migration> before, all = server::BuiltinMigrations();
  for (const auto& m : all) {
    if (m.version == repair) break;
    before.push_back(m);
  }
  ASSERT_LT(before.size(), all.size()) << "no migration " << repair;
  ASSERT_TRUE(server::Migrate(&db, before).ok());
  // (gpu_hours, usd) as the old raise left them, then budgets it never touched.
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"0.005", "1e12"}, {"1e12", "60.5"}, {"40", "NULL"}, {"NULL", "2"}, {"NULL", "NULL"}};
  {
    pqxx::connection conn(url);
    pqxx::work tx(conn);
    for (const auto& [gpu_hours, usd] : rows) {
      tx.exec(
          "INSERT INTO sweeps (name, spec_yaml, file_name, max_attempts, axes, "
          "budget_gpu_hours, budget_usd) VALUES ('s', '', 's.yaml', 1, '{}', " +
          gpu_hours + ", " + usd + ")");
    }
    tx.commit();
  }
  auto applied = server::Migrate(&db, all);
  ASSERT_TRUE(applied.ok()) << applied.status();
  pqxx::connection conn(url);
  pqxx::work tx(conn);
  auto r = tx.exec(
      "SELECT coalesce(budget_gpu_hours::text, 'NULL'), coalesce(budget_usd::text, 'NULL') "
      "FROM sweeps ORDER BY id");
  const std::vector<std::pair<std::string, std::string>> want = {
      {"0.005", "NULL"}, {"NULL", "60.5"}, {"40", "NULL"}, {"NULL", "2"}, {"NULL", "NULL"}};
  ASSERT_EQ(r.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(r[i][0].as<std::string>(), want[i].first) << "row " << i;
    EXPECT_EQ(r[i][1].as<std::string>(), want[i].second) << "row " << i;
  }
}

}  // namespace
}  // namespace ablate::testing
