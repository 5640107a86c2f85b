#include "server/flags.h"

#include "spdlog/spdlog.h"

namespace ablate::server {

void AddDatabaseFlag(CLI::App* app, std::string* url) {
  app->add_option("--database-url", *url, "PostgreSQL URL, e.g. postgresql://ablate@db/ablate")
      ->envname("ABLATE_DATABASE_URL");
}

void AddServeFlags(CLI::App* app, ServerOptions* o, std::string* auth_mode, bool* no_migrate) {
  app->add_option("--listen", o->listen, "gRPC address host:port")
      ->envname("ABLATE_LISTEN")
      ->capture_default_str();
  app->add_option("--metrics-listen", o->metrics_listen,
                  "Prometheus /metrics address host:port (empty: off)")
      ->envname("ABLATE_METRICS_LISTEN")
      ->capture_default_str();
  app->add_flag("--metrics-insecure", o->metrics_insecure,
                "Allow --metrics-listen beyond loopback (/metrics has no TLS and no auth)")
      ->envname("ABLATE_METRICS_INSECURE");
  app->add_option("--lease-seconds", o->lease_seconds,
                  "Lease length; a worker that misses heartbeats this long loses its run")
      ->envname("ABLATE_LEASE_SECONDS")
      ->capture_default_str();
  app->add_option("--max-long-poll", o->max_long_poll_seconds,
                  "Longest a Lease call waits for work, seconds")
      ->envname("ABLATE_MAX_LONG_POLL")
      ->capture_default_str();
  app->add_option("--data-dir", o->data_dir,
                  "Directory sweep data paths resolve against (served to workers by hash)")
      ->envname("ABLATE_DATA_DIR");
  app->add_option("--store-dir", o->store_dir, "Content-addressed checkpoint store directory")
      ->envname("ABLATE_STORE_DIR")
      ->capture_default_str();
  app->add_option("--tls-cert", o->tls_cert, "PEM certificate chain")->envname("ABLATE_TLS_CERT");
  app->add_option("--tls-key", o->tls_key, "PEM private key")->envname("ABLATE_TLS_KEY");
  app->add_flag("--insecure", o->insecure, "Allow plaintext gRPC on a non-loopback address")
      ->envname("ABLATE_INSECURE");
  app->add_option("--auth", *auth_mode, "token | none (none: loopback only, for demos)")
      ->envname("ABLATE_AUTH")
      ->check(CLI::IsMember({"token", "none"}))
      ->capture_default_str();
  app->add_option("--max-grid", o->max_grid, "Largest sweep (runs) accepted")
      ->envname("ABLATE_MAX_GRID")
      ->capture_default_str();
  app->add_option("--max-message-bytes", o->max_message_bytes, "gRPC message size cap")
      ->envname("ABLATE_MAX_MESSAGE_BYTES")
      ->capture_default_str();
  app->add_option("--max-checkpoint-bytes", o->max_checkpoint_bytes,
                  "Largest checkpoint upload accepted, bytes (refused while streaming)")
      ->envname("ABLATE_MAX_CHECKPOINT_BYTES")
      ->capture_default_str();
  app->add_option("--max-prepared-bytes", o->max_prepared_bytes,
                  "Largest prepared data file (tokenizer, token file) a worker may upload, bytes")
      ->envname("ABLATE_MAX_PREPARED_BYTES")
      ->capture_default_str();
  app->add_option("--prepare-claim-seconds", o->prepare_claim_seconds,
                  "How long a worker's claim to prepare a data set lasts unless renewed")
      ->envname("ABLATE_PREPARE_CLAIM_SECONDS")
      ->capture_default_str();
  app->add_option("--db-pool", o->db_pool_size, "PostgreSQL connections per server process")
      ->envname("ABLATE_DB_POOL")
      ->capture_default_str();
  app->add_option("--threads", o->executor_threads,
                  "Threads for long-poll and stream work (waiting calls hold none)")
      ->envname("ABLATE_THREADS")
      ->capture_default_str();
  app->add_option("--bench-after", o->faults.bench_after,
                  "Worker-side failures in a row after which a worker is benched")
      ->envname("ABLATE_BENCH_AFTER")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app->add_option("--bench-seconds", o->faults.bench_seconds,
                  "A worker's first bench, seconds; doubled for each further bench in a row")
      ->envname("ABLATE_BENCH_SECONDS")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app->add_option("--bench-max-seconds", o->faults.bench_max_seconds, "The longest bench, seconds")
      ->envname("ABLATE_BENCH_MAX_SECONDS")
      ->check(CLI::Range(1.0, 604800.0))
      ->capture_default_str();
  app->add_option("--run-fault-workers", o->faults.run_fault_workers,
                  "Different workers a run may fail on for worker-side causes before it fails")
      ->envname("ABLATE_RUN_FAULT_WORKERS")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app->add_option("--max-preemptions", o->faults.max_preemptions,
                  "Lease expiries (preempted or vanished workers) a run may have before it fails")
      ->envname("ABLATE_MAX_PREEMPTIONS")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app->add_option("--fault-hold-seconds", o->faults.fault_hold_seconds,
                  "How long a run that faulted on a worker waits for another leasing worker "
                  "before the one it faulted on may take it again")
      ->envname("ABLATE_FAULT_HOLD_SECONDS")
      ->check(CLI::Range(0.0, 604800.0))
      ->capture_default_str();
  app->add_option("--max-releases", o->faults.max_releases,
                  "Hand-backs (Release without a fault) a run may have before it fails")
      ->envname("ABLATE_MAX_RELEASES")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app->add_option("--max-points-per-run", o->max_points_per_run,
                  "Metric points one run may store, all names together")
      ->envname("ABLATE_MAX_POINTS_PER_RUN")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app->add_option("--max-points-per-name", o->max_points_per_name,
                  "Metric points one run may store under one name")
      ->envname("ABLATE_MAX_POINTS_PER_NAME")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app->add_option("--max-metric-names", o->max_metric_names,
                  "Distinct metric names one run may store")
      ->envname("ABLATE_MAX_METRIC_NAMES")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app->add_option("--max-final-probes", o->max_final_probes,
                  "Entries a run's result may carry in final_probes")
      ->envname("ABLATE_MAX_FINAL_PROBES")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app->add_option("--max-worker-names", o->max_worker_names,
                  "Live worker names one worker token may register")
      ->envname("ABLATE_MAX_WORKER_NAMES")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app->add_flag("--no-migrate", *no_migrate, "Do not apply migrations on start")
      ->envname("ABLATE_NO_MIGRATE");
}

void AddLogFlag(CLI::App* app, std::string* level) {
  app->add_option("--log-level", *level, "trace | debug | info | warn | error")
      ->envname("ABLATE_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
}

void SetUpLogging(const std::string& level) {
  // logfmt-style lines (time, level, message with key=value fields): greppable and parseable
  // by Loki/Vector without a JSON encoder in the hot path.
  spdlog::set_pattern("ts=%Y-%m-%dT%H:%M:%S.%e%z level=%l msg=\"%v\"");
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace ablate::server
