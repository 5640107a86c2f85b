#include "server/server.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/util/file.h"
#include "common/util/net.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "server/auth.h"
#include "server/blob_store.h"
#include "server/costs.h"
#include "server/dataset_resolver.h"
#include "server/executor.h"
#include "server/lease_broker.h"
#include "server/metrics.h"
#include "server/periodic.h"
#include "server/reaper.h"
#include "server/store/db.h"
#include "server/store/ingest_store.h"
#include "server/store/migrator.h"
#include "server/store/notifier.h"
#include "server/store/notify_batcher.h"
#include "server/store/prepared_store.h"
#include "server/store/run_transitions.h"
#include "server/store/stats_store.h"
#include "server/store/sweep_reads.h"
#include "server/store/sweep_store.h"
#include "server/store/token_store.h"
#include "server/store/worker_store.h"
#include "server/sweep_service.h"
#include "server/watch_hub.h"
#include "server/worker_service.h"
#include "spdlog/spdlog.h"

namespace ablate::server {

struct Server::Impl {
  ServerOptions options;
  std::unique_ptr<Db> db;
  std::unique_ptr<NotifyBatcher> notes;
  std::unique_ptr<WorkerStore> workers;
  std::unique_ptr<RunTransitions> runs;
  std::unique_ptr<IngestStore> ingest;
  std::unique_ptr<SweepStore> sweeps;
  std::unique_ptr<SweepReads> sweep_reads;
  std::unique_ptr<TokenStore> tokens;
  std::unique_ptr<StatsStore> stats;
  std::unique_ptr<PreparedStore> prepared;
  std::unique_ptr<CostStore> cost_store;
  std::unique_ptr<Costs> costs;
  std::unique_ptr<RetentionStore> retention;
  std::unique_ptr<Executor> executor;
  std::unique_ptr<LeaseBroker> broker;
  std::unique_ptr<WatchHub> hub;
  std::unique_ptr<Notifier> notifier;
  std::unique_ptr<ServerMetrics> metrics;
  std::unique_ptr<Authenticator> auth;
  std::unique_ptr<BlobStore> blobs;
  std::unique_ptr<DatasetResolver> datasets;
  std::unique_ptr<Reaper> reaper;
  Periodic count_compactor;
  std::unique_ptr<WorkerServiceImpl> worker_service;
  std::unique_ptr<SweepServiceImpl> sweep_service;
  std::unique_ptr<grpc::Server> grpc_server;
  Periodic trimmer;  // gives freed heap back to the system (Server::Start says why)
  int port = 0;
  bool shut_down = false;
};

namespace {

// How often each replica re-prices its budgeted sweeps: Lease starts at most the runs the last
// round allowed, so this bounds how long a freed budget (a raise, a run that ended early) waits.
constexpr std::chrono::milliseconds kBudgetKeeperInterval(1000);
// How often each replica folds the run count deltas (migration 0011): a sweep's counts are read
// from about one row per run shape plus the transitions of the last interval.
constexpr std::chrono::milliseconds kRunCountCompaction(1000);

absl::StatusOr<std::string> ReadFlagFile(const std::string& path, const char* flag) {
  auto text = util::ReadFile(path);
  if (!text.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(flag, " ", path, ": cannot read"));
  }
  return text;
}

// Every numeric option gets a range: a NaN lease or a negative message cap would otherwise start
// a server that misbehaves later instead of failing here with the flag's name. `!(v >= lo)`
// rather than `v < lo` so that NaN is refused too.
template <typename T>
absl::Status InRange(const char* flag, T value, T lo, T hi) {
  if (!(value >= lo && value <= hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be between ", lo, " and ", hi, " (got ", value, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckRanges(const ServerOptions& o) {
  for (const absl::Status& s : {
           InRange("--lease-seconds", o.lease_seconds, 0.1, 86400.0),
           InRange("--max-long-poll", o.max_long_poll_seconds, 0.0, 3600.0),
           InRange("--max-grid", o.max_grid, int64_t{1}, int64_t{10000000}),
           InRange("--max-message-bytes", o.max_message_bytes, 4096, 1 << 30),
           InRange("--max-checkpoint-bytes", o.max_checkpoint_bytes, int64_t{1}, int64_t{1} << 40),
           InRange("--max-prepared-bytes", o.max_prepared_bytes, int64_t{1}, int64_t{1} << 40),
           InRange("--prepare-claim-seconds", o.prepare_claim_seconds, 1.0, 86400.0),
           InRange("--db-pool", o.db_pool_size, 1, 1000),
           InRange("--threads", o.executor_threads, 1, 1024),
           InRange("max_spec_bytes", o.max_spec_bytes, 1, 1 << 30),
           InRange("max_points_per_report", o.max_points_per_report, 1, 10000000),
           InRange("reap_interval_seconds", o.reap_interval_seconds, 0.0, 3600.0),
           InRange("stats_interval_seconds", o.stats_interval_seconds, 0.01, 3600.0),
           InRange("--fault-hold-seconds", o.faults.fault_hold_seconds, 0.0, 604800.0),
           InRange("--max-releases", o.faults.max_releases, 1, 100000),
           InRange("--max-points-per-run", o.max_points_per_run, int64_t{1}, int64_t{1} << 40),
           InRange("--max-points-per-name", o.max_points_per_name, int64_t{1}, int64_t{1} << 40),
           InRange("--max-metric-names", o.max_metric_names, 1, 1000000),
           InRange("--max-final-probes", o.max_final_probes, 1, 100000),
           InRange("--max-worker-names", o.max_worker_names, 1, 100000),
       }) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const ServerOptions& o) {
  if (o.database_url.empty()) {
    return absl::InvalidArgumentError("--database-url (or ABLATE_DATABASE_URL) is required");
  }
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  const bool tls = !o.tls_cert.empty();
  if (!IsLoopback(o.listen) && !tls && !o.insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to listen on ", o.listen,
        " without TLS: give --tls-cert/--tls-key, or --insecure if the network is trusted"));
  }
  if (!o.auth && !IsLoopback(o.listen)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--auth none is only allowed on a loopback address (got ", o.listen, ")"));
  }
  if (!o.metrics_listen.empty() && !IsLoopback(o.metrics_listen) && !o.metrics_insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve /metrics on ", o.metrics_listen,
        ": it has no TLS and no authentication; give --metrics-insecure if the network is "
        "trusted, or keep --metrics-listen on loopback behind a proxy"));
  }
  return CheckRanges(o);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  if (auto s = CheckOptions(options); !s.ok()) return s;
#if defined(__GLIBC__)
  // glibc gives a thread that finds the arenas busy an arena of its own, up to 8 per core, and
  // keeps each: a fresh replica's RSS grew as load brought more contention (docs/soak.md). Two
  // per core bound that; MALLOC_ARENA_MAX in the environment still decides when set.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) {
    mallopt(M_ARENA_MAX, static_cast<int>(2 * std::max(1u, std::thread::hardware_concurrency())));
  }
#endif
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const ServerOptions& o = impl->options;
  impl->db = std::make_unique<Db>(o.database_url, o.db_pool_size);
  if (o.migrate) {
    auto applied = Migrate(impl->db.get(), BuiltinMigrations());
    if (!applied.ok()) return applied.status();
    for (const auto& v : *applied) spdlog::info("migration applied version={}", v);
  }
  if (auto s = impl->db->Fill(); !s.ok()) {
    spdlog::warn("database pool not filled at start ({}); connections open as requests need them",
                 std::string(s.message()));
  }
  impl->blobs = std::make_unique<BlobStore>(o.store_dir);
  if (auto s = impl->blobs->Init(); !s.ok()) return s;
  impl->notes = std::make_unique<NotifyBatcher>(impl->db.get());
  impl->notes->Start();
  impl->workers = std::make_unique<WorkerStore>(impl->db.get(), o.lease_seconds);
  impl->runs = std::make_unique<RunTransitions>(impl->db.get(), impl->notes.get(), o.lease_seconds,
                                                o.faults);
  impl->ingest = std::make_unique<IngestStore>(
      impl->db.get(), impl->notes.get(),
      IngestLimits{o.max_points_per_run, o.max_points_per_name, o.max_metric_names});
  impl->sweeps = std::make_unique<SweepStore>(impl->db.get());
  impl->sweep_reads = std::make_unique<SweepReads>(impl->db.get(), o.lease_seconds);
  impl->tokens = std::make_unique<TokenStore>(impl->db.get());
  impl->stats = std::make_unique<StatsStore>(impl->db.get(), o.lease_seconds);
  impl->prepared = std::make_unique<PreparedStore>(impl->db.get(), o.prepare_claim_seconds);
  impl->cost_store = std::make_unique<CostStore>(impl->db.get(), o.lease_seconds);
  impl->costs = std::make_unique<Costs>(impl->cost_store.get());
  impl->retention = std::make_unique<RetentionStore>(impl->db.get());
  impl->executor = std::make_unique<Executor>(o.executor_threads);
  // A long-poll never outlasts half a lease: an idle worker is seen (its Lease call) at least
  // that often, so `ablate workers` shows `lost` only for one whose calls stopped.
  impl->broker =
      std::make_unique<LeaseBroker>(impl->runs.get(), impl->executor.get(),
                                    std::min(o.max_long_poll_seconds, o.lease_seconds / 2));
  impl->hub = std::make_unique<WatchHub>();
  impl->metrics = std::make_unique<ServerMetrics>();
  impl->auth = std::make_unique<Authenticator>(impl->tokens.get(), o.auth);
  impl->datasets = std::make_unique<DatasetResolver>(o.data_dir);
  if (!o.metrics_listen.empty()) {
    if (auto s = impl->metrics->Expose(o.metrics_listen); !s.ok()) return s;
  }

  ServiceDeps deps;
  deps.options = &impl->options;
  deps.workers = impl->workers.get();
  deps.runs = impl->runs.get();
  deps.ingest = impl->ingest.get();
  deps.sweeps = impl->sweeps.get();
  deps.sweep_reads = impl->sweep_reads.get();
  deps.auth = impl->auth.get();
  deps.broker = impl->broker.get();
  deps.hub = impl->hub.get();
  deps.executor = impl->executor.get();
  deps.blobs = impl->blobs.get();
  deps.datasets = impl->datasets.get();
  deps.metrics = impl->metrics.get();
  deps.prepared = impl->prepared.get();
  deps.costs = impl->costs.get();
  deps.retention = impl->retention.get();
  impl->worker_service = std::make_unique<WorkerServiceImpl>(deps);
  impl->sweep_service = std::make_unique<SweepServiceImpl>(deps);

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!o.tls_cert.empty()) {
    auto cert = ReadFlagFile(o.tls_cert, "--tls-cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadFlagFile(o.tls_key, "--tls-key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(o.listen, creds, &impl->port);
  builder.RegisterService(impl->worker_service.get());
  builder.RegisterService(impl->sweep_service.get());
  builder.SetMaxReceiveMessageSize(o.max_message_bytes);
  // Inputs are capped by --max-message-bytes; replies (a big sweep's runs) may be larger, up to
  // what ablate's clients accept (common/rpc: 64 MiB).
  builder.SetMaxSendMessageSize(std::max(o.max_message_bytes, 64 << 20));
  // Workers behind NAT ping every 30 s even when idle; allow it instead of answering GOAWAY.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  impl->grpc_server = builder.BuildAndStart();
  if (impl->grpc_server == nullptr || impl->port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", o.listen, " (address in use or invalid?)"));
  }

  impl->notifier = std::make_unique<Notifier>(o.database_url);
  LeaseBroker* broker = impl->broker.get();
  WatchHub* hub = impl->hub.get();
  impl->notifier->AddHandler(
      [broker](const std::string& c, const std::string& p) { broker->OnNotify(c, p); });
  impl->notifier->AddHandler(
      [hub](const std::string& c, const std::string& p) { hub->OnNotify(c, p); });
  impl->notifier->Start();

  double reap =
      o.reap_interval_seconds > 0 ? o.reap_interval_seconds : std::min(5.0, o.lease_seconds / 4);
  impl->reaper =
      std::make_unique<Reaper>(impl->runs.get(), impl->metrics.get(),
                               std::chrono::milliseconds(static_cast<int64_t>(reap * 1000)));
  impl->reaper->Start();
#if defined(__GLIBC__)
  // glibc keeps what a burst frees (a PostgreSQL restart reconnecting every pool, a storm of
  // Leases) in its per-thread arenas, so RSS only steps up over days (the hour's soak: +24 % in
  // steps of 1-4 MiB, docs/soak.md). malloc_trim hands the free pages back; once a minute costs
  // a few milliseconds.
  impl->trimmer.Start(std::chrono::seconds(60), [] { malloc_trim(0); });
#endif
  impl->costs->StartKeeper(kBudgetKeeperInterval);
  SweepStore* sweeps = impl->sweeps.get();
  impl->count_compactor.Start(kRunCountCompaction, [sweeps] {
    if (auto folded = sweeps->CompactRunCounts(); !folded.ok()) {
      spdlog::warn("run count compaction: {}", folded.status().ToString());
    }
  });
  impl->metrics->StartRefresh(
      impl->sweep_reads.get(), impl->stats.get(),
      std::chrono::milliseconds(static_cast<int64_t>(o.stats_interval_seconds * 1000)));
  impl->grpc_server->GetHealthCheckService()->SetServingStatus(true);
  spdlog::info("serving listen={} port={} tls={} auth={} lease_seconds={} metrics={}", o.listen,
               impl->port, !o.tls_cert.empty(), o.auth ? "token" : "none", o.lease_seconds,
               o.metrics_listen.empty() ? "off" : o.metrics_listen);
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { Shutdown(std::chrono::seconds(1)); }

int Server::port() const { return impl_->port; }

int Server::waiting_leases() const { return impl_->broker->waiting(); }

void Server::Shutdown(std::chrono::milliseconds grace) {
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  spdlog::info("shutting down grace_ms={}", grace.count());
  impl_->grpc_server->GetHealthCheckService()->SetServingStatus(false);
  // Long-polls would otherwise hold shutdown for up to --max-long-poll.
  impl_->broker->Shutdown();
  impl_->grpc_server->Shutdown(std::chrono::system_clock::now() + grace);
  impl_->grpc_server->Wait();
  impl_->reaper->Stop();
  impl_->trimmer.Stop();
  impl_->costs->Stop();
  impl_->count_compactor.Stop();
  impl_->metrics->Stop();
  impl_->notifier->Stop();
  impl_->executor->Shutdown();
  impl_->notes->Stop();
}

}  // namespace ablate::server
