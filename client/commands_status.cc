// ls, status, watch: what the sweeps are doing.
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/render.h"
#include "common/util/backoff.h"
#include "common/util/fields.h"

namespace ablate::cli {

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

namespace {

// A follow stream (watch, logs -f) that ended this way lost the server, not its answer: the
// connection dropped or the server stopped (UNAVAILABLE), or the server cancelled the call on its
// way down (this CLI never cancels its own). Reconnected with back-off, saying so on stderr.
bool ServerWentAway(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::CANCELLED;
}

}  // namespace

bool FollowAgain(const char* what, const grpc::Status& status, util::Backoff* backoff,
                 bool* reconnecting) {
  if (!ServerWentAway(status)) return false;
  const auto wait = backoff->Next();
  std::cerr << "ablate: " << what << ": lost the server ("
            << util::Printable(status.error_message()) << "); reconnecting in "
            << Duration(double(wait.count()) / 1000) << "\n";
  *reconnecting = true;
  std::this_thread::sleep_for(wait);
  return true;
}

void FollowResumed(const char* what, util::Backoff* backoff, bool* reconnecting) {
  if (!*reconnecting) return;
  std::cerr << "ablate: " << what << ": reconnected\n";
  *reconnecting = false;
  backoff->Reset();
}

int Watch(Context& ctx, const std::string& sweep_ref, double interval) {
  const bool tty = isatty(STDOUT_FILENO) != 0 && !ctx.json;
  const bool color = tty && UseColor();
  v1::WatchSweepRequest req;
  *req.mutable_sweep() = ParseSweepRef(sweep_ref);
  req.set_min_interval_seconds(interval);
  v1::SweepUpdate update;
  int lines_drawn = 0;
  double last_plain = 0;
  std::string last_plain_line;
  bool finished = false;
  bool any_failed = false;
  util::Backoff backoff(util::kFollowBackoff);
  bool reconnecting = false;
  grpc::Status end;
  do {
    grpc::ClientContext gctx;
    ctx.Prepare(&gctx, -1);  // a watch lasts as long as the sweep
    auto reader = ctx.stub->WatchSweep(&gctx, req);
    while (reader->Read(&update)) {
      FollowResumed("watch", &backoff, &reconnecting);
      const auto& s = update.sweep();
      // By id from the first update on: a name might meanwhile resolve to a newer sweep.
      req.mutable_sweep()->Clear();
      req.mutable_sweep()->set_id(s.id());
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
          : eta < 0     ? ""
                        : absl::StrCat("ETA ", Duration(eta),
                                   s.eta_basis() == "throughput" && eta == s.eta_seconds()
                                           ? " (fleet speed)"
                                           : "");
      if (!tty) {
        // Logs and CI: a line when something changed or every 10 s, never a redraw.
        std::string line = absl::StrCat(
            "sweep ", s.id(), " ", s.name(), ": ", CountsLine(c),
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
    end = reader->Finish();
    // What went to stderr now sits below the frame: the next frame starts afresh.
    if (!end.ok() && !finished) lines_drawn = 0;
  } while (!end.ok() && !finished && FollowAgain("watch", end, &backoff, &reconnecting));
  absl::Status s = rpc::ToAbsl(end, "watch", ctx.conn.server);
  if (!s.ok()) return Fail(s);
  if (!finished) return Fail(absl::UnavailableError("watch ended before the sweep finished"));
  if (!ctx.json) {
    std::cout << "sweep finished" << (any_failed ? " (some runs failed or were cancelled)" : "")
              << "\n";
  }
  return any_failed ? 1 : 0;
}

}  // namespace ablate::cli
