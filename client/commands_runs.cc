// runs, metrics, logs, workers.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/render.h"

namespace ablate::cli {
namespace {}  // namespace

absl::StatusOr<v1::RunState> ParseRunState(const std::string& name) {
  std::string upper = name;
  for (auto& ch : upper) ch = static_cast<char>(std::toupper(ch));
  v1::RunState st;
  if (!v1::RunState_Parse(upper, &st) || st == v1::RUN_STATE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state ", name,
                     ": not a run state (queued, leased, running, succeeded, diverged, "
                     "failed, cancelled)"));
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
  req.set_limit(limit);
  auto resp = ctx.Call("list runs", &v1::SweepService::Stub::ListRuns, req);
  if (!resp.ok()) return Fail(resp.status());
  if (ctx.json) {
    for (const auto& r : resp->runs()) std::cout << ToJson(r) << "\n";
    return 0;
  }
  Table t({"RUN", "SWEEP", "CELL", "SEED", "STATE", "TRY", "STEP", "TRAIN", "VAL", "WORKER"});
  for (const auto& r : resp->runs()) {
    const bool done = r.state() == v1::SUCCEEDED || r.state() == v1::DIVERGED;
    t.Add({std::to_string(r.id()), std::to_string(r.sweep_id()), r.cell(), std::to_string(r.seed()),
           StateName(r.state()) + (r.state() == v1::DIVERGED && r.result().diverged_step() > 0
                                       ? absl::StrCat("@", r.result().diverged_step())
                                       : ""),
           absl::StrCat(r.attempt(), "/", r.max_attempts()),
           absl::StrCat(r.step(), "/", r.total_steps()),
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

int Logs(Context& ctx, int64_t run) {
  v1::ListRunEventsRequest req;
  req.set_run_id(run);
  auto resp = ctx.Call("run events", &v1::SweepService::Stub::ListRunEvents, req);
  if (!resp.ok()) return Fail(resp.status());
  if (ctx.json) {
    for (const auto& e : resp->events()) std::cout << ToJson(e) << "\n";
    return 0;
  }
  Table t({"WHEN", "EVENT", "TRY", "WORKER", "MESSAGE"});
  for (const auto& e : resp->events()) {
    t.Add({TimeAgo(e.time()), e.kind(), std::to_string(e.attempt()),
           e.worker().empty() ? "-" : e.worker(), e.message()});
  }
  std::cout << t.Render();
  return 0;
}

namespace {

// The runs a worker holds: "12", "12,13" with --slots, "-" when idle. A server from before
// held_run_ids sends only current_run_id.
std::string HeldRuns(const v1::Worker& w) {
  if (w.held_run_ids_size() > 0) return absl::StrJoin(w.held_run_ids(), ",");
  return w.current_run_id() > 0 ? std::to_string(w.current_run_id()) : "-";
}

}  // namespace

int Workers(Context& ctx, bool include_offline) {
  v1::ListWorkersRequest req;
  req.set_include_offline(include_offline);
  auto resp = ctx.Call("list workers", &v1::SweepService::Stub::ListWorkers, req);
  if (!resp.ok()) return Fail(resp.status());
  if (ctx.json) {
    for (const auto& w : resp->workers()) std::cout << ToJson(w) << "\n";
    return 0;
  }
  Table t({"ID", "NAME", "STATE", "DEVICE", "CORES", "RUNS", "DONE", "SEEN"});
  for (const auto& w : resp->workers()) {
    const auto& i = w.info();
    t.Add(
        {std::to_string(w.id()), i.name(), w.state(),
         absl::StrCat(i.device_kind(), i.device_name().empty() ? "" : " (" + i.device_name() + ")"),
         std::to_string(i.cpu_cores()), HeldRuns(w), std::to_string(w.runs_completed()),
         TimeAgo(w.last_seen_at())});
  }
  if (t.empty()) {
    std::cout << "no workers" << (include_offline ? "" : " online") << "; start one with "
              << "`ablate-worker --server " << ctx.conn.server << " --token T`\n";
  } else {
    std::cout << t.Render();
  }
  return 0;
}

}  // namespace ablate::cli
