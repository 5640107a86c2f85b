#include "server/reaper.h"

#include "spdlog/spdlog.h"

namespace ablate::server {

void Reaper::Start() {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      auto r = queue_->Reap();
      if (!r.ok()) {
        spdlog::warn("reaper: {}", r.status().ToString());
      } else {
        if (r->requeued + r->failed > 0) {
          metrics_->LeasesExpired(r->requeued + r->failed);
          spdlog::info("reaper: leases expired requeued={} failed={}", r->requeued, r->failed);
        }
        if (r->sweeps_finished > 0) spdlog::info("reaper: sweeps finished={}", r->sweeps_finished);
      }
      lock.lock();
      cv_.wait_for(lock, interval_, [this] { return stop_; });
    }
  });
}

void Reaper::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace ablate::server
