// The run state machine, in the order docs/architecture.md#the-run-state-machine draws it:
// shared rules first (the state lists, the fence, finishing a sweep, notifications), then one
// section per transition.
#include "server/store/run_transitions.h"

#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/run/retry_policy.h"
#include "common/run/run_state.h"
#include "common/util/sha256.h"
#include "common/util/status_macros.h"
#include "server/store/pg_codec.h"
#include "server/store/refine_store.h"
#include "spdlog/spdlog.h"

namespace ablate::server {
namespace {

// ---- The rules every transition shares ---------------------------------------------------------

// The unfinished states, as the SQL list the statements quote (`state IN ` + kUnfinished): a
// sweep with none of these is finished. Checked against util::IsTerminal at compile time, so a
// new state is decided there, and every statement that lists them is checked to quote this list.
constexpr std::string_view kUnfinished = "('queued', 'leased', 'running')";

// True when `sql` quotes exactly the states util::IsTerminal calls unfinished.
constexpr bool ListsUnfinishedStates(std::string_view sql) {
  for (int i = v1::RunState_MIN; i <= v1::RunState_MAX; ++i) {
    const auto state = static_cast<v1::RunState>(i);
    const std::string_view name = util::RunStateName(state);
    if (name.empty()) continue;
    bool listed = false;
    for (size_t at = sql.find(name); at != std::string_view::npos; at = sql.find(name, at + 1)) {
      listed |= at > 0 && sql[at - 1] == '\'' && at + name.size() < sql.size() &&
                sql[at + name.size()] == '\'';
    }
    if (listed == util::IsTerminal(state)) return false;
  }
  return true;
}
static_assert(ListsUnfinishedStates(kUnfinished), "kUnfinished disagrees with util::IsTerminal");
static_assert(sql::Name("finish_sweep").text().find(kUnfinished) != std::string_view::npos);
static_assert(sql::Name("cancel_runs").text().find(kUnfinished) != std::string_view::npos);

// The one statement that marks sweeps finished: the active sweep `sweep_id` (every active sweep
// when nullopt, the reaper's pass) if none of its runs is unfinished. Returns the sweeps it
// finished. Complete, Cancel (of some runs) and Reap call it; a whole-sweep cancel marks the
// sweep cancelled instead.
//
// Under read committed, two last runs completing at once may each still see the other
// unfinished, so neither finishes the sweep. The reaper's pass over every active sweep closes
// that gap at most one reaper interval later, without a sweep lock serialising every Complete.
std::vector<int64_t> FinishSweepsWithNothingLeft(pqxx::work& tx, std::optional<int64_t> sweep_id) {
  pqxx::result r = sweep_id ? pg::Exec(tx, "finish_sweep", *sweep_id)
                            : pg::Exec(tx, "finish_sweep", nullptr);  // $1 null: every sweep
  const pg::ByName col(r);
  std::vector<int64_t> out;
  for (const auto& row : r) out.push_back(col(row, "id").as<int64_t>());
  return out;
}

// Lease and Heartbeat name a worker: another token's worker gets the same answer as an unknown
// id, so a probe learns nothing.
absl::Status NotTheCallersWorker(int64_t worker_id) {
  return absl::NotFoundError(absl::StrCat(
      "worker ", worker_id, " is not registered with this token (call Register first)"));
}

// The one step after runs end, whichever way (Complete, Reap past max_attempts, Cancel): each
// of their sweeps refines and prunes first (refine_store.h; the runs it adds keep a sweep active)
// and is then finished if nothing is left. A way of ending that skipped it left a refining sweep
// waiting for a bracket no Complete would ever plan. Sweeps in id order, so two transactions
// ending runs of the same sweeps take the per-sweep locks in the same order.
absl::Status AfterRunsEnded(pqxx::work& tx, std::set<int64_t> sweep_ids, Notices& notices) {
  for (int64_t sweep_id : sweep_ids) {
    auto refined = RefineAfterRunFinished(tx, sweep_id);
    if (!refined.ok()) return refined.status();
    FinishSweepsWithNothingLeft(tx, sweep_id);
    notices.Sweep(sweep_id);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FenceError(pqxx::work& tx, int64_t run_id, int attempt) {
  pqxx::result r = pg::Exec(tx, "run_exists", run_id);
  if (r.empty()) return absl::NotFoundError(absl::StrCat("run ", run_id, " does not exist"));
  return absl::FailedPreconditionError(
      absl::StrCat("lease lost: run ", run_id, " attempt ", attempt,
                   " does not hold the run's lease (re-leased, released, expired, cancelled or "
                   "finished)"));
}

template <typename T>
absl::StatusOr<T> RunTransitions::Transition(
    const std::string& what, const std::function<absl::StatusOr<T>(pqxx::work&, Notices&)>& fn) {
  Notices notices;
  auto out = db_->Tx<T>(what, [&](pqxx::work& tx) -> absl::StatusOr<T> {
    notices.Clear();
    absl::StatusOr<T> r = fn(tx, notices);
    if (r.ok()) notices.SendQueue(tx);
    return r;
  });
  if (out.ok()) notices.SendWatchers(notes_);
  return out;
}

// ---- queued -> leased: Lease -------------------------------------------------------------------

absl::StatusOr<LeaseOutcome> RunTransitions::Lease(int64_t worker_id, int64_t token_id) {
  // 256 bits: a worker token holder cannot guess another worker's lease.
  auto token = RandomHex(32);
  if (!token.ok()) return absl::InternalError(absl::StrCat("lease: ", token.status().message()));
  const std::string digest = SecretDigest(*token);
  return Transition<LeaseOutcome>(
      "lease", [&](pqxx::work& tx, Notices& notices) -> absl::StatusOr<LeaseOutcome> {
        // The worker's row first, locked: it must be the caller's (registered with this token),
        // not stopped (Deregister), and below its declared slots. The lock serialises one
        // worker's concurrent Leases, so the count the next statement makes (a new snapshot,
        // taken after the lock) includes every lease the worker won before: a worker can never
        // hold more runs than it declared, however many Leases it sends at once.
        // The lease statement runs on its generic plan (plan_generic.sql says why).
        pg::Exec(tx, "plan_generic");
        pqxx::result wr = pg::Exec(tx, "lease_worker", worker_id, token_id, kMaxWorkerSlots);
        if (wr.empty() || !wr[0]["callers"].as<bool>()) return NotTheCallersWorker(worker_id);
        const pqxx::row worker = wr.front();
        if (worker["stopped"].as<bool>()) {
          return absl::NotFoundError(absl::StrCat("worker ", worker_id,
                                                  " was deregistered (it stopped); call Register "
                                                  "again before leasing"));
        }
        const int slots = worker["slots"].as<int>();
        // A benched worker, or one that owes its self-check, gets no run and is told why at once
        // (docs/server.md#failures); an operator's unbench clears both.
        const bool benched_now = worker["benched"].as<bool>();
        const bool self_check_due = worker["self_check_due"].as<bool>();
        if (benched_now || self_check_due) {
          pg::Exec(tx, "worker_seen", worker_id);
          v1::LeaseResponse benched;
          benched.set_benched_until(worker["benched_until"].as<double>());
          benched.set_bench_reason(worker["bench_reason"].as<std::string>());
          benched.set_self_check_due(self_check_due && !benched_now);
          LeaseOutcome out;
          out.benched = std::move(benched);
          return out;
        }
        const int64_t memory_per_slot = worker["memory_per_slot"].as<int64_t>();
        // One statement after the lock, so the hot path is two round trips. Without a checkpoint
        // the attempt starts over and every earlier point goes (step > -1); with one, the points
        // after its step go, and the new attempt's series continues without gap or duplicate.
        const pqxx::row row =
            pg::Exec1(tx, "lease", worker_id, lease_seconds_, digest, slots, memory_per_slot);
        LeaseOutcome result;
        result.device_kind = row["device_kind"].as<std::string>();
        if (row["run_id"].is_null() && row["held"].as<int64_t>() >= slots) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "lease refused: worker ", worker_id, " already holds ", row["held"].as<int64_t>(),
              " run lease(s) (runs ", row["held_ids"].as<std::string>(), "), the ", slots,
              " slot(s) it declared at Register; complete or release one first (a restarted "
              "worker's new process releases its old one's leases when it registers)"));
        }
        if (row["run_id"].is_null()) return result;
        v1::LeaseResponse out;
        out.set_has_run(true);
        const int64_t run_id = row["run_id"].as<int64_t>();
        if (row["attempt"].as<int>() > 1) {
          // The lease statement dropped the points after the resume step: the run's counted
          // series (what ReportMetrics' bounds read) are counted again. A first attempt has none.
          const std::string runs = pg::Int64Array({run_id});
          pg::Exec(tx, "metric_series_clear", runs);
          pg::Exec(tx, "metric_series_recount", runs);
        }
        // The run's spec over its sweep's base, the one merge ListRuns and refinement use too.
        std::optional<v1::RunSpec> base;
        if (!row["spec_base"].is_null()) {
          RETURN_IF_ERROR(pg::FromJson(row["spec_base"].as<std::string>(), &base.emplace()));
        }
        ASSIGN_OR_RETURN(*out.mutable_spec(), pg::MergeRunSpec(base ? &*base : nullptr,
                                                               row["spec_whole"], row["spec_own"]));
        out.mutable_spec()->set_run_id(run_id);
        out.mutable_spec()->set_sweep_id(row["sweep_id"].as<int64_t>());
        out.mutable_lease()->set_run_id(run_id);
        out.mutable_lease()->set_attempt(row["attempt"].as<int>());
        out.mutable_lease()->set_expires_at(row["expires_at"].as<double>());
        out.mutable_lease()->set_token(*token);
        if (!row["resume_step"].is_null()) {
          out.mutable_resume_from()->set_step(row["resume_step"].as<int64_t>());
          out.mutable_resume_from()->set_sha256(row["resume_sha256"].as<std::string>());
          out.mutable_resume_from()->set_size_bytes(row["resume_size_bytes"].as<int64_t>());
        }
        notices.Sweep(out.spec().sweep_id());
        result.lease = std::move(out);
        return result;
      });
}

// ---- leased -> running, running -> running: Heartbeat ------------------------------------------

absl::StatusOr<v1::HeartbeatResponse> RunTransitions::Heartbeat(const v1::HeartbeatRequest& req,
                                                                int64_t token_id) {
  return Transition<v1::HeartbeatResponse>(
      "heartbeat", [&](pqxx::work& tx, Notices& notices) -> absl::StatusOr<v1::HeartbeatResponse> {
        // Only the caller's own worker: another token cannot keep a worker looking alive.
        pqxx::result w = pg::Exec(tx, "heartbeat_worker", req.worker_id(), req.run_id(), token_id);
        if (w.empty()) {
          return NotTheCallersWorker(req.worker_id());
        }
        v1::HeartbeatResponse out;
        if (req.run_id() == 0) return out;
        pqxx::result r = pg::Exec(tx, "heartbeat_run", req.run_id(), req.attempt(),
                                  SecretDigest(req.lease_token()));
        if (r.empty()) {
          return absl::NotFoundError(absl::StrCat("run ", req.run_id(), " does not exist"));
        }
        const pqxx::row run = r.front();
        const auto state = util::RunStateFromName(run["state"].as<std::string>());
        const int attempt = run["attempt"].as<int>();
        const bool holder = run["holder"].as<bool>();  // lease_holder (migration 0018)
        if (!run["held"].as<bool>()) {                 // lease_held: the fence
          // Cancel is only news for the lease holder that was running when it was cancelled;
          // any other mismatch means this attempt was replaced (or never held the lease).
          if (holder && state == v1::CANCELLED) {
            out.set_cancel(true);
          } else {
            out.set_lease_lost(true);
          }
          return out;
        }
        pqxx::row u = pg::Exec1(tx, "heartbeat_extend", req.run_id(), lease_seconds_, req.step(),
                                req.tokens_per_second());
        out.set_expires_at(u["expires_at"].as<double>());
        if (state == v1::LEASED) {
          pg::Exec(tx, "heartbeat_started_event", req.run_id(), attempt,
                   w[0]["name"].as<std::string>());
          notices.Sweep(u["sweep_id"].as<int64_t>());
        }
        return out;
      });
}

// ---- Fenced writes without a state change: CheckFence, RecordCheckpoint ---------------------

absl::Status RunTransitions::CheckFence(int64_t run_id, int attempt,
                                        const std::string& lease_token) {
  return db_
      ->Tx<bool>("check lease",
                 [&](pqxx::work& tx) -> absl::StatusOr<bool> {
                   pqxx::result r =
                       pg::Exec(tx, "check_fence", run_id, attempt, SecretDigest(lease_token));
                   if (r.empty()) return FenceError(tx, run_id, attempt);
                   return true;
                 })
      .status();
}

absl::Status RunTransitions::RecordCheckpoint(int64_t run_id, int attempt,
                                              const std::string& lease_token,
                                              const v1::CheckpointRef& ref,
                                              const std::function<absl::Status()>& store_blob) {
  return db_
      ->Tx<bool>("record checkpoint",
                 [&](pqxx::work& tx) -> absl::StatusOr<bool> {
                   pqxx::result r =
                       pg::Exec(tx, "checkpoint_fence", run_id, attempt, SecretDigest(lease_token));
                   if (r.empty()) return FenceError(tx, run_id, attempt);
                   // The row lock holds off a re-lease until this commits; a failed move rolls
                   // back.
                   if (auto s = store_blob(); !s.ok()) return s;
                   pg::Exec(tx, "checkpoint_record", run_id, ref.step(), ref.sha256(),
                            ref.size_bytes(), attempt);
                   return true;
                 })
      .status();
}

// ---- leased/running -> succeeded | diverged | failed: Complete ---------------------------------

absl::Status RunTransitions::Complete(const v1::CompleteRequest& req) {
  const v1::RunState state = req.state();
  if (state != v1::SUCCEEDED && state != v1::DIVERGED && state != v1::FAILED) {
    return absl::InvalidArgumentError(
        absl::StrCat("complete: state must be SUCCEEDED, DIVERGED or FAILED (got ",
                     v1::RunState_Name(state), ")"));
  }
  if (state == v1::FAILED && req.fault() != v1::FAULT_RUN) {
    return AttemptFaulted(req.run_id(), req.attempt(), req.lease_token(),
                          req.fault() == v1::FAULT_WORKER ? "worker" : "unknown", req.error(),
                          req.result());
  }
  const std::string name(util::RunStateName(state));
  const std::string fault = state == v1::FAILED ? "run" : "";
  const std::string digest = SecretDigest(req.lease_token());
  return Transition<bool>("complete",
                          [&](pqxx::work& tx, Notices& notices) -> absl::StatusOr<bool> {
                            pqxx::result r =
                                pg::Exec(tx, "complete", req.run_id(), req.attempt(), digest, name,
                                         pg::ToJson(req.result()), req.error(),
                                         req.result().steps_done(), fault);
                            if (!r.empty()) {
                              const int64_t sweep_id = r[0]["sweep_id"].as<int64_t>();
                              if (auto s = AfterRunsEnded(tx, {sweep_id}, notices); !s.ok())
                                return s;
                              notices.Run(req.run_id());
                              return true;
                            }
                            // A retry of a Complete whose reply was lost finds its own result
                            // already there.
                            pqxx::result cur = pg::Exec(tx, "complete_current", req.run_id(),
                                                        req.attempt(), digest);
                            if (!cur.empty() && cur[0]["holder"].as<bool>() &&
                                cur[0]["state"].as<std::string>() == name) {
                              return true;
                            }
                            return FenceError(tx, req.run_id(), req.attempt());
                          })
      .status();
}

// ---- leased/running -> queued: Release ---------------------------------------------------------

absl::Status RunTransitions::Release(const v1::ReleaseRequest& req) {
  if (req.fault() != v1::FAULT_CLASS_UNSPECIFIED) {
    // A run-side cause is not the worker's to release on: it belongs in Complete. Read as a
    // worker-side fault, since the worker gave up on the run rather than finishing it.
    return AttemptFaulted(req.run_id(), req.attempt(), req.lease_token(),
                          req.fault() == v1::FAULT_UNKNOWN ? "unknown" : "worker", req.reason(),
                          v1::RunResult());
  }
  return Transition<bool>("release",
                          [&](pqxx::work& tx, Notices& notices) -> absl::StatusOr<bool> {
                            pqxx::result r =
                                pg::Exec(tx, "release", req.run_id(), req.attempt(),
                                         SecretDigest(req.lease_token()), faults_.max_releases);
                            if (r.empty()) return FenceError(tx, req.run_id(), req.attempt());
                            const pqxx::row released = r.front();
                            const pqxx::field worker = released["worker_id"];
                            const bool ended = released["ended"].as<bool>();
                            pg::Exec(tx, "release_event", req.run_id(), req.attempt(),
                                     ended ? absl::StrCat(req.reason(), "; the run failed: ",
                                                          released["error"].as<std::string>())
                                           : req.reason(),
                                     worker.is_null() ? 0 : worker.as<int64_t>());
                            const int64_t sweep_id = released["sweep_id"].as<int64_t>();
                            if (ended) {
                              if (auto s = AfterRunsEnded(tx, {sweep_id}, notices); !s.ok()) {
                                return s;
                              }
                            } else {
                              notices.Queue(released["device"].as<std::string>());
                              notices.Sweep(sweep_id);
                            }
                            notices.Run(req.run_id());
                            return true;
                          })
      .status();
}

// ---- leased/running -> queued | failed: an attempt that faulted (Complete, Release) -----------

absl::Status RunTransitions::AttemptFaulted(int64_t run_id, int attempt,
                                            const std::string& lease_token,
                                            const std::string& fault, const std::string& error,
                                            const v1::RunResult& result) {
  const std::string digest = SecretDigest(lease_token);
  return Transition<bool>(
             "attempt faulted",
             [&](pqxx::work& tx, Notices& notices) -> absl::StatusOr<bool> {
               pqxx::result r = pg::Exec(
                   tx, "attempt_faulted", run_id, attempt, digest, fault, error, pg::ToJson(result),
                   result.steps_done(), faults_.run_fault_workers, faults_.bench_after,
                   faults_.bench_seconds, faults_.bench_max_seconds, faults_.fault_hold_seconds);
               if (r.empty()) {
                 // A retry whose reply was lost finds its attempt already handed back (queued,
                 // the token not yet replaced by a new lease) or ended.
                 pqxx::result cur = pg::Exec(tx, "complete_current", run_id, attempt, digest);
                 if (!cur.empty() && cur[0]["holder"].as<bool>()) {
                   const auto now = util::RunStateFromName(cur[0]["state"].as<std::string>());
                   if (now == v1::QUEUED || now == v1::FAILED) return true;
                 }
                 return FenceError(tx, run_id, attempt);
               }
               const pqxx::row faulted = r.front();
               const int64_t sweep_id = faulted["sweep_id"].as<int64_t>();
               if (faulted["ended"].as<bool>()) {
                 if (auto s = AfterRunsEnded(tx, {sweep_id}, notices); !s.ok()) return s;
               } else {
                 notices.Queue(faulted["device"].as<std::string>());
                 notices.Sweep(sweep_id);
               }
               if (faulted["benched"].as<bool>()) {
                 spdlog::warn("worker {} benched until {:.0f} (unix): run {} attempt {} failed: {}",
                              faulted["worker"].as<std::string>(),
                              faulted["benched_until"].as<double>(), run_id, attempt, error);
               }
               notices.Run(run_id);
               return true;
             })
      .status();
}

// ---- leased/running -> queued | failed: Reap (lease expired) -----------------------------------

absl::StatusOr<ReapResult> RunTransitions::Reap() { return ReapLeases(0); }

absl::StatusOr<ReapResult> RunTransitions::ReapLeases(int64_t worker_id) {
  return Transition<ReapResult>(
      "reap", [&](pqxx::work& tx, Notices& notices) -> absl::StatusOr<ReapResult> {
        // SKIP LOCKED: a run a worker is heartbeating right now is left for the next pass, and two
        // replicas reaping at once split the expired runs between them.
        pqxx::result r = pg::Exec(tx, "reap", faults_.max_preemptions, worker_id);
        const pg::ByName col(r);
        ReapResult out;
        std::set<int64_t> ended;  // sweeps with a run failed here
        for (const auto& row : r) {
          const int64_t sweep_id = col(row, "sweep_id").as<int64_t>();
          if (util::RunStateFromName(col(row, "state").as<std::string>()) == v1::FAILED) {
            ++out.failed;
            ended.insert(sweep_id);
          } else {
            ++out.requeued;
            notices.Queue(col(row, "device").as<std::string>());
          }
          notices.Sweep(sweep_id);
          notices.Run(col(row, "id").as<int64_t>());
        }
        if (auto s = AfterRunsEnded(tx, ended, notices); !s.ok()) return s;
        if (worker_id != 0) return out;
        const std::vector<int64_t> finished = FinishSweepsWithNothingLeft(tx, std::nullopt);
        out.sweeps_finished = static_cast<int>(finished.size());
        for (int64_t s : finished) notices.Sweep(s);
        return out;
      });
}

// ---- leased/running -> queued | failed: a worker's new process (Register) ----------------------

absl::StatusOr<RestartResult> RunTransitions::WorkerRestarted(
    int64_t worker_id, const std::vector<v1::CrashedAttempt>& crashed) {
  RestartResult out;
  // What the dead process's work dir says ended each attempt: a worker-side failure, with its
  // cause, as if the process had lived to say so (AttemptFaulted: requeued elsewhere, toward
  // the worker's bench). The lease token proves the attempt was this worker's.
  for (const auto& c : crashed) {
    absl::Status s =
        AttemptFaulted(c.run_id(), c.attempt(), c.lease_token(), "worker", c.cause(), {});
    if (s.ok()) {
      ++out.faulted;
    } else if (absl::IsFailedPrecondition(s) || absl::IsNotFound(s)) {
      // The lease ran out before the worker came back (reaped: a preemption), or the run is
      // gone: nothing of the run's to change.
      ++out.stale;
    } else {
      return s;
    }
  }
  // Every other lease still held under this worker belongs to the dead process too.
  ASSIGN_OR_RETURN(const ReapResult reaped, ReapLeases(worker_id));
  out.released = reaped.requeued + reaped.failed;
  return out;
}

// ---- unfinished -> cancelled: Cancel -----------------------------------------------------------

absl::StatusOr<int> RunTransitions::Cancel(int64_t sweep_id, const std::vector<int64_t>& run_ids) {
  return Transition<int>("cancel", [&](pqxx::work& tx, Notices& notices) -> absl::StatusOr<int> {
    pqxx::result r = pg::Exec(tx, "cancel_runs", sweep_id, pg::Int64Array(run_ids));
    const pg::ByName col(r);
    for (const auto& row : r) notices.Run(col(row, "id").as<int64_t>());
    if (run_ids.empty()) {
      pg::Exec(tx, "cancel_sweep", sweep_id);
    }
    // A cancelled sweep neither refines nor prunes; cancelling some runs may settle a curve.
    if (auto s = AfterRunsEnded(tx, {sweep_id}, notices); !s.ok()) return s;
    return static_cast<int>(r.size());
  });
}

// ---- terminal -> queued: Retry -----------------------------------------------------------------

absl::StatusOr<int> RunTransitions::Retry(int64_t sweep_id, const std::vector<int64_t>& run_ids,
                                          const std::vector<v1::RunState>& states) {
  std::vector<v1::RunState> wanted = states;
  if (wanted.empty()) {
    wanted.assign(std::begin(util::kDefaultRetryStates), std::end(util::kDefaultRetryStates));
  }
  for (auto s : wanted) {
    if (!util::IsRetryable(s)) {
      return absl::InvalidArgumentError(absl::StrCat("retry: states: ", util::RetryRefusal(s)));
    }
  }
  return Transition<int>("retry", [&](pqxx::work& tx, Notices& notices) -> absl::StatusOr<int> {
    pqxx::result r = pg::Exec(tx, "retry_runs", sweep_id, pg::TextArray(pg::StateNames(wanted)),
                              pg::Int64Array(run_ids));
    const pg::ByName col(r);
    int64_t total = 0;
    for (const auto& row : r) {
      total += col(row, "requeued").as<int64_t>();
      notices.Queue(col(row, "device").as<std::string>());
    }
    if (total > 0) {
      pg::Exec(tx, "retry_reactivate_sweep", sweep_id);
      notices.Sweep(sweep_id);
    }
    return static_cast<int>(total);
  });
}

}  // namespace ablate::server
