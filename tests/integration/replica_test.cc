// Two ablate-server replicas on one database: they share one queue (never handing a run out
// twice) and wake each other's long-polls through LISTEN/NOTIFY. Also: a server whose
// PostgreSQL connections are all killed (as in a database restart) recovers by itself.
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "pqxx/pqxx"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

class ReplicaTest : public ServerFixture {
 protected:
  void SetUp() override {
    ServerFixture::SetUp();
    ASSERT_NE(StartReplica(options_), nullptr);
  }
};

TEST_F(ReplicaTest, TwoReplicasNeverHandOutARunTwice) {
  auto sub = Submit(SweepYaml("shared", 20, 6));
  ASSERT_EQ(sub.runs(), 120);
  std::mutex mu;
  std::vector<int64_t> got;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const int replica = t % 2;
      const int64_t w = Register(absl::StrCat("w", t), "cpu", replica, 64);
      for (;;) {
        auto l = Lease(w, 0, replica);
        if (!l.has_run()) return;
        EXPECT_EQ(l.lease().attempt(), 1);
        std::lock_guard<std::mutex> lock(mu);
        got.push_back(l.spec().run_id());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(got.size(), 120u);
  EXPECT_EQ(std::set<int64_t>(got.begin(), got.end()).size(), 120u);
}

TEST_F(ReplicaTest, ASubmitOnOneReplicaWakesALongPollOnTheOther) {
  const int64_t w = Register("idle", "cpu", 1);
  v1::LeaseResponse got;
  std::thread waiter([&] { got = Lease(w, /*wait=*/10, /*replica=*/1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Submit(SweepYaml("cross", 1, 1), /*replica=*/0);
  waiter.join();
  EXPECT_TRUE(got.has_run());
}

TEST_F(ReplicaTest, SurvivesItsDatabaseConnectionsBeingKilled) {
  Submit(SweepYaml("restart", 3, 1));
  const int64_t w = Register("steady", "cpu", 0, 2);
  ASSERT_TRUE(Lease(w).has_run());
  {
    pqxx::connection admin(url_);
    pqxx::nontransaction tx(admin);
    tx.exec(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()");
  }
  // Pooled connections are dead now; the next call reconnects (retrying is safe: nothing was
  // committed on a connection that was already broken).
  auto l = Lease(w);
  EXPECT_TRUE(l.has_run());
  // The LISTEN connection reconnects too: a long-poll is still woken by a submit.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const int64_t idle = Register("idle-after-restart", "cpu", 0, 2);
  ASSERT_TRUE(Lease(idle).has_run());  // the third run
  v1::LeaseResponse woken;
  std::thread waiter([&] { woken = Lease(idle, /*wait=*/10); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Submit(SweepYaml("after-restart", 1, 1));
  waiter.join();
  EXPECT_TRUE(woken.has_run());
}

}  // namespace
}  // namespace ablate::testing
