// The whole RPC surface against hostile callers (docs/server.md#hostile-input): every RPC of both
// services of proto/ablate/v1 called with no token, a wrong one, a revoked one and the other
// service's role, each with the code it must get (a table of RPC x caller); then, per rule, a
// well-formed caller with hostile intent or input: another worker's identity, lease or bytes,
// sizes and counts past their caps, names that look like paths, refine/prune and cost input,
// deleting what is live or gone. What auth_test and trust_test assert is not repeated here:
// their messages for the wrong role and missing tokens, Deregister naming another worker, the
// fenced calls (Heartbeat, ReportMetrics, PutCheckpoint, GetCheckpoint, Complete, Release) with
// a guessed lease token, info.slots 65 and a worker name with a newline.
// Memory under bursts of these calls is measured by bench/hostile/hostile_bench.
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"
#include "server/store/db.h"
#include "tests/integration/harness.h"
#include "tests/integration/hostile_client.h"

namespace ablate::testing {
namespace {

using grpc::StatusCode;
using server::Role;

std::string CodeName(StatusCode c) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(c));
}

std::string Yaml(const std::string& name, const std::string& extra = "") {
  return absl::StrCat("name: ", name,
                      "\ndata: {train: \"synthetic:50\", val: \"synthetic:10\"}\n"
                      "fixed: {n_embd: 32, n_head: 2, block_size: 32, batch_size: 4, steps: 100}\n"
                      "grid:\n  lr: [0.001, 0.002, 0.004, 0.008, 0.016, 0.032]\n",
                      extra);
}

// A sweep of six runs, two workers (a and b, one slot each, each its own worker token); worker a
// leases a run and uploads a checkpoint.
class SurfaceTest : public ServerFixture {
 protected:
  void Configure(server::ServerOptions* o) override {
    o->max_checkpoint_bytes = int64_t{64} << 20;
    o->max_prepared_bytes = int64_t{64} << 20;
  }

  void SetUp() override {
    ServerFixture::SetUp();
    if (HasFatalFailure()) return;
    user_ = Token(Role::kUser, "hostile-user");
    worker_a_ = Token(Role::kWorker, "hostile-worker-a");
    worker_b_ = Token(Role::kWorker, "hostile-worker-b");
    revoked_ = Token(Role::kWorker, "hostile-revoked");
    {
      server::Db db(url_, 1);
      server::TokenStore tokens(&db);
      auto list = tokens.List();
      ASSERT_TRUE(list.ok()) << list.status();
      for (const auto& t : *list) {
        if (t.name == "hostile-revoked") {
          ASSERT_TRUE(tokens.Revoke(t.id).ok());
        }
      }
    }
    c_ = std::make_unique<HostileClient>(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", servers_[0]->port()), grpc::InsecureChannelCredentials()));
    ASSERT_TRUE(c_->Submit(admin_, Yaml("victim"), &sweep_).ok());
    ASSERT_TRUE(c_->Register(worker_a_, "bench-a", 1, &a_).ok());
    ASSERT_TRUE(c_->Register(worker_b_, "bench-b", 1, &b_).ok());
    ASSERT_TRUE(c_->Lease(worker_a_, a_, &ra_).ok());
    checkpoint_ = std::string(64 << 10, 'w') + "the weights of worker a's run";
    ASSERT_TRUE(c_->PutCheckpoint(worker_a_, ra_, checkpoint_,
                                  static_cast<int64_t>(checkpoint_.size()), &checkpoint_ref_)
                    .ok());
    guess_ = {ra_.run, ra_.attempt, std::string(64, '0')};
  }

  // Worker b's open claim on key_ (claim_ its token).
  void ClaimKey() {
    key_ = Sha256Hex("hostile data key");
    v1::DataPrepClaimResponse claim;
    ASSERT_TRUE(c_->Claim(worker_b_, b_, key_, &claim).ok());
    claim_ = claim.claim_token();
  }

  static void Expect(const char* rpc, const std::string& what, StatusCode want,
                     const grpc::Status& got) {
    EXPECT_EQ(got.error_code(), want)
        << rpc << ", " << what << ": want " << CodeName(want) << ", got "
        << CodeName(got.error_code()) << ": " << got.error_message();
  }

  HostileClient& c() { return *c_; }

  std::string user_, worker_a_, worker_b_, revoked_;
  std::unique_ptr<HostileClient> c_;
  int64_t sweep_ = 0, a_ = 0, b_ = 0;
  Held ra_, guess_;
  std::string checkpoint_;
  v1::CheckpointRef checkpoint_ref_;
  std::string key_, claim_;
};

// One call of each RPC with harmless arguments; only the caller's token varies.
struct Rpc {
  const char* service;  // "WorkerService" or "SweepService"
  const char* name;
  std::function<grpc::Status(const std::string& token)> call;
};

TEST_F(SurfaceTest, EveryRpcRefusesNoTokenAWrongOneARevokedOneAndTheOtherServicesRole) {
  HostileClient& k = c();
  const Held ra = ra_;
  const int64_t a = a_, sweep = sweep_;
  const std::string key = Sha256Hex("k"), claim = Sha256Hex("c"), sha = checkpoint_ref_.sha256();
  const std::vector<Rpc> rpcs = {
      {"WorkerService", "Register", [&](auto& t) { return k.Register(t, "anon", 1); }},
      {"WorkerService", "Lease", [&](auto& t) { return k.Lease(t, a); }},
      {"WorkerService", "Heartbeat",
       [&](auto& t) {
         v1::HeartbeatResponse hr;
         return k.Heartbeat(t, a, ra, &hr);
       }},
      {"WorkerService", "ReportMetrics", [&](auto& t) { return k.Report(t, ra); }},
      {"WorkerService", "PutCheckpoint", [&](auto& t) { return k.PutCheckpoint(t, ra, "x", 1); }},
      {"WorkerService", "GetCheckpoint", [&](auto& t) { return k.GetCheckpoint(t, ra); }},
      {"WorkerService", "GetDataset",
       [&](auto& t) { return k.GetDataset(t, Sha256Hex("no such data set")); }},
      {"WorkerService", "Complete", [&](auto& t) { return k.Complete(t, ra, v1::FAILED); }},
      {"WorkerService", "Release", [&](auto& t) { return k.Release(t, ra); }},
      {"WorkerService", "ReportLogs", [&](auto& t) { return k.Logs(t, ra, 1, 10); }},
      {"WorkerService", "Deregister", [&](auto& t) { return k.Deregister(t, a); }},
      {"WorkerService", "ClaimDataPrep",
       [&](auto& t) {
         v1::DataPrepClaimResponse cr;
         return k.Claim(t, a, key, &cr);
       }},
      {"WorkerService", "PutPreparedFile",
       [&](auto& t) { return k.PutPrepared(t, key, claim, "tokens_train", "x", 1); }},
      {"WorkerService", "PublishDataPrep", [&](auto& t) { return k.Publish(t, key, claim, {}); }},
      {"WorkerService", "GetPreparedFile", [&](auto& t) { return k.GetPrepared(t, sha); }},
      {"SweepService", "SubmitSweep", [&](auto& t) { return k.Submit(t, Yaml("anon")); }},
      {"SweepService", "GetSweep", [&](auto& t) { return k.GetSweep(t, sweep); }},
      {"SweepService", "ListSweeps", [&](auto& t) { return k.ListSweeps(t); }},
      {"SweepService", "CancelSweep", [&](auto& t) { return k.Cancel(t, sweep); }},
      {"SweepService", "RetryRuns", [&](auto& t) { return k.Retry(t, sweep); }},
      {"SweepService", "WatchSweep", [&](auto& t) { return k.WatchSweep(t, sweep); }},
      {"SweepService", "ListRuns", [&](auto& t) { return k.ListRuns(t); }},
      {"SweepService", "ListCells", [&](auto& t) { return k.ListCells(t, sweep); }},
      {"SweepService", "GetRunMetrics", [&](auto& t) { return k.Metrics(t, ra.run); }},
      {"SweepService", "ListRunEvents", [&](auto& t) { return k.ListRunEvents(t, ra.run); }},
      {"SweepService", "ListWorkers", [&](auto& t) { return k.ListWorkers(t); }},
      {"SweepService", "GetArtifact", [&](auto& t) { return k.GetArtifact(t, ra.run); }},
      {"SweepService", "ListArtifacts", [&](auto& t) { return k.ListArtifacts(t, ra.run); }},
      {"SweepService", "SetBudget", [&](auto& t) { return k.Raise(t, sweep, 1); }},
      {"SweepService", "DeleteSweep", [&](auto& t) { return k.Delete(t, sweep); }},
      {"SweepService", "UnbenchWorker", [&](auto& t) { return k.Unbench(t, "bench-a"); }},
  };
  // The table has every RPC of both services: a new RPC fails here until it is added.
  std::set<std::string> want, have;
  for (const auto* service :
       {v1::WorkerService::service_full_name(), v1::SweepService::service_full_name()}) {
    const auto* d = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
    ASSERT_NE(d, nullptr) << service;
    for (int i = 0; i < d->method_count(); ++i) {
      want.insert(absl::StrCat(d->name(), ".", d->method(i)->name()));
    }
  }
  for (const auto& r : rpcs) have.insert(absl::StrCat(r.service, ".", r.name));
  EXPECT_EQ(have, want);

  // Who calls, and the code each service's RPCs must answer (none: let in; the table's calls
  // then meet the checks the other tests make).
  struct Caller {
    const char* who;
    std::string token;
    std::optional<StatusCode> worker_rpc, sweep_rpc;
  };
  const auto unauthenticated = StatusCode::UNAUTHENTICATED, denied = StatusCode::PERMISSION_DENIED;
  const std::vector<Caller> callers = {
      {"no token", "", unauthenticated, unauthenticated},
      {"a wrong token", "ablt_not_a_real_token", unauthenticated, unauthenticated},
      {"a revoked token", revoked_, unauthenticated, unauthenticated},
      {"a user token", user_, denied, std::nullopt},
      {"a worker token", worker_a_, std::nullopt, denied},
  };
  int checked = 0;
  for (const auto& caller : callers) {
    for (const auto& r : rpcs) {
      const auto& code =
          std::string(r.service) == "WorkerService" ? caller.worker_rpc : caller.sweep_rpc;
      if (!code.has_value()) continue;
      Expect(r.name, caller.who, *code, r.call(caller.token));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * 31 + 15 + 16);
}

TEST_F(SurfaceTest, AnotherWorkersIdentityIsNotFound) {
  const std::string w = "worker b names worker a's id";
  Expect("Lease", w, StatusCode::NOT_FOUND, c().Lease(worker_b_, a_));
  v1::HeartbeatResponse hr;
  Expect("Heartbeat", w, StatusCode::NOT_FOUND, c().Heartbeat(worker_b_, a_, Held{}, &hr));
  v1::DataPrepClaimResponse cr;
  Expect("ClaimDataPrep", w, StatusCode::NOT_FOUND,
         c().Claim(worker_b_, a_, Sha256Hex("in a's name"), &cr));
}

TEST_F(SurfaceTest, LogsUnderAnotherWorkersLeaseAreRefused) {
  Expect("ReportLogs", "worker b, worker a's run and attempt, a guessed token",
         StatusCode::FAILED_PRECONDITION, c().Logs(worker_b_, guess_, 1, 10));
}

TEST_F(SurfaceTest, AnotherRunsBytesAreNeitherPublishedNorServed) {
  ClaimKey();
  std::vector<v1::PreparedFileRef> refs(2);
  c().PutPrepared(worker_b_, key_, claim_, "tokenizer_model", "model", 5, &refs[0]);
  c().PutPrepared(worker_b_, key_, claim_, "tokenizer_vocab", "vocab", 5, &refs[1]);
  v1::PreparedFileRef stolen;
  stolen.set_role("tokens_train");
  stolen.set_sha256(checkpoint_ref_.sha256());
  stolen.set_size_bytes(checkpoint_ref_.size_bytes());
  Expect("PublishDataPrep", "a data set naming worker a's checkpoint as tokens_train",
         StatusCode::FAILED_PRECONDITION,
         c().Publish(worker_b_, key_, claim_, {refs[0], refs[1], stolen}));
  std::string bytes;
  Expect("GetPreparedFile", "worker a's checkpoint by its sha256", StatusCode::NOT_FOUND,
         c().GetPrepared(worker_b_, checkpoint_ref_.sha256(), &bytes));
  EXPECT_EQ(bytes, "");
  Expect("GetPreparedFile", "an uploaded but unpublished file", StatusCode::NOT_FOUND,
         c().GetPrepared(worker_b_, refs[0].sha256()));
  v1::DataPrepClaimResponse renew;
  Expect("ClaimDataPrep", "renew the claim with a guessed claim token",
         StatusCode::FAILED_PRECONDITION,
         c().Claim(worker_a_, a_, key_, &renew, std::string(64, 'f')));
  Expect("PutPreparedFile", "upload under a guessed claim token", StatusCode::FAILED_PRECONDITION,
         c().PutPrepared(worker_a_, key_, std::string(64, 'f'), "tokens_train", "t", 1));
  Held rb;
  ASSERT_TRUE(c().Lease(worker_b_, b_, &rb).ok());
  Expect("Complete", "final weights = worker a's checkpoint (another run)",
         StatusCode::INVALID_ARGUMENT,
         c().Complete(worker_b_, rb, v1::SUCCEEDED, &checkpoint_ref_));
}

TEST_F(SurfaceTest, SizesAndCountsAreCapped) {
  ClaimKey();
  Held rb;
  ASSERT_TRUE(c().Lease(worker_b_, b_, &rb).ok());
  Expect("Lease", "a second lease for a worker that declared 1 slot",
         StatusCode::RESOURCE_EXHAUSTED, c().Lease(worker_b_, b_));
  for (int i = 1; i < 4; ++i) {
    v1::DataPrepClaimResponse r;
    ASSERT_TRUE(c().Claim(worker_b_, b_, Sha256Hex(absl::StrCat("more keys ", i)), &r).ok());
  }
  v1::DataPrepClaimResponse fifth;
  Expect("ClaimDataPrep", "a 5th open data-preparation claim", StatusCode::RESOURCE_EXHAUSTED,
         c().Claim(worker_b_, b_, Sha256Hex("one too many"), &fifth));
  std::vector<v1::PreparedFileRef> nine(9);
  for (int i = 0; i < 9; ++i) {
    nine[i].set_role("tokens_train");
    nine[i].set_sha256(Sha256Hex(absl::StrCat(i)));
  }
  Expect("PublishDataPrep", "9 files", StatusCode::INVALID_ARGUMENT,
         c().Publish(worker_b_, key_, claim_, nine));
  Expect("ReportLogs", "101 lines", StatusCode::INVALID_ARGUMENT,
         c().Logs(worker_a_, ra_, 101, 10));
  Expect("ReportLogs", "a 513-byte line", StatusCode::INVALID_ARGUMENT,
         c().Logs(worker_a_, ra_, 1, 513));
  Expect("PutPreparedFile", "announces more than --max-prepared-bytes",
         StatusCode::INVALID_ARGUMENT,
         c().PutPrepared(worker_b_, key_, claim_, "tokens_train", "x", int64_t{1} << 40));
  Expect(
      "PutPreparedFile", "announces 1 KB, sends 70 MB (cap 64 MiB)", StatusCode::INVALID_ARGUMENT,
      c().PutPrepared(worker_b_, key_, claim_, "tokens_train", std::string(70 << 20, 'p'), 1024));
  Expect("PutCheckpoint", "announces more than --max-checkpoint-bytes",
         StatusCode::INVALID_ARGUMENT, c().PutCheckpoint(worker_a_, ra_, "x", int64_t{1} << 40));
}

TEST_F(SurfaceTest, NamesThatLookLikePathsAreRefused) {
  ClaimKey();
  Expect("PutPreparedFile", "role \"../../etc/passwd\"", StatusCode::INVALID_ARGUMENT,
         c().PutPrepared(worker_b_, key_, claim_, "../../etc/passwd", "x", 1));
  Expect("GetPreparedFile", "sha256 \"../../../etc/passwd\"", StatusCode::INVALID_ARGUMENT,
         c().GetPrepared(worker_b_, "../../../etc/passwd"));
  Expect("GetCheckpoint", "sha256 \"../../../etc/passwd\" (own lease)", StatusCode::NOT_FOUND,
         c().GetCheckpoint(worker_a_, ra_, "../../../etc/passwd"));
  Expect("GetArtifact", "name \"../../etc/passwd\"", StatusCode::INVALID_ARGUMENT,
         c().GetArtifact(admin_, ra_.run, "../../etc/passwd"));
  Expect("SubmitSweep", "data.train \"../../etc/passwd\"", StatusCode::INVALID_ARGUMENT,
         c().Submit(admin_,
                    "name: paths\ndata: {train: \"../../etc/passwd\"}\n"
                    "fixed: {steps: 10}\ngrid:\n  lr: [0.001]\n"));
  Expect("UnbenchWorker", "name \"../../etc/passwd\" (only looked up)", StatusCode::NOT_FOUND,
         c().Unbench(user_, "../../etc/passwd"));
  Expect("UnbenchWorker", "name with a newline", StatusCode::INVALID_ARGUMENT,
         c().Unbench(user_, "bench-a\nlevel=error msg=forged"));
  Expect("UnbenchWorker", "a 100 KB name", StatusCode::INVALID_ARGUMENT,
         c().Unbench(user_, std::string(100 << 10, 'n')));
  Expect("UnbenchWorker", "a name no worker has", StatusCode::NOT_FOUND,
         c().Unbench(user_, "no-such-worker"));
}

TEST_F(SurfaceTest, RefineAndPruneInputIsChecked) {
  const auto bad = StatusCode::INVALID_ARGUMENT;
  Expect("SubmitSweep", "refine.until_ratio 1", bad,
         c().Submit(admin_, Yaml("r1", "refine: {until_ratio: 1, max_new_runs: 4}\n")));
  Expect("SubmitSweep", "refine.max_new_runs -1", bad,
         c().Submit(admin_, Yaml("r2", "refine: {max_new_runs: -1}\n")));
  Expect("SubmitSweep", "refine.axis \"../lr\"", bad,
         c().Submit(admin_, Yaml("r3", "refine: {axis: ../lr, max_new_runs: 4}\n")));
  Expect("SubmitSweep", "refine.boundaries [everything]", bad,
         c().Submit(admin_, Yaml("r4", "refine: {boundaries: [everything], max_new_runs: 4}\n")));
  Expect("SubmitSweep", "prune.above_divergence \"maybe\"", bad,
         c().Submit(admin_, Yaml("r5", "prune: {above_divergence: maybe}\n")));
  Expect("SubmitSweep", "refine.max_new_runs 10^12", bad,
         c().Submit(admin_, Yaml("r6", "refine: {max_new_runs: 1000000000000}\n")));
}

// DeleteSweep: bad references, a live sweep (any user may delete any finished sweep: sweeps are
// shared by every user token, as cancel is), and a delete racing the Complete that finishes the
// sweep, after which the deleted run's worker can write nothing.
TEST_F(SurfaceTest, DeletingWhatIsLiveOrGoneIsRefusedAndARacingDeleteWaitsForTheEnd) {
  v1::SweepRef none, path, huge, victim;
  path.set_name("../../etc/passwd");
  huge.set_name(std::string(100 << 10, 's'));
  victim.set_id(sweep_);
  Expect("DeleteSweep", "no id and no name", StatusCode::INVALID_ARGUMENT, c().Delete(user_, none));
  Expect("ListCells", "after_cell with a NUL byte", StatusCode::INVALID_ARGUMENT,
         c().ListCells(user_, sweep_, std::string("a\0b", 3)));
  Expect("ListCells", "a 100 KB after_cell", StatusCode::INVALID_ARGUMENT,
         c().ListCells(user_, sweep_, std::string(100 << 10, 'c')));
  Expect("DeleteSweep", "an id no sweep has", StatusCode::NOT_FOUND,
         c().Delete(user_, int64_t{1} << 60));
  Expect("DeleteSweep", "name \"../../etc/passwd\" (only looked up)", StatusCode::NOT_FOUND,
         c().Delete(user_, path));
  Expect("DeleteSweep", "a 100 KB name", StatusCode::INVALID_ARGUMENT, c().Delete(user_, huge));
  Expect("DeleteSweep", "a sweep with leased and queued runs", StatusCode::FAILED_PRECONDITION,
         c().Delete(user_, sweep_));
  Expect("DeleteSweep", "a live sweep, dry run", StatusCode::FAILED_PRECONDITION,
         c().Delete(user_, victim, true));
  // Worker b leases the one run of a sweep queued ahead of the victim's, uploads a checkpoint
  // and completes it while a user deletes the sweep.
  int64_t doomed = 0;
  Held run;
  v1::CheckpointRef ref;
  const std::string weights = "the doomed run's weights";
  ASSERT_TRUE(c().Submit(admin_,
                         "name: doomed\ndata: {train: \"synthetic:50\", val: \"synthetic:10\"}\n"
                         "fixed: {n_embd: 32, n_head: 2, block_size: 32, batch_size: 4, "
                         "steps: 100}\ngrid:\n  lr: [0.001]\n",
                         &doomed, /*priority=*/100)
                  .ok());
  ASSERT_TRUE(c().Lease(worker_b_, b_, &run).ok());
  ASSERT_TRUE(
      c().PutCheckpoint(worker_b_, run, weights, static_cast<int64_t>(weights.size()), &ref).ok());
  std::atomic<bool> done{false};
  grpc::Status deleted(StatusCode::DEADLINE_EXCEEDED, "never deleted");
  std::thread deleter([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      deleted = c().Delete(user_, doomed);
      if (deleted.error_code() != StatusCode::FAILED_PRECONDITION) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(done ? 5 : 1));
    }
  });
  Expect("Complete", "the last run's Complete racing DeleteSweep", StatusCode::OK,
         c().Complete(worker_b_, run, v1::SUCCEEDED, &ref));
  done = true;
  deleter.join();
  Expect("DeleteSweep", "racing the last run's Complete (deletes once finished)", StatusCode::OK,
         deleted);
  Expect("DeleteSweep", "the same sweep again", StatusCode::NOT_FOUND, c().Delete(user_, doomed));
  Expect("ReportMetrics", "a run of a deleted sweep, its old lease", StatusCode::NOT_FOUND,
         c().Report(worker_b_, run));
  Expect("GetArtifact", "the final weights of a deleted sweep's run", StatusCode::NOT_FOUND,
         c().GetArtifact(user_, run.run));
}

// Issue #25: what a worker declares it costs, and budgets.
TEST_F(SurfaceTest, PricesBenchmarksAndBudgetsAreChecked) {
  const auto bad = StatusCode::INVALID_ARGUMENT;
  v1::WorkerInfo info;
  info.set_price_per_hour(std::nan(""));
  Expect("Register", "price_per_hour NaN", bad, c().RegisterWith(worker_b_, "priced-nan", info));
  info.set_price_per_hour(-0.35);
  Expect("Register", "a negative price_per_hour", bad,
         c().RegisterWith(worker_b_, "priced-neg", info));
  info.set_price_per_hour(1e300);
  Expect("Register", "price_per_hour 1e300", bad, c().RegisterWith(worker_b_, "priced-huge", info));
  info.Clear();
  for (int i = 0; i < 100; ++i) info.add_benchmarks()->set_flops_per_second(1e9);
  Expect("Register", "100 startup benchmarks", bad,
         c().RegisterWith(worker_b_, "bench-many", info));
  info.Clear();
  info.add_benchmarks()->set_flops_per_second(std::numeric_limits<double>::infinity());
  Expect("Register", "a benchmark of infinite FLOP/s", bad,
         c().RegisterWith(worker_b_, "bench-inf", info));
  info.Clear();
  info.add_benchmarks()->set_model(std::string(100 << 10, 'm'));
  Expect("Register", "a benchmark with a 100 KB model text", bad,
         c().RegisterWith(worker_b_, "bench-text", info));

  Expect("SetBudget", "raise NaN", bad, c().Raise(user_, sweep_, std::nan("")));
  Expect("SetBudget", "raise -5", bad, c().Raise(user_, sweep_, -5));
  Expect("SetBudget", "raise 1e300", bad, c().Raise(user_, sweep_, 1e300));
  Expect("SetBudget", "an id no sweep has", StatusCode::NOT_FOUND,
         c().Raise(user_, int64_t{1} << 60, 1));
  Expect("SetBudget", "a sweep without a budget", StatusCode::FAILED_PRECONDITION,
         c().Raise(user_, sweep_, 1));
  Expect("SubmitSweep", "budget {usd: 1e300}", bad,
         c().Submit(user_, Yaml("rich") + "budget: {usd: 1e300}\n"));
  Expect("SubmitSweep", "budget {gpu_hours: .nan}", bad,
         c().Submit(user_, Yaml("nan-budget") + "budget: {gpu_hours: .nan}\n"));
}

}  // namespace
}  // namespace ablate::testing
