// queue_bench: the coordinator's throughput and latency on this machine, server + PostgreSQL +
// load generator all on loopback (issue 2's performance targets). Prints figures; asserts
// nothing.
//
//   queue_bench [--database-url URL]   (default: a throwaway cluster via scripts/dev-postgres)
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "ablate/v1/ablate.grpc.pb.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/bench_db.h"
#include "grpcpp/grpcpp.h"
#include "libpq-fe.h"
#include "pqxx/pqxx"
#include "server/server.h"
#include "server/store/db.h"
#include "server/store/token_store.h"
#include "spdlog/spdlog.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace ablate;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

// CPU seconds used so far by this process (server + load generator) and by every PostgreSQL
// process on the machine: with other work sharing the cores, CPU per operation says more
// about capacity than wall-clock throughput does.
double SelfCpu() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

double PostgresCpu() {
  double total = 0;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream stat(e.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || line.substr(open + 1, close - open - 1) != "postgres")
      continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    total += (utime + stime) / tick;
  }
  return total;
}

int Threads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n - 2;  // . and ..
}

std::string SweepYaml(const std::string& name, int lrs, int seeds) {
  std::string lr, seed;
  for (int i = 0; i < lrs; ++i) absl::StrAppend(&lr, i ? ", " : "", 1e-4 * (i + 1));
  for (int i = 0; i < seeds; ++i) absl::StrAppend(&seed, i ? ", " : "", i);
  // steps covers every step the metrics benchmark reports (the server refuses steps past it).
  return absl::StrCat("name: ", name,
                      "\ndata: {train: \"synthetic:100\", val: \"synthetic:10\"}\n"
                      "fixed: {n_embd: 64, n_head: 2, block_size: 64, batch_size: 8, "
                      "steps: 1000000}\n"
                      "grid:\n  lr: [",
                      lr, "]\n  seed: [", seed, "]\n");
}

struct Bench {
  std::shared_ptr<grpc::Channel> channel;
  std::string token;

  std::unique_ptr<grpc::ClientContext> Ctx(double deadline_s = 60) const {
    auto c = std::make_unique<grpc::ClientContext>();
    c->AddMetadata("authorization", "Bearer " + token);
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
    return c;
  }
  int64_t Register(v1::WorkerService::Stub* stub, const std::string& name) const {
    v1::RegisterRequest req;
    req.mutable_info()->set_name(name);
    req.mutable_info()->set_device_kind("cpu");
    v1::RegisterResponse resp;
    auto s = stub->Register(Ctx().get(), req, &resp);
    if (!s.ok()) std::fprintf(stderr, "register: %s\n", s.error_message().c_str());
    return resp.worker_id();
  }
  int64_t Submit(const std::string& yaml, double* seconds) const {
    auto stub = v1::SweepService::NewStub(channel);
    v1::SubmitSweepRequest req;
    req.set_spec_yaml(yaml);
    v1::SubmitSweepResponse resp;
    const auto t0 = Clock::now();
    auto s = stub->SubmitSweep(Ctx().get(), req, &resp);
    *seconds = Seconds(Clock::now() - t0);
    if (!s.ok()) std::fprintf(stderr, "submit: %s\n", s.error_message().c_str());
    return resp.sweep().id();
  }
};

int64_t SubmitFigure(const Bench& b) {
  std::vector<double> times;
  int64_t first = 0;
  for (int i = 0; i < 3; ++i) {
    double t = 0;
    const int64_t id = b.Submit(SweepYaml(absl::StrCat("submit", i), 100, 100), &t);
    if (i == 0) first = id;
    times.push_back(t);
  }
  std::printf(
      "submit      10,000-run sweep: %.2f s median of 3 (%.2f / %.2f / %.2f)   "
      "[target <= 2 s]\n",
      Percentile(times, 0.5), times[0], times[1], times[2]);
  return first;
}

// Cancels every active sweep, so idle workers really are idle.
void CancelAll(const Bench& b) {
  auto stub = v1::SweepService::NewStub(b.channel);
  v1::ListSweepsRequest req;
  req.set_active_only(true);
  v1::ListSweepsResponse list;
  if (!stub->ListSweeps(b.Ctx().get(), req, &list).ok()) return;
  for (const auto& s : list.sweeps()) {
    v1::CancelSweepRequest c;
    c.mutable_sweep()->set_id(s.id());
    v1::CancelSweepResponse cr;
    if (!stub->CancelSweep(b.Ctx().get(), c, &cr).ok()) std::fprintf(stderr, "cancel failed\n");
  }
}

void LeaseCompleteFigure(const Bench& b, int workers) {
  // The 30,000 runs queued by SubmitFigure are the work; 64 workers drain as many as they can.
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::vector<double> lease_ms;
  const double self0 = SelfCpu(), pg0 = PostgresCpu();
  const auto t0 = Clock::now();
  const auto stop_at = t0 + std::chrono::seconds(15);
  std::vector<std::thread> threads;
  for (int t = 0; t < workers; ++t) {
    threads.emplace_back([&, t] {
      auto stub = v1::WorkerService::NewStub(b.channel);
      const int64_t id = b.Register(stub.get(), absl::StrCat("bench-worker-", t));
      std::vector<double> mine;
      while (Clock::now() < stop_at) {
        v1::LeaseRequest lr;
        lr.set_worker_id(id);
        v1::LeaseResponse lease;
        const auto l0 = Clock::now();
        auto s = stub->Lease(b.Ctx().get(), lr, &lease);
        mine.push_back(Seconds(Clock::now() - l0) * 1000);
        if (!s.ok() || !lease.has_run()) break;
        v1::CompleteRequest c;
        c.set_run_id(lease.lease().run_id());
        c.set_attempt(lease.lease().attempt());
        c.set_lease_token(lease.lease().token());
        c.set_state(v1::SUCCEEDED);
        c.mutable_result()->set_final_val_loss(1.0);
        v1::CompleteResponse cr;
        if (stub->Complete(b.Ctx().get(), c, &cr).ok()) ++done;
      }
      std::lock_guard<std::mutex> lock(mu);
      lease_ms.insert(lease_ms.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  const double secs = Seconds(Clock::now() - t0);
  std::printf(
      "lease       %lld runs Lease->Complete by %d workers in %.2f s: %.0f runs/s, "
      "Lease p50 %.1f ms p99 %.1f ms   [target >= 1000 runs/s, p99 <= 25 ms]\n",
      static_cast<long long>(done.load()), workers, secs, done.load() / secs,
      Percentile(lease_ms, 0.5), Percentile(lease_ms, 0.99));
  const double self_ms = (SelfCpu() - self0) * 1000 / done.load();
  const double pg_ms = (PostgresCpu() - pg0) * 1000 / done.load();
  std::printf(
      "            CPU per run: %.2f ms server+load generator, %.2f ms PostgreSQL -> "
      "%.0f runs/s if two cores were ours alone\n",
      self_ms, pg_ms, 2000.0 / (self_ms + pg_ms));
}

// The rows ReportFigure's workers send, in COPY's text format: run, name, step, value, time, seq.
constexpr const char* kSeries[] = {"train_loss", "lr", "grad_norm", "tokens_per_second",
                                   "max_attn_logit"};

// The peer: a raw COPY of `rows` points, one client, one transaction, into a table of
// metric_points' own shape (LIKE ... INCLUDING ALL: its columns, defaults and indexes), as
// `psql \copy` does it (text) and in COPY's binary format. Returns rows/s and fills CPU per row.
struct PeerFigure {
  double rows_per_s = 0;
  double client_us = 0, pg_us = 0;
};

PeerFigure RawCopy(const std::string& url, int64_t rows, bool binary) {
  PeerFigure f;
  PGconn* c = PQconnectdb(url.c_str());
  if (PQstatus(c) != CONNECTION_OK) {
    std::fprintf(stderr, "peer: %s\n", PQerrorMessage(c));
    PQfinish(c);
    return f;
  }
  auto exec = [&](const char* sql) {
    PGresult* r = PQexec(c, sql);
    const auto st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_COPY_IN && st != PGRES_TUPLES_OK)
      std::fprintf(stderr, "peer: %s: %s\n", sql, PQerrorMessage(c));
    PQclear(r);
  };
  exec("DROP TABLE IF EXISTS bench_copy_peer");
  exec("CREATE TABLE bench_copy_peer (LIKE metric_points INCLUDING ALL)");
  // The rows, built before the clock starts (the peer's client does no other work).
  std::string buf;
  const int64_t per_run = 50 * 500;
  if (binary) buf.append("PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0", 19);
  auto be = [&buf](auto v) {
    unsigned char b[sizeof(v)];
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof(v));
    for (size_t i = 0; i < sizeof(v); ++i) b[i] = static_cast<unsigned char>(u >> (8 * (sizeof(v) - 1 - i)));
    buf.append(reinterpret_cast<char*>(b), sizeof(v));
  };
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t run = 1 + i / per_run, step = (i % per_run) / 5;
    const char* name = kSeries[i % 5];
    const double value = 1.0 / (1 + step % 100), time = 1.7e9 + step % 100;
    const int64_t seq = 1 + i / 500;
    if (binary) {
      be(static_cast<int16_t>(6));
      be(static_cast<int32_t>(8)), be(run);
      be(static_cast<int32_t>(std::strlen(name)));
      buf.append(name);
      be(static_cast<int32_t>(8)), be(step);
      be(static_cast<int32_t>(8)), be(value);
      be(static_cast<int32_t>(8)), be(time);
      be(static_cast<int32_t>(8)), be(seq);
    } else {
      absl::StrAppend(&buf, run, "\t", name, "\t", step, "\t", value, "\t", time, "\t", seq, "\n");
    }
  }
  if (binary) be(static_cast<int16_t>(-1));
  const double self0 = SelfCpu(), pg0 = PostgresCpu();
  const auto t0 = Clock::now();
  exec("BEGIN");
  exec(binary ? "COPY bench_copy_peer (run_id, name, step, value, time, seq) FROM STDIN "
                "(FORMAT binary)"
              : "COPY bench_copy_peer (run_id, name, step, value, time, seq) FROM STDIN");
  for (size_t off = 0; off < buf.size(); off += 1 << 16) {
    PQputCopyData(c, buf.data() + off, static_cast<int>(std::min<size_t>(1 << 16, buf.size() - off)));
  }
  PQputCopyEnd(c, nullptr);
  PGresult* r = PQgetResult(c);
  if (PQresultStatus(r) != PGRES_COMMAND_OK) std::fprintf(stderr, "peer copy: %s\n", PQerrorMessage(c));
  PQclear(r);
  exec("COMMIT");
  const double secs = Seconds(Clock::now() - t0);
  f.rows_per_s = rows / secs;
  f.client_us = (SelfCpu() - self0) * 1e6 / rows;
  f.pg_us = (PostgresCpu() - pg0) * 1e6 / rows;
  exec("DROP TABLE bench_copy_peer");
  PQfinish(c);
  return f;
}

void ReportFigure(const Bench& b, const std::string& url, int concurrency, int batches_each) {
  double t = 0;
  b.Submit(SweepYaml("metrics", concurrency, 1), &t);
  std::atomic<int64_t> points{0};
  std::vector<std::thread> threads;
  const double self0 = SelfCpu(), pg0 = PostgresCpu();
  const auto t0 = Clock::now();
  for (int w = 0; w < concurrency; ++w) {
    threads.emplace_back([&, w] {
      auto stub = v1::WorkerService::NewStub(b.channel);
      const int64_t id = b.Register(stub.get(), absl::StrCat("bench-reporter-", w));
      v1::LeaseRequest lr;
      lr.set_worker_id(id);
      v1::LeaseResponse lease;
      if (!stub->Lease(b.Ctx().get(), lr, &lease).ok() || !lease.has_run()) return;
      for (int batch = 0; batch < batches_each; ++batch) {
        v1::ReportMetricsRequest req;
        req.set_run_id(lease.lease().run_id());
        req.set_attempt(lease.lease().attempt());
        req.set_lease_token(lease.lease().token());
        // 500 points: 100 steps x 5 series, as a worker logging every step would send.
        for (int s = 0; s < 100; ++s) {
          for (const char* name : kSeries) {
            auto* p = req.add_points();
            p->set_step(batch * 100 + s);
            p->set_name(name);
            p->set_value(1.0 / (1 + s));
            p->set_time(1.7e9 + s);
          }
        }
        v1::ReportMetricsResponse resp;
        auto st = stub->ReportMetrics(b.Ctx().get(), req, &resp);
        if (!st.ok()) {
          std::fprintf(stderr, "report: %s\n", st.error_message().c_str());
          return;
        }
        points += resp.accepted();
      }
    });
  }
  for (auto& th : threads) th.join();
  const double secs = Seconds(Clock::now() - t0);
  const int64_t n = points.load();
  const double ours = n / secs;
  const double self_us = (SelfCpu() - self0) * 1e6 / n;
  const double pg_us = (PostgresCpu() - pg0) * 1e6 / n;
  const PeerFigure text = RawCopy(url, n, false), binary = RawCopy(url, n, true);
  const PeerFigure& peer = text.rows_per_s >= binary.rows_per_s ? text : binary;
  std::printf(
      "metrics     %lld points in batches of 500 from %d workers in %.2f s: %.0f points/s"
      "   [target >= 100,000/s]\n",
      static_cast<long long>(n), concurrency, secs, ours);
  std::printf(
      "            peer, raw PostgreSQL: the same %lld rows by one COPY into a table of "
      "metric_points' shape: text %.0f rows/s, binary %.0f rows/s\n",
      static_cast<long long>(n), text.rows_per_s, binary.rows_per_s);
  std::printf(
      "            ours / raw COPY (%s): %.2f   [target >= 0.70]\n",
      &peer == &text ? "text" : "binary", ours / peer.rows_per_s);
  std::printf(
      "            CPU per point: ours %.2f us server+load generator + %.2f us PostgreSQL; "
      "raw COPY %.2f us client + %.2f us PostgreSQL\n",
      self_us, pg_us, peer.client_us, peer.pg_us);
  std::printf(
      "            rows/s per core (1e6 / CPU us per row): ours %.0f, raw COPY %.0f\n",
      1e6 / (self_us + pg_us), 1e6 / (peer.client_us + peer.pg_us));
}

void IdleLongPollFigure(const Bench& b, int idle, int64_t sweep_id) {
  auto wstub = v1::WorkerService::NewStub(b.channel);
  const int threads_before = Threads();
  grpc::CompletionQueue cq;
  struct Call {
    std::unique_ptr<grpc::ClientContext> ctx;
    v1::LeaseResponse resp;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::LeaseResponse>> rpc;
  };
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < idle; ++i) {
    const int64_t id = b.Register(wstub.get(), absl::StrCat("bench-idle-", i));
    auto call = std::make_unique<Call>();
    call->ctx = b.Ctx(120);
    v1::LeaseRequest req;
    req.set_worker_id(id);
    req.set_wait_seconds(60);
    call->rpc = wstub->AsyncLease(call->ctx.get(), req, &cq);
    call->rpc->Finish(&call->resp, &call->status, call.get());
    calls.push_back(std::move(call));
  }
  // Let every call reach the server and park.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const int threads_during = Threads();
  auto sstub = v1::SweepService::NewStub(b.channel);
  std::vector<double> ms;
  for (int i = 0; i < 50; ++i) {
    v1::GetSweepRequest req;
    req.mutable_sweep()->set_id(sweep_id);
    v1::GetSweepResponse resp;
    const auto t0 = Clock::now();
    auto s = sstub->GetSweep(b.Ctx().get(), req, &resp);
    ms.push_back(Seconds(Clock::now() - t0) * 1000);
    if (!s.ok()) std::fprintf(stderr, "getsweep: %s\n", s.error_message().c_str());
  }
  int early = 0;
  for (auto& c : calls) c->ctx->TryCancel();
  for (int i = 0; i < idle; ++i) {
    void* tag;
    bool ok;
    if (!cq.Next(&tag, &ok)) break;
    if (static_cast<Call*>(tag)->status.ok()) ++early;
  }
  std::printf(
      "long-poll   %d idle workers parked in Lease: GetSweep p50 %.1f ms p99 %.1f ms, "
      "process threads %d -> %d (server + client, in one process)   "
      "[target GetSweep <= 100 ms]\n",
      idle, Percentile(ms, 0.5), Percentile(ms, 0.99), threads_before, threads_during);
  if (early > 0) std::printf("            (%d long-polls answered before cancel)\n", early);
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  // --durable: the throwaway cluster runs with fsync and synchronous_commit on, as a production
  // PostgreSQL does (scripts/dev-postgres turns both off); --only NAME: one figure
  // (submit, lease, metrics, long-poll).
  bool durable = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--durable") durable = true;
    if (std::string(argv[i]) == "--only" && i + 1 < argc) only = argv[i + 1];
  }
  if (durable) {
    setenv("DEV_POSTGRES_OPTIONS", "-c fsync=on -c synchronous_commit=on -c full_page_writes=on",
           1);
  }
  auto want = [&only](const char* figure) { return only.empty() || only == figure; };
  ablate::bench::BenchDatabase db(argc, argv, "queue_bench");
  if (db.url().empty()) return 1;
  const std::string& url = db.url();
  // rlimit: 1,000 long-polls plus clients need file descriptors.
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  nofile.rlim_cur = nofile.rlim_max;
  setrlimit(RLIMIT_NOFILE, &nofile);

  server::ServerOptions o;
  o.database_url = url;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "";
  o.store_dir = (std::filesystem::temp_directory_path() / "ablate-bench-store").string();
  o.max_long_poll_seconds = 60;
  auto srv = server::Server::Start(o);
  if (!srv.ok()) {
    std::fprintf(stderr, "queue_bench: %s\n", srv.status().ToString().c_str());
    return 1;
  }
  Bench b;
  {
    server::Db db(url, 1);
    server::TokenStore tokens(&db);
    b.token = tokens.Create(server::Role::kAdmin, "bench")->secret;
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  b.channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", (*srv)->port()),
                                        grpc::InsecureChannelCredentials(), args);

  std::printf("queue_bench on %s, %ld cores, load average before: %s\n",
              ablate::bench::Shell("uname -srm").c_str(), sysconf(_SC_NPROCESSORS_ONLN),
              ablate::bench::Shell("cut -d' ' -f1-3 /proc/loadavg").c_str());
  {
    server::Db db(url, 1);
    auto fsync = db.Tx<std::string>("show fsync", [](pqxx::work& tx) -> absl::StatusOr<std::string> {
      return tx.exec("SELECT current_setting('fsync') || ', synchronous_commit ' || "
                      "current_setting('synchronous_commit')")[0][0]
          .as<std::string>();
    });
    std::printf(
        "server + PostgreSQL (fsync %s) + load generator on loopback; auth on (token)\n",
        fsync.ok() ? fsync->c_str() : "unknown");
  }
  const int64_t big = want("submit") || want("long-poll") ? SubmitFigure(b) : 0;
  if (want("lease")) LeaseCompleteFigure(b, 64);
  if (want("metrics")) ReportFigure(b, url, 8, 50);
  CancelAll(b);
  if (want("long-poll")) IdleLongPollFigure(b, 1000, big);
  std::printf("load average after: %s\n",
              ablate::bench::Shell("cut -d' ' -f1-3 /proc/loadavg").c_str());
  (*srv)->Shutdown(std::chrono::seconds(2));
  return 0;
}
