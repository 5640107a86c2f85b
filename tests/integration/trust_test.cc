// The trust boundary against a hostile client holding a valid worker token (issue 10): each test
// is an attempt that once worked. Data paths may not leave --data-dir through symlinks; a lease
// belongs to the worker holding its token, not to whoever guesses the attempt number; a live
// worker's name cannot be taken over; names and text are checked; metric steps and checkpoint
// sizes are bounded; a refused upload leaves no blob; bad options stop the server at startup.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"
#include "pqxx/pqxx"
#include "server/store/pqxx_compat.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

namespace fs = std::filesystem;
using server::Role;

class TrustTest : public ServerFixture {
 protected:
  void Configure(server::ServerOptions* o) override {
    data_dir_ =
        (fs::temp_directory_path() / absl::StrCat("ablate-trust-data-", getpid(), "-", std::rand()))
            .string();
    outside_ = data_dir_ + "-outside";
    fs::create_directories(data_dir_);
    fs::create_directories(outside_);
    o->data_dir = data_dir_;
    o->max_checkpoint_bytes = 1000;
  }
  void TearDown() override {
    ServerFixture::TearDown();
    std::error_code ec;
    fs::remove_all(data_dir_, ec);
    fs::remove_all(outside_, ec);
  }

  grpc::Status TrySubmit(const std::string& yaml) {
    v1::SubmitSweepRequest req;
    req.set_spec_yaml(yaml);
    req.set_file_name("s.yaml");
    v1::SubmitSweepResponse resp;
    return SweepStub()->SubmitSweep(Ctx().get(), req, &resp);
  }
  static std::string WithTrain(const std::string& name, const std::string& train) {
    std::string yaml = SweepYaml(name, 1, 1);
    return yaml.replace(yaml.find("\"synthetic:50\""), 14, train);
  }
  grpc::Status RegisterAs(const std::string& token, const std::string& name, int64_t* id) {
    v1::RegisterRequest req;
    req.mutable_info()->set_name(name);
    req.mutable_info()->set_device_kind("cpu");
    v1::RegisterResponse resp;
    auto s = WorkerStub()->Register(Ctx(token).get(), req, &resp);
    if (id != nullptr) *id = resp.worker_id();
    return s;
  }
  grpc::Status Report(const std::string& as, int64_t run, int attempt, const std::string& lease,
                      int64_t step, const std::string& name = "train_loss") {
    v1::ReportMetricsRequest req;
    req.set_run_id(run);
    req.set_attempt(attempt);
    req.set_lease_token(lease);
    auto* p = req.add_points();
    p->set_name(name);
    p->set_step(step);
    p->set_value(1.0);
    v1::ReportMetricsResponse resp;
    return WorkerStub()->ReportMetrics(Ctx(as).get(), req, &resp);
  }
  // Uploads `data` announced as `announced` bytes; `between` runs after the first chunk went.
  grpc::Status Upload(const std::string& as, int64_t run, int attempt, const std::string& lease,
                      const std::string& data, int64_t announced,
                      const std::function<void()>& between = nullptr) {
    v1::PutCheckpointResponse stored;
    auto ctx = Ctx(as);
    auto writer = WorkerStub()->PutCheckpoint(ctx.get(), &stored);
    v1::CheckpointChunk header;
    header.set_run_id(run);
    header.set_attempt(attempt);
    header.set_lease_token(lease);
    header.mutable_ref()->set_step(10);
    header.mutable_ref()->set_sha256(Sha256Hex(data));
    header.mutable_ref()->set_size_bytes(announced);
    header.set_data(data.substr(0, 100));
    writer->Write(header);
    if (between) between();
    for (size_t off = 100; off < data.size(); off += 100) {
      v1::CheckpointChunk c;
      c.set_data(data.substr(off, 100));
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }
  // Every file in the checkpoint store (blobs and temporaries).
  std::vector<std::string> StoreFiles() {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(options_.store_dir, ec)) {
      if (e.is_regular_file()) out.push_back(e.path().string());
    }
    return out;
  }
  std::string LeaseDigest(int64_t run) {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    return server::pg::ExecText(tx, "SELECT lease_token_sha256 FROM runs WHERE id = $1", run)[0][0]
        .as<std::string>();
  }
  static std::string LeaseLost(int64_t run, int attempt) {
    return absl::StrCat("lease lost: run ", run, " attempt ", attempt,
                        " does not hold the run's lease (re-leased, released, expired, cancelled "
                        "or finished)");
  }

  std::string data_dir_, outside_;
};

TEST_F(TrustTest, SymlinksCannotLeadOutOfTheDataDir) {
  std::ofstream(fs::path(outside_) / "secret.txt") << "the server's secret";
  fs::create_symlink(fs::path(outside_) / "secret.txt", fs::path(data_dir_) / "link.txt");
  fs::create_directory_symlink(outside_, fs::path(data_dir_) / "linked-dir");
  // A link that stays inside is fine.
  std::ofstream(fs::path(data_dir_) / "real.txt") << "inside data";
  fs::create_symlink(fs::path(data_dir_) / "real.txt", fs::path(data_dir_) / "alias.txt");

  for (const char* path : {"link.txt", "linked-dir/secret.txt"}) {
    auto s = TrySubmit(WithTrain("escape", path));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << path;
    EXPECT_EQ(s.error_message(),
              absl::StrCat("s.yaml:2: data.train: \"", path,
                           "\" leads outside --data-dir through a symbolic link; only files "
                           "inside it are served"));
  }
  auto nul = TrySubmit(WithTrain("nul", "\"real.txt\\0.png\""));
  EXPECT_EQ(nul.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The sweep-file parser refuses it first; the resolver's own check stays behind it.
  EXPECT_NE(nul.error_message().find("data.train: contains a NUL byte"), std::string::npos)
      << nul.error_message();
  ASSERT_TRUE(TrySubmit(WithTrain("alias", "alias.txt")).ok());

  // A file swapped for a link after submit (same size, so only confinement can tell) is not
  // served either.
  std::ofstream(fs::path(data_dir_) / "swap.txt") << "0123456789";
  ASSERT_TRUE(TrySubmit(WithTrain("swap", "swap.txt")).ok());
  std::ofstream(fs::path(outside_) / "ten.txt") << "SECRET!!!!";
  fs::remove(fs::path(data_dir_) / "swap.txt");
  fs::create_symlink(fs::path(outside_) / "ten.txt", fs::path(data_dir_) / "swap.txt");
  const std::string worker = Token(Role::kWorker, "prober");
  v1::GetDatasetRequest ds;
  ds.set_sha256(Sha256Hex("0123456789"));
  auto ctx = Ctx(worker);
  auto reader = WorkerStub()->GetDataset(ctx.get(), ds);
  std::string fetched;
  v1::DataChunk chunk;
  while (reader->Read(&chunk)) fetched += chunk.data();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(fetched, "");
}

TEST_F(TrustTest, OnlyTheLeaseTokenHolderCanTouchARun) {
  Submit(SweepYaml("owned", 1, 1));
  const std::string a_token = Token(Role::kWorker, "a"), b_token = Token(Role::kWorker, "b");
  int64_t a = 0, b = 0;
  ASSERT_TRUE(RegisterAs(a_token, "worker-a", &a).ok());
  ASSERT_TRUE(RegisterAs(b_token, "worker-b", &b).ok());
  auto lease = Lease(a, 0, 0, a_token);
  ASSERT_TRUE(lease.has_run());
  const int64_t run = lease.spec().run_id();
  const std::string token = lease.lease().token();
  // 256 random bits as hex; the database keeps only the digest.
  ASSERT_EQ(token.size(), 64u);
  EXPECT_EQ(LeaseDigest(run), Sha256Hex(token));

  // Worker b knows run and attempt (both small numbers) but not the token.
  for (const std::string& guess : {std::string(), std::string(64, '0'), token.substr(1) + "0"}) {
    v1::HeartbeatRequest hb;
    hb.set_worker_id(b);
    hb.set_run_id(run);
    hb.set_attempt(1);
    hb.set_lease_token(guess);
    v1::HeartbeatResponse hr;
    ASSERT_TRUE(WorkerStub()->Heartbeat(Ctx(b_token).get(), hb, &hr).ok());
    EXPECT_TRUE(hr.lease_lost());

    auto rep = Report(b_token, run, 1, guess, 5);
    EXPECT_EQ(rep.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    // Word for word what a stale attempt gets: no hint which part was wrong.
    EXPECT_EQ(rep.error_message(), LeaseLost(run, 1));

    auto up = Upload(b_token, run, 1, guess, "ckpt", 4);
    EXPECT_EQ(up.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(up.error_message(), LeaseLost(run, 1));

    v1::GetCheckpointRequest get;
    get.set_run_id(run);
    get.set_attempt(1);
    get.set_lease_token(guess);
    auto gctx = Ctx(b_token);
    auto reader = WorkerStub()->GetCheckpoint(gctx.get(), get);
    v1::CheckpointChunk c;
    while (reader->Read(&c)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);

    v1::CompleteRequest done;
    done.set_run_id(run);
    done.set_attempt(1);
    done.set_lease_token(guess);
    done.set_state(v1::FAILED);
    v1::CompleteResponse cr;
    auto comp = WorkerStub()->Complete(Ctx(b_token).get(), done, &cr);
    EXPECT_EQ(comp.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(comp.error_message(), LeaseLost(run, 1));

    v1::ReleaseRequest rel;
    rel.set_run_id(run);
    rel.set_attempt(1);
    rel.set_lease_token(guess);
    v1::ReleaseResponse rr;
    auto r = WorkerStub()->Release(Ctx(b_token).get(), rel, &rr);
    EXPECT_EQ(r.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(r.error_message(), LeaseLost(run, 1));
  }
  // A stale attempt number with the right token is refused the same way.
  EXPECT_EQ(Report(a_token, run, 2, token, 5).error_message(), LeaseLost(run, 2));
  // Nothing of b's landed, and the holder carries on.
  EXPECT_TRUE(Points(run).empty());
  EXPECT_EQ(GetSweep(lease.spec().sweep_id()).runs(0).state(), v1::LEASED);
  ASSERT_TRUE(Report(a_token, run, 1, token, 5).ok());
  v1::CompleteRequest done;
  done.set_run_id(run);
  done.set_attempt(1);
  done.set_lease_token(token);
  done.set_state(v1::SUCCEEDED);
  v1::CompleteResponse cr;
  ASSERT_TRUE(WorkerStub()->Complete(Ctx(a_token).get(), done, &cr).ok());
  // A retried Complete (reply lost) needs the token too.
  ASSERT_TRUE(WorkerStub()->Complete(Ctx(a_token).get(), done, &cr).ok());
  done.set_lease_token("");
  EXPECT_EQ(WorkerStub()->Complete(Ctx(b_token).get(), done, &cr).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(TrustTest, ALiveWorkersNameIsNotAnotherTokensToTake) {
  const std::string owner = Token(Role::kWorker, "owner"), other = Token(Role::kWorker, "other");
  int64_t id = 0, again = 0, taken = 0;
  ASSERT_TRUE(RegisterAs(owner, "gpu-1", &id).ok());
  auto refused = RegisterAs(other, "gpu-1", nullptr);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(refused.error_message().find("worker name \"gpu-1\" belongs to a live worker"),
            std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("the name is free at "), std::string::npos)
      << refused.error_message();
  // The same token (a restarted worker) takes its row over.
  ASSERT_TRUE(RegisterAs(owner, "gpu-1", &again).ok());
  EXPECT_EQ(again, id);
  // Once the worker has been silent for a lease period the name is free.
  {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    tx.exec("UPDATE workers SET last_seen_at = now() - interval '1 hour'");
    tx.commit();
  }
  ASSERT_TRUE(RegisterAs(other, "gpu-1", &taken).ok());
  EXPECT_EQ(taken, id);
  EXPECT_EQ(RegisterAs(owner, "gpu-1", nullptr).error_code(), grpc::StatusCode::ALREADY_EXISTS);
}

TEST_F(TrustTest, NamesAndFreeTextAreChecked) {
  auto bad_name = RegisterAs(admin_, "evil\nlevel=error msg=forged", nullptr);
  EXPECT_EQ(bad_name.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad_name.error_message().rfind("info.name: only printable ASCII", 0), 0u)
      << bad_name.error_message();

  Submit(SweepYaml("texts", 1, 1));
  const int64_t w = Register("w");
  auto l = Lease(w);
  const int64_t run = l.spec().run_id();
  auto bad_metric = Report(admin_, run, 1, l.lease().token(), 1, "loss\r\nforged");
  EXPECT_EQ(bad_metric.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad_metric.error_message().rfind("points[0].name: only printable ASCII", 0), 0u)
      << bad_metric.error_message();

  v1::CompleteRequest done;
  done.set_run_id(run);
  done.set_attempt(1);
  done.set_lease_token(l.lease().token());
  done.set_state(v1::FAILED);
  // Invalid UTF-8 never gets here (proto3 refuses it while parsing); a NUL byte does, and
  // PostgreSQL would refuse it with an internal error.
  done.set_error(std::string("trace\0back", 10));
  v1::CompleteResponse cr;
  auto c = WorkerStub()->Complete(Ctx().get(), done, &cr);
  EXPECT_EQ(c.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(c.error_message().rfind("error: ", 0), 0u) << c.error_message();

  v1::ReleaseRequest rel;
  rel.set_run_id(run);
  rel.set_attempt(1);
  rel.set_lease_token(l.lease().token());
  rel.set_reason(std::string("nul\0byte", 8));
  v1::ReleaseResponse rr;
  auto r = WorkerStub()->Release(Ctx().get(), rel, &rr);
  EXPECT_EQ(r.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.error_message().rfind("reason: ", 0), 0u) << r.error_message();
  // None of it touched the run.
  EXPECT_EQ(GetSweep(l.spec().sweep_id()).runs(0).state(), v1::LEASED);
}

TEST_F(TrustTest, MetricStepsStopAtTheRunsLastStep) {
  Submit(SweepYaml("steps", 1, 1));  // steps: 100; the trainer reports steps 0..100
  const int64_t w = Register("w");
  auto l = Lease(w);
  const int64_t run = l.spec().run_id();
  const std::string token = l.lease().token();
  ASSERT_TRUE(Report(admin_, run, 1, token, 100).ok());
  auto s = Report(admin_, run, 1, token, 101);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "points[0]: step 101 is beyond the run's last step 100 (the trainer reports steps "
            "0..100)");
  s = Report(admin_, run, 1, token, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_EQ(Points(run).size(), 1u);
  // Someone else's over-long step is still just "lease lost".
  EXPECT_EQ(Report(admin_, run, 1, "", 101).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(TrustTest, CheckpointsAreCappedAndRefusedUploadsLeaveNoBlob) {
  Submit(SweepYaml("ckpt", 1, 1));
  const int64_t w = Register("w");
  auto l = Lease(w);
  const int64_t run = l.spec().run_id();
  const std::string token = l.lease().token();

  auto announced = Upload(admin_, run, 1, token, std::string(2000, 'x'), 2000);
  EXPECT_EQ(announced.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(announced.error_message(),
            "checkpoint: header ref.size_bytes 2000 is over the server's --max-checkpoint-bytes "
            "(1000)");
  // A header that lies about the size is stopped while streaming.
  auto lied = Upload(admin_, run, 1, token, std::string(1500, 'y'), 500);
  EXPECT_EQ(lied.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(lied.error_message(),
            "checkpoint: more than 1000 bytes uploaded; the server's --max-checkpoint-bytes is "
            "1000");
  EXPECT_TRUE(StoreFiles().empty());

  // The lease is lost mid-upload (the worker's own Release here; a re-lease works alike): the
  // upload is refused and its blob is not left in the store.
  const std::string blob(900, 'z');
  auto fenced = Upload(admin_, run, 1, token, blob, 900, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past the early fence check
    v1::ReleaseRequest rel;
    rel.set_run_id(run);
    rel.set_attempt(1);
    rel.set_lease_token(token);
    v1::ReleaseResponse rr;
    ASSERT_TRUE(WorkerStub()->Release(Ctx().get(), rel, &rr).ok());
  });
  EXPECT_EQ(fenced.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(fenced.error_message(), LeaseLost(run, 1));
  EXPECT_TRUE(StoreFiles().empty());

  // Within the cap and the lease, it is stored.
  auto again = Lease(w);
  ASSERT_TRUE(again.has_run());
  ASSERT_TRUE(Upload(admin_, run, 2, again.lease().token(), blob, 900).ok());
  EXPECT_EQ(StoreFiles().size(), 1u);
}

// A worker holds at most the slots it declared at Register (0, an older worker, counts as 1):
// leasing on and on cannot drain a sweep, not even with many Leases at once.
TEST_F(TrustTest, LeasesAreBoundedByTheWorkersSlots) {
  Submit(SweepYaml("drain", 10, 1));
  const std::string token = Token(Role::kWorker, "drainer");
  int64_t two = 0;
  {
    v1::RegisterRequest req;
    req.mutable_info()->set_name("two-slots");
    req.mutable_info()->set_device_kind("cpu");
    req.mutable_info()->set_slots(2);
    v1::RegisterResponse resp;
    ASSERT_TRUE(WorkerStub()->Register(Ctx(token).get(), req, &resp).ok());
    two = resp.worker_id();
  }
  const auto first = Lease(two, 0, 0, token);
  const auto second = Lease(two, 0, 0, token);
  ASSERT_TRUE(first.has_run());
  ASSERT_TRUE(second.has_run());
  v1::LeaseRequest lr;
  lr.set_worker_id(two);
  v1::LeaseResponse third;
  auto refused = WorkerStub()->Lease(Ctx(token).get(), lr, &third);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_FALSE(third.has_run());
  EXPECT_NE(refused.error_message().find(
                absl::StrCat("already holds 2 run lease(s) (runs ", first.spec().run_id(), ", ",
                             second.spec().run_id(), "), the 2 slot(s) it declared at Register")),
            std::string::npos)
      << refused.error_message();
  // Finishing one frees its slot.
  v1::CompleteRequest done;
  done.set_run_id(first.spec().run_id());
  done.set_attempt(first.lease().attempt());
  done.set_lease_token(first.lease().token());
  done.set_state(v1::SUCCEEDED);
  v1::CompleteResponse cr;
  ASSERT_TRUE(WorkerStub()->Complete(Ctx(token).get(), done, &cr).ok());
  EXPECT_TRUE(Lease(two, 0, 0, token).has_run());

  // A worker that declares no slots holds one run; 16 Leases at once win exactly one.
  int64_t old = 0;
  ASSERT_TRUE(RegisterAs(token, "no-slots", &old).ok());
  std::atomic<int> granted{0}, exhausted{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      v1::LeaseRequest req;
      req.set_worker_id(old);
      v1::LeaseResponse resp;
      auto s = WorkerStub()->Lease(Ctx(token).get(), req, &resp);
      if (s.ok() && resp.has_run()) granted++;
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) exhausted++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(granted.load(), 1);
  EXPECT_EQ(exhausted.load(), 15);
  // ListWorkers shows what each holds against its slots.
  v1::ListWorkersRequest req;
  v1::ListWorkersResponse resp;
  ASSERT_TRUE(SweepStub()->ListWorkers(Ctx().get(), req, &resp).ok());
  std::map<std::string, std::pair<int, int>> held;
  for (const auto& w : resp.workers()) {
    held[w.info().name()] = {w.held_run_ids_size(), w.info().slots()};
  }
  EXPECT_EQ(held["two-slots"], std::make_pair(2, 2));
  EXPECT_EQ(held["no-slots"], std::make_pair(1, 0));

  // Declared slots are bounded too.
  v1::RegisterRequest greedy;
  greedy.mutable_info()->set_name("greedy");
  greedy.mutable_info()->set_device_kind("cpu");
  greedy.mutable_info()->set_slots(65);
  v1::RegisterResponse gr;
  auto bad = WorkerStub()->Register(Ctx(token).get(), greedy, &gr);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.error_message(), "info.slots must be between 0 and 64 (got 65)");
}

// A deregistered worker (it said it stopped) must register again before it leases.
TEST_F(TrustTest, ADeregisteredWorkerMustRegisterAgainToLease) {
  Submit(SweepYaml("after-stop", 2, 1));
  const std::string token = Token(Role::kWorker, "stopper");
  int64_t id = 0;
  ASSERT_TRUE(RegisterAs(token, "stopper-1", &id).ok());
  v1::CliDeregisterRequest dr;
  dr.set_worker_id(id);
  v1::CliDeregisterResponse dresp;
  ASSERT_TRUE(WorkerStub()->Deregister(Ctx(token).get(), dr, &dresp).ok());
  v1::LeaseRequest lr;
  lr.set_worker_id(id);
  v1::LeaseResponse lease;
  auto refused = WorkerStub()->Lease(Ctx(token).get(), lr, &lease);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(refused.error_message().find("was deregistered"), std::string::npos)
      << refused.error_message();
  EXPECT_FALSE(lease.has_run());
  int64_t again = 0;
  ASSERT_TRUE(RegisterAs(token, "stopper-1", &again).ok());
  EXPECT_EQ(again, id);
  EXPECT_TRUE(Lease(id, 0, 0, token).has_run());
}

TEST_F(TrustTest, BadOptionsStopTheServerNamingTheFlag) {
  struct Case {
    std::function<void(server::ServerOptions*)> set;
    std::string error;
  };
  const std::vector<Case> cases = {
      {[](auto* o) { o->lease_seconds = std::nan(""); }, "--lease-seconds must be between"},
      {[](auto* o) { o->max_message_bytes = -1; }, "--max-message-bytes must be between"},
      {[](auto* o) { o->max_long_poll_seconds = -5; }, "--max-long-poll must be between"},
      {[](auto* o) { o->max_checkpoint_bytes = 0; }, "--max-checkpoint-bytes must be between"},
      {[](auto* o) { o->db_pool_size = 0; }, "--db-pool must be between"},
      {[](auto* o) { o->executor_threads = -3; }, "--threads must be between"},
      {[](auto* o) { o->max_grid = 0; }, "--max-grid must be between"},
      {[](auto* o) { o->faults.fault_hold_seconds = std::nan(""); },
       "--fault-hold-seconds must be between"},
      {[](auto* o) { o->faults.max_releases = 0; }, "--max-releases must be between"},
      {[](auto* o) { o->max_points_per_run = 0; }, "--max-points-per-run must be between"},
      {[](auto* o) { o->max_points_per_name = -1; }, "--max-points-per-name must be between"},
      {[](auto* o) { o->max_metric_names = 0; }, "--max-metric-names must be between"},
      {[](auto* o) { o->max_final_probes = 0; }, "--max-final-probes must be between"},
      {[](auto* o) { o->max_worker_names = 0; }, "--max-worker-names must be between"},
      {[](auto* o) { o->metrics_listen = "0.0.0.0:0"; },
       "refusing to serve /metrics on 0.0.0.0:0: it has no TLS and no authentication; give "
       "--metrics-insecure"},
  };
  for (const auto& c : cases) {
    server::ServerOptions o = options_;
    o.listen = "127.0.0.1:0";
    c.set(&o);
    auto s = server::Server::Start(o);
    ASSERT_FALSE(s.ok()) << c.error;
    EXPECT_EQ(s.status().message().rfind(c.error, 0), 0u) << s.status().message();
  }
}

}  // namespace
}  // namespace ablate::testing
