// runs, metrics, logs, workers.
#include <algorithm>
#include <cctype>
#include <ctime>
#include <iostream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/render.h"
#include "common/run/run_state.h"
#include "common/sweep/sweep.h"
#include "common/util/fields.h"

namespace ablate::cli {
namespace {

// The TRY column counts attempts as max_attempts does: a hand-back (Release, a worker shutting
// down), a preemption (lease expiry) and a worker-side failure are not the run's, and the server
// grants each a fresh attempt by raising the run's max_attempts by one, so the raw numbers read
// "1/4" after one; shown here are attempt - f and max_attempts - f, f those free attempts. A
// run's max_attempts differs from its sweep's only after one of them or a retry, so only those
// runs' histories are fetched to count its hand-backs (preemptions and worker faults come with
// the run). The free attempts never exceed max_attempts above the sweep's (the attempt that used
// up an allowance ended the run and was not granted a fresh one).
class TryColumn {
 public:
  explicit TryColumn(Context& ctx) : ctx_(ctx) {}

  std::string Format(const v1::Run& r) {
    // An unreadable sweep file (-1) shows the raw numbers rather than a history call per run.
    const int base = SweepMaxAttempts(r.sweep_id());
    if (base < 0 || r.max_attempts() == base) {
      return absl::StrCat(r.attempt(), "/", r.max_attempts());
    }
    const int handbacks = HandBacks(r);
    const int granted = std::max(0, r.max_attempts() - base);
    const int free = std::min(granted, handbacks + r.preemptions() + r.worker_faults());
    std::string out = absl::StrCat(r.attempt() - free, "/", r.max_attempts() - free);
    if (handbacks > 0) absl::StrAppend(&out, " +", handbacks, " handed back");
    if (r.preemptions() > 0) absl::StrAppend(&out, " +", r.preemptions(), " preempted");
    if (r.worker_faults() > 0) {
      absl::StrAppend(&out, " +", r.worker_faults(), " worker fault",
                      r.worker_faults() == 1 ? "" : "s");
    }
    return out;
  }

 private:
  int SweepMaxAttempts(int64_t sweep_id) {
    auto [it, fresh] = max_attempts_.try_emplace(sweep_id, -1);
    if (fresh) {
      v1::GetSweepRequest req;
      req.mutable_sweep()->set_id(sweep_id);
      auto resp = ctx_.Call("get sweep", &v1::SweepService::Stub::GetSweep, req);
      if (resp.ok()) {
        auto spec = sweep::ParseSweep(resp->sweep().spec_yaml(), resp->sweep().file_name());
        if (spec.ok()) it->second = spec->max_attempts;
      }
    }
    return it->second;
  }

  int HandBacks(const v1::Run& r) {
    v1::ListRunEventsRequest req;
    req.set_run_id(r.id());
    auto resp = ctx_.Call("run events", &v1::SweepService::Stub::ListRunEvents, req);
    if (!resp.ok()) return 0;
    int n = 0;
    for (const auto& e : resp->events()) n += e.kind() == "released" ? 1 : 0;
    return n;
  }

  Context& ctx_;
  std::map<int64_t, int> max_attempts_;
};

}  // namespace

absl::StatusOr<v1::RunState> ParseRunState(const std::string& name) {
  std::string upper = name;
  for (auto& ch : upper) ch = static_cast<char>(std::toupper(ch));
  v1::RunState st;
  if (!v1::RunState_Parse(upper, &st) || st == v1::RUN_STATE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state ", name,
                     ": not a run state (queued, leased, running, succeeded, diverged, "
                     "failed, cancelled, skipped)"));
  }
  return st;
}

// Losses are positive; 0 means "not measured yet".
std::string Loss(double v) { return v > 0 ? Num(v) : "-"; }

int Runs(Context& ctx, const std::string& sweep, const std::vector<std::string>& states,
         int limit) {
  v1::ListRunsRequest req;
  if (!sweep.empty()) *req.mutable_sweep() = ParseSweepRef(sweep);
  for (const auto& s : states) {
    auto st = ParseRunState(s);
    if (!st.ok()) return Fail(st.status());
    req.add_states(*st);
  }
  // limit <= 0 (--all): every matching run, page by page, newest first as the server orders.
  std::vector<v1::Run> runs;
  int64_t total = 0;
  while (limit <= 0 || static_cast<int64_t>(runs.size()) < limit) {
    const int64_t want = limit <= 0 ? kRunsPerPage : limit - static_cast<int64_t>(runs.size());
    req.set_limit(static_cast<int>(std::min<int64_t>(want, kRunsPerPage)));
    req.set_offset(static_cast<int>(runs.size()));
    auto resp = ctx.Call("list runs", &v1::SweepService::Stub::ListRuns, req);
    if (!resp.ok()) return Fail(resp.status());
    total = resp->total();
    for (auto& r : *resp->mutable_runs()) runs.push_back(std::move(r));
    // A server from before paging sends no total and ignores the offset: one page only.
    if (resp->runs().empty() || total == 0 || static_cast<int64_t>(runs.size()) >= total) break;
  }
  // On stderr, so that JSON on stdout stays one run a line.
  if (total > static_cast<int64_t>(runs.size())) {
    std::cerr << runs.size() << " of " << total << " runs shown (newest first); --all or --limit N"
              << " for more\n";
  }
  if (ctx.json) {
    for (const auto& r : runs) std::cout << ToJson(r) << "\n";
    return 0;
  }
  Table t({"RUN", "SWEEP", "CELL", "SEED", "STATE", "TRY", "STEP", "TRAIN", "VAL", "WORKER"});
  TryColumn tries(ctx);
  for (const auto& r : runs) {
    const bool done = util::HasOutcome(r.state());
    t.Add({std::to_string(r.id()), std::to_string(r.sweep_id()), r.cell(), std::to_string(r.seed()),
           StateName(r.state()) + (r.state() == v1::DIVERGED && r.result().diverged_step() > 0
                                       ? absl::StrCat("@", r.result().diverged_step())
                                       : ""),
           tries.Format(r), absl::StrCat(r.step(), "/", r.total_steps()),
           Loss(done ? r.result().final_train_loss() : r.latest_train_loss()),
           Loss(done ? r.result().final_val_loss() : r.latest_val_loss()),
           r.worker().empty() ? "-" : r.worker()});
  }
  std::cout << t.Render();
  return 0;
}

int Metrics(Context& ctx, int64_t run, const std::vector<std::string>& names, bool follow) {
  grpc::ClientContext gctx;
  ctx.Prepare(&gctx, follow ? -1 : 0);
  v1::GetRunMetricsRequest req;
  req.set_run_id(run);
  for (const auto& n : names) req.add_names(n);
  req.set_after_step(-1);
  req.set_follow(follow);
  auto reader = ctx.stub->GetRunMetrics(&gctx, req);
  v1::GetRunMetricsResponse chunk;
  bool header = false;
  while (reader->Read(&chunk)) {
    for (const auto& p : chunk.points()) {
      if (ctx.json) {
        std::cout << ToJson(p) << "\n";
        continue;
      }
      if (!header) {
        std::cout << "step\tname\tvalue\n";
        header = true;
      }
      std::cout << p.step() << "\t" << p.name() << "\t" << Num(p.value(), 6) << "\n";
    }
    std::cout.flush();
  }
  absl::Status s = rpc::ToAbsl(reader->Finish(), "metrics", ctx.conn.server);
  return s.ok() ? 0 : Fail(s);
}

namespace {

// "-- 12:03:04 leased  try 1  w1  lease until ...": a lifecycle event among the progress lines,
// at its UTC time of day (the lines carry none).
std::string EventLine(const v1::RunEvent& e) {
  const auto t = static_cast<std::time_t>(e.time());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char when[16];
  std::strftime(when, sizeof when, "%H:%M:%S", &tm);
  std::string out = absl::StrCat("-- ", when, " ", e.kind(), "  try ", e.attempt());
  if (!e.worker().empty()) absl::StrAppend(&out, "  ", e.worker());
  if (!e.message().empty()) absl::StrAppend(&out, "  ", e.message());
  // A worker's error text is part of the message: shown, never obeyed (util::Printable).
  return util::Printable(out);
}

}  // namespace

int Logs(Context& ctx, int64_t run, bool follow) {
  // Events (leased, started, expired, fenced, completed, ...) and the progress lines the worker
  // printed, from one stream: the server sends each message's events and lines so that merging
  // them by time puts them in order.
  v1::GetRunMetricsRequest lreq;
  lreq.set_run_id(run);
  lreq.set_after_step(-1);
  lreq.set_follow(follow);
  lreq.set_include_logs(true);
  lreq.set_include_events(true);
  lreq.set_skip_points(true);
  v1::GetRunMetricsResponse chunk;
  v1::RunState state = v1::RUN_STATE_UNSPECIFIED;
  // A stream opened again (the server went away meanwhile) starts from the run's first event and
  // line: what was printed before is recognised and not printed twice.
  std::set<std::string> printed;
  auto first_time = [&](const google::protobuf::Message& m) {
    return !follow || printed.insert(m.SerializeAsString()).second;
  };
  util::Backoff backoff(util::kFollowBackoff);
  bool reconnecting = false;
  grpc::Status end;
  do {
    grpc::ClientContext gctx;
    ctx.Prepare(&gctx, follow ? -1 : 0);
    auto reader = ctx.stub->GetRunMetrics(&gctx, lreq);
    while (reader->Read(&chunk)) {
      FollowResumed("logs", &backoff, &reconnecting);
      state = chunk.state();
      int e = 0, l = 0;
      const int ne = chunk.events_size(), nl = chunk.log_lines_size();
      while (e < ne || l < nl) {
        // At equal times the event first: "started" precedes the first line it caused.
        const bool event =
            l >= nl || (e < ne && chunk.events(e).time() <= chunk.log_lines(l).time());
        const google::protobuf::Message& m =
            event ? static_cast<const google::protobuf::Message&>(chunk.events(e++))
                  : chunk.log_lines(l++);
        if (!first_time(m)) continue;
        if (ctx.json) {
          std::cout << ToJson(m) << "\n";
        } else if (event) {
          std::cout << EventLine(static_cast<const v1::RunEvent&>(m)) << "\n";
        } else {
          std::cout << util::Printable(static_cast<const v1::LogLine&>(m).text()) << "\n";
        }
      }
      std::cout.flush();
    }
    end = reader->Finish();
  } while (follow && !end.ok() && FollowAgain("logs", end, &backoff, &reconnecting));
  absl::Status s = rpc::ToAbsl(end, "logs", ctx.conn.server);
  if (!s.ok()) return Fail(s);
  if (follow && !ctx.json) std::cout << "run " << run << ": " << StateName(state) << "\n";
  return 0;
}

namespace {

// How long `ablate workers` keeps listing a worker after it went offline.
constexpr double kRecentOfflineSeconds = 600;

// The runs a worker holds: "12", "12,13" with --slots, "-" when idle. A server from before
// held_run_ids sends only current_run_id.
std::string HeldRuns(const v1::Worker& w) {
  if (w.held_run_ids_size() > 0) return absl::StrJoin(w.held_run_ids(), ",");
  return w.current_run_id() > 0 ? std::to_string(w.current_run_id()) : "-";
}

}  // namespace

namespace {

// "21:14:03 (in 3m05s)": when a bench ends, in local time, and how far off.
std::string Until(double unix_seconds) {
  const auto t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char when[16];
  std::strftime(when, sizeof when, "%H:%M:%S", &tm);
  const double left = unix_seconds - Now();
  return left > 0 ? absl::StrCat(when, " (in ", Duration(left), ")") : when;
}

// What `ablate workers` says under the table of a worker that is benched or lost.
std::string WorkerNote(const v1::Worker& w) {
  const std::string& name = w.info().name();
  if (w.state() == "benched") {
    std::string out = absl::StrCat(name, ": benched");
    if (w.benched_until() > Now()) {
      absl::StrAppend(&out, " until ", Until(w.benched_until()),
                      w.self_check_due() ? ", then its self-check" : "");
    } else if (w.self_check_due()) {
      absl::StrAppend(&out, " until it passes its self-check (restart it, or unbench it)");
    }
    if (!w.bench_reason().empty()) absl::StrAppend(&out, ": ", w.bench_reason());
    absl::StrAppend(&out, "; lift it with `ablate workers unbench ", name, "`");
    return util::Printable(out);  // the reason quotes an error a worker sent
  }
  if (w.state() == "lost") {
    return absl::StrCat(name, ": lost (no heartbeat for ", Duration(Now() - w.last_seen_at()), ")",
                        w.held_run_ids_size() > 0
                            ? "; the runs it holds are requeued when their leases expire"
                            : "");
  }
  return "";
}

}  // namespace

int Workers(Context& ctx, bool include_offline) {
  v1::ListWorkersRequest req;
  req.set_include_offline(include_offline);
  // A worker that stopped or went silent lately is listed as offline (SEEN says since when), so
  // a clean stop does not look like the worker vanished; --all lists every one ever registered.
  req.set_recent_offline_seconds(kRecentOfflineSeconds);
  auto resp = ctx.Call("list workers", &v1::SweepService::Stub::ListWorkers, req);
  if (!resp.ok()) return Fail(resp.status());
  if (ctx.json) {
    for (const auto& w : resp->workers()) std::cout << ToJson(w) << "\n";
    return 0;
  }
  // SLOTS: runs held / runs it may hold (the --slots it declared); PREP: data-preparation
  // claims it holds open. DONE: runs it completed (succeeded, diverged, or failed for the run's
  // own cause); FAULTS: attempts it ended with a worker-side or unknown failure (an attempt that
  // only lost its lease counts in neither).
  // $/H: the price it declared (--price-per-hour), "-" when none.
  Table t({"ID", "NAME", "STATE", "DEVICE", "CORES", "RUNS", "SLOTS", "PREP", "DONE", "FAULTS",
           "$/H", "SEEN"});
  std::vector<std::string> notes;
  for (const auto& w : resp->workers()) {
    const auto& i = w.info();
    const int held = w.held_run_ids_size() > 0 ? w.held_run_ids_size() : w.current_run_id() > 0;
    t.Add(
        {std::to_string(w.id()), i.name(), w.state(),
         absl::StrCat(i.device_kind(), i.device_name().empty() ? "" : " (" + i.device_name() + ")"),
         std::to_string(i.cpu_cores()), HeldRuns(w),
         absl::StrCat(held, "/", std::max(i.slots(), 1)), std::to_string(w.open_data_claims()),
         std::to_string(w.runs_completed()), std::to_string(w.runs_faulted()),
         i.price_per_hour() > 0 ? Usd(i.price_per_hour()) : "-", TimeAgo(w.last_seen_at())});
    if (std::string note = WorkerNote(w); !note.empty()) notes.push_back(std::move(note));
  }
  if (t.empty()) {
    std::cout << "no workers" << (include_offline ? "" : " online") << "; start one with "
              << "`ablate-worker --server " << ctx.conn.server << " --token-file worker.token`\n";
  } else {
    std::cout << t.Render();
    for (const auto& note : notes) std::cout << note << "\n";
  }
  return 0;
}

int Unbench(Context& ctx, const std::string& name) {
  v1::UnbenchWorkerRequest req;
  req.set_name(name);
  auto resp = ctx.Call("unbench worker", &v1::SweepService::Stub::UnbenchWorker, req);
  if (!resp.ok()) return Fail(resp.status());
  if (ctx.json) {
    std::cout << ToJson(resp->worker()) << "\n";
    return 0;
  }
  const v1::Worker& w = resp->worker();
  std::cout << "worker " << w.info().name() << " unbenched: it may lease at once (now " << w.state()
            << ")\n";
  return 0;
}

}  // namespace ablate::cli
