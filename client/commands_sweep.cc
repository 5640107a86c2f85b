// submit, ls, status, watch, cancel, retry, delete.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/render.h"
#include "client/seed_plan.h"
#include "common/sweep/sweep.h"
#include "common/util/file.h"
#include "common/util/retry_policy.h"
#include "nlohmann/json.hpp"

namespace ablate::cli {

v1::SweepRef ParseSweepRef(const std::string& text) {
  v1::SweepRef ref;
  int64_t id = 0;
  if (absl::SimpleAtoi(text, &id) && id > 0) {
    ref.set_id(id);
  } else {
    ref.set_name(text);
  }
  return ref;
}

int ExitCode(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 2;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return 3;
    case absl::StatusCode::kNotFound:
      return 4;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return 5;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      return 6;
    default:
      return 1;
  }
}

namespace {
std::string& UnreachableHint() {
  static auto* hint = new std::string;
  return *hint;
}
}  // namespace

void SetUnreachableHint(std::string hint) { UnreachableHint() = std::move(hint); }

int Fail(const absl::Status& status) {
  std::cerr << "ablate: " << status.message() << "\n";
  const int code = ExitCode(status);
  if (code == 5 && !UnreachableHint().empty()) std::cerr << UnreachableHint();
  return code;
}

absl::StatusOr<v1::GetSweepResponse> FetchSweep(Context& ctx, const std::string& sweep) {
  v1::GetSweepRequest req;
  *req.mutable_sweep() = ParseSweepRef(sweep);
  auto resp = ctx.Call("get sweep", &v1::SweepService::Stub::GetSweep, req);
  if (!resp.ok()) return resp;
  // The runs page by page (the server answers at most kRunsPerPage a call, so no reply of a
  // 100,000-run sweep carries them all), newest first, then turned into queue order.
  v1::ListRunsRequest page;
  page.mutable_sweep()->set_id(resp->sweep().id());
  std::vector<v1::Run> runs;
  while (true) {
    page.set_limit(kRunsPerPage);
    page.set_offset(static_cast<int>(runs.size()));
    auto got = ctx.Call("list runs", &v1::SweepService::Stub::ListRuns, page);
    if (!got.ok()) return got.status();
    for (auto& r : *got->mutable_runs()) runs.push_back(std::move(r));
    if (got->runs().empty() || got->total() == 0 ||
        static_cast<int64_t>(runs.size()) >= got->total()) {
      break;
    }
  }
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) *resp->add_runs() = std::move(*it);
  return resp;
}

namespace {

// The server's dry run of a sweep file: its expansion's count and what it would cost on the fleet.
// `what` names the call in errors (`submit --dry-run` says "submit", as its submit would).
absl::StatusOr<v1::SubmitSweepResponse> AskEstimate(Context& ctx, const std::string& file,
                                                    const std::string& text,
                                                    const char* what = "estimate") {
  v1::SubmitSweepRequest req;
  req.set_spec_yaml(text);
  req.set_file_name(file);
  req.set_dry_run(true);
  return ctx.Call(what, &v1::SweepService::Stub::SubmitSweep, req);
}

}  // namespace

int Submit(Context& ctx, const SubmitArgs& args) {
  auto text = util::ReadFile(args.file);
  if (!text.ok()) {
    return Fail(absl::NotFoundError(absl::StrCat(args.file, ": cannot open sweep file")));
  }
  // Validate locally first: the same parser the server runs, so errors come back at once, with
  // the file's line numbers, and --dry-run needs no server.
  auto parsed = sweep::ParseSweep(*text, args.file);
  if (!parsed.ok()) return Fail(parsed.status());
  auto runs = sweep::Expand(*parsed);
  if (!runs.ok()) return Fail(runs.status());
  if (args.dry_run) {
    // With a server configured, the server's dry run makes every check its submit makes (the
    // data files under its --data-dir, its grid limit) and refuses the same way: the dry run
    // fails as the submit would, with the same message and exit code, before printing anything.
    // Without one, only the file itself is checked, and the output says so.
    std::optional<v1::SubmitSweepResponse> checked;
    if (ctx.stub != nullptr) {
      auto resp = AskEstimate(ctx, args.file, *text, "submit");
      if (!resp.ok()) return Fail(resp.status());
      checked = *std::move(resp);
    }
    if (ctx.json) {
      for (const auto& r : *runs) std::cout << ToJson(r) << "\n";
      return 0;
    }
    std::cout << "sweep '" << parsed->name << "': " << runs->size() << " runs, axes ";
    std::vector<std::string> axes;
    for (const auto& a : parsed->grid)
      axes.push_back(absl::StrCat(a.name, "(", a.values.size(), ")"));
    std::cout << absl::StrJoin(axes, " x ") << "\n";
    std::vector<std::string> header{"#"};
    for (const auto& a : parsed->grid) header.push_back(a.name);
    Table t(header);
    int i = 0;
    for (const auto& r : *runs) {
      std::vector<std::string> row{std::to_string(++i)};
      for (const auto& a : parsed->grid) {
        auto it = r.grid_values().find(a.name);
        row.push_back(it == r.grid_values().end() ? "" : it->second);
      }
      t.Add(row);
    }
    std::cout << t.Render();
    // The grid is local; the estimate needs the fleet, so it follows when a server answered.
    if (!checked) {
      std::cout << "\n(no server configured, so the data files were not checked: with one, "
                   "`ablate estimate "
                << args.file << "` checks them and prices the sweep on the fleet)\n";
      return 0;
    }
    std::cout << "\n" << EstimateText(checked->sweep().name(), checked->estimate());
    return 0;
  }
  v1::SubmitSweepRequest req;
  req.set_spec_yaml(*text);
  req.set_file_name(args.file);
  req.set_priority(args.priority);
  auto resp = ctx.Call("submit", &v1::SweepService::Stub::SubmitSweep, req);
  if (!resp.ok()) return Fail(resp.status());
  if (ctx.json) {
    std::cout << ToJson(*resp) << "\n";
  } else {
    std::cout << "submitted sweep " << resp->sweep().id() << " '" << resp->sweep().name()
              << "': " << resp->runs() << " runs queued\n"
              << "  watch:  ablate watch " << resp->sweep().id() << "\n"
              << "  report: ablate report " << resp->sweep().id() << " --out report/\n";
  }
  if (args.watch) return Watch(ctx, std::to_string(resp->sweep().id()), 1);
  return 0;
}

int Estimate(Context& ctx, const EstimateArgs& args) {
  const std::string& file = args.file;
  auto text = util::ReadFile(file);
  if (!text.ok()) {
    return Fail(absl::NotFoundError(absl::StrCat(file, ": cannot open sweep file")));
  }
  // The same local check as submit, so a bad file fails with its line before any call.
  auto parsed = sweep::ParseSweep(*text, file);
  if (!parsed.ok()) return Fail(parsed.status());
  // The seed plan first: a pilot without spread is a usage error, before the fleet is asked.
  std::optional<SeedPlan> plan;
  std::string pilot_line;
  if (args.plan.sigma) {
    plan = PlanSeeds(*args.plan.sigma, args.plan, CountGrid(*parsed));
  } else if (!args.plan.pilot.empty()) {
    auto pilot = MeasurePilot(ctx, args.plan.pilot);
    if (!pilot.ok()) return Fail(pilot.status());
    const v1::Sweep& s = pilot->sweep;
    if (pilot->pooled.dof == 0) {
      const std::string why = absl::StrCat(
          "--pilot ", args.plan.pilot, ": sweep ", s.id(), " '", s.name(),
          "' has no cell with 2 or more finished seeds that trained, so no seed noise to plan "
          "from; give it seeds, or the noise with --sigma S");
      return args.usage_error ? args.usage_error(why) : Fail(absl::InvalidArgumentError(why));
    }
    plan = PlanSeeds(pilot->pooled.sigma, args.plan, CountGrid(*parsed));
    plan->pilot_sweep = s.id();
    plan->pilot_dof = pilot->pooled.dof;
    pilot_line = absl::StrCat(
        PilotLine(s.id(), pilot->pooled),
        pilot->partial ? " (from its finished runs; others are unfinished or failed)" : "", "\n");
  }
  auto print_plan = [&](const v1::SweepEstimate* estimate) {
    if (ctx.json) {
      nlohmann::ordered_json doc = nlohmann::ordered_json::object();
      if (estimate != nullptr) doc = nlohmann::ordered_json::parse(ToJson(*estimate));
      doc["seed_plan"] = SeedPlanJson(*plan, estimate);
      std::cout << doc.dump() << "\n";
    } else {
      std::cout << pilot_line << SeedPlanText(*plan, estimate);
    }
  };
  if (ctx.stub == nullptr) {  // --sigma without a server configured: the plan, no cost
    print_plan(nullptr);
    if (!ctx.json) {
      std::cout << "  (no server configured, so no cost: with one, `ablate estimate " << file
                << "` prices it on the fleet)\n";
    }
    return 0;
  }
  auto resp = AskEstimate(ctx, file, *text);
  if (!resp.ok()) {
    if (plan) print_plan(nullptr);  // what needs no server still answers
    return Fail(resp.status());
  }
  if (plan) {
    if (!ctx.json) std::cout << EstimateText(resp->sweep().name(), resp->estimate()) << "\n";
    print_plan(&resp->estimate());
  } else if (ctx.json) {
    std::cout << ToJson(resp->estimate()) << "\n";
  } else {
    std::cout << EstimateText(resp->sweep().name(), resp->estimate()) << "\n"
              << SeedPlanHint(args.plan);
  }
  return 0;
}

int Budget(Context& ctx, const std::string& sweep_ref, double raise) {
  v1::Sweep sweep;
  if (raise != 0) {
    if (!(raise > 0) || !std::isfinite(raise)) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "--raise: must be a finite number above 0 (in the budget's unit), not ", raise)));
    }
    v1::SetBudgetRequest req;
    *req.mutable_sweep() = ParseSweepRef(sweep_ref);
    req.set_raise(raise);
    auto resp = ctx.Call("raise budget", &v1::SweepService::Stub::SetBudget, req);
    if (!resp.ok()) return Fail(resp.status());
    sweep = resp->sweep();
  } else {
    v1::GetSweepRequest req;
    *req.mutable_sweep() = ParseSweepRef(sweep_ref);
    auto resp = ctx.Call("get sweep", &v1::SweepService::Stub::GetSweep, req);
    if (!resp.ok()) return Fail(resp.status());
    sweep = resp->sweep();
  }
  if (ctx.json) {
    std::cout << ToJson(sweep.budget()) << "\n";
    return 0;
  }
  if (!sweep.has_budget()) {
    std::cout << "sweep " << sweep.id() << " '" << sweep.name()
              << "' has no budget (set one in the sweep file: budget: {gpu_hours: N} or "
                 "{usd: N})\n";
  } else {
    std::cout << "sweep " << sweep.id() << " '" << sweep.name()
              << "': " << BudgetLine(sweep.budget(), std::to_string(sweep.id())) << "\n";
  }
  for (const auto& line : CostLines(sweep.cost(), true)) std::cout << line << "\n";
  return 0;
}

int ListSweeps(Context& ctx, bool active_only, int limit, bool wide) {
  v1::ListSweepsRequest req;
  req.set_active_only(active_only);
  req.set_limit(limit);
  auto resp = ctx.Call("list sweeps", &v1::SweepService::Stub::ListSweeps, req);
  if (!resp.ok()) return Fail(resp.status());
  if (ctx.json) {
    for (const auto& s : resp->sweeps()) std::cout << ToJson(s) << "\n";
    return 0;
  }
  if (resp->sweeps().empty() && active_only) {
    std::cout << "no active sweeps (`ablate ls` lists finished ones too)\n";
  } else if (resp->sweeps().empty()) {
    std::cout << "no sweeps yet: ablate submit examples/smoke.yaml\n";
  } else {
    std::cout << SweepsTable({resp->sweeps().begin(), resp->sweeps().end()}, wide);
  }
  return 0;
}

namespace {

// Every cell of the sweep, folded by the server a page at a time: status reads no runs, so a
// 100,000-run sweep answers as fast as its cells can be listed.
absl::StatusOr<std::vector<v1::CellSummary>> FetchCells(Context& ctx, int64_t sweep_id) {
  v1::ListCellsRequest req;
  req.mutable_sweep()->set_id(sweep_id);
  req.set_limit(kCellsPerPage);
  std::vector<v1::CellSummary> cells;
  while (true) {
    auto got = ctx.Call("list cells", &v1::SweepService::Stub::ListCells, req);
    if (!got.ok()) return got.status();
    for (auto& c : *got->mutable_cells()) cells.push_back(std::move(c));
    if (got->next_after_cell().empty()) return cells;
    if (got->next_after_cell() == req.after_cell() || got->cells().empty()) {
      // A page that does not move on would be asked for forever.
      return absl::InternalError("list cells: the server answered the same page again");
    }
    req.set_after_cell(got->next_after_cell());
  }
}

// The cell's grid values without the seed, in the sweep's axis order.
std::vector<std::string> CellColumns(const v1::Sweep& sweep, const v1::CellSummary& cell) {
  std::vector<std::string> out;
  for (const auto& axis : sweep.axes()) {
    if (axis == "seed") continue;
    auto it = cell.grid_values().find(axis);
    out.push_back(it == cell.grid_values().end() ? "" : it->second);
  }
  return out;
}

// "2 running, 1 queued": the cell's runs by state, live ones first, as CountsLine orders them.
std::string CellStates(const v1::SweepCounts& c) {
  std::vector<std::string> parts;
  for (const auto& [name, n] : CountsByState(c)) {
    if (n > 0) parts.push_back(absl::StrCat(n, " ", name));
  }
  return absl::StrJoin(parts, ", ");
}

// Axis values compared as numbers where both are, so an LR axis reads as a curve.
bool AxisLess(const std::vector<std::string>& x, const std::vector<std::string>& y) {
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    double dx = 0, dy = 0;
    if (absl::SimpleAtod(x[i], &dx) && absl::SimpleAtod(y[i], &dy)) {
      if (dx != dy) return dx < dy;
    } else if (x[i] != y[i]) {
      return x[i] < y[i];
    }
  }
  return false;
}

}  // namespace

int Status(Context& ctx, const std::string& sweep_ref) {
  v1::GetSweepRequest req;
  *req.mutable_sweep() = ParseSweepRef(sweep_ref);
  auto resp = ctx.Call("get sweep", &v1::SweepService::Stub::GetSweep, req);
  if (!resp.ok()) return Fail(resp.status());
  const v1::Sweep& s = resp->sweep();
  auto cells = FetchCells(ctx, s.id());
  if (!cells.ok()) return Fail(cells.status());
  if (ctx.json) {
    // One document: the sweep and its cells (`ablate runs SWEEP --all` lists the runs).
    std::string out = absl::StrCat("{\"sweep\":", ToJson(s), ",\"cells\":[");
    for (size_t i = 0; i < cells->size(); ++i) {
      absl::StrAppend(&out, i > 0 ? "," : "", ToJson((*cells)[i]));
    }
    std::cout << out << "]}\n";
    return 0;
  }
  // The cells first, the summary last: a sweep of more cells than the screen has lines scrolls
  // its first rows off, not the counts, ETA and budget a glance at the bottom looks for.
  // One row per cell (seeds folded into state counts and a mean loss), sorted by the axes in
  // file order.
  std::vector<std::pair<std::vector<std::string>, const v1::CellSummary*>> rows;
  rows.reserve(cells->size());
  for (const auto& c : *cells) rows.emplace_back(CellColumns(s, c), &c);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return AxisLess(a.first, b.first); });
  std::vector<std::string> header;
  for (const auto& a : s.axes()) {
    if (a != "seed") header.push_back(a);
  }
  header.insert(header.end(), {"RUNS", "VAL LOSS", "PROGRESS"});
  if (s.has_refine()) header.push_back("ADDED BY");
  Table t(header);
  for (const auto& [cols, c] : rows) {
    std::vector<std::string> row = cols;
    row.push_back(CellStates(c->counts()));
    row.push_back(c->loss_runs() > 0 ? Num(c->mean_val_loss()) : "-");
    row.push_back(c->running_total_steps() > 0
                      ? Bar(double(c->running_steps()) / c->running_total_steps(), 10)
                      : "");
    if (s.has_refine()) {
      row.push_back(c->refine_round() > 0 ? absl::StrCat("refine r", c->refine_round()) : "grid");
    }
    t.Add(row);
  }
  std::cout << t.Render() << "\n";
  const std::string held = HeldReason(s);
  std::cout << "sweep " << s.id() << " '" << s.name() << "' (" << s.state()
            << (held.empty() ? "" : ", held: " + held) << "): " << CountsLine(s.counts());
  if (s.state() == "active" && held.empty() && s.eta_seconds() >= 0) {
    std::cout << ", ETA " << Duration(s.eta_seconds())
              << (s.eta_basis() == "throughput" ? " (fleet speed)" : "");
  }
  std::cout << "\n";
  if (s.has_refine()) std::cout << RefineLine(s.refine()) << "\n";
  if (s.has_budget()) std::cout << BudgetLine(s.budget(), std::to_string(s.id())) << "\n";
  for (const auto& line : CostLines(s.cost(), true)) std::cout << line << "\n";
  for (const auto& line : FleetLines(s.counts())) std::cout << line << "\n";
  return 0;
}

namespace {

// Seconds until the sweep ends: the server's estimate once runs have finished (it knows their
// durations); before that, from the running runs' progress, so a first ETA shows within seconds
// of the first steps rather than after the first run ends. -1: unknown.
double EstimateEta(const v1::SweepUpdate& update) {
  const auto& s = update.sweep();
  if (s.eta_seconds() >= 0) return s.eta_seconds();
  const double now = Now();
  double remaining = 0, run_seconds = 0;
  int running = 0;
  for (const auto& r : update.runs()) {
    if (r.state() != v1::RUNNING || r.step() <= 0 || r.total_steps() <= 0 || r.started_at() <= 0 ||
        now <= r.started_at()) {
      continue;
    }
    const double rate = double(r.step()) / (now - r.started_at());  // steps per second
    remaining += double(std::max<int64_t>(0, r.total_steps() - r.step())) / rate;
    run_seconds += double(r.total_steps()) / rate;
    ++running;
  }
  if (running == 0) return -1;
  // Queued runs take as long as the running ones do, spread over as many workers as are busy.
  const auto& c = s.counts();
  const double queued = c.queued() + c.leased() + (c.running() - running);
  return (remaining + queued * run_seconds / running) / running;
}

}  // namespace

int Watch(Context& ctx, const std::string& sweep_ref, double interval) {
  const bool tty = isatty(STDOUT_FILENO) != 0 && !ctx.json;
  const bool color = tty && UseColor();
  grpc::ClientContext gctx;
  ctx.Prepare(&gctx, -1);  // a watch lasts as long as the sweep
  v1::WatchSweepRequest req;
  *req.mutable_sweep() = ParseSweepRef(sweep_ref);
  req.set_min_interval_seconds(interval);
  auto reader = ctx.stub->WatchSweep(&gctx, req);
  v1::SweepUpdate update;
  int lines_drawn = 0;
  double last_plain = 0;
  std::string last_plain_line;
  bool finished = false;
  bool any_failed = false;
  while (reader->Read(&update)) {
    const auto& s = update.sweep();
    const auto& c = s.counts();
    finished = update.finished();
    any_failed = c.failed() > 0 || c.cancelled() > 0;
    if (ctx.json) {
      std::cout << ToJson(update) << std::endl;
      continue;
    }
    const std::string held = finished ? "" : HeldReason(s);
    const double eta = finished || !held.empty() ? -1 : EstimateEta(update);
    const std::string eta_text =
        !held.empty() ? absl::StrCat("held: ", held)
        : eta < 0
            ? ""
            : absl::StrCat(
                  "ETA ", Duration(eta),
                  s.eta_basis() == "throughput" && eta == s.eta_seconds() ? " (fleet speed)" : "");
    if (!tty) {
      // Logs and CI: a line when something changed or every 10 s, never a redraw.
      std::string line =
          absl::StrCat("sweep ", s.id(), " ", s.name(), ": ", CountsLine(c),
                       s.budget().reached() && held != "budget reached" ? ", budget reached" : "");
      for (const auto& fleet : FleetLines(c)) absl::StrAppend(&line, "; ", fleet);
      if (finished || line != last_plain_line || Now() - last_plain >= 10) {
        std::cout << line << (eta_text.empty() ? "" : ", " + eta_text) << std::endl;
        last_plain = Now();
        last_plain_line = line;
      }
      continue;
    }
    // One frame, every line within the terminal's width (a wrapped line would break the
    // cursor-up redraw and leave copies behind), at most a screenful tall for the same reason.
    const auto [width, height] = TerminalSize();
    const std::vector<std::string> lines = WatchFrame(update, eta_text, width, height, color);
    std::string frame;
    // Back to the first line of the previous frame, and clear from there down.
    if (lines_drawn > 0) absl::StrAppend(&frame, "\r\033[", lines_drawn, "A\033[J");
    for (const auto& l : lines) absl::StrAppend(&frame, l, "\n");
    std::cout << frame << std::flush;
    lines_drawn = static_cast<int>(lines.size());
  }
  absl::Status s = rpc::ToAbsl(reader->Finish(), "watch", ctx.conn.server);
  if (!s.ok()) return Fail(s);
  if (!finished) return Fail(absl::UnavailableError("watch ended before the sweep finished"));
  if (!ctx.json) {
    std::cout << "sweep finished" << (any_failed ? " (some runs failed or were cancelled)" : "")
              << "\n";
  }
  return any_failed ? 1 : 0;
}

namespace {

std::string SweepLabel(const v1::Sweep& s) {
  return absl::StrCat("sweep ", s.id(), " '", s.name(), "'");
}

// The named runs of `sweep`, each checked: a run of another sweep (or none) is NotFound (exit 4),
// one in a state `allowed` refuses is FailedPrecondition (exit 6) with the reason it gives.
// Checked before the call so that asking for the impossible is an error, never a silent
// "0 runs"; the server applies the same state filter, so a run that changes state meanwhile is
// skipped, not mishandled.
absl::Status CheckRuns(const v1::GetSweepResponse& sweep, const std::vector<int64_t>& ids,
                       const std::function<std::string(const v1::Run&)>& refusal) {
  std::map<int64_t, const v1::Run*> by_id;
  for (const auto& r : sweep.runs()) by_id[r.id()] = &r;
  for (int64_t id : ids) {
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      return absl::NotFoundError(absl::StrCat("run ", id, " is not a run of ",
                                              SweepLabel(sweep.sweep()), " (`ablate runs ",
                                              sweep.sweep().id(), "` lists them)"));
    }
    if (std::string why = refusal(*it->second); !why.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("run ", id, " is ", StateName(it->second->state()), ": ", why));
    }
  }
  return absl::OkStatus();
}

// Sends a cancel; nothing cancelled is an error (exit 6), as an empty retry is.
int SendCancel(Context& ctx, const v1::CancelSweepRequest& req) {
  auto resp = ctx.Call("cancel", &v1::SweepService::Stub::CancelSweep, req);
  if (!resp.ok()) return Fail(resp.status());
  if (resp->cancelled() == 0) {
    return Fail(absl::FailedPreconditionError(
        req.has_sweep()
            ? "nothing was cancelled: the runs finished before the cancel reached the server"
            : "nothing was cancelled: the runs have finished"));
  }
  if (ctx.json) {
    std::cout << ToJson(*resp) << "\n";
  } else {
    std::cout << "cancelled " << resp->cancelled()
              << " run(s); running ones stop at their next heartbeat\n";
  }
  return 0;
}

}  // namespace

int Cancel(Context& ctx, const std::string& sweep, const std::vector<int64_t>& runs) {
  v1::CancelSweepRequest req;
  for (auto r : runs) req.add_run_ids(r);
  if (sweep.empty()) return SendCancel(ctx, req);  // the server finds each run's sweep
  auto current = FetchSweep(ctx, sweep);
  if (!current.ok()) return Fail(current.status());
  auto refusal = [](const v1::Run& r) -> std::string {
    return IsTerminal(r.state()) ? "it has finished, so there is nothing to cancel" : "";
  };
  if (absl::Status s = CheckRuns(*current, runs, refusal); !s.ok()) return Fail(s);
  if (runs.empty()) {
    const auto& c = current->sweep().counts();
    if (c.queued() + c.leased() + c.running() == 0) {
      return Fail(absl::FailedPreconditionError(
          absl::StrCat(SweepLabel(current->sweep()), " has no unfinished runs (", CountsLine(c),
                       "): nothing to cancel")));
    }
  }
  req.mutable_sweep()->set_id(current->sweep().id());
  return SendCancel(ctx, req);
}

int Retry(Context& ctx, const std::string& sweep, const std::vector<int64_t>& runs,
          const std::vector<std::string>& states) {
  v1::RetryRunsRequest req;
  for (const auto& name : states) {
    auto st = ParseRunState(name);
    if (!st.ok()) return Fail(st.status());
    if (!util::IsRetryable(*st)) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("retry: --state ", name, ": ", util::RetryRefusal(*st))));
    }
    req.add_states(*st);
  }
  auto current = FetchSweep(ctx, sweep);
  if (!current.ok()) return Fail(current.status());
  auto refusal = [](const v1::Run& r) { return util::RetryRefusal(r.state()); };
  if (absl::Status s = CheckRuns(*current, runs, refusal); !s.ok()) return Fail(s);
  req.mutable_sweep()->set_id(current->sweep().id());
  for (auto r : runs) req.add_run_ids(r);
  auto resp = ctx.Call("retry", &v1::SweepService::Stub::RetryRuns, req);
  if (!resp.ok()) return Fail(resp.status());
  if (resp->requeued() == 0) {  // as `cancel` with nothing to cancel: refused (exit 6)
    return Fail(absl::FailedPreconditionError(
        absl::StrCat(SweepLabel(current->sweep()), " has no ", util::RetryableList(), " runs",
                     states.empty() ? "" : " in the states asked for", " (",
                     CountsLine(current->sweep().counts()), "): nothing to retry")));
  }
  if (ctx.json) {
    std::cout << ToJson(*resp) << "\n";
  } else {
    std::cout << "requeued " << resp->requeued() << " run(s)\n";
  }
  return 0;
}

int Delete(Context& ctx, const std::string& sweep, bool yes) {
  // A dry run first: an unknown sweep (exit 4) or a live one (exit 6) is refused before anything
  // is asked, and the question can say what would go.
  v1::DeleteSweepRequest req;
  *req.mutable_sweep() = ParseSweepRef(sweep);
  req.set_dry_run(true);
  auto would = ctx.Call("delete", &v1::SweepService::Stub::DeleteSweep, req);
  if (!would.ok()) return Fail(would.status());
  if (!yes) {
    if (isatty(STDIN_FILENO) == 0) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "delete: stdin is not a terminal, so nothing can confirm; pass --yes to delete sweep ",
          would->sweep_id(), " without asking")));
    }
    std::cerr << "delete sweep " << would->sweep_id() << " '" << would->name()
              << "': " << would->runs() << " runs, their metrics and " << would->checkpoints()
              << " stored checkpoints? [y/N] " << std::flush;
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != "y" && answer != "Y" && answer != "yes") {
      std::cerr << "not deleted\n";
      return 1;
    }
  }
  // By id: the name might meanwhile resolve to a newer sweep.
  req.mutable_sweep()->Clear();
  req.mutable_sweep()->set_id(would->sweep_id());
  req.set_dry_run(false);
  auto gone = ctx.Call("delete", &v1::SweepService::Stub::DeleteSweep, req);
  if (!gone.ok()) return Fail(gone.status());
  if (ctx.json) {
    std::cout << ToJson(*gone) << "\n";
  } else {
    std::cout << "deleted sweep " << gone->sweep_id() << " '" << gone->name()
              << "': " << gone->runs() << " runs, " << gone->metric_points() << " metric points, "
              << gone->checkpoints() << " checkpoints (" << gone->checkpoint_files() << " files, "
              << gone->checkpoint_bytes() << " bytes removed from the store)\n";
  }
  return 0;
}

}  // namespace ablate::cli
