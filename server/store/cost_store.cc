#include "server/store/cost_store.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/store/channels.h"
#include "server/store/pg_codec.h"
#include "server/store/rows.h"

namespace ablate::server {
namespace {

// A run shape from the columns device, dtype, flops_per_token and flops_per_run (sweep_remaining,
// budget_running, budget_queued).
cost::WorkShape Shape(const pg::ByName& col, const pqxx::row& row) {
  cost::WorkShape s;
  s.device = col(row, "device").as<std::string>();
  s.dtype = col(row, "dtype").as<std::string>();
  s.flops_per_token = col(row, "flops_per_token").as<double>();
  s.flops_per_run = col(row, "flops_per_run").as<double>();
  return s;
}

v1::SweepCost UsageFrom(const pqxx::result& r) {
  v1::SweepCost out;
  out.set_priced(!r.empty());
  pg::ByName col(r);
  for (const auto& row : r) {
    auto* line = out.add_classes();
    line->set_device_class(col(row, "device_class").as<std::string>());
    line->set_runs(col(row, "runs").as<int>());
    line->set_running(col(row, "running").as<int>());
    line->set_device_seconds(col(row, "device_seconds").as<double>());
    line->set_usd(col(row, "usd").as<double>());
    line->set_priced(col(row, "priced").as<bool>());
    out.set_device_seconds(out.device_seconds() + line->device_seconds());
    out.set_usd(out.usd() + line->usd());
    if (!line->priced()) out.set_priced(false);
    out.set_as_of(col(row, "as_of").as<double>());
  }
  return out;
}

}  // namespace

bool PlausibleBenchmark(const v1::DeviceBenchmark& b) {
  auto within = [](double v, double lo, double hi) { return v >= lo && v <= hi; };  // NaN: no
  return within(b.flops_per_second(), kMinBenchmarkFlops, kMaxBenchmarkFlops) &&
         within(b.tokens_per_second(), 0, kMaxTokensPerSecond) &&
         within(b.seconds(), 0, kMaxBenchmarkSeconds);
}

absl::StatusOr<std::vector<cost::FleetWorker>> CostStore::Fleet() {
  using Out = std::vector<cost::FleetWorker>;
  return db_->Tx<Out>("fleet", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "fleet_workers", 2 * lease_seconds_);
    pg::ByName col(r);
    Out out;
    for (const auto& row : r) {
      v1::WorkerInfo info;
      // Written by Register from a parsed WorkerInfo; an unreadable one counts as bare.
      (void)pg::FromJson(col(row, "info").as<std::string>(), &info);
      cost::FleetWorker w;
      w.device_kind = col(row, "device_kind").as<std::string>();
      w.device_class = cost::DeviceClass(w.device_kind, info.device_name());
      w.slots = std::max(1, info.slots());
      w.price_per_hour = info.price_per_hour() > 0 ? info.price_per_hour() : 0;
      for (const auto& b : info.benchmarks()) {
        if (PlausibleBenchmark(b)) w.benchmarks.push_back(b);
      }
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
    pg::ByName col(r);
    Out out;
    for (const auto& row : r) {
      cost::SpeedSample s;
      s.device_class = col(row, "device_class").as<std::string>();
      s.dtype = col(row, "dtype").as<std::string>();
      s.flops_per_token = col(row, "flops_per_token").as<double>();
      s.flops = col(row, "flops").as<double>();
      s.device_seconds = col(row, "device_seconds").as<double>();
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
  return db_->Tx<RemainingWork>(
      "sweep remaining work", [&](pqxx::work& tx) -> absl::StatusOr<RemainingWork> {
        pqxx::result r = pg::Exec(tx, "sweep_remaining", sweep_id);
        pg::ByName col(r);
        RemainingWork out;
        for (const auto& row : r) {
          out.unknown_size += col(row, "unknown").as<int64_t>();
          cost::WorkShape s = Shape(col, row);
          s.runs = col(row, "queued").as<double>() + col(row, "left_fraction").as<double>();
          if (s.flops_per_run > 0 && s.runs > 0) out.shapes.push_back(std::move(s));
        }
        return out;
      });
}

absl::StatusOr<std::vector<int64_t>> CostStore::BudgetedSweeps() {
  using Out = std::vector<int64_t>;
  return db_->Tx<Out>("budgeted sweeps", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "budget_sweeps");
    pg::ByName col(r);
    Out out;
    for (const auto& row : r) out.push_back(col(row, "id").as<int64_t>());
    return out;
  });
}

absl::StatusOr<std::optional<v1::Budget>> CostStore::KeepBudget(int64_t sweep_id,
                                                                const Decide& decide) {
  using Out = std::optional<v1::Budget>;
  return db_->Tx<Out>("keep budget", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result lock = pg::Exec(tx, "budget_lock", sweep_id);
    if (lock.empty()) return Out();
    const pqxx::row limits = lock.front();
    if (!limits["active"].as<bool>()) return Out();
    const pqxx::field gpu_hours = limits["budget_gpu_hours"], usd = limits["budget_usd"];
    if (gpu_hours.is_null() && usd.is_null()) return Out();
    BudgetRound round;
    round.budget.set_gpu_hours(gpu_hours.is_null() ? 0 : gpu_hours.as<double>());
    round.budget.set_usd(usd.is_null() ? 0 : usd.as<double>());
    const pqxx::field runs_left = limits["budget_runs_left"];
    const int before = runs_left.is_null() ? 0 : runs_left.as<int>();
    round.spent = UsageFrom(pg::Exec(tx, "usage_by_class", sweep_id));
    pqxx::result running = pg::Exec(tx, "budget_running", sweep_id);
    pg::ByName col(running);
    for (const auto& row : running) {
      cost::RunningRun run;
      run.device_class = col(row, "device_class").as<std::string>();
      run.share = col(row, "share").as<double>();
      run.usd_per_slot_hour = col(row, "usd_per_slot_hour").as<double>();
      run.tokens_per_second = col(row, "tokens_per_second").as<double>();
      run.remaining_tokens = col(row, "remaining_tokens").as<double>();
      run.shape = Shape(col, row);
      run.shape.runs = 1;
      run.remaining_fraction = col(row, "remaining_fraction").as<double>();
      round.running.push_back(std::move(run));
    }
    pqxx::result queued = pg::Exec(tx, "budget_queued", sweep_id, kBudgetLookahead);
    pg::ByName queued_col(queued);
    for (const auto& row : queued) {
      cost::WorkShape s = Shape(queued_col, row);
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
