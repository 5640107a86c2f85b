// Bearer tokens and roles (docs/architecture.md#security): worker tokens only reach
// WorkerService, user tokens only SweepService, admin both; missing, unknown and revoked tokens
// are refused.
#include <map>

#include "absl/strings/str_cat.h"
#include "server/store/db.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

using server::Role;

class AuthTest : public ServerFixture {
 protected:
  grpc::Status ListSweeps(const std::string& token) {
    v1::ListSweepsRequest req;
    v1::ListSweepsResponse resp;
    return SweepStub()->ListSweeps(Ctx(token).get(), req, &resp);
  }
  grpc::Status RegisterWorker(const std::string& token, const std::string& name = "w") {
    v1::RegisterRequest req;
    req.mutable_info()->set_name(name);
    req.mutable_info()->set_device_kind("cpu");
    v1::RegisterResponse resp;
    return WorkerStub()->Register(Ctx(token).get(), req, &resp);
  }
  grpc::Status LeaseWith(const std::string& token) {
    v1::LeaseRequest req;
    req.set_worker_id(1);
    v1::LeaseResponse resp;
    return WorkerStub()->Lease(Ctx(token).get(), req, &resp);
  }
};

TEST_F(AuthTest, RolesReachOnlyTheirService) {
  const std::string worker = Token(Role::kWorker, "gpu-box");
  const std::string user = Token(Role::kUser, "alice");
  EXPECT_TRUE(RegisterWorker(worker).ok());
  EXPECT_TRUE(ListSweeps(user).ok());
  // Another name: a live worker's name is not another token's to take (see trust_test).
  EXPECT_TRUE(RegisterWorker(admin_, "w-admin").ok());
  EXPECT_TRUE(ListSweeps(admin_).ok());

  auto denied = ListSweeps(worker);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(denied.error_message(),
            "token \"gpu-box\" has role worker; SweepService.ListSweeps needs role user or admin");
  auto denied2 = RegisterWorker(user);
  EXPECT_EQ(denied2.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(denied2.error_message(),
            "token \"alice\" has role user; WorkerService.Register needs role worker or admin");
  // The callback-API long-poll checks too.
  EXPECT_EQ(LeaseWith(user).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AuthTest, MissingUnknownAndRevokedTokensAreUnauthenticated) {
  auto none = ListSweeps("");
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(none.error_message().find("authorization: Bearer <token>"), std::string::npos);
  auto junk = ListSweeps("ablt_not_a_real_token");
  EXPECT_EQ(junk.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(junk.error_message(), "unknown or revoked token");

  const std::string user = Token(Role::kUser, "bob");
  server::Db db(url_, 1);
  server::TokenStore tokens(&db);
  auto list = tokens.List();
  ASSERT_TRUE(list.ok());
  ASSERT_TRUE(tokens.Revoke(list->back().id).ok());
  EXPECT_EQ(ListSweeps(user).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(LeaseWith(user).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AuthTest, TokensAreStoredOnlyAsDigests) {
  const std::string secret = Token(Role::kWorker, "digest");
  pqxx::connection conn(url_);
  pqxx::work tx(conn);
  auto r = server::pg::ExecText(tx, "SELECT count(*) FROM tokens WHERE sha256 = $1 OR name = $1",
                                secret);
  EXPECT_EQ(r[0][0].as<int>(), 0);
  auto d = tx.exec("SELECT sha256 FROM tokens WHERE name = 'digest'");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0][0].as<std::string>().size(), 64u);
}

TEST(ServerOptionsTest, RefusesPlaintextBeyondLoopbackAndAuthNoneBeyondLoopback) {
  server::ServerOptions o;
  o.database_url = "postgresql://unused/none";
  o.listen = "0.0.0.0:0";
  auto s = server::Server::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("without TLS"), std::string::npos);
  o.insecure = true;
  o.auth = false;
  s = server::Server::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--auth none is only allowed on a loopback"),
            std::string::npos);
  EXPECT_TRUE(server::IsLoopback("127.0.0.1:7070"));
  EXPECT_TRUE(server::IsLoopback("[::1]:7070"));
  EXPECT_TRUE(server::IsLoopback("localhost:1"));
  EXPECT_FALSE(server::IsLoopback("0.0.0.0:7070"));
  EXPECT_FALSE(server::IsLoopback("10.0.0.5:7070"));
}

// A worker stopping cleanly (WorkerService.Deregister) is offline at once, not two lease periods
// later; only the token that registered it may say so, and its name is free again.
TEST_F(AuthTest, DeregisterTakesAWorkerOfflineAtOnceForItsOwnTokenOnly) {
  const std::string mine = Token(Role::kWorker, "box-a");
  const std::string other = Token(Role::kWorker, "box-b");
  const std::string user = Token(Role::kUser, "carol");
  v1::RegisterRequest reg;
  reg.mutable_info()->set_name("stopper");
  reg.mutable_info()->set_device_kind("cpu");
  v1::RegisterResponse worker;
  ASSERT_TRUE(WorkerStub()->Register(Ctx(mine).get(), reg, &worker).ok());
  auto deregister = [&](const std::string& token, int64_t id) {
    v1::CliDeregisterRequest req;
    req.set_worker_id(id);
    v1::CliDeregisterResponse resp;
    return WorkerStub()->Deregister(Ctx(token).get(), req, &resp);
  };
  auto states = [&](bool include_offline) {
    v1::ListWorkersRequest req;
    req.set_include_offline(include_offline);
    v1::ListWorkersResponse resp;
    EXPECT_TRUE(SweepStub()->ListWorkers(Ctx().get(), req, &resp).ok());
    std::map<std::string, std::string> out;
    for (const auto& w : resp.workers()) out[w.info().name()] = w.state();
    return out;
  };
  EXPECT_EQ(states(false)["stopper"], "idle");
  EXPECT_EQ(deregister(user, worker.worker_id()).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(deregister(other, worker.worker_id()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(deregister(mine, worker.worker_id() + 1000).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(states(false)["stopper"], "idle") << "refused calls change nothing";

  ASSERT_TRUE(deregister(mine, worker.worker_id()).ok());
  EXPECT_EQ(states(false).count("stopper"), 0u);
  EXPECT_EQ(states(true)["stopper"], "offline");
  // A stopped worker's name is free at once, for any worker token.
  v1::RegisterResponse again;
  ASSERT_TRUE(WorkerStub()->Register(Ctx(other).get(), reg, &again).ok());
  EXPECT_EQ(again.worker_id(), worker.worker_id());
  EXPECT_EQ(states(false)["stopper"], "idle");
}

// `ablate workers` asks for the workers gone offline lately too (recent_offline_seconds), so a
// worker stopped with SIGTERM shows as offline rather than vanishing; older ones need --all.
TEST_F(AuthTest, RecentlyOfflineWorkersAreListedOnlyWhenAskedAndOnlyForThatLong) {
  const std::string token = Token(Role::kWorker, "box");
  auto add = [&](const std::string& name) {
    v1::RegisterRequest reg;
    reg.mutable_info()->set_name(name);
    reg.mutable_info()->set_device_kind("cpu");
    v1::RegisterResponse resp;
    EXPECT_TRUE(WorkerStub()->Register(Ctx(token).get(), reg, &resp).ok());
    return resp.worker_id();
  };
  const int64_t stopped = add("stopped"), silent = add("silent"), old = add("old");
  add("live");
  for (int64_t id : {stopped, old}) {
    v1::CliDeregisterRequest req;
    req.set_worker_id(id);
    v1::CliDeregisterResponse resp;
    ASSERT_TRUE(WorkerStub()->Deregister(Ctx(token).get(), req, &resp).ok());
  }
  {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    // Silent for an hour but offline (two lease periods of silence) only 30 s ago; stopped 11
    // minutes ago.
    tx.exec(absl::StrCat("UPDATE workers SET last_seen_at = now() - make_interval(secs => ",
                         2 * options_.lease_seconds, " + 30) WHERE id = ", silent));
    tx.exec(absl::StrCat("UPDATE workers SET stopped_at = now() - interval '11 minutes', ",
                         "last_seen_at = now() - interval '11 minutes' WHERE id = ", old));
    tx.commit();
  }
  auto listed = [&](bool include_offline, double recent) {
    v1::ListWorkersRequest req;
    req.set_include_offline(include_offline);
    req.set_recent_offline_seconds(recent);
    v1::ListWorkersResponse resp;
    EXPECT_TRUE(SweepStub()->ListWorkers(Ctx().get(), req, &resp).ok());
    std::map<std::string, std::string> out;
    for (const auto& w : resp.workers()) out[w.info().name()] = w.state();
    return out;
  };
  using M = std::map<std::string, std::string>;
  EXPECT_EQ(listed(false, 0), (M{{"live", "idle"}}));
  EXPECT_EQ(listed(false, 600),
            (M{{"live", "idle"}, {"silent", "offline"}, {"stopped", "offline"}}));
  EXPECT_EQ(listed(false, 10), (M{{"live", "idle"}, {"stopped", "offline"}}));
  EXPECT_EQ(
      listed(true, 0),
      (M{{"live", "idle"}, {"old", "offline"}, {"silent", "offline"}, {"stopped", "offline"}}));
}

}  // namespace
}  // namespace ablate::testing
