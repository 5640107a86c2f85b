#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "pqxx/pqxx"
#include "server/store/db.h"
#include "server/store/statements.h"
#include "spdlog/spdlog.h"

namespace ablate::testing {
namespace {

std::string ClusterUrl() {
  if (const char* url = std::getenv("ABLATE_TEST_DATABASE_URL"); url != nullptr && *url) {
    return url;
  }
  const char* dir = std::getenv("ABLATE_TEST_PG_DIR");
  const char* src = std::getenv("ABLATE_SOURCE_DIR");
  if (dir == nullptr || src == nullptr) return "";
  std::string cmd = absl::StrCat(src, "/scripts/dev-postgres url ", dir);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  char buf[512] = {0};
  std::string out;
  while (fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  pclose(p);
  return std::string(absl::StripTrailingAsciiWhitespace(out));
}

// With ABLATE_SQL_COVERAGE_DIR set (tests/integration/CMakeLists.txt sets it), writes the names
// of the statements this process ran to <dir>/<pid>.txt when the tests end: sql_coverage_test
// checks that the integration tests together ran every statement in server/store/sql/.
class SqlCoverage : public ::testing::Environment {
 public:
  void TearDown() override {
    const char* dir = std::getenv("ABLATE_SQL_COVERAGE_DIR");
    if (dir == nullptr || *dir == 0) return;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::ofstream out(absl::StrCat(dir, "/", getpid(), ".txt"));
    for (size_t i = 0; i < server::sql::kStatementCount; ++i) {
      if (server::sql::Executed(i)) out << server::sql::kStatements[i].name << "\n";
    }
  }
};
[[maybe_unused]] ::testing::Environment* const kSqlCoverage =
    ::testing::AddGlobalTestEnvironment(new SqlCoverage);

// The databases FreshDatabase made: dropped when the binary's tests end, so the cluster that
// ctest shares between test binaries does not grow by one database per test (copying and then
// deleting them all made the cluster's stop take half a minute).
std::vector<std::string>& MadeDatabases() {
  static auto* names = new std::vector<std::string>;
  return *names;
}

class DropDatabases : public ::testing::Environment {
 public:
  void TearDown() override {
    const std::string base = ClusterUrl();
    if (base.empty() || MadeDatabases().empty()) return;
    try {
      pqxx::connection conn(base);
      pqxx::nontransaction tx(conn);
      for (const auto& name : MadeDatabases()) {
        tx.exec(absl::StrCat("DROP DATABASE IF EXISTS ", name, " WITH (FORCE)"));
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "could not drop the test databases: %s\n", e.what());
    }
  }
};
[[maybe_unused]] ::testing::Environment* const kDropDatabases =
    ::testing::AddGlobalTestEnvironment(new DropDatabases);

}  // namespace

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
  if (write(fd, req.data(), req.size()) < 0) {
    close(fd);
    return "";
  }
  std::string out;
  char buf[8192];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

std::string FreshDatabase() {
  const std::string base = ClusterUrl();
  if (base.empty()) {
    ADD_FAILURE() << "no PostgreSQL: run through ctest (fixture `postgres`) or set "
                     "ABLATE_TEST_DATABASE_URL";
    return "";
  }
  static std::atomic<int> counter{0};
  const std::string name =
      absl::StrCat("itest_", getpid(), "_", counter.fetch_add(1), "_", std::rand() % 100000);
  pqxx::connection conn(base);
  pqxx::nontransaction tx(conn);
  tx.exec(absl::StrCat("DROP DATABASE IF EXISTS ", name));
  tx.exec(absl::StrCat("CREATE DATABASE ", name));
  MadeDatabases().push_back(name);
  // Replace the database component of the URL (the last path segment).
  const auto slash = base.rfind('/');
  return absl::StrCat(base.substr(0, slash + 1), name);
}

std::string SweepYaml(const std::string& name, int lrs, int seeds, const std::string& extra_fixed,
                      const std::string& extra_top) {
  std::string lr_list, seed_list;
  for (int i = 0; i < lrs; ++i) absl::StrAppend(&lr_list, i ? ", " : "", 0.001 * (i + 1));
  for (int i = 0; i < seeds; ++i) absl::StrAppend(&seed_list, i ? ", " : "", i);
  return absl::StrCat("name: ", name, "\n",
                      "data: {train: \"synthetic:50\", val: \"synthetic:10\", tokenizer: {type: "
                      "bpe, vocab: 512}}\n",
                      "fixed: {n_embd: 32, n_head: 2, block_size: 32, batch_size: 4, steps: 100",
                      extra_fixed, "}\n", "grid:\n  lr: [", lr_list, "]\n  seed: [", seed_list,
                      "]\n", extra_top);
}

void ServerFixture::SetUp() {
  spdlog::set_level(spdlog::level::warn);
  url_ = FreshDatabase();
  ASSERT_FALSE(url_.empty());
  tmp_ = (std::filesystem::temp_directory_path() /
          absl::StrCat("ablate-itest-", getpid(), "-", std::rand()))
             .string();
  std::filesystem::create_directories(tmp_);
  options_.database_url = url_;
  options_.listen = "127.0.0.1:0";
  options_.metrics_listen = "";
  options_.lease_seconds = 30;
  options_.max_long_poll_seconds = 10;
  options_.store_dir = tmp_ + "/store";
  options_.stats_interval_seconds = 1;
  options_.db_pool_size = 8;
  options_.executor_threads = 4;
  Configure(&options_);
  auto s = server::Server::Start(options_);
  ASSERT_TRUE(s.ok()) << s.status();
  servers_.push_back(*std::move(s));
  admin_ = Token(server::Role::kAdmin, "admin");
}

void ServerFixture::TearDown() {
  for (auto& s : servers_) s->Shutdown(std::chrono::milliseconds(500));
  servers_.clear();
  std::error_code ec;
  if (!tmp_.empty()) std::filesystem::remove_all(tmp_, ec);
}

server::Server* ServerFixture::StartReplica(const server::ServerOptions& options) {
  auto s = server::Server::Start(options);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return nullptr;
  servers_.push_back(*std::move(s));
  return servers_.back().get();
}

std::string ServerFixture::Token(server::Role role, const std::string& name) {
  server::Db db(url_, 1);
  server::TokenStore tokens(&db);
  auto t = tokens.Create(role, name);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? t->secret : "";
}

namespace {
std::shared_ptr<grpc::Channel> Dial(int port) {
  return grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
}
}  // namespace

std::unique_ptr<v1::WorkerService::Stub> ServerFixture::WorkerStub(int replica) {
  return v1::WorkerService::NewStub(Dial(servers_[replica]->port()));
}

std::unique_ptr<v1::SweepService::Stub> ServerFixture::SweepStub(int replica) {
  return v1::SweepService::NewStub(Dial(servers_[replica]->port()));
}

std::unique_ptr<grpc::ClientContext> ServerFixture::Ctx(const std::string& token,
                                                        double deadline_s) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
  return ctx;
}

v1::SubmitSweepResponse ServerFixture::Submit(const std::string& yaml, int replica) {
  v1::SubmitSweepRequest req;
  req.set_spec_yaml(yaml);
  req.set_file_name("test.yaml");
  v1::SubmitSweepResponse resp;
  auto s = SweepStub(replica)->SubmitSweep(Ctx().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp;
}

int64_t ServerFixture::Register(const std::string& name, const std::string& device, int replica,
                                int slots) {
  v1::RegisterRequest req;
  req.mutable_info()->set_name(name);
  req.mutable_info()->set_device_kind(device);
  req.mutable_info()->set_slots(slots);
  v1::RegisterResponse resp;
  auto s = WorkerStub(replica)->Register(Ctx().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp.worker_id();
}

v1::LeaseResponse ServerFixture::Lease(int64_t worker_id, double wait, int replica,
                                       const std::string& token) {
  v1::LeaseRequest req;
  req.set_worker_id(worker_id);
  req.set_wait_seconds(wait);
  v1::LeaseResponse resp;
  auto s =
      WorkerStub(replica)->Lease(Ctx(token.empty() ? admin_ : token, wait + 30).get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  if (resp.has_run()) {
    std::lock_guard<std::mutex> lock(tokens_mu_);
    lease_tokens_[{resp.lease().run_id(), resp.lease().attempt()}] = resp.lease().token();
  }
  return resp;
}

std::string ServerFixture::LeaseToken(int64_t run_id, int attempt) {
  std::lock_guard<std::mutex> lock(tokens_mu_);
  auto it = lease_tokens_.find({run_id, attempt});
  return it == lease_tokens_.end() ? "" : it->second;
}

grpc::Status ServerFixture::CompleteLease(const v1::LeaseResponse& l, v1::CompleteRequest req) {
  req.set_run_id(l.lease().run_id());
  req.set_attempt(l.lease().attempt());
  req.set_lease_token(l.lease().token());
  v1::CompleteResponse resp;
  return WorkerStub()->Complete(Ctx().get(), req, &resp);
}

v1::GetSweepResponse ServerFixture::GetSweep(int64_t sweep_id, bool runs) {
  v1::GetSweepRequest req;
  req.mutable_sweep()->set_id(sweep_id);
  req.set_include_runs(runs);
  v1::GetSweepResponse resp;
  auto s = SweepStub()->GetSweep(Ctx().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp;
}

v1::Run ServerFixture::RunOf(int64_t sweep, int64_t run) {
  const v1::GetSweepResponse got = GetSweep(sweep);
  for (const auto& r : got.runs()) {
    if (r.id() == run) return r;
  }
  ADD_FAILURE() << "no run " << run;
  return v1::Run();
}

std::string ServerFixture::Sql(const std::string& sql) {
  pqxx::connection conn(url_);
  pqxx::work tx(conn);
  const pqxx::result r = server::pg::ExecText(tx, sql);
  tx.commit();
  if (r.empty() || r.columns() == 0 || r[0][0].is_null()) return "";
  return r[0][0].as<std::string>();
}

void ServerFixture::ExpireLease(int64_t run_id) {
  Sql(absl::StrCat("UPDATE runs SET lease_expires_at = now() - interval '1 second' WHERE id = ",
                   run_id));
}

std::vector<v1::RunEvent> ServerFixture::Events(int64_t run_id) {
  v1::ListRunEventsRequest req;
  req.set_run_id(run_id);
  v1::ListRunEventsResponse resp;
  auto s = SweepStub()->ListRunEvents(Ctx().get(), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return {resp.events().begin(), resp.events().end()};
}

std::vector<v1::MetricPoint> ServerFixture::Points(int64_t run_id) {
  v1::GetRunMetricsRequest req;
  req.set_run_id(run_id);
  req.set_after_step(-1);
  auto ctx = Ctx();
  auto reader = SweepStub()->GetRunMetrics(ctx.get(), req);
  std::vector<v1::MetricPoint> out;
  v1::GetRunMetricsResponse msg;
  while (reader->Read(&msg)) {
    for (const auto& p : msg.points()) out.push_back(p);
  }
  auto s = reader->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  return out;
}

}  // namespace ablate::testing
