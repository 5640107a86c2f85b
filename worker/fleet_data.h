// Data prepared once per fleet (docs/architecture.md#data-flow): before a run trains, the worker
// makes sure its cache holds the run's tokenizer and token files. Its own cache comes first;
// then the server's store (another worker prepared them: download by SHA-256); if another worker
// is preparing them right now, wait for it; only the worker that claims the key prepares, then
// uploads and publishes the files for the rest of the fleet.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "ablate/v1/ablate.pb.h"
#include "absl/status/statusor.h"
#include "worker/run_session.h"
#include "worker/server_client.h"

namespace ablate::worker {

enum class FleetDataSource {
  kCache,       // already in this worker's cache
  kDownloaded,  // another worker prepared them; downloaded from the server
  kPrepared,    // prepared here and published to the fleet
  kLocalOnly,   // prepared here; the server could not take part (old server, unreachable)
};
const char* FleetDataSourceName(FleetDataSource source);
// Adds one to the stats counter of `source` (exported as ablate_worker_data_sets_total).
void CountFleetData(FleetDataSource source, SessionStats* stats);

struct FleetDataOptions {
  int64_t worker_id = 0;
  std::string cache_dir;
  int64_t run_id = 0;                 // for logs
  double poll_seconds = 2;            // how often a waiting worker asks again
  std::function<bool()> should_stop;  // cancelled, lease lost or shutting down: stop waiting
};

// `data` holds local paths (or synthetic:N). On return the files PlanRunData names are in the
// cache, so Train finds them. Errors: the preparation itself failed, or should_stop.
absl::StatusOr<FleetDataSource> EnsureFleetData(ServerClient* coordinator, const v1::DataSpec& data,
                                                const FleetDataOptions& options);

}  // namespace ablate::worker
