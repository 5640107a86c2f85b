// Test harness for the coordinator: a fresh PostgreSQL database per test (on the cluster ctest
// starts, see tests/CMakeLists.txt), real ablate-server instances on loopback, and stubs that
// carry a bearer token.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ablate/v1/ablate.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/options.h"
#include "server/server.h"
#include "server/store/token_store.h"

namespace ablate::testing {

// Creates an empty database and returns its URL. Fails the test if no cluster is configured.
std::string FreshDatabase();

// A loopback TCP port free now (for a server's --metrics-listen).
int FreePort();
// The whole response (status line, headers, body) of an HTTP/1.0 GET of `path` on loopback
// `port`; "" when nothing answers.
std::string HttpGet(int port, const std::string& path);

// A sweep file: `runs` grid points (lr axis x seeds), tiny synthetic config.
std::string SweepYaml(const std::string& name, int lrs, int seeds,
                      const std::string& extra_fixed = "", const std::string& extra_top = "");

class ServerFixture : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Starts one more replica on the same database (options as the first, port 0).
  server::Server* StartReplica(const server::ServerOptions& options);
  virtual void Configure(server::ServerOptions* /*options*/) {}

  std::string Token(server::Role role, const std::string& name = "t");
  std::unique_ptr<v1::WorkerService::Stub> WorkerStub(int replica = 0);
  std::unique_ptr<v1::SweepService::Stub> SweepStub(int replica = 0);
  // A client context carrying `token` (admin token when empty).
  static std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token, double deadline_s = 30);
  std::unique_ptr<grpc::ClientContext> Ctx() { return Ctx(admin_); }

  // Conveniences over the admin token.
  v1::SubmitSweepResponse Submit(const std::string& yaml, int replica = 0);
  // `slots`: how many runs the worker may hold leases on at once (as ablate-worker --slots).
  int64_t Register(const std::string& name, const std::string& device = "cpu", int replica = 0,
                   int slots = 1);
  // Records each lease's token: LeaseToken(run, attempt) gives it back for fenced calls.
  // `token`: the worker token the worker registered with (admin when empty).
  v1::LeaseResponse Lease(int64_t worker_id, double wait = 0, int replica = 0,
                          const std::string& token = "");
  std::string LeaseToken(int64_t run_id, int attempt);
  // Complete of the attempt `l` leased: `req` as given, with its run, attempt and lease token.
  grpc::Status CompleteLease(const v1::LeaseResponse& l, v1::CompleteRequest req);
  v1::GetSweepResponse GetSweep(int64_t sweep_id, bool runs = true);
  // Run `run` of sweep `sweep` as GetSweep lists it (a test failure when it is not there).
  v1::Run RunOf(int64_t sweep, int64_t run);
  std::vector<v1::MetricPoint> Points(int64_t run_id);
  // The run's events (ListRunEvents), oldest first.
  std::vector<v1::RunEvent> Events(int64_t run_id);
  // Runs `sql` on the test's database in a transaction of its own (set-up a test cannot reach
  // through the API: an aged heartbeat, a bench run out) and returns the first column of its
  // first row as text, "" when there is none or it is NULL.
  std::string Sql(const std::string& sql);
  // Moves the run's lease expiry into the past, as if its worker had stopped heartbeating; the
  // server's reaper does the rest.
  void ExpireLease(int64_t run_id);

  std::string url_;
  server::ServerOptions options_;
  std::vector<std::unique_ptr<server::Server>> servers_;
  std::string admin_;
  std::string tmp_;

 private:
  std::mutex tokens_mu_;
  std::map<std::pair<int64_t, int>, std::string> lease_tokens_;  // guarded by tokens_mu_
};

}  // namespace ablate::testing
