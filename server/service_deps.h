// The parts the two gRPC services share, owned by Server.
#pragma once

#include "server/auth.h"
#include "server/blob_store.h"
#include "server/costs.h"
#include "server/dataset_resolver.h"
#include "server/executor.h"
#include "server/lease_broker.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/store/ingest_store.h"
#include "server/store/prepared_store.h"
#include "server/store/retention_store.h"
#include "server/store/run_transitions.h"
#include "server/store/sweep_reads.h"
#include "server/store/sweep_store.h"
#include "server/store/worker_store.h"
#include "server/watch_hub.h"

namespace ablate::server {

struct ServiceDeps {
  const ServerOptions* options = nullptr;
  WorkerStore* workers = nullptr;
  RunTransitions* runs = nullptr;
  IngestStore* ingest = nullptr;
  SweepStore* sweeps = nullptr;
  SweepReads* sweep_reads = nullptr;
  Authenticator* auth = nullptr;
  LeaseBroker* broker = nullptr;
  WatchHub* hub = nullptr;
  Executor* executor = nullptr;
  BlobStore* blobs = nullptr;
  DatasetResolver* datasets = nullptr;
  ServerMetrics* metrics = nullptr;
  PreparedStore* prepared = nullptr;
  Costs* costs = nullptr;
  RetentionStore* retention = nullptr;
};

}  // namespace ablate::server
