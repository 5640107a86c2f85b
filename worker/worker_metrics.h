// The worker's own Prometheus endpoint (--metrics-listen). Off by default: most workers sit
// behind NAT where nothing can scrape them, and the server already exports per-run series.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/run_session.h"

namespace prometheus {
class Exposer;
class Registry;
}  // namespace prometheus

namespace ablate::worker {

struct WorkerIdentity {
  std::string worker, device_kind, device_name, torch_version;
};

class WorkerMetrics {
 public:
  // Serves /metrics on `listen` (host:port) and samples `stats` (one per slot) and `benched`
  // (the server benched this worker), both outliving this, once a second.
  static absl::StatusOr<std::unique_ptr<WorkerMetrics>> Start(
      const std::string& listen, const WorkerIdentity& id, const std::vector<SessionStats>& stats,
      const std::atomic<bool>* benched);
  ~WorkerMetrics();

 private:
  WorkerMetrics() = default;
  void Loop(WorkerIdentity id, const std::vector<SessionStats>* stats,
            const std::atomic<bool>* benched);

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ablate::worker
