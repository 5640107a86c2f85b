// The fenced bulk writes of a running attempt: ReportMetrics (batched; the fence, a binary COPY
// (copy.h) and, when a re-sent report meets stored points, an upsert, in one Db transaction) and
// ReportLogs.
#include "server/store/ingest_store.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/run/metric_names.h"
#include "common/util/sha256.h"
#include "nlohmann/json.hpp"
#include "server/store/copy.h"
#include "server/store/pg_codec.h"
#include "server/store/rows.h"
#include "server/store/run_transitions.h"
#include "server/store/statements.h"
#include "server/store/stats_store.h"

namespace ablate::server {

struct IngestStore::Pending {
  const v1::ReportMetricsRequest* request = nullptr;
  std::string digest;  // of the lease token
  bool has_train = false, has_val = false, has_logit = false;
  double train = 0, val = 0, logit = 0;
  int64_t train_step = -1, val_step = -1, logit_step = -1;  // where each was measured
  int64_t max_step = 0;
  std::string probes;                          // a JSON object
  int64_t probes_step = -1;                    // the newest step among them
  std::vector<const v1::MetricPoint*> points;  // one per (name, step): the request's last
  // Set by the writer: whether the batch's fence let the request's points in, and else (or when
  // the batch failed) why not; `over` when it was refused for a bound (written without it).
  bool accepted = false;
  bool over = false;
  absl::Status status;
  std::promise<void> done;
};

namespace {

const std::string kWhat = "report metrics";

std::string BoolArray(const std::vector<bool>& values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i)
    absl::StrAppend(&out, i ? "," : "", values[i] ? "t" : "f");
  return out + "}";
}

// The fence of a batch (ingest_fence.sql): sets each accepted request's run's latest_* columns
// and returns the sequence number of its points, by run.
std::map<int64_t, int64_t> Fence(pqxx::work& tx, const std::vector<IngestStore::Pending*>& batch) {
  std::vector<int64_t> ids, attempts, max_steps, train_steps, val_steps, logit_steps, probe_steps;
  std::vector<std::string> digests, probes;
  std::vector<bool> has_train, has_val, has_logit;
  std::vector<double> train, val, logit;
  for (const IngestStore::Pending* p : batch) {
    ids.push_back(p->request->run_id());
    attempts.push_back(p->request->attempt());
    digests.push_back(p->digest);
    has_train.push_back(p->has_train);
    train.push_back(p->train);
    has_val.push_back(p->has_val);
    val.push_back(p->val);
    has_logit.push_back(p->has_logit);
    logit.push_back(p->logit);
    max_steps.push_back(p->max_step);
    probes.push_back(p->probes);
    train_steps.push_back(p->train_step);
    val_steps.push_back(p->val_step);
    logit_steps.push_back(p->logit_step);
    probe_steps.push_back(p->probes_step);
  }
  const pqxx::result fenced = pg::Exec(
      tx, "ingest_fence", pg::Int64Array(ids), pg::Int64Array(attempts), pg::TextArray(digests),
      BoolArray(has_train), pg::DoubleArray(train), BoolArray(has_val), pg::DoubleArray(val),
      BoolArray(has_logit), pg::DoubleArray(logit), pg::Int64Array(max_steps),
      pg::TextArray(probes), pg::Int64Array(train_steps), pg::Int64Array(val_steps),
      pg::Int64Array(logit_steps), pg::Int64Array(probe_steps));
  std::map<int64_t, int64_t> seq_of;
  const pg::ByName col(fenced);
  for (const auto& row : fenced) {
    seq_of[col(row, "run_id").as<int64_t>()] = col(row, "seq").as<int64_t>();
  }
  return seq_of;
}

// Why the fence refused `req`, worded in the batch's transaction: a point past the run's last
// step (for the lease holder), else the fence's own error.
absl::Status Refusal(pqxx::work& tx, const v1::ReportMetricsRequest& req,
                     const std::string& digest) {
  const pqxx::result held =
      pg::Exec(tx, "report_metrics_total_steps", req.run_id(), req.attempt(), digest);
  if (held.empty()) return FenceError(tx, req.run_id(), req.attempt());
  const int64_t total = held[0]["total_steps"].as<int64_t>();
  for (int i = 0; i < req.points_size(); ++i) {
    if (req.points(i).step() > total) {
      return absl::InvalidArgumentError(absl::StrCat(
          "points[", i, "]: step ", req.points(i).step(), " is beyond the run's last step ", total,
          " (the trainer reports steps 0..", total, ")"));
    }
  }
  // Every step within the run: the batch's fence refused the lease itself.
  return FenceError(tx, req.run_id(), req.attempt());
}

// The accepted requests' points as COPY rows (ingest_copy.sql's columns).
std::string CopyRows(const std::vector<const IngestStore::Pending*>& accepted,
                     const std::map<int64_t, int64_t>& seq_of) {
  pg::CopyRows rows;
  for (const IngestStore::Pending* p : accepted) {
    const int64_t run = p->request->run_id(), seq = seq_of.at(run);
    for (const v1::MetricPoint* point : p->points) {
      rows.Row(6);
      rows.Int64(run);
      rows.Text(point->name());
      rows.Int64(point->step());
      rows.Double(point->value());
      rows.Double(point->time());
      rows.Int64(seq);
    }
  }
  return std::move(rows).Finish();
}

// The accepted requests' points upserted (ingest_upsert.sql), for a batch whose COPY met points
// already stored.
void Upsert(pqxx::work& tx, const std::vector<const IngestStore::Pending*>& accepted,
            const std::map<int64_t, int64_t>& seq_of) {
  std::vector<int64_t> runs, steps, seqs;
  std::vector<std::string> names;
  std::vector<double> values, times;
  for (const IngestStore::Pending* p : accepted) {
    for (const v1::MetricPoint* point : p->points) {
      runs.push_back(p->request->run_id());
      names.push_back(point->name());
      steps.push_back(point->step());
      values.push_back(point->value());
      times.push_back(point->time());
      seqs.push_back(seq_of.at(p->request->run_id()));
    }
  }
  pg::Exec(tx, "ingest_upsert", pg::Int64Array(runs), pg::TextArray(names), pg::Int64Array(steps),
           pg::DoubleArray(values), pg::DoubleArray(times), pg::Int64Array(seqs));
}

// Per (run, name) of the accepted requests, the points each brings: what the bounds are checked
// against (ingest_series_check.sql) and the counts add (ingest_series_add.sql).
struct Series {
  std::vector<int64_t> runs;
  std::vector<std::string> names;
  std::vector<int64_t> points;
};

Series CountSeries(const std::vector<const IngestStore::Pending*>& accepted) {
  std::map<std::pair<int64_t, std::string_view>, int64_t> count;
  for (const IngestStore::Pending* p : accepted) {
    for (const v1::MetricPoint* point : p->points) ++count[{p->request->run_id(), point->name()}];
  }
  Series out;
  for (const auto& [key, n] : count) {
    out.runs.push_back(key.first);
    out.names.emplace_back(key.second);
    out.points.push_back(n);
  }
  return out;
}

// Why a report was refused for a bound: `points` in all, `names` and the largest series `top`
// the run would hold with it.
absl::Status OverBound(int64_t run, int64_t points, int64_t names, int64_t top,
                       const IngestLimits& limits) {
  std::string why;
  if (names > limits.names_per_run) {
    why = absl::StrCat(names, " metric names, over --max-metric-names ", limits.names_per_run);
  } else if (top > limits.points_per_name) {
    why = absl::StrCat(top, " points under one name, over --max-points-per-name ",
                       limits.points_per_name);
  } else {
    why = absl::StrCat(points, " points, over --max-points-per-run ", limits.points_per_run);
  }
  return absl::OutOfRangeError(absl::StrCat("points: with this report run ", run, " would hold ",
                                            why, " (the server keeps no more of its points)"));
}

}  // namespace

IngestStore::IngestStore(Db* db, NotifyBatcher* notes, IngestLimits limits, int writers)
    : db_(db), notes_(notes), limits_(limits), copy_db_(db->url(), std::max(1, writers)) {
  for (int i = 0; i < std::max(1, writers); ++i) {
    threads_.emplace_back([this] {
      for (;;) {
        std::vector<Pending*> batch = NextBatch();
        if (batch.empty()) return;
        Write(batch);
        Finish(batch);
      }
    });
  }
}

void IngestStore::Write(const std::vector<Pending*>& all) {
  // The points go by COPY. One that meets a stored point (a worker re-sending a report whose
  // answer it lost: rare) aborts the transaction, and the batch is written again with an upsert
  // instead. A request that would take its run past a bound (rarer) also aborts it, and the
  // batch is written again without that request. No savepoint: a batch is six round trips
  // (BEGIN, fence, check, COPY, count, COMMIT).
  bool met_stored = false, met_bound = false;
  std::vector<Pending*> batch = all;
  auto write = [&](pqxx::work& tx) -> absl::StatusOr<int> {
    met_bound = false;
    const std::map<int64_t, int64_t> seq_of = Fence(tx, batch);
    std::vector<const Pending*> accepted;
    for (Pending* p : batch) {
      p->accepted = seq_of.contains(p->request->run_id());
      p->status = p->accepted ? absl::OkStatus() : Refusal(tx, *p->request, p->digest);
      if (p->accepted) accepted.push_back(p);
    }
    if (accepted.empty()) return 0;
    const Series series = CountSeries(accepted);
    // The fence holds the runs' rows, so their counts cannot move under this check. It counts
    // every point of the batch as new; a run it finds over a bound is checked again counting
    // only the points not stored yet (a re-sent report adds none), by an index probe per point,
    // which only those runs pay.
    pqxx::result over =
        pg::Exec(tx, "ingest_series_check", pg::Int64Array(series.runs),
                 pg::TextArray(series.names), pg::Int64Array(series.points), limits_.points_per_run,
                 limits_.points_per_name, limits_.names_per_run);
    if (!over.empty()) {
      std::set<int64_t> suspects;
      for (const auto& row : over) suspects.insert(row["run_id"].as<int64_t>());
      std::vector<int64_t> runs, steps;
      std::vector<std::string> names;
      for (const Pending* p : accepted) {
        if (!suspects.contains(p->request->run_id())) continue;
        for (const v1::MetricPoint* point : p->points) {
          runs.push_back(p->request->run_id());
          names.push_back(point->name());
          steps.push_back(point->step());
        }
      }
      over = pg::Exec(tx, "ingest_series_check_new", pg::Int64Array(runs), pg::TextArray(names),
                      pg::Int64Array(steps), limits_.points_per_run, limits_.points_per_name,
                      limits_.names_per_run);
    }
    if (!over.empty()) {
      const pg::ByName col(over);
      for (const auto& row : over) {
        const int64_t run = col(row, "run_id").as<int64_t>();
        for (Pending* p : batch) {
          if (p->request->run_id() != run) continue;
          p->over = true;
          p->accepted = false;
          p->status =
              OverBound(run, col(row, "points").as<int64_t>(), col(row, "names").as<int64_t>(),
                        col(row, "top").as<int64_t>(), limits_);
        }
      }
      met_bound = true;
      return absl::AbortedError("over a bound");  // rolled back, written again without them
    }
    if (met_stored) {
      Upsert(tx, accepted, seq_of);
      // Some of the points were stored already: count the runs' series again.
      std::vector<int64_t> runs;
      for (const Pending* p : accepted) runs.push_back(p->request->run_id());
      pg::Exec(tx, "metric_series_clear", pg::Int64Array(runs));
      pg::Exec(tx, "metric_series_recount", pg::Int64Array(runs));
      return 0;
    }
    int copied = 0;
    try {
      copied = static_cast<int>(pg::Copy(tx, "ingest_copy", CopyRows(accepted, seq_of)));
    } catch (const pqxx::unique_violation&) {
      met_stored = true;
      return absl::AlreadyExistsError("points already stored");  // rolled back, written again
    }
    pg::Exec(tx, "ingest_series_add", pg::Int64Array(series.runs), pg::TextArray(series.names),
             pg::Int64Array(series.points));
    return copied;
  };
  absl::StatusOr<int> written = 0;
  // At most: once, once more with the upsert, once more without the requests over a bound.
  for (int tries = 0; tries < 3; ++tries) {
    written = copy_db_.Tx<int>(kWhat, write);
    if (met_bound) {
      std::erase_if(batch, [](const Pending* p) { return p->over; });
      if (batch.empty()) return;
      continue;
    }
    if (!written.ok() && met_stored && absl::IsAlreadyExists(written.status())) continue;
    break;
  }
  if (written.ok()) return;
  for (Pending* p : batch) {
    p->accepted = false;
    p->status = written.status();
  }
}

IngestStore::~IngestStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

std::vector<IngestStore::Pending*> IngestStore::NextBatch() {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<Pending*> batch;
  for (;;) {
    int points = 0;
    std::set<int64_t> runs;
    for (auto it = queue_.begin(); it != queue_.end();) {
      Pending* p = *it;
      const int64_t run = p->request->run_id();
      const int n = static_cast<int>(p->points.size());
      if (in_flight_.contains(run) || runs.contains(run) ||
          (!batch.empty() && points + n > kMaxIngestBatchPoints)) {
        ++it;
        continue;
      }
      batch.push_back(p);
      runs.insert(run);
      points += n;
      it = queue_.erase(it);
    }
    if (!batch.empty()) {
      in_flight_.insert(runs.begin(), runs.end());
      return batch;
    }
    if (stopping_ && queue_.empty()) return batch;
    cv_.wait(lock);
  }
}

void IngestStore::Finish(const std::vector<Pending*>& batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Pending* p : batch) in_flight_.erase(p->request->run_id());
  }
  // A request held back because its run was in this batch can go now.
  cv_.notify_all();
  for (Pending* p : batch) p->done.set_value();
}

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
  Pending pending;
  pending.request = &req;
  pending.digest = SecretDigest(req.lease_token());
  // One row per (name, step) in a batch: a report that repeats a key keeps its last value (what
  // a worker re-sending after a retry means).
  std::map<std::pair<std::string_view, int64_t>, const v1::MetricPoint*> latest;
  for (const auto& p : req.points()) latest[{p.name(), p.step()}] = &p;
  std::map<std::string_view, std::pair<int64_t, double>> newest;  // name -> (step, value)
  for (const auto& [key, p] : latest) {
    pending.points.push_back(p);
    pending.max_step = std::max(pending.max_step, p->step());
    auto it = newest.find(p->name());
    if (it == newest.end() || it->second.first <= p->step()) {
      newest[p->name()] = {p->step(), p->value()};
    }
  }
  // The newest value of `name` in the request and its step (the fence keeps it only if no newer
  // step set the column before).
  auto latest_of = [&](const char* name, bool* has, double* value, int64_t* step) {
    auto it = newest.find(name);
    *has = it != newest.end();
    *value = *has ? it->second.second : 0.0;
    *step = *has ? it->second.first : -1;
  };
  latest_of(metric::kTrainLoss, &pending.has_train, &pending.train, &pending.train_step);
  latest_of(metric::kValLoss, &pending.has_val, &pending.val, &pending.val_step);
  latest_of(metric::kMaxAttnLogit, &pending.has_logit, &pending.logit, &pending.logit_step);
  // The aggregate probes a dashboard shows per run; per-layer ones stay in metric_points.
  nlohmann::json probes = nlohmann::json::object();
  for (const char* name : kExportedProbes) {
    bool has = false;
    double value = 0;
    int64_t step = -1;
    latest_of(name, &has, &value, &step);
    if (has && std::isfinite(value)) {
      probes[name] = value;
      pending.probes_step = std::max(pending.probes_step, step);
    }
  }
  pending.probes = probes.dump();

  std::future<void> done = pending.done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("report metrics: the server is shutting down");
    queue_.push_back(&pending);
  }
  cv_.notify_one();
  done.wait();
  if (!pending.status.ok()) return pending.status;
  // After commit: docs/architecture.md, "Why two kinds of NOTIFY".
  Notices notices;
  notices.Run(req.run_id());
  notices.SendWatchers(notes_);
  return static_cast<int>(pending.points.size());
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
    if (r[0]["held"].as<int64_t>() == 0) return FenceError(tx, req.run_id(), req.attempt());
    pg::Exec(tx, "report_logs_trim", req.run_id(), kMaxLogLinesPerRun - 1);
    return static_cast<int>(r[0]["written"].as<int64_t>());
  });
}

}  // namespace ablate::server
