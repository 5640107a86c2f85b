// queue_bench: the coordinator's throughput and latency on this machine, server + PostgreSQL +
// load generator all on loopback (issue 2's performance targets). Prints figures; asserts
// nothing.
//
//   queue_bench [--database-url URL] [--durable] [--only submit|lease|metrics|long-poll]
//   (default: a throwaway cluster via scripts/dev-postgres)
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "ablate/v1/ablate.grpc.pb.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "bench/bench_db.h"
#include "bench/bench_stats.h"
#include "grpcpp/grpcpp.h"
#include "libpq-fe.h"
#include "pqxx/pqxx"
#include "server/server.h"
#include "server/store/db.h"
#include "server/store/statements.h"
#include "server/store/token_store.h"
#include "spdlog/spdlog.h"
#include "worker/metric_sender.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace ablate;
namespace sql = ablate::server::sql;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

using bench::Percentile;
using bench::SelfCpu;
using bench::ThreadCpu;

// The cluster's postmaster (set by main): PostgreSQL's CPU is counted for this cluster only, so a
// second PostgreSQL on the machine (a test suite beside the benchmark) does not count.
pid_t g_postmaster = 0;
double PostgresCpu() { return bench::PostgresCpu(g_postmaster); }

// The postmaster of the cluster at `url`: the first line of its data directory's postmaster.pid.
pid_t Postmaster(const std::string& url) {
  server::Db db(url, 1);
  auto dir =
      db.Tx<std::string>("data directory", [](pqxx::work& tx) -> absl::StatusOr<std::string> {
        return tx.exec("SELECT current_setting('data_directory')")[0][0].as<std::string>();
      });
  if (!dir.ok()) return 0;
  std::ifstream pid_file(*dir + "/postmaster.pid");
  long long pid = 0;
  pid_file >> pid;
  return static_cast<pid_t>(pid);
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

// pg_stat_statements, when the cluster was started with it (queue_bench starts its own so):
// PostgreSQL's side of a figure, statement by statement.
bool ResetStatements(const std::string& url) {
  server::Db db(url, 1);
  return db
      .Tx<bool>("reset statements",
                [](pqxx::work& tx) -> absl::StatusOr<bool> {
                  tx.exec("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
                  tx.exec("SELECT pg_stat_statements_reset()");
                  return true;
                })
      .ok();
}

// Per `unit` (a run, a request): calls and milliseconds of each of the `top` statements.
void PrintStatements(const std::string& url, int64_t units, const char* unit, int top) {
  server::Db db(url, 1);
  auto rows = db.Tx<std::vector<std::string>>(
      "statements", [&](pqxx::work& tx) -> absl::StatusOr<std::vector<std::string>> {
        std::vector<std::string> out;
        pqxx::result r = tx.exec(absl::StrCat(
            "SELECT calls, total_exec_time, total_plan_time, "
            "regexp_replace(regexp_replace(query, '--[^\\n]*\\n', '', 'g'), '\\s+', ' ', 'g') "
            "FROM pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT ",
            top));
        for (const auto& row : r) {
          out.push_back(absl::StrFormat(
              "              %6.2f calls/%s %7.3f ms/%s  %.70s", row[0].as<double>() / units, unit,
              (row[1].as<double>() + row[2].as<double>()) / units, unit, row[3].as<std::string>()));
        }
        return out;
      });
  if (!rows.ok()) return;
  std::printf("            PostgreSQL's time per %s by statement (pg_stat_statements, top %d):\n",
              unit, top);
  for (const auto& line : *rows) std::printf("%s\n", line.c_str());
}

// A statement for pgbench: the file's SQL without its leading comment, $n replaced by `args[n-1]`.
std::string Bind(sql::Name name, const std::vector<std::string>& args) {
  std::string text(name.text());
  while (text.starts_with("--")) text.erase(0, text.find('\n') + 1);
  for (size_t i = args.size(); i >= 1; --i) {
    const std::string param = absl::StrCat("$", i);
    for (size_t at = text.find(param); at != std::string::npos; at = text.find(param, at)) {
      text.replace(at, param.size(), args[i - 1]);
      at += args[i - 1].size();
    }
  }
  return text;
}

// The peer: pgbench running the statements a Lease and a Complete run (the same files, the same
// transactions), one pgbench client per worker, against the same queue. Returns cycles/s.
double PgbenchPeer(const Bench& b, const std::string& url, int workers, int seconds) {
  // Workers of its own, registered one after another so their ids are consecutive.
  auto stub = v1::WorkerService::NewStub(b.channel);
  const int64_t first = b.Register(stub.get(), "pgbench-worker-0");
  for (int i = 1; i < workers; ++i) {
    if (b.Register(stub.get(), absl::StrCat("pgbench-worker-", i)) != first + i) {
      std::fprintf(stderr, "pgbench peer: worker ids are not consecutive\n");
      return 0;
    }
  }
  const std::string digest = "'pgbench'";
  std::string script =
      absl::StrCat("\\set wid :client_id + ", first, "\nBEGIN;\n", Bind("plan_generic", {}), ";\n",
                   Bind("lease_worker", {":wid", "NULL", "16"}), ";\n");
  absl::StrAppend(&script, Bind("lease", {":wid", "60", digest, "16", "0"}), " \\gset\n",
                  "COMMIT;\nBEGIN;\n",
                  Bind("complete", {":run_id", ":attempt", digest, "'succeeded'",
                                    "'{\"finalValLoss\": 1}'", "''", "0", "''"}),
                  ";\n", Bind("refine_sweep", {":sweep_id"}), ";\n",
                  Bind("finish_sweep", {":sweep_id"}), ";\nCOMMIT;\n");
  const std::string path =
      (std::filesystem::temp_directory_path() / absl::StrCat("queue_bench-", getpid(), ".sql"))
          .string();
  std::ofstream(path) << script;
  const std::string out =
      ablate::bench::Shell(absl::StrCat("pgbench -n -M prepared -c ", workers, " -j 2 -T ", seconds,
                                        " -f ", path, " '", url, "' 2>&1"));
  std::filesystem::remove(path);
  if (out.find("tps = ") == std::string::npos) {
    std::fprintf(stderr, "pgbench peer failed:\n%s\n", out.c_str());
    return 0;
  }
  // What pgbench really did: the runs its workers completed (a cycle that leased nothing would
  // count as a pgbench transaction too).
  server::Db db(url, 1);
  auto completed = db.Tx<int64_t>("peer runs", [](pqxx::work& tx) -> absl::StatusOr<int64_t> {
    return tx
        .exec(
            "SELECT count(*) FROM runs r JOIN workers w ON w.id = r.worker_id "
            "WHERE w.name LIKE 'pgbench-worker-%' AND r.state = 'succeeded'")[0][0]
        .as<int64_t>();
  });
  return completed.ok() ? static_cast<double>(*completed) / seconds : 0;
}

void LeaseCompleteFigure(const Bench& b, const std::string& url, int workers) {
  // The 30,000 runs queued by SubmitFigure are the work; 64 workers drain as many as they can.
  const bool profiled = ResetStatements(url);
  std::atomic<int64_t> done{0};
  std::mutex mu;
  std::vector<double> lease_ms;
  double client_cpu = 0;  // guarded by mu
  const double self0 = SelfCpu(), pg0 = PostgresCpu();
  const auto t0 = Clock::now();
  const auto stop_at = t0 + std::chrono::seconds(10);
  std::vector<std::thread> threads;
  for (int t = 0; t < workers; ++t) {
    threads.emplace_back([&, t] {
      const double cpu0 = ThreadCpu();
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
      client_cpu += ThreadCpu() - cpu0;
    });
  }
  for (auto& t : threads) t.join();
  const double secs = Seconds(Clock::now() - t0);
  const double ours = done.load() / secs;
  std::printf(
      "lease       %lld runs Lease->Complete by %d workers in %.2f s: %.0f runs/s, "
      "Lease p50 %.1f ms p99 %.1f ms   [target >= 2,000 runs/s]\n",
      static_cast<long long>(done.load()), workers, secs, ours, Percentile(lease_ms, 0.5),
      Percentile(lease_ms, 0.99));
  const double self_ms = (SelfCpu() - self0) * 1000 / done.load();
  const double pg_ms = (PostgresCpu() - pg0) * 1000 / done.load();
  const double client_ms = client_cpu * 1000 / done.load();
  std::printf(
      "            CPU per run: %.2f ms server (%.2f ms more in the load generator's threads), "
      "%.2f ms PostgreSQL -> %.0f runs/s if two cores ran only server and PostgreSQL\n",
      self_ms - client_ms, client_ms, pg_ms, 2000.0 / (self_ms - client_ms + pg_ms));
  if (profiled) PrintStatements(url, done.load(), "run", 8);
  // The peer gets a queue as long as ours had.
  double unused = 0;
  for (int i = 0; i < 2; ++i) b.Submit(SweepYaml(absl::StrCat("peer", i), 100, 100), &unused);
  const double pg0_peer = PostgresCpu();
  const double peer = PgbenchPeer(b, url, workers, 10);
  if (peer > 0) {
    std::printf(
        "            peer, raw PostgreSQL: pgbench running the same statements (lease_worker, "
        "lease; complete, refine_sweep, finish_sweep) in the same transactions, %d clients: "
        "%.0f runs/s, %.2f ms PostgreSQL CPU per run\n",
        workers, peer, (PostgresCpu() - pg0_peer) * 1000 / (peer * 10));
    std::printf("            ours / pgbench: %.2f   [target >= 0.50]\n", ours / peer);
  }
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
    for (size_t i = 0; i < sizeof(v); ++i)
      b[i] = static_cast<unsigned char>(u >> (8 * (sizeof(v) - 1 - i)));
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
    PQputCopyData(c, buf.data() + off,
                  static_cast<int>(std::min<size_t>(1 << 16, buf.size() - off)));
  }
  PQputCopyEnd(c, nullptr);
  PGresult* r = PQgetResult(c);
  if (PQresultStatus(r) != PGRES_COMMAND_OK)
    std::fprintf(stderr, "peer copy: %s\n", PQerrorMessage(c));
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

void ReportFigure(const Bench& b, const std::string& url, int concurrency, int batches_each,
                  int steps_per_batch) {
  double t = 0;
  b.Submit(SweepYaml(absl::StrCat("metrics", steps_per_batch), concurrency, 1), &t);
  std::atomic<int64_t> points{0};
  std::vector<std::thread> threads;
  std::mutex mu;
  double client_cpu = 0;  // guarded by mu
  const bool profiled = ResetStatements(url);
  const double self0 = SelfCpu(), pg0 = PostgresCpu();
  const auto t0 = Clock::now();
  for (int w = 0; w < concurrency; ++w) {
    threads.emplace_back([&, w] {
      const double cpu0 = ThreadCpu();
      struct AddCpu {
        std::mutex* mu;
        double* sum;
        double cpu0;
        ~AddCpu() {
          std::lock_guard<std::mutex> lock(*mu);
          *sum += ThreadCpu() - cpu0;
        }
      } add_cpu{&mu, &client_cpu, cpu0};
      auto stub = v1::WorkerService::NewStub(b.channel);
      const int64_t id =
          b.Register(stub.get(), absl::StrCat("bench-reporter-", steps_per_batch, "-", w));
      v1::LeaseRequest lr;
      lr.set_worker_id(id);
      v1::LeaseResponse lease;
      if (!stub->Lease(b.Ctx().get(), lr, &lease).ok() || !lease.has_run()) return;
      for (int batch = 0; batch < batches_each; ++batch) {
        v1::ReportMetricsRequest req;
        req.set_run_id(lease.lease().run_id());
        req.set_attempt(lease.lease().attempt());
        req.set_lease_token(lease.lease().token());
        // 5 series a step, as a worker logging every step sends them.
        for (int s = 0; s < steps_per_batch; ++s) {
          for (const char* name : kSeries) {
            auto* p = req.add_points();
            p->set_step(batch * steps_per_batch + s);
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
  const double client_us = client_cpu * 1e6 / n;
  const double self_us = (SelfCpu() - self0) * 1e6 / n - client_us;
  const double pg_us = (PostgresCpu() - pg0) * 1e6 / n;
  std::printf("metrics     %lld points in batches of %d from %d workers in %.2f s: %.0f points/s\n",
              static_cast<long long>(n), steps_per_batch * 5, concurrency, secs, ours);
  // Size on disk per million points: heap (with TOAST and the free-space map) and indexes, over
  // every point the table holds.
  server::Db db(url, 1);
  auto sizes = db.Tx<std::vector<double>>(
      "sizes", [](pqxx::work& tx) -> absl::StatusOr<std::vector<double>> {
        pqxx::row r = tx.exec(
            "SELECT pg_table_size('metric_points'), pg_indexes_size('metric_points'), "
            "(SELECT count(*) FROM metric_points)")[0];
        return std::vector<double>{r[0].as<double>(), r[1].as<double>(), r[2].as<double>()};
      });
  if (profiled) {
    // Requests per batch: the fence runs once a batch (server/store/ingest_store.h).
    auto batches = db.Tx<double>("batches", [](pqxx::work& tx) -> absl::StatusOr<double> {
      return tx
          .exec(
              "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
              "WHERE query LIKE '%UPDATE runs r SET%latest_probes%'")[0][0]
          .as<double>();
    });
    if (batches.ok() && *batches > 0) {
      std::printf("            (ours) %.0f batches: %.1f requests, %.0f points each on average\n",
                  *batches, n / (steps_per_batch * 5.0) / *batches, n / *batches);
    }
    PrintStatements(url, n / (steps_per_batch * 5), "request", 4);
  }
  const PeerFigure text = RawCopy(url, n, false), binary = RawCopy(url, n, true);
  const PeerFigure& peer = text.rows_per_s >= binary.rows_per_s ? text : binary;
  std::printf(
      "            peer, raw PostgreSQL: the same %lld rows by one COPY into a table of "
      "metric_points' shape: text %.0f rows/s, binary %.0f rows/s\n",
      static_cast<long long>(n), text.rows_per_s, binary.rows_per_s);
  std::printf("            ours / raw COPY (%s): %.2f   [target >= 0.70]\n",
              &peer == &text ? "text" : "binary", ours / peer.rows_per_s);
  std::printf(
      "            CPU per point: ours %.2f us server + %.2f us PostgreSQL (+ %.2f us in the load "
      "generator's gRPC clients); raw COPY %.2f us client + %.2f us PostgreSQL\n",
      self_us, pg_us, client_us, peer.client_us, peer.pg_us);
  std::printf(
      "            rows/s per core (1e6 / CPU us per row, clients included): ours %.0f, raw COPY "
      "%.0f\n",
      1e6 / (self_us + pg_us + client_us), 1e6 / (peer.client_us + peer.pg_us));
  if (sizes.ok()) {
    const double rows = (*sizes)[2];
    std::printf(
        "            metric_points on disk per million points: %.0f MB (table %.0f MB + "
        "indexes %.0f MB; %.0f points stored)\n",
        ((*sizes)[0] + (*sizes)[1]) / rows, (*sizes)[0] / rows, (*sizes)[1] / rows, rows);
  }
}

// The points a second one slot produces at the study's logging rates (issue #37: ~50 in each
// half-second poll of the sender before it coalesced).
constexpr double kStudyPointsPerSecond = 100;
// The old sender sent whatever the spool held every half second.
constexpr double kOldSenderPollSeconds = 0.5;

// Points a request at the study's rates when the sender waits `seconds` for the oldest point,
// capped at worker::kMetricBatch: a multiple of the 5 series a step ReportFigure sends.
int StudyRequestPoints(double seconds) {
  const double points = std::min<double>(worker::kMetricBatch, kStudyPointsPerSecond * seconds);
  return std::max(5, static_cast<int>(points) / 5 * 5);
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
    if (std::string(argv[i]) == "--help") {
      std::printf(
          "queue_bench [--database-url URL] [--durable] [--only submit|lease|metrics|long-poll]\n"
          "  Prints the coordinator's throughput and latency figures on this machine.\n");
      return 0;
    }
    if (std::string(argv[i]) == "--durable") durable = true;
    if (std::string(argv[i]) == "--only" && i + 1 < argc) only = argv[i + 1];
  }
  // pg_stat_statements: the lease figure prints PostgreSQL's time per statement.
  const char* extra = std::getenv("DEV_POSTGRES_OPTIONS");
  setenv(
      "DEV_POSTGRES_OPTIONS",
      absl::StrCat(extra != nullptr ? extra : "", " -c shared_preload_libraries=pg_stat_statements",
                   durable ? " -c fsync=on -c synchronous_commit=on -c full_page_writes=on" : "")
          .c_str(),
      1);
  auto want = [&only](const char* figure) { return only.empty() || only == figure; };
  ablate::bench::BenchDatabase db(argc, argv, "queue_bench");
  if (db.url().empty()) return 1;
  const std::string& url = db.url();
  g_postmaster = Postmaster(url);
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
  // The benchmark's workers (64 leasing, 1,000 idle long-polls, the reporters) share one token.
  o.max_worker_names = 100000;
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
    auto fsync =
        db.Tx<std::string>("show fsync", [](pqxx::work& tx) -> absl::StatusOr<std::string> {
          return tx
              .exec(
                  "SELECT current_setting('fsync') || ', synchronous_commit ' || "
                  "current_setting('synchronous_commit')")[0][0]
              .as<std::string>();
        });
    std::printf("server + PostgreSQL (fsync %s) + load generator on loopback; auth on (token)\n",
                fsync.ok() ? fsync->c_str() : "unknown");
  }
  const int64_t big = want("submit") || want("lease") || want("long-poll") ? SubmitFigure(b) : 0;
  if (want("lease")) LeaseCompleteFigure(b, url, 64);
  if (want("metrics")) {
    ReportFigure(b, url, 8, 50, 100);  // 500 points a request
    ReportFigure(b, url, 64, 50, 4);   // 20 points a request: batched across requests
    // The size a real worker sends, from worker/metric_sender.h at the study's rate: before the
    // sender coalesced (a request every poll), and now (the oldest point waits kSenderMaxAge).
    const int before = StudyRequestPoints(kOldSenderPollSeconds);
    const int now =
        StudyRequestPoints(std::chrono::duration<double>(worker::kSenderMaxAge).count());
    std::printf(
        "metrics     the size a real worker sends at the study's %.0f points/s: %d points "
        "a request (every %.1f s) before the sender coalesced, %d now\n",
        kStudyPointsPerSecond, before, kOldSenderPollSeconds, now);
    ReportFigure(b, url, 32, 50, before / 5);
    ReportFigure(b, url, 32, 50, now / 5);
  }
  CancelAll(b);
  if (want("long-poll")) IdleLongPollFigure(b, 1000, big);
  std::printf("load average after: %s\n",
              ablate::bench::Shell("cut -d' ' -f1-3 /proc/loadavg").c_str());
  (*srv)->Shutdown(std::chrono::seconds(2));
  return 0;
}
