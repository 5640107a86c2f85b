// scale_bench: the coordinator with a 100,000-run sweep and 10,000 parked long-polling workers
// (issue #22, "Fleet scale"), each figure beside raw PostgreSQL doing the same work in the same
// run where one exists. Server in-process, PostgreSQL, load generator on one machine, loopback,
// token auth on. Prints figures; asserts nothing.
//
//   scale_bench [--database-url URL] [--runs N] [--waiters N] [--parked-only]
//
// The parked workers run in a child process (this binary again, --waiters-child), so the
// server's memory per waiter is this process's RSS growth alone.
#include <dirent.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "ablate/v1/ablate.grpc.pb.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_db.h"
#include "bench/bench_stats.h"
#include "grpcpp/grpcpp.h"
#include "pqxx/pqxx"
#include "server/server.h"
#include "server/store/db.h"
#include "server/store/statements.h"
#include "server/store/token_store.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using namespace ablate;
using bench::Percentile;
using bench::PostgresCpu;
using bench::SelfCpu;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string P50P99(const std::vector<double>& ms) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "p50 %7.1f ms  p99 %7.1f ms", Percentile(ms, 0.5),
                Percentile(ms, 0.99));
  return buf;
}

// Times `f` `n` times; milliseconds each.
std::vector<double> Time(int n, const std::function<void()>& f) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    f();
    ms.push_back(Ms(Clock::now() - t0));
  }
  return ms;
}

// A /proc/self/status field in kB ("VmRSS") or a count ("Threads").
int64_t ProcStatus(const std::string& field, pid_t pid = 0) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/status")
                            : absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream rest(line.substr(field.size() + 1));
    int64_t v = 0;
    rest >> v;
    return v;
  }
  return -1;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// One HTTP/1.0 GET on loopback; the body's size (-1 on failure).
int64_t HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return -1;
  }
  std::string resp;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) resp.append(buf, n);
  close(fd);
  const auto body = resp.find("\r\n\r\n");
  return body == std::string::npos ? -1 : static_cast<int64_t>(resp.size() - body - 4);
}

std::shared_ptr<grpc::Channel> Channel(int port, int index) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("ablate.bench_channel", index);  // distinct args: a connection of its own
  args.SetMaxReceiveMessageSize(64 << 20);
  return grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials(), args);
}

struct Client {
  std::shared_ptr<grpc::Channel> channel;
  std::string token;
  std::unique_ptr<v1::SweepService::Stub> sweeps;
  std::unique_ptr<v1::WorkerService::Stub> workers;

  Client(std::shared_ptr<grpc::Channel> c, std::string t)
      : channel(std::move(c)),
        token(std::move(t)),
        sweeps(v1::SweepService::NewStub(channel)),
        workers(v1::WorkerService::NewStub(channel)) {}

  std::unique_ptr<grpc::ClientContext> Ctx(double deadline_s = 120) const {
    auto c = std::make_unique<grpc::ClientContext>();
    c->AddMetadata("authorization", "Bearer " + token);
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
    return c;
  }
  int64_t Register(const std::string& name, const std::string& device) const {
    v1::RegisterRequest req;
    req.mutable_info()->set_name(name);
    req.mutable_info()->set_device_kind(device);
    v1::RegisterResponse resp;
    auto s = workers->Register(Ctx().get(), req, &resp);
    if (!s.ok()) std::fprintf(stderr, "register: %s\n", s.error_message().c_str());
    return resp.worker_id();
  }
  // Lease (wait_seconds 0) and, when a run came, Complete it (or leave it held).
  bool LeaseOnce(int64_t worker, bool complete, double* lease_ms = nullptr) const {
    v1::LeaseRequest lr;
    lr.set_worker_id(worker);
    v1::LeaseResponse lease;
    const auto t0 = Clock::now();
    auto s = workers->Lease(Ctx().get(), lr, &lease);
    if (lease_ms != nullptr) *lease_ms = Ms(Clock::now() - t0);
    if (!s.ok()) std::fprintf(stderr, "lease: %s\n", s.error_message().c_str());
    if (!s.ok() || !lease.has_run()) return false;
    if (!complete) return true;
    v1::CompleteRequest c;
    c.set_run_id(lease.lease().run_id());
    c.set_attempt(lease.lease().attempt());
    c.set_lease_token(lease.lease().token());
    c.set_state(v1::SUCCEEDED);
    c.mutable_result()->set_final_val_loss(1.0);
    v1::CompleteResponse cr;
    return workers->Complete(Ctx().get(), c, &cr).ok();
  }
  v1::Sweep GetSweep(int64_t id, bool runs = false, grpc::Status* status = nullptr) const {
    v1::GetSweepRequest req;
    req.mutable_sweep()->set_id(id);
    req.set_include_runs(runs);
    v1::GetSweepResponse resp;
    auto s = sweeps->GetSweep(Ctx().get(), req, &resp);
    if (status != nullptr) *status = s;
    if (!s.ok() && status == nullptr)
      std::fprintf(stderr, "getsweep: %s\n", s.error_message().c_str());
    return resp.sweep();
  }
  v1::ListRunsResponse ListRuns(int64_t sweep, int limit, int offset) const {
    v1::ListRunsRequest req;
    req.mutable_sweep()->set_id(sweep);
    req.set_limit(limit);
    req.set_offset(offset);
    v1::ListRunsResponse resp;
    auto s = sweeps->ListRuns(Ctx().get(), req, &resp);
    if (!s.ok()) std::fprintf(stderr, "listruns: %s\n", s.error_message().c_str());
    return resp;
  }
  v1::ListCellsResponse ListCells(int64_t sweep, int limit, const std::string& after) const {
    v1::ListCellsRequest req;
    req.mutable_sweep()->set_id(sweep);
    req.set_limit(limit);
    req.set_after_cell(after);
    v1::ListCellsResponse resp;
    auto s = sweeps->ListCells(Ctx().get(), req, &resp);
    if (!s.ok()) std::fprintf(stderr, "listcells: %s\n", s.error_message().c_str());
    return resp;
  }
};

// lrs x seeds runs on `device` (the parked workers are cpu: a cuda sweep stays queued under
// them, as a big sweep waits for the right hardware).
std::string SweepYaml(const std::string& name, int lrs, int seeds, const std::string& device) {
  std::string lr, seed;
  for (int i = 0; i < lrs; ++i) absl::StrAppend(&lr, i ? ", " : "", 1e-5 * (i + 1));
  for (int i = 0; i < seeds; ++i) absl::StrAppend(&seed, i ? ", " : "", i);
  return absl::StrCat("name: ", name,
                      "\ndata: {train: \"synthetic:100\", val: \"synthetic:10\"}\n"
                      "fixed: {n_embd: 64, n_head: 2, block_size: 64, batch_size: 8, steps: 1000, "
                      "device: ",
                      device, "}\ngrid:\n  lr: [", lr, "]\n  seed: [", seed, "]\n");
}

// Raw PostgreSQL beside the server: a statement's own text (server/store/sql, looked up by name),
// prepared on a connection of this process, so the difference is what the server adds (gRPC,
// auth, protobuf, the rest of the handler).
std::string StatementText(const std::string& name) {
  for (const auto& s : server::sql::kStatements) {
    if (s.name == name) return std::string(s.text);
  }
  return "";
}

class Raw {
 public:
  explicit Raw(const std::string& url) : conn_(url) {}
  template <typename... Args>
  size_t Run(const std::string& name, Args... args) {
    if (prepared_.insert(name).second) conn_.prepare(name, StatementText(name));
    pqxx::nontransaction tx(conn_);
    return tx.exec_prepared(name, args...).size();
  }
  size_t Text(const std::string& sql) {
    pqxx::nontransaction tx(conn_);
    return tx.exec(sql).size();
  }
  int64_t Int(const std::string& sql) {
    pqxx::nontransaction tx(conn_);
    return tx.exec(sql)[0][0].as<int64_t>();
  }

 private:
  pqxx::connection conn_;
  std::set<std::string> prepared_;
};

// --- the parked workers' process -----------------------------------------------------------

// Registers `n` cpu workers, parks one Lease (wait 900 s) for each over `channels` connections,
// prints "parked" and its RSS, and on a line on stdin cancels them and exits.
int WaitersChild(int port, const std::string& token, int n, int channels) {
  std::vector<std::unique_ptr<Client>> clients;
  for (int c = 0; c < channels; ++c) {
    clients.push_back(std::make_unique<Client>(Channel(port, 1000 + c), token));
  }
  std::vector<int64_t> ids(n);
  std::vector<std::thread> threads;
  std::atomic<int> next{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = next++; i < n; i = next++) {
        ids[i] = clients[(i + t) % channels]->Register(absl::StrCat("parked-", i), "cpu");
      }
    });
  }
  for (auto& t : threads) t.join();
  struct Call {
    std::unique_ptr<grpc::ClientContext> ctx;
    v1::LeaseResponse resp;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::LeaseResponse>> rpc;
  };
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < n; ++i) {
    const Client& c = *clients[i % channels];
    auto call = std::make_unique<Call>();
    call->ctx = c.Ctx(1000);
    v1::LeaseRequest req;
    req.set_worker_id(ids[i]);
    req.set_wait_seconds(900);
    call->rpc = c.workers->AsyncLease(call->ctx.get(), req, &cq);
    call->rpc->Finish(&call->resp, &call->status, call.get());
    calls.push_back(std::move(call));
  }
  std::printf("parked %ld\n", static_cast<long>(ProcStatus("VmRSS")));
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  int answered = 0;
  for (auto& c : calls) c->ctx->TryCancel();
  for (int i = 0; i < n; ++i) {
    void* tag;
    bool ok;
    if (!cq.Next(&tag, &ok)) break;
    if (static_cast<Call*>(tag)->status.ok()) ++answered;
  }
  std::printf("done %d\n", answered);
  std::fflush(stdout);
  return 0;
}

// --- the figures ---------------------------------------------------------------------------

struct Bench {
  Client* client;
  Raw* raw;
  std::string url;
  int runs;
};

// The server's submit of a `runs`-run sweep, median of 3, then raw PostgreSQL loading the same
// rows (runs + run_specs, exported from the first sweep) with COPY into tables of the same shape
// and indexes, median of 3. Returns the first sweep's id.
int64_t SubmitFigure(const Bench& b, int lrs, int seeds) {
  std::vector<double> ms;
  std::vector<int64_t> ids;
  const double self0 = SelfCpu(), pg0 = PostgresCpu();
  for (int i = 0; i < 3; ++i) {
    v1::SubmitSweepRequest req;
    req.set_spec_yaml(SweepYaml(absl::StrCat("scale", i), lrs, seeds, "cuda"));
    v1::SubmitSweepResponse resp;
    const auto t0 = Clock::now();
    auto s = b.client->sweeps->SubmitSweep(b.client->Ctx(300).get(), req, &resp);
    ms.push_back(Ms(Clock::now() - t0));
    if (!s.ok()) std::fprintf(stderr, "submit: %s\n", s.error_message().c_str());
    ids.push_back(resp.sweep().id());
  }
  const double self_cpu = (SelfCpu() - self0) / 3, pg_cpu = (PostgresCpu() - pg0) / 3;
  const auto dir = std::filesystem::temp_directory_path() / absl::StrCat("scale-bench-", getpid());
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::all);
  const std::string runs_file = (dir / "runs.copy").string();
  const std::string specs_file = (dir / "specs.copy").string();
  const std::string psql = absl::StrCat("psql -X -q -v ON_ERROR_STOP=1 '", b.url, "' ");
  bench::Shell(absl::StrCat(
      psql, "-c \"CREATE TABLE IF NOT EXISTS raw_runs (LIKE runs INCLUDING ALL)\" ",
      "-c \"CREATE TABLE IF NOT EXISTS raw_specs (LIKE run_specs INCLUDING ALL)\" ",
      "-c \"\\copy (SELECT * FROM runs WHERE sweep_id = ", ids[0], ") TO '", runs_file, "'\" ",
      "-c \"\\copy (SELECT s.* FROM run_specs s JOIN runs r ON r.id = s.run_id WHERE r.sweep_id = ",
      ids[0], ") TO '", specs_file, "'\""));
  std::vector<double> raw_ms;
  for (int i = 0; i < 3; ++i) {
    bench::Shell(absl::StrCat(psql, "-c 'TRUNCATE raw_runs, raw_specs'"));
    const auto t0 = Clock::now();
    bench::Shell(absl::StrCat(psql, "-1 -c \"\\copy raw_runs FROM '", runs_file,
                              "'\" -c \"\\copy raw_specs FROM '", specs_file, "'\""));
    raw_ms.push_back(Ms(Clock::now() - t0));
  }
  const int64_t copied = b.raw->Int("SELECT count(*) FROM raw_runs");
  bench::Shell(absl::StrCat(psql, "-c 'DROP TABLE raw_runs, raw_specs'"));
  std::filesystem::remove_all(dir);
  std::printf(
      "submit      %d-run sweep: %.2f s median of 3 (%.2f / %.2f / %.2f)   [target <= 2 s]\n"
      "  raw PG    COPY of the same %lld runs + run_specs rows (as stored: a run's spec as its "
      "delta)\n"
      "            into tables of the same shape and indexes (no triggers), one transaction, psql\n"
      "            \\copy: %.2f s median of 3 -> "
      "submit = %.1fx raw\n"
      "            CPU per submit: %.2f s server (parse, expand, JSON, gRPC; the walk on a thread "
      "of\n"
      "            its own beside the inserts), %.2f s PostgreSQL\n",
      b.runs, Percentile(ms, 0.5) / 1000, ms[0] / 1000, ms[1] / 1000, ms[2] / 1000,
      static_cast<long long>(copied), Percentile(raw_ms, 0.5) / 1000,
      Percentile(ms, 0.5) / std::max(1.0, Percentile(raw_ms, 0.5)), self_cpu, pg_cpu);
  // Only the first stays active: the others would be leased first by nobody, but /metrics and
  // the budget keeper read every active sweep.
  for (size_t i = 1; i < ids.size(); ++i) {
    v1::CancelSweepRequest c;
    c.mutable_sweep()->set_id(ids[i]);
    v1::CancelSweepResponse cr;
    if (!b.client->sweeps->CancelSweep(b.client->Ctx(300).get(), c, &cr).ok()) {
      std::fprintf(stderr, "cancel failed\n");
    }
  }
  return ids[0];
}

// The counts as sweep_get read them before migration 0011: an aggregate over the sweep's runs.
std::string OldCountsSql(int64_t sweep) {
  return absl::StrCat(
      "SELECT count(*) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state = 'leased'), "
      "count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state = 'succeeded'), "
      "count(*) FILTER (WHERE state = 'diverged'), count(*) FILTER (WHERE state = 'failed'), "
      "count(*) FILTER (WHERE state = 'cancelled'), count(*), "
      "count(*) FILTER (WHERE state = 'skipped'), count(*) FILTER (WHERE refine_round > 0), "
      "coalesce(max(refine_round), 0), avg(extract(epoch from finished_at - started_at)) FILTER "
      "(WHERE state IN ('succeeded', 'diverged', 'failed') AND started_at IS NOT NULL) "
      "FROM runs WHERE sweep_id = ",
      sweep);
}

// The whole of `ablate status` as the CLI does it: GetSweep, then the cells the server folds
// from the runs, a page of 1,000 cells per call (client/commands.h), until the last page.
std::string StatusFigure(const Bench& b, int64_t sweep) {
  size_t cells = 0;
  int calls = 0;
  auto status = Time(20, [&] {
    b.client->GetSweep(sweep);
    std::string after;
    cells = 0;
    calls = 0;
    do {
      auto page = b.client->ListCells(sweep, 1000, after);
      cells += page.cells_size();
      ++calls;
      after = page.next_after_cell();
    } while (!after.empty());
  });
  return absl::StrCat("ablate status (GetSweep + ListCells, ", cells, " cells in ", calls,
                      calls == 1 ? " call" : " calls", "): ", P50P99(status),
                      "   [target p99 <= 200 ms]\n");
}

void ReadFigures(const Bench& b, int64_t sweep) {
  Client& c = *b.client;
  Raw& raw = *b.raw;
  const int n = 100;
  // ablate status: GetSweep (counts, cost, ETA) then the runs a page at a time.
  auto get = Time(n, [&] { c.GetSweep(sweep); });
  auto get_raw = Time(n, [&] { raw.Run("sweep_get", sweep); });
  auto remaining_raw = Time(n, [&] { raw.Run("sweep_remaining", sweep); });
  auto old_raw = Time(10, [&] { raw.Text(OldCountsSql(sweep)); });
  std::printf(
      "GetSweep    (ablate status, watch's counts) %s   [target p99 <= 200 ms]\n"
      "  raw PG    sweep_get %s; sweep_remaining (the ETA, cached 3 s) %s\n"
      "  before    the counts as an aggregate over the sweep's runs (sweep_get before 0011): %s\n",
      P50P99(get).c_str(), P50P99(get_raw).c_str(), P50P99(remaining_raw).c_str(),
      P50P99(old_raw).c_str());
  // An idle worker of another device asks while the sweep is queued: the lease statement walks
  // the queue in order, skipping every run of the other device.
  const int64_t cpu = c.Register("scale-cpu-idle", "cpu");
  std::vector<double> empty_ms;
  for (int i = 0; i < 20; ++i) {
    double ms = 0;
    c.LeaseOnce(cpu, false, &ms);
    empty_ms.push_back(ms);
  }
  std::printf(
      "Lease       by a cpu worker, nothing for it among the %d queued cuda runs (wait 0): %s\n",
      b.runs, P50P99(empty_ms).c_str());
  grpc::Status refused;
  c.GetSweep(sweep, /*runs=*/true, &refused);
  std::printf("            GetSweep include_runs on it: %s\n",
              refused.ok() ? "answered with every run"
                           : absl::StrCat("refused (", refused.error_message(), ")").c_str());

  size_t most = 0;
  auto page_of = [&](int limit, int offset) {
    auto r = c.ListRuns(sweep, limit, offset);
    most = std::max<size_t>(most, r.runs_size());
    return r;
  };
  // ablate runs: 50 newest by default; --all and status page 1,000 at a time (the CLI's page,
  // client/commands.h); 10,000 is the most the server answers in one call.
  auto cli = Time(50, [&] { page_of(50, 0); });
  auto cli_deep = Time(20, [&] { page_of(50, b.runs - 50); });
  auto page = Time(20, [&] { page_of(1000, 0); });
  auto page_deep = Time(20, [&] { page_of(1000, b.runs - 1000); });
  auto cap = Time(5, [&] { page_of(10000, 0); });
  auto cli_raw = Time(50, [&] { raw.Run("runs_page", sweep, "{}", 50, 0); });
  auto page_raw = Time(20, [&] { raw.Run("runs_page", sweep, "{}", 1000, 0); });
  auto page_deep_raw = Time(20, [&] { raw.Run("runs_page", sweep, "{}", 1000, b.runs - 1000); });
  auto cap_raw = Time(5, [&] { raw.Run("runs_page", sweep, "{}", 10000, 0); });
  auto count_raw = Time(n, [&] { raw.Run("runs_count", sweep, "{}"); });
  const int64_t total = c.ListRuns(sweep, 1, 0).total();
  std::printf(
      "ListRuns    (ablate runs) 50 newest (the CLI's default): %s; the oldest 50: %s\n"
      "            a page of 1,000 (ablate runs --all, status): first %s; last %s\n"
      "            10,000 (the server's cap per call): %s   [target p99 <= 200 ms]\n"
      "  raw PG    runs_page 50: %s; 1,000 first: %s; last: %s; 10,000: %s\n"
      "            runs_count (the total beside a page) %s\n"
      "            most runs in one reply: %zu of %lld (total as answered)\n",
      P50P99(cli).c_str(), P50P99(cli_deep).c_str(), P50P99(page).c_str(),
      P50P99(page_deep).c_str(), P50P99(cap).c_str(), P50P99(cli_raw).c_str(),
      P50P99(page_raw).c_str(), P50P99(page_deep_raw).c_str(), P50P99(cap_raw).c_str(),
      P50P99(count_raw).c_str(), most, static_cast<long long>(total));
  const std::string status = StatusFigure(b, sweep);
  auto cells_raw = Time(20, [&] { raw.Run("cells_page", sweep, std::string(), 1000); });
  // Before ListCells the CLI read every run (ListRuns pages of 1,000) and folded them itself.
  auto before = Time(1, [&] {
    c.GetSweep(sweep);
    for (int off = 0; off < total; off += 1000) page_of(1000, off);
  });
  std::printf(
      "%s"
      "  raw PG    cells_page, 1,000 cells: %s\n"
      "  before    GetSweep + every run in %lld ListRuns pages of 1,000, folded by the CLI: %.1f "
      "s\n",
      status.c_str(), P50P99(cells_raw).c_str(), static_cast<long long>((total + 999) / 1000),
      before[0] / 1000);
}

// WatchSweep (ablate watch): the first frame after the stream opens, and how long after a run
// completes a frame shows it (min interval 0.2 s; a worker of the sweep's device completes one
// run at a time).
void WatchFigure(const Bench& b, int64_t sweep, int64_t worker) {
  Client& c = *b.client;
  std::vector<double> first_ms, update_ms;
  for (int i = 0; i < 5; ++i) {
    auto ctx = c.Ctx();
    v1::WatchSweepRequest req;
    req.mutable_sweep()->set_id(sweep);
    req.set_min_interval_seconds(0.2);
    const auto t0 = Clock::now();
    auto reader = c.sweeps->WatchSweep(ctx.get(), req);
    v1::SweepUpdate u;
    if (!reader->Read(&u)) break;
    first_ms.push_back(Ms(Clock::now() - t0));
    for (int k = 0; k < 4; ++k) {
      // Past the stream's minimum interval, so the frame waits for the change, not the throttle.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const int before = u.sweep().counts().succeeded();
      c.LeaseOnce(worker, /*complete=*/true);
      const auto t1 = Clock::now();
      while (reader->Read(&u) && u.sweep().counts().succeeded() == before) {
      }
      update_ms.push_back(Ms(Clock::now() - t1));
    }
    ctx->TryCancel();
    while (reader->Read(&u)) {
    }
    reader->Finish();
  }
  Raw& raw = *b.raw;
  auto fetch_raw = Time(20, [&] {
    raw.Run("sweep_get", sweep);
    raw.Run("runs_in_flight", sweep);
  });
  std::printf(
      "WatchSweep  (ablate watch) first frame %s; a completed run shown after %s\n"
      "            (Complete -> NOTIFY -> re-read -> frame; frames at most every 0.2 s, each "
      "change\n"
      "            made 0.3 s after the last frame)   [target p99 <= 200 ms]\n"
      "  raw PG    one frame's reads (sweep_get + runs_in_flight) %s\n",
      P50P99(first_ms).c_str(), P50P99(update_ms).c_str(), P50P99(fetch_raw).c_str());
}

// With `half_done`, first marks half the sweep finished (the refresh then exports ~50,000 runs
// every 5 s, which would weigh on the figures after it until the sweep is cancelled).
void MetricsFigure(const Bench& b, int64_t sweep, int metrics_port, bool half_done) {
  Raw& raw = *b.raw;
  auto scrape_now = [&](const char* what) {
    // Let a refresh (every --stats-interval, default 5 s) see the sweep as it is now: wait until
    // the exposition stops growing (a refresh of ~50,000 runs takes seconds here; charged
    // seconds keep changing a few digits).
    int64_t bytes = 0, seen = -1;
    for (int i = 0; i < 30 && (std::abs(bytes - seen) * 100 > std::max<int64_t>(seen, 1) || i < 2);
         ++i) {
      seen = bytes;
      std::this_thread::sleep_for(std::chrono::milliseconds(6000));
      bytes = HttpGet(metrics_port, "/metrics");
    }
    auto scrape = Time(20, [&] { bytes = HttpGet(metrics_port, "/metrics"); });
    auto refresh_raw = Time(5, [&] {
      raw.Run("sweep_list", true, 100000);
      raw.Run("stats_active_runs");
      raw.Run("stats_active_cells");
      raw.Run("stats_workers", 60.0);
      raw.Run("stats_usage");
    });
    std::printf(
        "/metrics    %s: scrape %s, %.2f MB   [target p99 <= 200 ms]\n"
        "  raw PG    the refresh's reads (every --stats-interval, off the scrape path: "
        "sweep_list,\n"
        "            stats_active_runs, stats_active_cells, stats_workers, stats_usage) %s\n",
        what, P50P99(scrape).c_str(), bytes / 1e6, P50P99(refresh_raw).c_str());
  };
  if (!half_done) {
    scrape_now("with the sweep live (250 runs started)");
    return;
  }
  // Half the sweep finished, as it is half way through: the finished runs are folded into their
  // cells (three series a cell), the runs in flight exported with their own (about 11 a run).
  // Written straight into the database, as 50,000 Completes would take minutes here.
  raw.Text(absl::StrCat(
      "UPDATE runs SET state = 'succeeded', attempt = 1, step = total_steps, started_at = now() - "
      "interval '1 minute', finished_at = now(), latest_train_loss = 3.5, latest_val_loss = 3.6, "
      "latest_max_attn_logit = 12, tokens_per_second = 5000, result = '{\"final_val_loss\": "
      "3.6}', latest_probes = "
      "'{\"attn_entropy\": 1.5, \"grad_norm\": 0.7}' WHERE sweep_id = ",
      sweep, " AND state = 'queued' AND order_index % 2 = 0"));
  scrape_now("with the sweep half finished (~50,000 runs folded into their cells)");
  // ablate status again: now half the runs have a result to fold.
  std::printf("            the sweep half finished: %s", StatusFigure(b, sweep).c_str());
}

// 10,000 parked Lease calls from a child process, then GetSweep and Lease beside them.
void ParkedFigure(const Bench& b, int64_t sweep, int64_t cuda_worker, int port, int waiters,
                  const std::string& self) {
  Client& c = *b.client;
  const int64_t cpu_worker = c.Register("scale-cpu-probe", "cpu");
  // Warm the paths measured below, so the RSS baseline includes their steady state.
  for (int i = 0; i < 20; ++i) {
    c.GetSweep(sweep);
    c.LeaseOnce(cpu_worker, false);
  }
  const int64_t rss0 = ProcStatus("VmRSS"), threads0 = ProcStatus("Threads");
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
  posix_spawn_file_actions_addclose(&fa, to_child[1]);
  posix_spawn_file_actions_addclose(&fa, from_child[0]);
  const int channels = std::max(1, waiters / 1000);
  std::vector<std::string> argv_s = {self,    "--waiters-child",       std::to_string(port),
                                     c.token, std::to_string(waiters), std::to_string(channels)};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const auto t0 = Clock::now();
  if (posix_spawn(&pid, self.c_str(), &fa, nullptr, argv.data(), environ) != 0) {
    std::fprintf(stderr, "cannot start the waiters' process\n");
    return;
  }
  close(to_child[0]);
  close(from_child[1]);
  FILE* from = fdopen(from_child[0], "r");
  char line[256] = {0};
  if (fgets(line, sizeof(line), from) == nullptr) {
    std::fprintf(stderr, "the waiters' process ended early\n");
    return;
  }
  const double sent_s = Ms(Clock::now() - t0) / 1000;
  // The child has sent its calls; the server still runs each one's first (empty) lease query on
  // its executor before parking it. Settled when a probe's empty Lease, queued behind them,
  // answers promptly three times running.
  for (int quick = 0, i = 0; quick < 3 && i < 600; ++i) {
    double ms = 0;
    c.LeaseOnce(cpu_worker, false, &ms);
    quick = ms < 50 ? quick + 1 : 0;
  }
  const double park_s = Ms(Clock::now() - t0) / 1000;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int64_t rss1 = ProcStatus("VmRSS"), threads1 = ProcStatus("Threads");
  const int64_t child_rss = ProcStatus("VmRSS", pid);
  auto get = Time(100, [&] { c.GetSweep(sweep); });
  std::vector<double> lease_grant, lease_empty;
  for (int i = 0; i < 50; ++i) {
    double ms = 0;
    c.LeaseOnce(cuda_worker, true, &ms);
    lease_grant.push_back(ms);
    c.LeaseOnce(cpu_worker, false, &ms);
    lease_empty.push_back(ms);
  }
  auto get_raw = Time(100, [&] { b.raw->Run("sweep_get", sweep); });
  const int64_t rss2 = ProcStatus("VmRSS");
  if (write(to_child[1], "stop\n", 5) != 5) std::fprintf(stderr, "cannot stop the waiters\n");
  char done[256] = {0};
  if (fgets(done, sizeof(done), from) == nullptr) done[0] = 0;
  fclose(from);
  close(to_child[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::string answered = done;
  if (answered.rfind("done ", 0) == 0) answered = answered.substr(5);
  if (!answered.empty() && answered.back() == '\n') answered.pop_back();
  std::printf(
      "long-poll   %d workers parked in Lease (registered and sent in %.1f s, parked by %.1f s; "
      "from a child\n"
      "            process over %d connections; nothing queued for them: the big sweep cancelled,\n"
      "            a 1,000-run cuda sweep for the probe): GetSweep (the big sweep) %s;\n"
      "            Lease that gets a run %s;\n"
      "            Lease that finds none (wait 0) %s   [target p99 <= 100 ms]\n"
      "  raw PG    sweep_get meanwhile %s\n"
      "            server threads %lld -> %lld while they wait (no thread per waiter)\n"
      "            server RSS %.1f -> %.1f MiB (%.1f after the probes): %.1f KiB per parked "
      "Lease\n"
      "            (this process holds the server and only the probe client; the 10,000 "
      "clients'\n"
      "            %.1f MiB are the child's. Includes gRPC's per-call and per-connection state.)\n"
      "            on stop: %s long-polls answered before cancel\n",
      waiters, sent_s, park_s, channels, P50P99(get).c_str(), P50P99(lease_grant).c_str(),
      P50P99(lease_empty).c_str(), P50P99(get_raw).c_str(), static_cast<long long>(threads0),
      static_cast<long long>(threads1), rss0 / 1024.0, rss1 / 1024.0, rss2 / 1024.0,
      static_cast<double>(rss1 - rss0) / waiters, child_rss / 1024.0, answered.c_str());
}

// The parked workers' Leases must find nothing, cheaply: the big sweep is cancelled (its counts
// stay what GetSweep reads) and a 1,000-run cuda sweep gives the probe worker runs.
void ParkedPhase(const Bench& b, int64_t sweep, int64_t cuda, int port, int waiters) {
  Client& client = *b.client;
  v1::CancelSweepRequest cancel;
  cancel.mutable_sweep()->set_id(sweep);
  v1::CancelSweepResponse cancelled;
  if (!client.sweeps->CancelSweep(client.Ctx(300).get(), cancel, &cancelled).ok()) {
    std::fprintf(stderr, "cancel failed\n");
  }
  v1::SubmitSweepRequest small;
  small.set_spec_yaml(SweepYaml("scale-small", 10, 100, "cuda"));
  v1::SubmitSweepResponse small_resp;
  if (!client.sweeps->SubmitSweep(client.Ctx(300).get(), small, &small_resp).ok()) {
    std::fprintf(stderr, "submit failed\n");
  }
  ParkedFigure(b, sweep, cuda, port, waiters,
               std::filesystem::read_symlink("/proc/self/exe").string());
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  setvbuf(stdout, nullptr, _IOLBF, 0);  // figures appear as they are measured
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  nofile.rlim_cur = nofile.rlim_max;
  setrlimit(RLIMIT_NOFILE, &nofile);
  if (argc == 6 && std::string(argv[1]) == "--waiters-child") {
    int port = 0, n = 0, channels = 0;
    if (!absl::SimpleAtoi(argv[2], &port) || !absl::SimpleAtoi(argv[4], &n) ||
        !absl::SimpleAtoi(argv[5], &channels)) {
      return 2;
    }
    return WaitersChild(port, argv[3], n, channels);
  }
  int runs = 100000, waiters = 10000;
  bool parked_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--parked-only") parked_only = true;
  }
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--runs") absl::SimpleAtoi(argv[i + 1], &runs);
    if (std::string(argv[i]) == "--waiters") absl::SimpleAtoi(argv[i + 1], &waiters);
  }
  const int seeds = 100, lrs = std::max(1, runs / seeds);
  runs = lrs * seeds;
  ablate::bench::BenchDatabase db(argc, argv, "scale_bench");
  if (db.url().empty()) return 1;

  server::ServerOptions o;
  o.database_url = db.url();
  o.listen = "127.0.0.1:0";
  const int metrics_port = FreePort();
  o.metrics_listen = absl::StrCat("127.0.0.1:", metrics_port);
  o.store_dir = (std::filesystem::temp_directory_path() / "ablate-scale-bench-store").string();
  o.max_long_poll_seconds = 900;
  o.lease_seconds = 3600;  // the held runs stay held without heartbeats
  o.max_grid = std::max<int64_t>(o.max_grid, runs);
  // Every parked Lease is a worker of its own, all of one token (--max-worker-names).
  o.max_worker_names = std::max(o.max_worker_names, waiters + 16);
  auto srv = server::Server::Start(o);
  if (!srv.ok()) {
    std::fprintf(stderr, "scale_bench: %s\n", srv.status().ToString().c_str());
    return 1;
  }
  std::string token;
  {
    server::Db tdb(db.url(), 1);
    server::TokenStore tokens(&tdb);
    token = tokens.Create(server::Role::kAdmin, "bench")->secret;
  }
  Client client(Channel((*srv)->port(), 0), token);
  Raw raw(db.url());
  Bench b{&client, &raw, db.url(), runs};

  std::printf("scale_bench on %s, %ld cores, load average before: %s\n",
              bench::Shell("uname -srm").c_str(), sysconf(_SC_NPROCESSORS_ONLN),
              bench::Shell("cut -d' ' -f1-3 /proc/loadavg").c_str());
  std::printf(
      "server (in-process) + PostgreSQL (fsync=off as scripts/dev-postgres runs it) + load "
      "generator on loopback; auth on (token). \"raw PG\" lines run the server's own statements\n"
      "(server/store/sql) prepared on a plain connection of this process, in the same run.\n");
  if (parked_only) {
    // The parked figure alone, on one big sweep (the others need minutes at this size).
    v1::SubmitSweepRequest req;
    req.set_spec_yaml(SweepYaml("scale0", lrs, seeds, "cuda"));
    v1::SubmitSweepResponse resp;
    if (!client.sweeps->SubmitSweep(client.Ctx(300).get(), req, &resp).ok()) return 1;
    const int64_t cuda = client.Register("scale-cuda", "cuda");
    for (int i = 0; i < 200; ++i) client.LeaseOnce(cuda, true);
    ParkedPhase(b, resp.sweep().id(), cuda, (*srv)->port(), waiters);
    (*srv)->Shutdown(std::chrono::seconds(2));
    return 0;
  }
  const int64_t sweep = SubmitFigure(b, lrs, seeds);
  // Some of the sweep done and some in flight, as a live sweep looks: a cuda worker completes
  // 200 runs and holds 50 more.
  const int64_t cuda = client.Register("scale-cuda", "cuda");
  for (int i = 0; i < 200; ++i) client.LeaseOnce(cuda, true);
  std::vector<int64_t> holders;
  for (int i = 0; i < 5; ++i) {
    v1::RegisterRequest req;
    req.mutable_info()->set_name(absl::StrCat("scale-holder-", i));
    req.mutable_info()->set_device_kind("cuda");
    req.mutable_info()->set_slots(10);
    v1::RegisterResponse resp;
    client.workers->Register(client.Ctx().get(), req, &resp);
    for (int k = 0; k < 10; ++k) client.LeaseOnce(resp.worker_id(), false);
  }
  ReadFigures(b, sweep);
  WatchFigure(b, sweep, cuda);
  MetricsFigure(b, sweep, metrics_port, /*half_done=*/false);
  MetricsFigure(b, sweep, metrics_port, /*half_done=*/true);
  ParkedPhase(b, sweep, cuda, (*srv)->port(), waiters);
  std::printf("load average after: %s\n", bench::Shell("cut -d' ' -f1-3 /proc/loadavg").c_str());
  (*srv)->Shutdown(std::chrono::seconds(2));
  return 0;
}
