#include "server/store/cost_store.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/store/channels.h"
#include "server/store/pg_codec.h"

namespace ablate::server {
namespace {

cost::WorkShape Shape(const pqxx::row& row, int first) {
  cost::WorkShape s;
  s.device = row[first].as<std::string>();
  s.dtype = row[first + 1].as<std::string>();
  s.flops_per_token = row[first + 2].as<double>();
  s.flops_per_run = row[first + 3].as<double>();
  return s;
}

v1::SweepCost UsageFrom(const pqxx::result& r) {
  v1::SweepCost out;
  out.set_priced(!r.empty());
  for (const auto& row : r) {
    auto* line = out.add_classes();
    line->set_device_class(row[0].as<std::string>());
    line->set_runs(row[1].as<int>());
    line->set_running(row[2].as<int>());
    line->set_device_seconds(row[3].as<double>());
    line->set_usd(row[4].as<double>());
    line->set_priced(row[5].as<bool>());
    out.set_device_seconds(out.device_seconds() + line->device_seconds());
    out.set_usd(out.usd() + line->usd());
    if (!line->priced()) out.set_priced(false);
    out.set_as_of(row[6].as<double>());
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<cost::FleetWorker>> CostStore::Fleet() {
  using Out = std::vector<cost::FleetWorker>;
  return db_->Tx<Out>("fleet", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "fleet_workers", 2 * lease_seconds_);
    Out out;
    for (const auto& row : r) {
      v1::WorkerInfo info;
      // Written by Register from a parsed WorkerInfo; an unreadable one counts as bare.
      (void)pg::FromJson(row[1].as<std::string>(), &info);
      cost::FleetWorker w;
      w.device_kind = row[0].as<std::string>();
      w.device_class = cost::DeviceClass(w.device_kind, info.device_name());
      w.slots = std::max(1, info.slots());
      w.price_per_hour = info.price_per_hour() > 0 ? info.price_per_hour() : 0;
      w.benchmarks.assign(info.benchmarks().begin(), info.benchmarks().end());
      w.memory_bytes = info.device_memory_bytes();
      out.push_back(std::move(w));
    }
    return out;
  });
}

absl::StatusOr<std::vector<cost::SpeedSample>> CostStore::Samples() {
  using Out = std::vector<cost::SpeedSample>;
  return db_->Tx<Out>("speed samples", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "fleet_samples", kSpeedSamples);
    Out out;
    for (const auto& row : r) {
      cost::SpeedSample s;
      s.device_class = row[0].as<std::string>();
      s.dtype = row[1].as<std::string>();
      s.flops_per_token = row[2].as<double>();
      s.flops = row[3].as<double>();
      s.device_seconds = row[4].as<double>();
      out.push_back(std::move(s));
    }
    return out;
  });
}

absl::StatusOr<v1::SweepCost> CostStore::Usage(int64_t sweep_id) {
  return db_->Tx<v1::SweepCost>("sweep usage",
                                [&](pqxx::work& tx) -> absl::StatusOr<v1::SweepCost> {
                                  return UsageFrom(pg::Exec(tx, "usage_by_class", sweep_id));
                                });
}

absl::StatusOr<RemainingWork> CostStore::Remaining(int64_t sweep_id) {
  return db_->Tx<RemainingWork>("sweep remaining work",
                                [&](pqxx::work& tx) -> absl::StatusOr<RemainingWork> {
                                  pqxx::result r = pg::Exec(tx, "sweep_remaining", sweep_id);
                                  RemainingWork out;
                                  for (const auto& row : r) {
                                    out.unknown_size += row[6].as<int64_t>();
                                    cost::WorkShape s = Shape(row, 0);
                                    s.runs = row[4].as<double>() + row[5].as<double>();
                                    if (s.flops_per_run > 0 && s.runs > 0)
                                      out.shapes.push_back(std::move(s));
                                  }
                                  return out;
                                });
}

absl::StatusOr<std::vector<int64_t>> CostStore::BudgetedSweeps() {
  using Out = std::vector<int64_t>;
  return db_->Tx<Out>("budgeted sweeps", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    Out out;
    for (const auto& row : pg::Exec(tx, "budget_sweeps")) out.push_back(row[0].as<int64_t>());
    return out;
  });
}

absl::StatusOr<std::optional<v1::Budget>> CostStore::KeepBudget(int64_t sweep_id,
                                                                const Decide& decide) {
  using Out = std::optional<v1::Budget>;
  return db_->Tx<Out>("keep budget", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result lock = pg::Exec(tx, "budget_lock", sweep_id);
    if (lock.empty() || !lock[0][3].as<bool>()) return Out();
    if (lock[0][0].is_null() && lock[0][1].is_null()) return Out();
    BudgetRound round;
    round.budget.set_gpu_hours(lock[0][0].is_null() ? 0 : lock[0][0].as<double>());
    round.budget.set_usd(lock[0][1].is_null() ? 0 : lock[0][1].as<double>());
    const int before = lock[0][2].is_null() ? 0 : lock[0][2].as<int>();
    round.spent = UsageFrom(pg::Exec(tx, "usage_by_class", sweep_id));
    for (const auto& row : pg::Exec(tx, "budget_running", sweep_id)) {
      cost::RunningRun run;
      run.device_class = row[0].as<std::string>();
      run.share = row[1].as<double>();
      run.usd_per_slot_hour = row[2].as<double>();
      run.tokens_per_second = row[3].as<double>();
      run.remaining_tokens = row[4].as<double>();
      run.shape = Shape(row, 5);
      run.shape.runs = 1;
      run.remaining_fraction = row[9].as<double>();
      round.running.push_back(std::move(run));
    }
    for (const auto& row : pg::Exec(tx, "budget_queued", sweep_id, kBudgetLookahead)) {
      cost::WorkShape s = Shape(row, 0);
      s.runs = 1;
      round.queued.push_back(std::move(s));
    }
    decide(&round);
    const int after = round.runs_left;
    round.budget.set_runs_left(after);
    pg::Exec(tx, "budget_update", sweep_id, after, pg::ToJson(round.budget));
    if (before <= 0 && after > 0) {
      pg::Exec(tx, "notify", std::string(channels::kQueue), std::string("auto"));
    }
    return Out(round.budget);
  });
}

absl::Status CostStore::Raise(int64_t sweep_id, double amount) {
  return db_
      ->Tx<bool>("raise budget",
                 [&](pqxx::work& tx) -> absl::StatusOr<bool> {
                   if (pg::Exec(tx, "budget_raise", sweep_id, amount).empty()) {
                     return absl::FailedPreconditionError(absl::StrCat(
                         "sweep ", sweep_id,
                         " has no budget to raise (a budget is set in the sweep file: budget: "
                         "{gpu_hours: N} or {usd: N})"));
                   }
                   return true;
                 })
      .status();
}

}  // namespace ablate::server
