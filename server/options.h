// Everything ablate-server can be told, with its defaults. Flags and environment variables map
// onto this in main.cc; tests and benchmarks fill it directly.
#pragma once

#include <cstdint>
#include <string>

#include "server/store/fault_policy.h"

namespace ablate::server {

struct ServerOptions {
  std::string database_url;
  std::string listen = "127.0.0.1:7070";          // port 0: pick a free one (tests)
  std::string metrics_listen = "127.0.0.1:9464";  // empty: no /metrics
  double lease_seconds = 60;
  double max_long_poll_seconds = 30;
  std::string data_dir;                    // sweep data paths resolve against it
  std::string store_dir = "ablate-store";  // content-addressed checkpoints
  std::string tls_cert, tls_key;           // PEM files; both or neither
  bool insecure = false;                   // allow plaintext beyond loopback
  bool metrics_insecure = false;           // allow /metrics (no TLS, no auth) beyond loopback
  bool auth = true;                        // false: --auth none (loopback only)
  int64_t max_grid = 100000;
  int max_message_bytes = 16 << 20;
  int max_spec_bytes = 1 << 20;
  int max_points_per_report = 50000;
  // What one run may store (docs/server.md#hostile-input): metric points in all, points of one
  // name, distinct metric names, and entries in its result's final_probes. A report past one of
  // the point or name caps is refused with OUT_OF_RANGE naming the flag (the worker drops those
  // points and trains on), a result past the probe cap with INVALID_ARGUMENT. A deep model
  // reports ~8 probes per layer and one per head, so the name cap leaves room for ~100 layers of
  // 16 heads.
  int64_t max_points_per_run = 10'000'000;
  int64_t max_points_per_name = 1'000'000;
  int max_metric_names = 4096;
  int max_final_probes = 256;
  // Live worker names (not stopped, seen within a lease period) one token may hold: a fleet that
  // shares one worker token (docs/deploy.md's --scale) fits; a client registering names without
  // end does not.
  int max_worker_names = 64;
  // Sweep files parsed and expanded at once (SubmitSweep); a request that finds every slot taken
  // waits up to parse_wait_seconds, then gets RESOURCE_EXHAUSTED.
  int max_concurrent_parses = 2;
  double parse_wait_seconds = 5;
  int64_t max_checkpoint_bytes = int64_t{4} << 30;  // a checkpoint upload larger is refused
  // A prepared file (tokenizer or token file, PutPreparedFile) larger is refused. Token files are
  // about half the size of their text (uint16 ids, ~4 bytes of text a token).
  int64_t max_prepared_bytes = int64_t{16} << 30;
  // How long a data-preparation claim lasts without renewal (the preparer renews it every third
  // of this); a worker that died while preparing blocks others this long at most.
  double prepare_claim_seconds = 120;
  int db_pool_size = 16;
  int executor_threads = 8;
  double reap_interval_seconds = 0;  // 0: lease_seconds / 4, at most 5 s
  double stats_interval_seconds = 5;
  bool migrate = true;
  // Failures not the run's own: benching and allowances (docs/server.md#failures).
  FaultPolicy faults;
};

}  // namespace ablate::server
