#include "server/store/queue_store.h"

#include <cmath>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/util/sha256.h"
#include "server/store/channels.h"
#include "server/store/pg_codec.h"
#include "server/store/refine_store.h"
#include "server/store/stats_store.h"

namespace ablate::server {
namespace {

// The error every fenced write returns; a worker that sees it stops the run. It is the same
// whether the attempt is stale, the lease token wrong or missing, or the run no longer leased:
// a caller probing someone else's run learns nothing about which part it got wrong.
absl::Status FenceError(pqxx::work& tx, int64_t run_id, int attempt) {
  pqxx::result r = pg::Exec(tx, "SELECT 1 FROM runs WHERE id = $1", run_id);
  if (r.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
  return absl::FailedPreconditionError(
      absl::StrCat("lease lost: run ", run_id, " attempt ", attempt,
                   " does not hold the run's lease (re-leased, released, expired, cancelled or "
                   "finished)"));
}

// What the runs row keeps of a lease token.
std::string TokenDigest(const std::string& lease_token) { return Sha256Hex(lease_token); }

// The fence every worker write passes: this attempt, this token, still leased or running.
constexpr char kFenced[] =
    "id = $1 AND attempt = $2 AND lease_token_sha256 = $3 AND state IN ('leased', 'running')";

void Notify(pqxx::work& tx, const char* channel, const std::string& payload) {
  pg::Exec(tx, "SELECT pg_notify($1, $2)", std::string(channel), payload);
}

}  // namespace

absl::StatusOr<int64_t> QueueStore::Register(const v1::WorkerInfo& info, int64_t token_id) {
  if (info.name().empty()) return absl::InvalidArgumentError("register: info.name is empty");
  const std::string& kind = info.device_kind();
  if (kind != "cpu" && kind != "cuda" && kind != "mps") {
    return absl::InvalidArgumentError(
        absl::StrCat("register: info.device_kind must be cpu, cuda or mps (got \"", kind, "\")"));
  }
  return db_->Tx<int64_t>("register", [&](pqxx::work& tx) -> absl::StatusOr<int64_t> {
    // Re-registering under the same name with the same token (a restarted daemon) keeps the id;
    // any run the old process held comes back through lease expiry, not here. Another token may
    // take the name only once its worker has been silent for a lease period: otherwise any
    // worker token could hijack a live worker's row (and its current run's bookkeeping).
    pqxx::result row = pg::Exec(
        tx,
        "INSERT INTO workers (name, device_kind, info, token_id) VALUES ($1, $2, $3::jsonb, $4) "
        "ON CONFLICT (name) DO UPDATE SET device_kind = excluded.device_kind, "
        "info = excluded.info, last_seen_at = now(), current_run_id = NULL, "
        "token_id = excluded.token_id "
        "WHERE workers.token_id IS NOT DISTINCT FROM excluded.token_id "
        "OR workers.last_seen_at <= now() - make_interval(secs => $5) RETURNING id",
        info.name(), kind, pg::ToJson(info), token_id, lease_seconds_);
    if (!row.empty()) return row[0][0].as<int64_t>();
    pqxx::row live = pg::Exec1(
        tx,
        "SELECT ceil(extract(epoch from last_seen_at + make_interval(secs => $2) - now())), "
        "to_char((last_seen_at + make_interval(secs => $2)) AT TIME ZONE 'UTC', "
        "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM workers WHERE name = $1",
        info.name(), lease_seconds_);
    return absl::AlreadyExistsError(absl::StrCat(
        "register: worker name \"", info.name(),
        "\" belongs to a live worker registered with another token; the name is free at ",
        live[1].as<std::string>(), " (in ", live[0].as<int64_t>(),
        " s) if that worker stays silent. Choose another --name, or use that worker's token"));
  });
}

absl::StatusOr<LeaseOutcome> QueueStore::Lease(int64_t worker_id) {
  // 256 bits: a worker token holder cannot guess another worker's lease.
  auto token = RandomHex(32);
  if (!token.ok()) return absl::InternalError(absl::StrCat("lease: ", token.status().message()));
  const std::string digest = TokenDigest(*token);
  auto out = db_->Tx<LeaseOutcome>("lease", [&](pqxx::work& tx) -> absl::StatusOr<LeaseOutcome> {
    // One statement, so the hot path is one round trip. Without a checkpoint the attempt starts
    // over and every earlier point goes (step > -1); with one, the points after its step go,
    // and the new attempt's series continues without gap or duplicate.
    pqxx::result lr = pg::ExecPrepared(
        tx, "lease",
        "WITH w AS (SELECT name, device_kind FROM workers WHERE id = $1), "
        "next AS ("
        "  SELECT id FROM runs WHERE state = 'queued' "
        "  AND device IN ('auto', (SELECT device_kind FROM w)) "
        "  ORDER BY priority DESC, sweep_id, order_index LIMIT 1 FOR UPDATE SKIP LOCKED), "
        "ck AS ("
        "  SELECT c.step, c.sha256, c.size_bytes FROM checkpoints c, next "
        "  WHERE c.run_id = next.id ORDER BY c.step DESC LIMIT 1), "
        "upd AS ("
        "  UPDATE runs r SET state = 'leased', attempt = r.attempt + 1, worker_id = $1, "
        "    lease_expires_at = now() + make_interval(secs => $2), "
        "    started_at = coalesce(r.started_at, now()), error = '', "
        "    step = coalesce((SELECT step FROM ck), 0), lease_token_sha256 = $3 "
        "  FROM next WHERE r.id = next.id "
        "  RETURNING r.id, r.sweep_id, r.attempt, r.lease_expires_at), "
        "d AS (DELETE FROM metric_points WHERE run_id = (SELECT id FROM upd) "
        "  AND step > coalesce((SELECT step FROM ck), -1)), "
        "e AS (INSERT INTO run_events (run_id, kind, attempt, worker, message) "
        "  SELECT id, 'leased', attempt, (SELECT name FROM w), "
        "    coalesce('resume from step ' || (SELECT step FROM ck), '') FROM upd), "
        "wu AS (UPDATE workers SET last_seen_at = now(), "
        "  current_run_id = (SELECT id FROM upd) WHERE id = $1) "
        "SELECT (SELECT device_kind FROM w), upd.id, upd.sweep_id, upd.attempt, "
        "  extract(epoch from upd.lease_expires_at), "
        "  (SELECT spec::text FROM run_specs WHERE run_id = upd.id), ck.step, ck.sha256, "
        "  ck.size_bytes "
        "FROM (SELECT 1) one LEFT JOIN upd ON true LEFT JOIN ck ON true",
        worker_id, lease_seconds_, digest);
    const pqxx::row row = lr[0];
    if (row[0].is_null()) {
      return absl::NotFoundError(
          absl::StrCat("worker ", worker_id, " is not registered (call Register first)"));
    }
    LeaseOutcome result;
    result.device_kind = row[0].as<std::string>();
    if (row[1].is_null()) return result;
    v1::LeaseResponse out;
    out.set_has_run(true);
    const int64_t run_id = row[1].as<int64_t>();
    absl::Status parsed = pg::FromJson(row[5].as<std::string>(), out.mutable_spec());
    if (!parsed.ok()) return parsed;
    out.mutable_spec()->set_run_id(run_id);
    out.mutable_spec()->set_sweep_id(row[2].as<int64_t>());
    out.mutable_lease()->set_run_id(run_id);
    out.mutable_lease()->set_attempt(row[3].as<int>());
    out.mutable_lease()->set_expires_at(row[4].as<double>());
    out.mutable_lease()->set_token(*token);
    if (!row[6].is_null()) {
      out.mutable_resume_from()->set_step(row[6].as<int64_t>());
      out.mutable_resume_from()->set_sha256(row[7].as<std::string>());
      out.mutable_resume_from()->set_size_bytes(row[8].as<int64_t>());
    }
    result.lease = std::move(out);
    return result;
  });
  if (out.ok() && out->lease.has_value()) {
    notes_->Add(channels::kSweep, absl::StrCat(out->lease->spec().sweep_id()));
  }
  return out;
}

absl::StatusOr<v1::HeartbeatResponse> QueueStore::Heartbeat(const v1::HeartbeatRequest& req) {
  return db_->Tx<v1::HeartbeatResponse>(
      "heartbeat", [&](pqxx::work& tx) -> absl::StatusOr<v1::HeartbeatResponse> {
        pqxx::result w =
            pg::Exec(tx,
                     "UPDATE workers SET last_seen_at = now(), current_run_id = nullif($2, 0) "
                     "WHERE id = $1 RETURNING name",
                     req.worker_id(), req.run_id());
        if (w.empty()) {
          return absl::NotFoundError(
              absl::StrCat("worker ", req.worker_id(), " is not registered (call Register first)"));
        }
        v1::HeartbeatResponse out;
        if (req.run_id() == 0) return out;
        pqxx::result r = pg::Exec(
            tx, "SELECT state, attempt, lease_token_sha256 = $2 FROM runs WHERE id = $1 FOR UPDATE",
            req.run_id(), TokenDigest(req.lease_token()));
        if (r.empty()) {
          return absl::NotFoundError(absl::StrCat("run ", req.run_id(), " does not exist"));
        }
        const std::string state = r[0][0].as<std::string>();
        const int attempt = r[0][1].as<int>();
        const bool holder = attempt == req.attempt() && r[0][2].as<bool>();
        if (!holder || (state != "leased" && state != "running")) {
          // Cancel is only news for the lease holder that was running when it was cancelled;
          // any other mismatch means this attempt was replaced (or never held the lease).
          if (holder && state == "cancelled") {
            out.set_cancel(true);
          } else {
            out.set_lease_lost(true);
          }
          return out;
        }
        pqxx::row u = pg::Exec1(
            tx,
            "UPDATE runs SET state = 'running', "
            "  lease_expires_at = now() + make_interval(secs => $2), step = greatest(step, $3), "
            "  tokens_per_second = $4 "
            "WHERE id = $1 RETURNING extract(epoch from lease_expires_at), sweep_id",
            req.run_id(), lease_seconds_, req.step(), req.tokens_per_second());
        out.set_expires_at(u[0].as<double>());
        if (state == "leased") {
          pg::Exec(
              tx,
              "INSERT INTO run_events (run_id, kind, attempt, worker) VALUES ($1, 'started', $2, "
              "$3)",
              req.run_id(), attempt, w[0][0].as<std::string>());
          notes_->Add(channels::kSweep, absl::StrCat(u[1].as<int64_t>()));
        }
        return out;
      });
}

absl::StatusOr<int> QueueStore::ReportMetrics(const v1::ReportMetricsRequest& req) {
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
  auto [has_train, train] = latest_of("train_loss");
  auto [has_val, val] = latest_of("val_loss");
  auto [has_logit, logit] = latest_of("max_attn_logit");
  // The aggregate probes a dashboard shows per run; per-layer ones stay in metric_points.
  std::string probes = "{";
  for (const char* name : kExportedProbes) {
    auto [has, value] = latest_of(name);
    if (!has || !std::isfinite(value)) continue;
    if (probes.size() > 1) probes += ",";
    absl::StrAppend(&probes, "\"", name, "\":", absl::StrFormat("%.17g", value));
  }
  probes += "}";
  const std::string digest = TokenDigest(req.lease_token());
  auto stored = db_->Tx<int>("report metrics", [&](pqxx::work& tx) -> absl::StatusOr<int> {
    // The fence is an UPDATE of the run row, so a concurrent re-lease (which deletes points past
    // the resume step) waits for this batch to commit, then deletes what it must.
    pqxx::result rr = pg::ExecPrepared(
        tx, "report_metrics",
        "WITH fence AS ("
        "  UPDATE runs SET "
        "    latest_train_loss = CASE WHEN $3 THEN $4::float8 ELSE latest_train_loss END, "
        "    latest_val_loss = CASE WHEN $5 THEN $6::float8 ELSE latest_val_loss END, "
        "    latest_max_attn_logit = CASE WHEN $7 THEN $8::float8 ELSE latest_max_attn_logit END, "
        "    step = greatest(step, $9), "
        "    latest_probes = latest_probes || $14::jsonb "
        "  WHERE id = $1 AND attempt = $2 AND lease_token_sha256 = $15 "
        "    AND state IN ('leased', 'running') AND total_steps >= $9 "
        "  RETURNING id, nextval('metric_points_seq') AS seq), "
        "ins AS ("
        "  INSERT INTO metric_points (run_id, name, step, value, time, seq) "
        "  SELECT fence.id, p.name, p.step, p.value, p.time, fence.seq FROM fence, "
        "    unnest($10::text[], $11::bigint[], $12::float8[], $13::float8[]) "
        "      AS p(name, step, value, time) "
        "  ON CONFLICT (run_id, name, step) DO UPDATE SET value = excluded.value, "
        "    time = excluded.time, seq = excluded.seq RETURNING 1) "
        "SELECT (SELECT count(*) FROM fence), (SELECT count(*) FROM ins)",
        req.run_id(), req.attempt(), has_train, train, has_val, val, has_logit, logit, max_step,
        pg::TextArray(names), pg::Int64Array(steps), pg::DoubleArray(values),
        pg::DoubleArray(times), probes, digest);
    const pqxx::row row = rr[0];
    if (row[0].as<int64_t>() == 0) {
      // Refused: a step past the run's last one (from the lease holder), else the fence.
      pqxx::result held = pg::Exec(tx, absl::StrCat("SELECT total_steps FROM runs WHERE ", kFenced),
                                   req.run_id(), req.attempt(), digest);
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
  if (stored.ok()) notes_->Add(channels::kRun, absl::StrCat(req.run_id()));
  return stored;
}

absl::Status QueueStore::CheckFence(int64_t run_id, int attempt, const std::string& lease_token) {
  return db_
      ->Tx<bool>("check lease",
                 [&](pqxx::work& tx) -> absl::StatusOr<bool> {
                   pqxx::result r = pg::Exec(tx, absl::StrCat("SELECT 1 FROM runs WHERE ", kFenced),
                                             run_id, attempt, TokenDigest(lease_token));
                   if (r.empty()) return FenceError(tx, run_id, attempt);
                   return true;
                 })
      .status();
}

absl::Status QueueStore::RecordCheckpoint(int64_t run_id, int attempt,
                                          const std::string& lease_token,
                                          const v1::CheckpointRef& ref,
                                          const std::function<absl::Status()>& store_blob) {
  return db_
      ->Tx<bool>("record checkpoint",
                 [&](pqxx::work& tx) -> absl::StatusOr<bool> {
                   pqxx::result r = pg::Exec(
                       tx, absl::StrCat("SELECT 1 FROM runs WHERE ", kFenced, " FOR SHARE"), run_id,
                       attempt, TokenDigest(lease_token));
                   if (r.empty()) return FenceError(tx, run_id, attempt);
                   // The row lock holds off a re-lease until this commits; a failed move rolls
                   // back.
                   if (auto s = store_blob(); !s.ok()) return s;
                   pg::Exec(tx,
                            "INSERT INTO checkpoints (run_id, step, sha256, size_bytes, attempt) "
                            "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, step) DO UPDATE SET "
                            "sha256 = excluded.sha256, size_bytes = excluded.size_bytes, "
                            "attempt = excluded.attempt, created_at = now()",
                            run_id, ref.step(), ref.sha256(), ref.size_bytes(), attempt);
                   return true;
                 })
      .status();
}

absl::StatusOr<v1::CheckpointRef> QueueStore::FindCheckpoint(int64_t run_id,
                                                             const std::string& sha256) {
  return db_->Tx<v1::CheckpointRef>(
      "find checkpoint", [&](pqxx::work& tx) -> absl::StatusOr<v1::CheckpointRef> {
        pqxx::result r =
            pg::Exec(tx,
                     "SELECT step, sha256, size_bytes FROM checkpoints WHERE run_id = $1 "
                     "AND ($2 = '' OR sha256 = $2) ORDER BY step DESC LIMIT 1",
                     run_id, sha256);
        if (r.empty()) {
          return absl::NotFoundError(
              sha256.empty() ? absl::StrCat("run ", run_id, " has no checkpoint")
                             : absl::StrCat("run ", run_id, " has no checkpoint ", sha256));
        }
        v1::CheckpointRef ref;
        ref.set_step(r[0][0].as<int64_t>());
        ref.set_sha256(r[0][1].as<std::string>());
        ref.set_size_bytes(r[0][2].as<int64_t>());
        return ref;
      });
}

absl::Status QueueStore::Complete(const v1::CompleteRequest& req) {
  const v1::RunState state = req.state();
  if (state != v1::SUCCEEDED && state != v1::DIVERGED && state != v1::FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat("complete: state must be SUCCEEDED, DIVERGED or FAILED (got ",
                     v1::RunState_Name(state), ")"));
  }
  const std::string name = pg::StateName(state);
  const std::string digest = TokenDigest(req.lease_token());
  auto sweep = db_->Tx<int64_t>("complete", [&](pqxx::work& tx) -> absl::StatusOr<int64_t> {
    // Finishing the sweep here is optimistic: two last runs completing at once may each still
    // see the other unfinished. The reaper's periodic pass closes that gap, so a sweep is marked
    // finished at most one reaper interval late, without a sweep lock serialising every Complete.
    pqxx::result r = pg::ExecPrepared(
        tx, "complete",
        "WITH upd AS ("
        "  UPDATE runs SET state = $3, result = $4::jsonb, error = $5, finished_at = now(), "
        "    lease_expires_at = NULL, step = greatest(step, $6) "
        "  WHERE id = $1 AND attempt = $2 AND lease_token_sha256 = $7 "
        "    AND state IN ('leased', 'running') "
        "  RETURNING sweep_id, worker_id), "
        "e AS (INSERT INTO run_events (run_id, kind, attempt, worker, message) "
        "  SELECT $1, 'completed', $2, "
        "    coalesce((SELECT name FROM workers WHERE id = upd.worker_id), ''), $3 FROM upd), "
        "w AS (UPDATE workers SET runs_completed = runs_completed + 1, "
        "  current_run_id = CASE WHEN current_run_id = $1 THEN NULL ELSE current_run_id END "
        "  WHERE id = (SELECT worker_id FROM upd)), "
        "s AS (UPDATE sweeps SET state = 'finished', finished_at = now() "
        "  WHERE id = (SELECT sweep_id FROM upd) AND state = 'active' AND NOT EXISTS ("
        "    SELECT 1 FROM runs WHERE sweep_id = (SELECT sweep_id FROM upd) AND id <> $1 "
        "    AND state IN ('queued', 'leased', 'running'))) "
        "SELECT sweep_id FROM upd",
        req.run_id(), req.attempt(), name, pg::ToJson(req.result()), req.error(),
        req.result().steps_done(), digest);
    if (!r.empty()) {
      const int64_t sweep_id = r[0][0].as<int64_t>();
      // Refinement and pruning (issue #11) decide in this transaction, so a sweep never shows
      // as finished between its last run and the runs refinement adds after it.
      auto refined = RefineAfterRunFinished(tx, sweep_id);
      if (!refined.ok()) return refined.status();
      return sweep_id;
    }
    // A retry of a Complete whose reply was lost finds its own result already there.
    pqxx::result cur =
        pg::Exec(tx, "SELECT state, attempt, lease_token_sha256 = $2 FROM runs WHERE id = $1",
                 req.run_id(), digest);
    if (!cur.empty() && cur[0][1].as<int>() == req.attempt() && cur[0][2].as<bool>() &&
        cur[0][0].as<std::string>() == name) {
      return int64_t{0};
    }
    return FenceError(tx, req.run_id(), req.attempt());
  });
  if (!sweep.ok()) return sweep.status();
  if (*sweep != 0) {
    notes_->Add(channels::kSweep, absl::StrCat(*sweep));
    notes_->Add(channels::kRun, absl::StrCat(req.run_id()));
  }
  return absl::OkStatus();
}

absl::Status QueueStore::Release(const v1::ReleaseRequest& req) {
  return db_
      ->Tx<bool>("release",
                 [&](pqxx::work& tx) -> absl::StatusOr<bool> {
                   pqxx::result r = pg::Exec(
                       tx,
                       absl::StrCat("UPDATE runs SET state = 'queued', lease_expires_at = NULL, "
                                    "max_attempts = max_attempts + 1 WHERE ",
                                    kFenced, " RETURNING sweep_id, device, worker_id"),
                       req.run_id(), req.attempt(), TokenDigest(req.lease_token()));
                   if (r.empty()) return FenceError(tx, req.run_id(), req.attempt());
                   pg::Exec(tx,
                            "WITH e AS (INSERT INTO run_events (run_id, kind, attempt, message) "
                            "  VALUES ($1, 'released', $2, $3)), "
                            "w AS (UPDATE workers SET current_run_id = NULL WHERE id = $4 "
                            "  AND current_run_id = $1) "
                            "SELECT pg_notify($5, $6), pg_notify($7, $8), pg_notify($9, $10)",
                            req.run_id(), req.attempt(), req.reason(),
                            r[0][2].is_null() ? 0 : r[0][2].as<int64_t>(),
                            std::string(channels::kQueue), r[0][1].as<std::string>(),
                            std::string(channels::kSweep), absl::StrCat(r[0][0].as<int64_t>()),
                            std::string(channels::kRun), absl::StrCat(req.run_id()));
                   return true;
                 })
      .status();
}

absl::StatusOr<ReapResult> QueueStore::Reap() {
  return db_->Tx<ReapResult>("reap", [&](pqxx::work& tx) -> absl::StatusOr<ReapResult> {
    // SKIP LOCKED: a run a worker is heartbeating right now is left for the next pass, and two
    // replicas reaping at once split the expired runs between them instead of both touching each.
    pqxx::result r = tx.exec(
        "WITH expired AS ("
        "  SELECT id FROM runs WHERE state IN ('leased', 'running') AND lease_expires_at < now()"
        "  ORDER BY lease_expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED), "
        "upd AS ("
        "  UPDATE runs r SET "
        "    state = CASE WHEN r.attempt >= r.max_attempts THEN 'failed' ELSE 'queued' END, "
        "    error = CASE WHEN r.attempt >= r.max_attempts THEN "
        "      format('lease expired on attempt %s of %s (worker stopped heartbeating)', "
        "             r.attempt, r.max_attempts) ELSE r.error END, "
        "    finished_at = CASE WHEN r.attempt >= r.max_attempts THEN now() END, "
        "    lease_expires_at = NULL "
        "  FROM expired WHERE r.id = expired.id "
        "  RETURNING r.id, r.sweep_id, r.attempt, r.state, r.device, r.error), "
        "e AS (INSERT INTO run_events (run_id, kind, attempt, message) "
        "  SELECT id, 'expired', attempt, CASE WHEN state = 'failed' THEN error "
        "    ELSE 'lease expired; requeued' END FROM upd), "
        "w AS (UPDATE workers SET current_run_id = NULL "
        "  WHERE current_run_id IN (SELECT id FROM upd)) "
        "SELECT id, sweep_id, state, device FROM upd");
    ReapResult out;
    std::set<std::string> devices;
    std::set<int64_t> sweeps;
    for (const auto& row : r) {
      if (row[2].as<std::string>() == "failed") {
        ++out.failed;
      } else {
        ++out.requeued;
        devices.insert(row[3].as<std::string>());
      }
      sweeps.insert(row[1].as<int64_t>());
      Notify(tx, channels::kRun, absl::StrCat(row[0].as<int64_t>()));
    }
    pqxx::result done = tx.exec(
        "UPDATE sweeps s SET state = 'finished', finished_at = now() "
        "WHERE state = 'active' AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.sweep_id = s.id "
        "AND r.state IN ('queued', 'leased', 'running')) RETURNING id");
    out.sweeps_finished = static_cast<int>(done.size());
    for (const auto& row : done) sweeps.insert(row[0].as<int64_t>());
    for (const auto& d : devices) Notify(tx, channels::kQueue, d);
    for (int64_t s : sweeps) Notify(tx, channels::kSweep, absl::StrCat(s));
    return out;
  });
}

absl::StatusOr<std::pair<std::string, int64_t>> QueueStore::DatasetPath(const std::string& sha) {
  using Out = std::pair<std::string, int64_t>;
  return db_->Tx<Out>("get dataset", [&](pqxx::work& tx) -> absl::StatusOr<Out> {
    pqxx::result r = pg::Exec(tx, "SELECT path, size_bytes FROM datasets WHERE sha256 = $1", sha);
    if (r.empty()) return absl::NotFoundError(absl::StrCat("no data set with sha256 ", sha));
    return Out(r[0][0].as<std::string>(), r[0][1].as<int64_t>());
  });
}

}  // namespace ablate::server
