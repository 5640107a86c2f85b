#include "server/store/stats_store.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/store/pg_codec.h"

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
    Out out;
    out.reserve(r.size());
    for (const auto& row : r) {
      RunStats s;
      s.run_id = row[0].as<int64_t>();
      s.sweep_id = row[1].as<int64_t>();
      s.qk_norm = row[2].as<std::string>();
      s.lr = row[3].as<std::string>();
      s.n_layer = row[4].as<std::string>();
      s.seed = row[5].as<std::string>();
      s.step = row[6].as<double>();
      s.train_loss = Opt(row[7]);
      s.val_loss = Opt(row[8]);
      s.tokens_per_second = Opt(row[9]);
      s.max_attn_logit = Opt(row[10]);
      // A flat {"name": number} object written by ReportMetrics; anything else is skipped.
      nlohmann::json probes = nlohmann::json::parse(row[11].as<std::string>(), nullptr, false);
      if (probes.is_object()) {
        for (const auto& [name, value] : probes.items()) {
          if (value.is_number()) s.probes[name] = value.get<double>();
        }
      }
      s.grid_values = GridValues(row[12]);  // seed included
      s.refine_round = row[13].as<int>();
      out.push_back(std::move(s));
    }
    return out;
  });
}

absl::StatusOr<std::vector<CellStats>> StatsStore::ActiveCells() {
  using Out = std::vector<CellStats>;
  return db_->Tx<Out>("cell stats", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "stats_active_cells");
    Out out;
    out.reserve(r.size());
    for (const auto& row : r) {
      CellStats c;
      c.sweep_id = row[0].as<int64_t>();
      c.qk_norm = row[1].as<std::string>();
      c.lr = row[2].as<std::string>();
      c.n_layer = row[3].as<std::string>();
      c.grid_values = GridValues(row[4]);
      c.refine_round = row[5].as<int>();
      c.val_loss = Opt(row[6]);
      c.max_attn_logit = Opt(row[7]);
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
    Out out;
    std::set<std::string> taken;
    for (const auto& row : r) {
      if (row[2].is_null()) continue;
      out[row[0].as<int64_t>()] = row[2].as<std::string>();
      taken.insert(row[2].as<std::string>());
    }
    // Unlabelled ones, oldest first: the name if free, else name#id (unique: ids are).
    for (const auto& row : r) {
      if (!row[2].is_null()) continue;
      const int64_t id = row[0].as<int64_t>();
      const std::string name = row[1].as<std::string>();
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
    Out out;
    for (const auto& row : pg::Exec(tx, "stats_usage")) {
      out.push_back({row[0].as<int64_t>(), row[1].as<std::string>(), row[2].as<double>(),
                     row[3].as<double>(), row[4].as<bool>()});
    }
    return out;
  });
}

absl::StatusOr<std::vector<WorkerCount>> StatsStore::Workers() {
  using Out = std::vector<WorkerCount>;
  return db_->Tx<Out>("worker stats", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "stats_workers", lease_seconds_);
    Out out;
    for (const auto& row : r) {
      out.push_back({row[0].as<std::string>(), row[1].as<std::string>(), row[2].as<int>(),
                     row[3].as<int64_t>()});
    }
    return out;
  });
}

absl::StatusOr<std::vector<WorkerFaults>> StatsStore::FaultedWorkers() {
  using Out = std::vector<WorkerFaults>;
  return db_->Tx<Out>("worker fault stats", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    Out out;
    for (const auto& row : pg::Exec(tx, "stats_workers_faulted", lease_seconds_)) {
      out.push_back({row[0].as<std::string>(), row[1].as<std::string>(), row[2].as<int64_t>(),
                     row[3].as<bool>(), row[4].as<double>()});
    }
    return out;
  });
}

}  // namespace ablate::server
