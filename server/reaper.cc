#include "server/reaper.h"

#include "spdlog/spdlog.h"

namespace ablate::server {

void Reaper::Start() {
  loop_.Start(interval_, [this] { Pass(); });
}

void Reaper::Pass() {
  auto r = runs_->Reap();
  if (!r.ok()) {
    spdlog::warn("reaper: {}", r.status().ToString());
    return;
  }
  if (r->requeued + r->failed > 0) {
    metrics_->LeasesExpired(r->requeued + r->failed);
    spdlog::info("reaper: leases expired requeued={} failed={}", r->requeued, r->failed);
  }
  if (r->sweeps_finished > 0) spdlog::info("reaper: sweeps finished={}", r->sweeps_finished);
}

}  // namespace ablate::server
