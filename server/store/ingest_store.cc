// The fenced bulk writes of a running attempt: ReportMetrics and ReportLogs.
#include "server/store/ingest_store.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/metric_names.h"
#include "common/util/sha256.h"
#include "nlohmann/json.hpp"
#include "server/store/pg_codec.h"
#include "server/store/run_transitions.h"
#include "server/store/stats_store.h"

namespace ablate::server {

absl::StatusOr<int> IngestStore::Ingest(const std::string& what, int64_t run_id,
                                        const std::function<absl::StatusOr<int>(pqxx::work&)>& fn) {
  auto out = db_->Tx<int>(what, fn);
  if (out.ok()) {
    // Not inside the transaction: docs/architecture.md, "Why two kinds of NOTIFY".
    Notices notices;
    notices.Run(run_id);
    notices.SendWatchers(notes_);
  }
  return out;
}

absl::StatusOr<int> IngestStore::ReportMetrics(const v1::ReportMetricsRequest& req) {
  // One statement per (name, step) is allowed per upsert, so a batch that repeats a key keeps
  // its last value (what a worker re-sending after a retry means).
  std::map<std::pair<std::string, int64_t>, const v1::MetricPoint*> latest;
  for (const auto& p : req.points()) latest[{p.name(), p.step()}] = &p;
  std::vector<std::string> names;
  std::vector<int64_t> steps;
  std::vector<double> values, times;
  std::map<std::string, std::pair<int64_t, double>> newest;  // name -> (step, value)
  int64_t max_step = 0;
  for (const auto& [key, p] : latest) {
    names.push_back(p->name());
    steps.push_back(p->step());
    values.push_back(p->value());
    times.push_back(p->time());
    max_step = std::max(max_step, p->step());
    auto it = newest.find(p->name());
    if (it == newest.end() || it->second.first <= p->step())
      newest[p->name()] = {p->step(), p->value()};
  }
  auto latest_of = [&](const char* name) -> std::pair<bool, double> {
    auto it = newest.find(name);
    return it == newest.end() ? std::pair<bool, double>{false, 0.0}
                              : std::pair<bool, double>{true, it->second.second};
  };
  auto [has_train, train] = latest_of(metric::kTrainLoss);
  auto [has_val, val] = latest_of(metric::kValLoss);
  auto [has_logit, logit] = latest_of(metric::kMaxAttnLogit);
  // The aggregate probes a dashboard shows per run; per-layer ones stay in metric_points.
  nlohmann::json probes = nlohmann::json::object();
  for (const char* name : kExportedProbes) {
    auto [has, value] = latest_of(name);
    if (!has || !std::isfinite(value)) continue;
    probes[name] = value;
  }
  const std::string digest = SecretDigest(req.lease_token());
  return Ingest("report metrics", req.run_id(), [&](pqxx::work& tx) -> absl::StatusOr<int> {
    // The fence is an UPDATE of the run row, so a concurrent re-lease (which deletes points
    // past the resume step) waits for this batch to commit, then deletes what it must.
    pqxx::result rr = pg::Exec(tx, "report_metrics", req.run_id(), req.attempt(), digest, has_train,
                               train, has_val, val, has_logit, logit, max_step,
                               pg::TextArray(names), pg::Int64Array(steps), pg::DoubleArray(values),
                               pg::DoubleArray(times), probes.dump());
    const pqxx::row row = rr[0];
    if (row[0].as<int64_t>() == 0) {
      // Refused: a step past the run's last one (from the lease holder), else the fence.
      pqxx::result held =
          pg::Exec(tx, "report_metrics_total_steps", req.run_id(), req.attempt(), digest);
      if (held.empty()) return FenceError(tx, req.run_id(), req.attempt());
      const int64_t total = held[0][0].as<int64_t>();
      for (int i = 0; i < req.points_size(); ++i) {
        if (req.points(i).step() > total) {
          return absl::InvalidArgumentError(absl::StrCat(
              "points[", i, "]: step ", req.points(i).step(), " is beyond the run's last step ",
              total, " (the trainer reports steps 0..", total, ")"));
        }
      }
      return FenceError(tx, req.run_id(), req.attempt());
    }
    return static_cast<int>(row[1].as<int64_t>());
  });
}

absl::StatusOr<int> IngestStore::ReportLogs(const v1::LogReportRequest& req) {
  std::vector<int64_t> steps;
  std::vector<double> times;
  std::vector<std::string> lines;
  for (const auto& l : req.lines()) {
    steps.push_back(l.step());
    times.push_back(l.time());
    lines.push_back(l.text());
  }
  const std::string digest = SecretDigest(req.lease_token());
  return Ingest("report logs", req.run_id(), [&](pqxx::work& tx) -> absl::StatusOr<int> {
    // FOR SHARE: a concurrent re-lease or Complete waits for these lines to commit.
    pqxx::result r = pg::Exec(tx, "report_logs", req.run_id(), req.attempt(), digest,
                              pg::Int64Array(steps), pg::DoubleArray(times), pg::TextArray(lines));
    if (r[0][0].as<int64_t>() == 0) return FenceError(tx, req.run_id(), req.attempt());
    pg::Exec(tx, "report_logs_trim", req.run_id(), kMaxLogLinesPerRun - 1);
    return static_cast<int>(r[0][1].as<int64_t>());
  });
}

}  // namespace ablate::server
