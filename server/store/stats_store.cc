#include "server/store/stats_store.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/store/pg_codec.h"
#include "server/store/rows.h"

namespace ablate::server {
namespace {

std::optional<double> Opt(const pqxx::field& f) {
  if (f.is_null()) return std::nullopt;
  return f.as<double>();
}

// A run's or cell's grid values ({"axis": "value"}, written at submit); anything else skipped.
std::map<std::string, std::string> GridValues(const pqxx::field& f) {
  std::map<std::string, std::string> out;
  nlohmann::json grid = nlohmann::json::parse(f.as<std::string>(), nullptr, false);
  if (grid.is_object()) {
    for (const auto& [axis, value] : grid.items()) {
      if (value.is_string()) out[axis] = value.get<std::string>();
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<RunStats>> StatsStore::ActiveRuns() {
  using Out = std::vector<RunStats>;
  return db_->Tx<Out>("run stats", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "stats_active_runs");
    pg::ByName col(r);
    Out out;
    out.reserve(r.size());
    for (const auto& row : r) {
      RunStats s;
      s.run_id = col(row, "run_id").as<int64_t>();
      s.sweep_id = col(row, "sweep_id").as<int64_t>();
      s.qk_norm = col(row, "qk_norm").as<std::string>();
      s.lr = col(row, "lr").as<std::string>();
      s.n_layer = col(row, "n_layer").as<std::string>();
      s.seed = col(row, "seed").as<std::string>();
      s.step = col(row, "step").as<double>();
      s.train_loss = Opt(col(row, "latest_train_loss"));
      s.val_loss = Opt(col(row, "latest_val_loss"));
      s.tokens_per_second = Opt(col(row, "tokens_per_second"));
      s.max_attn_logit = Opt(col(row, "latest_max_attn_logit"));
      // A flat {"name": number} object written by ReportMetrics; anything else is skipped.
      nlohmann::json probes =
          nlohmann::json::parse(col(row, "probes").as<std::string>(), nullptr, false);
      if (probes.is_object()) {
        for (const auto& [name, value] : probes.items()) {
          if (value.is_number()) s.probes[name] = value.get<double>();
        }
      }
      s.grid_values = GridValues(col(row, "grid_values"));  // seed included
      s.refine_round = col(row, "refine_round").as<int>();
      out.push_back(std::move(s));
    }
    return out;
  });
}

absl::StatusOr<std::vector<CellStats>> StatsStore::ActiveCells() {
  using Out = std::vector<CellStats>;
  return db_->Tx<Out>("cell stats", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "stats_active_cells");
    pg::ByName col(r);
    Out out;
    out.reserve(r.size());
    for (const auto& row : r) {
      CellStats c;
      c.sweep_id = col(row, "sweep_id").as<int64_t>();
      c.qk_norm = col(row, "qk_norm").as<std::string>();
      c.lr = col(row, "lr").as<std::string>();
      c.n_layer = col(row, "n_layer").as<std::string>();
      c.grid_values = GridValues(col(row, "grid_values"));
      c.refine_round = col(row, "refine_round").as<int>();
      c.val_loss = Opt(col(row, "val_loss"));
      c.max_attn_logit = Opt(col(row, "max_attn_logit"));
      out.push_back(std::move(c));
    }
    return out;
  });
}

absl::StatusOr<std::map<int64_t, std::string>> StatsStore::SweepLabels() {
  using Out = std::map<int64_t, std::string>;
  return db_->Tx<Out>("sweep labels", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    // Every replica refreshes; one at a time assigns, so two cannot both hand out a name.
    pg::Exec(tx, "stats_labels_lock");
    pg::Exec(tx, "stats_labels_clear");
    pqxx::result r = pg::Exec(tx, "stats_labels_active");
    pg::ByName col(r);
    Out out;
    std::set<std::string> taken;
    for (const auto& row : r) {
      const pqxx::field label = col(row, "metric_label");
      if (label.is_null()) continue;
      out[col(row, "id").as<int64_t>()] = label.as<std::string>();
      taken.insert(label.as<std::string>());
    }
    // Unlabelled ones, oldest first: the name if free, else name#id (unique: ids are).
    for (const auto& row : r) {
      if (!col(row, "metric_label").is_null()) continue;
      const int64_t id = col(row, "id").as<int64_t>();
      const std::string name = col(row, "name").as<std::string>();
      const std::string label = taken.count(name) ? absl::StrCat(name, "#", id) : name;
      pg::Exec(tx, "stats_label_set", id, label);
      out[id] = label;
      taken.insert(label);
    }
    return out;
  });
}

absl::StatusOr<std::vector<UsageStats>> StatsStore::Usage() {
  using Out = std::vector<UsageStats>;
  return db_->Tx<Out>("usage stats", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "stats_usage");
    pg::ByName col(r);
    Out out;
    for (const auto& row : r) {
      out.push_back({col(row, "sweep_id").as<int64_t>(), col(row, "device_class").as<std::string>(),
                     col(row, "device_seconds").as<double>(), col(row, "usd").as<double>(),
                     col(row, "priced").as<bool>()});
    }
    return out;
  });
}

absl::StatusOr<std::vector<WorkerCount>> StatsStore::Workers() {
  using Out = std::vector<WorkerCount>;
  return db_->Tx<Out>("worker stats", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "stats_workers", lease_seconds_);
    pg::ByName col(r);
    Out out;
    for (const auto& row : r) {
      out.push_back({col(row, "st").as<std::string>(), col(row, "device_kind").as<std::string>(),
                     col(row, "workers").as<int>(), col(row, "runs_faulted").as<int64_t>()});
    }
    return out;
  });
}

absl::StatusOr<std::vector<WorkerFaults>> StatsStore::FaultedWorkers() {
  using Out = std::vector<WorkerFaults>;
  return db_->Tx<Out>("worker fault stats", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "stats_workers_faulted", lease_seconds_);
    pg::ByName col(r);
    Out out;
    for (const auto& row : r) {
      out.push_back({col(row, "name").as<std::string>(), col(row, "device_kind").as<std::string>(),
                     col(row, "runs_faulted").as<int64_t>(), col(row, "benched").as<bool>(),
                     col(row, "benched_until").as<double>()});
    }
    return out;
  });
}

}  // namespace ablate::server
