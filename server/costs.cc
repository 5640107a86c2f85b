#include "server/costs.h"

#include <algorithm>
#include <utility>

#include "common/util/log.h"
#include "spdlog/spdlog.h"

namespace ablate::server {
namespace {

// How long a speed model is reused: estimates and the ETA change slowly; the budget keeper's
// spent and running figures are read fresh every round regardless.
constexpr auto kModelTtl = std::chrono::seconds(3);
constexpr auto kRemainingTtl = std::chrono::seconds(3);
constexpr size_t kRemainingCached = 1000;  // sweeps; beyond, the cache starts afresh

}  // namespace

absl::StatusOr<std::shared_ptr<const cost::SpeedModel>> Costs::Model() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (model_ && std::chrono::steady_clock::now() - model_at_ < kModelTtl) return model_;
  }
  auto fleet = store_->Fleet();
  if (!fleet.ok()) return fleet.status();
  auto samples = store_->Samples();
  if (!samples.ok()) return samples.status();
  auto model = std::make_shared<const cost::SpeedModel>(*std::move(fleet), *std::move(samples));
  std::lock_guard<std::mutex> lock(mu_);
  model_ = model;
  model_at_ = std::chrono::steady_clock::now();
  return model;
}

absl::Status Costs::Annotate(v1::Sweep* sweep) {
  auto usage = store_->Usage(sweep->id());
  if (!usage.ok()) return usage.status();
  *sweep->mutable_cost() = *std::move(usage);
  sweep->set_eta_basis("durations");
  if (sweep->state() != "active" || sweep->eta_seconds() == 0) return absl::OkStatus();
  RemainingWork work;
  bool cached = false;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = remaining_.find(sweep->id());
    if (it != remaining_.end() && now - it->second.at < kRemainingTtl) {
      work = it->second.work;
      cached = true;
    }
  }
  if (!cached) {
    auto read = store_->Remaining(sweep->id());
    if (!read.ok()) return read.status();
    work = *std::move(read);
    std::lock_guard<std::mutex> lock(mu_);
    if (remaining_.size() >= kRemainingCached) remaining_.clear();
    remaining_[sweep->id()] = CachedWork{now, work};
  }
  const RemainingWork* remaining = &work;
  if (remaining->unknown_size > 0 || remaining->shapes.empty()) return absl::OkStatus();
  auto model = Model();
  if (!model.ok()) return model.status();
  const cost::SpeedModel::FleetTime t = (*model)->OnFleet(remaining->shapes);
  if (t.seconds >= 0) {
    sweep->set_eta_seconds(t.seconds);
    sweep->set_eta_basis("throughput");
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::SweepEstimate> Costs::Estimate(const std::vector<cost::WorkShape>& base,
                                                  int64_t base_runs, int64_t max_new_runs) {
  auto model = Model();
  if (!model.ok()) return model.status();
  return cost::Estimate(base, base_runs, max_new_runs, **model);
}

absl::Status Costs::KeepBudget(int64_t sweep_id) {
  auto model = Model();
  if (!model.ok()) return model.status();
  auto kept =
      store_->KeepBudget(sweep_id, [&](BudgetRound* round) { cost::DecideBudget(**model, round); });
  return kept.status();
}

absl::Status Costs::Raise(int64_t sweep_id, double amount) {
  if (auto s = store_->Raise(sweep_id, amount); !s.ok()) return s;
  return KeepBudget(sweep_id);
}

void Costs::StartKeeper(std::chrono::milliseconds interval) {
  keeper_.Start(interval, [this] {
    auto sweeps = store_->BudgetedSweeps();
    if (!sweeps.ok()) {
      spdlog::warn("budget keeper: {}", sweeps.status().ToString());
      return;
    }
    for (int64_t id : *sweeps) {
      if (auto s = KeepBudget(id); !s.ok()) {
        spdlog::warn("budget keeper: sweep {}: {}", id, s.ToString());
      }
    }
  });
}

}  // namespace ablate::server
