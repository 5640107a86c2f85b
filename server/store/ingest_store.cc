// The fenced bulk writes of a running attempt: ReportMetrics (batched, binary COPY over libpq)
// and ReportLogs.
#include "server/store/ingest_store.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/metric_names.h"
#include "common/util/sha256.h"
#include "nlohmann/json.hpp"
#include "server/store/pg_codec.h"
#include "server/store/run_transitions.h"
#include "server/store/statements.h"
#include "server/store/stats_store.h"

namespace ablate::server {

struct IngestStore::Pending {
  const v1::ReportMetricsRequest* request = nullptr;
  std::string digest;  // of the lease token
  bool has_train = false, has_val = false, has_logit = false;
  double train = 0, val = 0, logit = 0;
  int64_t max_step = 0;
  std::string probes;                          // a JSON object
  std::vector<const v1::MetricPoint*> points;  // one per (name, step): the request's last
  // Set by the writer.
  bool fenced = false;
  absl::Status status;
  std::promise<void> done;
};

namespace {

constexpr std::string_view kWhat = "report metrics";

using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;

// What went wrong with a batch, and what may be done about it.
struct Failure {
  absl::Status status;
  bool retry = false;   // nothing was committed: the batch may run again
  bool broken = false;  // the connection must be dropped
};

// Big-endian, as COPY's binary format (and the network) wants.
template <typename T>
void AppendBig(std::string* out, T value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  char bytes[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) {
    bytes[i] = static_cast<char>(bits >> (8 * (sizeof(T) - 1 - i)));
  }
  out->append(bytes, sizeof(T));
}

template <typename T>
void AppendField(std::string* out, T value) {
  AppendBig<int32_t>(out, sizeof(T));
  AppendBig<T>(out, value);
}

std::string BoolArray(const std::vector<bool>& values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i)
    absl::StrAppend(&out, i ? "," : "", values[i] ? "t" : "f");
  return out + "}";
}

}  // namespace

// One libpq connection and the transaction that writes a batch on it. libpq, not libpqxx: the
// bulk path needs COPY in binary format, which libpqxx does not offer, and nothing here throws.
class IngestStore::Writer {
 public:
  explicit Writer(std::string url) : url_(std::move(url)) {}
  ~Writer() {
    if (conn_ != nullptr) PQfinish(conn_);
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Writes `batch` as one transaction, retried while nothing can have been committed; sets each
  // request's `fenced`, and `status` for every request when the batch failed.
  void Write(const std::vector<Pending*>& batch) {
    constexpr int kAttempts = 4;
    Failure failure;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      failure = Try(batch);
      if (failure.status.ok()) return;
      if (failure.broken) Drop();
      if (!failure.retry) break;
    }
    for (Pending* p : batch) {
      p->fenced = false;
      p->status = failure.status;
    }
  }

 private:
  Failure Try(const std::vector<Pending*>& batch) {
    for (Pending* p : batch) p->fenced = false;
    if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
      Drop();
      conn_ = PQconnectdb(url_.c_str());
      if (PQstatus(conn_) != CONNECTION_OK) {
        return Lost(PQerrorMessage(conn_), /*committing=*/false);
      }
    }
    if (auto f = Command("BEGIN"); !f.status.ok()) return f;
    Failure f = Body(batch);
    if (!f.status.ok()) {
      if (!f.broken) Command("ROLLBACK");
      return f;
    }
    Result r(PQexec(conn_, "COMMIT"), PQclear);
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) {
      // The commit may or may not have happened: retrying could not double-apply (points are
      // keyed, the latest_* columns idempotent), but the caller hears UNAVAILABLE and retries.
      return Lost(PQerrorMessage(conn_), /*committing=*/true);
    }
    return {};
  }

  // The fence, then the points: COPY, or the upsert when the COPY meets a stored point.
  Failure Body(const std::vector<Pending*>& batch) {
    std::vector<int64_t> ids, max_steps;
    std::vector<int64_t> attempts;
    std::vector<std::string> digests, probes;
    std::vector<bool> has_train, has_val, has_logit;
    std::vector<double> train, val, logit;
    for (const Pending* p : batch) {
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
    }
    Result fence(nullptr, PQclear);
    if (auto f = Params("ingest_fence",
                        {pg::Int64Array(ids), pg::Int64Array(attempts), pg::TextArray(digests),
                         BoolArray(has_train), pg::DoubleArray(train), BoolArray(has_val),
                         pg::DoubleArray(val), BoolArray(has_logit), pg::DoubleArray(logit),
                         pg::Int64Array(max_steps), pg::TextArray(probes)},
                        &fence);
        !f.status.ok()) {
      return f;
    }
    std::map<int64_t, int64_t> seq_of;  // run -> the sequence number of its points
    for (int i = 0; i < PQntuples(fence.get()); ++i) {
      seq_of[std::stoll(PQgetvalue(fence.get(), i, 0))] = std::stoll(PQgetvalue(fence.get(), i, 1));
    }
    std::vector<const Pending*> fenced;
    for (Pending* p : batch) {
      p->fenced = seq_of.contains(p->request->run_id());
      if (p->fenced) fenced.push_back(p);
    }
    if (fenced.empty()) return {};
    if (auto f = Command("SAVEPOINT points"); !f.status.ok()) return f;
    Failure copied = Copy(fenced, seq_of);
    if (copied.status.ok() || copied.broken ||
        copied.status.code() != absl::StatusCode::kAlreadyExists) {
      return copied;
    }
    if (auto f = Command("ROLLBACK TO SAVEPOINT points"); !f.status.ok()) return f;
    return Upsert(fenced, seq_of);
  }

  Failure Copy(const std::vector<const Pending*>& fenced,
               const std::map<int64_t, int64_t>& seq_of) {
    std::string data("PGCOPY\n\377\r\n\0", 11);
    AppendBig<int32_t>(&data, 0);  // flags
    AppendBig<int32_t>(&data, 0);  // header extension
    for (const Pending* p : fenced) {
      const int64_t run = p->request->run_id(), seq = seq_of.at(run);
      for (const v1::MetricPoint* point : p->points) {
        AppendBig<int16_t>(&data, 6);
        AppendField<int64_t>(&data, run);
        AppendBig<int32_t>(&data, static_cast<int32_t>(point->name().size()));
        data.append(point->name());
        AppendField<int64_t>(&data, point->step());
        AppendField<double>(&data, point->value());
        AppendField<double>(&data, point->time());
        AppendField<int64_t>(&data, seq);
      }
    }
    AppendBig<int16_t>(&data, -1);
    constexpr sql::Name kCopy("ingest_copy");
    Result start(PQexec(conn_, std::string(kCopy.text()).c_str()), PQclear);
    if (PQresultStatus(start.get()) != PGRES_COPY_IN) return Error(start.get());
    constexpr size_t kChunk = 1 << 18;
    for (size_t at = 0; at < data.size(); at += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, data.size() - at));
      if (PQputCopyData(conn_, data.data() + at, n) != 1) {
        return Lost(PQerrorMessage(conn_), false);
      }
    }
    if (PQputCopyEnd(conn_, nullptr) != 1) return Lost(PQerrorMessage(conn_), false);
    Failure out;
    bool first = true;
    while (PGresult* raw = PQgetResult(conn_)) {
      Result r(raw, PQclear);
      if (first && PQresultStatus(raw) != PGRES_COMMAND_OK) out = Error(raw);
      first = false;
    }
    if (out.status.ok()) sql::MarkExecuted(kCopy.index());
    return out;
  }

  Failure Upsert(const std::vector<const Pending*>& fenced,
                 const std::map<int64_t, int64_t>& seq_of) {
    std::vector<int64_t> runs, steps, seqs;
    std::vector<std::string> names;
    std::vector<double> values, times;
    for (const Pending* p : fenced) {
      for (const v1::MetricPoint* point : p->points) {
        runs.push_back(p->request->run_id());
        names.push_back(point->name());
        steps.push_back(point->step());
        values.push_back(point->value());
        times.push_back(point->time());
        seqs.push_back(seq_of.at(p->request->run_id()));
      }
    }
    Result r(nullptr, PQclear);
    return Params("ingest_upsert",
                  {pg::Int64Array(runs), pg::TextArray(names), pg::Int64Array(steps),
                   pg::DoubleArray(values), pg::DoubleArray(times), pg::Int64Array(seqs)},
                  &r);
  }

  // Runs statement `name` (server/store/sql) with text parameters.
  Failure Params(sql::Name name, const std::vector<std::string>& params, Result* out) {
    std::vector<const char*> values;
    for (const auto& p : params) values.push_back(p.c_str());
    out->reset(PQexecParams(conn_, std::string(name.text()).c_str(),
                            static_cast<int>(values.size()), nullptr, values.data(), nullptr,
                            nullptr, 0));
    const ExecStatusType st = PQresultStatus(out->get());
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return Error(out->get());
    sql::MarkExecuted(name.index());
    return {};
  }

  Failure Command(const char* command) {
    Result r(PQexec(conn_, command), PQclear);
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) return Error(r.get());
    return {};
  }

  // The failure a statement's result (or its absence) says, as Db::Convert maps pqxx's.
  Failure Error(const PGresult* r) {
    if (r == nullptr || PQstatus(conn_) != CONNECTION_OK) {
      return Lost(PQerrorMessage(conn_), false);
    }
    const char* state_field = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const std::string state = state_field != nullptr ? state_field : "";
    const std::string detail = absl::StrCat(PQresultErrorMessage(r), " [sqlstate ", state, "]");
    const std::string what(kWhat);
    Failure f;
    if (state.starts_with("08") || state.starts_with("57")) {
      f.broken = f.retry = true;
      f.status =
          HiddenDatabaseError(absl::StatusCode::kUnavailable, what, "database unavailable", detail);
    } else if (state == "40001" || state == "40P01") {
      f.retry = true;
      f.status =
          HiddenDatabaseError(absl::StatusCode::kUnavailable, what, "transaction conflict", detail);
    } else if (state == "23505") {
      // Expected when a re-sent report meets its own points: the caller upserts instead, so
      // this is no error worth a log line.
      f.status = absl::AlreadyExistsError("points already stored");
    } else {
      f.status =
          HiddenDatabaseError(absl::StatusCode::kInternal, what, "internal database error", detail);
    }
    return f;
  }

  Failure Lost(const char* message, bool committing) {
    Failure f;
    f.broken = true;
    f.retry = !committing;
    f.status = HiddenDatabaseError(absl::StatusCode::kUnavailable, std::string(kWhat),
                                   committing ? "commit outcome unknown" : "database unavailable",
                                   message != nullptr ? message : "");
    return f;
  }

  void Drop() {
    if (conn_ != nullptr) PQfinish(conn_);
    conn_ = nullptr;
  }

  std::string url_;
  PGconn* conn_ = nullptr;
};

IngestStore::IngestStore(Db* db, NotifyBatcher* notes, int writers) : db_(db), notes_(notes) {
  for (int i = 0; i < std::max(1, writers); ++i) {
    writers_.push_back(std::make_unique<Writer>(db->url()));
  }
  for (auto& writer : writers_) {
    threads_.emplace_back([this, w = writer.get()] {
      for (;;) {
        std::vector<Pending*> batch = NextBatch();
        if (batch.empty()) return;
        w->Write(batch);
        Finish(batch);
      }
    });
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
  auto latest_of = [&](const char* name, bool* has, double* value) {
    auto it = newest.find(name);
    *has = it != newest.end();
    *value = *has ? it->second.second : 0.0;
  };
  latest_of(metric::kTrainLoss, &pending.has_train, &pending.train);
  latest_of(metric::kValLoss, &pending.has_val, &pending.val);
  latest_of(metric::kMaxAttnLogit, &pending.has_logit, &pending.logit);
  // The aggregate probes a dashboard shows per run; per-layer ones stay in metric_points.
  nlohmann::json probes = nlohmann::json::object();
  for (const char* name : kExportedProbes) {
    bool has = false;
    double value = 0;
    latest_of(name, &has, &value);
    if (has && std::isfinite(value)) probes[name] = value;
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
  if (!pending.fenced) return Refused(req);
  // After commit: docs/architecture.md, "Why two kinds of NOTIFY".
  Notices notices;
  notices.Run(req.run_id());
  notices.SendWatchers(notes_);
  return static_cast<int>(pending.points.size());
}

absl::Status IngestStore::Refused(const v1::ReportMetricsRequest& req) {
  const std::string digest = SecretDigest(req.lease_token());
  return db_
      ->Tx<int>("report metrics",
                [&](pqxx::work& tx) -> absl::StatusOr<int> {
                  pqxx::result held = pg::Exec(tx, "report_metrics_total_steps", req.run_id(),
                                               req.attempt(), digest);
                  if (held.empty()) return FenceError(tx, req.run_id(), req.attempt());
                  const int64_t total = held[0][0].as<int64_t>();
                  for (int i = 0; i < req.points_size(); ++i) {
                    if (req.points(i).step() > total) {
                      return absl::InvalidArgumentError(
                          absl::StrCat("points[", i, "]: step ", req.points(i).step(),
                                       " is beyond the run's last step ", total,
                                       " (the trainer reports steps 0..", total, ")"));
                    }
                  }
                  // Every step within the run: the batch's fence refused the lease itself.
                  return FenceError(tx, req.run_id(), req.attempt());
                })
      .status();
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
