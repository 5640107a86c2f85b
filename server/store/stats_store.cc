#include "server/store/stats_store.h"

#include "nlohmann/json.hpp"

namespace ablate::server {
namespace {

std::optional<double> Opt(const pqxx::field& f) {
  if (f.is_null()) return std::nullopt;
  return f.as<double>();
}

}  // namespace

absl::StatusOr<std::vector<RunStats>> StatsStore::ActiveRuns() {
  using Out = std::vector<RunStats>;
  return db_->Tx<Out>("run stats", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = tx.exec(
        "SELECT r.id, r.sweep_id, "
        "  coalesce(rs.spec->'grid_values'->>'qk_norm', rs.spec->'config'->>'qk_norm', ''), "
        "  coalesce(rs.spec->'grid_values'->>'lr', rs.spec->'config'->>'lr', ''), "
        "  coalesce(rs.spec->'grid_values'->>'n_layer', rs.spec->'config'->>'n_layer', ''), "
        "  r.seed::text, r.step, r.latest_train_loss, r.latest_val_loss, r.tokens_per_second, "
        "  r.latest_max_attn_logit, r.latest_probes::text "
        "FROM runs r JOIN sweeps s ON s.id = r.sweep_id "
        "LEFT JOIN run_specs rs ON rs.run_id = r.id "
        "WHERE s.state = 'active' AND r.state <> 'queued' AND r.started_at IS NOT NULL");
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
      out.push_back(std::move(s));
    }
    return out;
  });
}

absl::StatusOr<std::vector<WorkerCount>> StatsStore::Workers() {
  using Out = std::vector<WorkerCount>;
  return db_->Tx<Out>("worker stats", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(
        tx,
        // Busy: holds a lease (a worker with --slots may hold several; see SweepStore::Workers).
        "SELECT CASE WHEN last_seen_at < now() - make_interval(secs => $1) THEN 'offline' "
        "  WHEN EXISTS (SELECT 1 FROM runs r WHERE r.worker_id = w.id "
        "    AND r.state IN ('leased', 'running')) THEN 'busy' ELSE 'idle' END AS st, "
        "  device_kind, count(*) FROM workers w GROUP BY st, device_kind",
        2 * lease_seconds_);
    Out out;
    for (const auto& row : r) {
      out.push_back({row[0].as<std::string>(), row[1].as<std::string>(), row[2].as<int>()});
    }
    return out;
  });
}

}  // namespace ablate::server
