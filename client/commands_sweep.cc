// submit, ls, status, watch, cancel, retry.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/render.h"
#include "common/sweep/sweep.h"
#include "common/util/file.h"

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

int Fail(const absl::Status& status) {
  std::cerr << "ablate: " << status.message() << "\n";
  return ExitCode(status);
}

absl::StatusOr<v1::GetSweepResponse> FetchSweep(Context& ctx, const std::string& sweep) {
  v1::GetSweepRequest req;
  *req.mutable_sweep() = ParseSweepRef(sweep);
  req.set_include_runs(true);
  return ctx.Call("get sweep", &v1::SweepService::Stub::GetSweep, req);
}

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

int ListSweeps(Context& ctx, bool active_only, int limit) {
  v1::ListSweepsRequest req;
  req.set_active_only(active_only);
  req.set_limit(limit);
  auto resp = ctx.Call("list sweeps", &v1::SweepService::Stub::ListSweeps, req);
  if (!resp.ok()) return Fail(resp.status());
  if (ctx.json) {
    for (const auto& s : resp->sweeps()) std::cout << ToJson(s) << "\n";
    return 0;
  }
  Table t({"ID", "NAME", "STATE", "PROGRESS", "RUNS", "ETA", "CREATED"});
  for (const auto& s : resp->sweeps()) {
    const auto& c = s.counts();
    const int done = c.succeeded() + c.diverged() + c.failed() + c.cancelled() + c.skipped();
    t.Add({std::to_string(s.id()), s.name(), s.state(),
           Bar(c.total() > 0 ? double(done) / c.total() : 0, 20), CountsLine(c),
           s.state() == "active" ? Duration(s.eta_seconds()) : "-", TimeAgo(s.created_at())});
  }
  if (t.empty()) {
    std::cout << "no sweeps yet: ablate submit examples/smoke.yaml\n";
  } else {
    std::cout << t.Render();
  }
  return 0;
}

namespace {

// The cell's grid values without the seed, in the sweep's axis order.
std::vector<std::string> CellColumns(const v1::Sweep& sweep, const v1::Run& run) {
  std::vector<std::string> out;
  for (const auto& axis : sweep.axes()) {
    if (axis == "seed") continue;
    auto it = run.grid_values().find(axis);
    out.push_back(it == run.grid_values().end() ? "" : it->second);
  }
  return out;
}

double RunLoss(const v1::Run& r) {
  if (r.state() == v1::SUCCEEDED) return r.result().final_val_loss();
  if (r.state() == v1::DIVERGED) return NAN;
  return r.latest_val_loss() > 0 ? r.latest_val_loss() : NAN;
}

}  // namespace

int Status(Context& ctx, const std::string& sweep_ref) {
  auto resp = FetchSweep(ctx, sweep_ref);
  if (!resp.ok()) return Fail(resp.status());
  if (ctx.json) {
    std::cout << ToJson(*resp) << "\n";
    return 0;
  }
  const auto& s = resp->sweep();
  std::cout << "sweep " << s.id() << " '" << s.name() << "' (" << s.state()
            << "): " << CountsLine(s.counts());
  if (s.state() == "active" && s.eta_seconds() >= 0)
    std::cout << ", ETA " << Duration(s.eta_seconds());
  std::cout << "\n";
  if (s.has_refine()) std::cout << RefineLine(s.refine()) << "\n";
  std::cout << "\n";
  // One row per cell; seeds folded into state counts and a mean loss.
  struct Cell {
    std::vector<std::string> cols;
    std::map<std::string, int> states;
    double loss_sum = 0;
    int loss_n = 0;
    int64_t step = 0, total = 0;
    int round = 0;  // the refinement round that added the cell (0: the base grid)
  };
  std::map<std::string, Cell> cells;
  std::vector<std::string> order;
  for (const auto& r : resp->runs()) {
    auto [it, fresh] = cells.try_emplace(r.cell());
    if (fresh) {
      it->second.cols = CellColumns(s, r);
      it->second.round = r.refine_round();
      order.push_back(r.cell());
    }
    it->second.states[StateName(r.state())]++;
    const double l = RunLoss(r);
    if (std::isfinite(l)) {
      it->second.loss_sum += l;
      it->second.loss_n++;
    }
    if (r.state() == v1::RUNNING) {
      it->second.step += r.step();
      it->second.total += r.total_steps();
    }
  }
  // Rows sorted by the axes in file order, numbers numerically, so an LR axis reads as a curve.
  std::sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) {
    const auto& x = cells[a].cols;
    const auto& y = cells[b].cols;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      double dx = 0, dy = 0;
      if (absl::SimpleAtod(x[i], &dx) && absl::SimpleAtod(y[i], &dy)) {
        if (dx != dy) return dx < dy;
      } else if (x[i] != y[i]) {
        return x[i] < y[i];
      }
    }
    return false;
  });
  std::vector<std::string> header;
  for (const auto& a : s.axes()) {
    if (a != "seed") header.push_back(a);
  }
  header.insert(header.end(), {"RUNS", "VAL LOSS", "PROGRESS"});
  if (s.has_refine()) header.push_back("ADDED BY");
  Table t(header);
  for (const auto& key : order) {
    const Cell& c = cells[key];
    std::vector<std::string> row = c.cols;
    std::vector<std::string> st;
    for (const auto& [name, n] : c.states) st.push_back(absl::StrCat(n, " ", name));
    row.push_back(absl::StrJoin(st, ", "));
    row.push_back(c.loss_n > 0 ? Num(c.loss_sum / c.loss_n) : "-");
    row.push_back(c.total > 0 ? Bar(double(c.step) / c.total, 10) : "");
    if (s.has_refine()) row.push_back(c.round > 0 ? absl::StrCat("refine r", c.round) : "grid");
    t.Add(row);
  }
  std::cout << t.Render();
  return 0;
}

int Watch(Context& ctx, const std::string& sweep_ref, double interval) {
  const bool tty = isatty(STDOUT_FILENO) != 0 && !ctx.json;
  grpc::ClientContext gctx;
  ctx.Prepare(&gctx, -1);  // a watch lasts as long as the sweep
  v1::WatchSweepRequest req;
  *req.mutable_sweep() = ParseSweepRef(sweep_ref);
  req.set_min_interval_seconds(interval);
  auto reader = ctx.stub->WatchSweep(&gctx, req);
  v1::SweepUpdate update;
  int lines_drawn = 0;
  double last_plain = 0;
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
    const int done = c.succeeded() + c.diverged() + c.failed() + c.cancelled() + c.skipped();
    const double frac = c.total() > 0 ? double(done) / c.total() : 0;
    if (!tty) {
      // Logs and CI: one line per state change or every 10 s, never a redraw.
      if (finished || Now() - last_plain >= 10) {
        std::cout << "sweep " << s.id() << " " << s.name() << ": " << CountsLine(c)
                  << (s.eta_seconds() >= 0 && !finished ? ", ETA " + Duration(s.eta_seconds()) : "")
                  << std::endl;
        last_plain = Now();
      }
      continue;
    }
    std::ostringstream frame;
    frame << "sweep " << s.id() << " '" << s.name() << "'  " << Bar(frac, 30) << " "
          << static_cast<int>(std::round(100 * frac)) << "%  " << CountsLine(c);
    if (!finished && s.eta_seconds() >= 0) frame << "  ETA " << Duration(s.eta_seconds());
    frame << "\n";
    int lines = 1;
    if (s.has_refine()) {
      frame << "  " << RefineLine(s.refine()) << "\n";
      ++lines;
    }
    for (const auto& r : update.runs()) {
      if (r.state() != v1::RUNNING && r.state() != v1::LEASED) continue;
      const double f = r.total_steps() > 0 ? double(r.step()) / r.total_steps() : 0;
      frame << "  run " << r.id() << " " << r.cell() << " seed " << r.seed()
            << (r.refine_round() > 0 ? absl::StrCat(" (refine r", r.refine_round(), ")") : "")
            << "  " << Bar(f, 20) << " " << r.step() << "/" << r.total_steps() << "  loss "
            << (r.latest_train_loss() > 0 ? Num(r.latest_train_loss()) : "-") << "  on "
            << (r.worker().empty() ? "?" : r.worker()) << "\n";
      ++lines;
    }
    // Move the cursor back over the previous frame and clear it.
    for (int i = 0; i < lines_drawn; ++i) std::cout << "\033[1A\033[2K";
    std::cout << frame.str() << std::flush;
    lines_drawn = lines;
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

int Cancel(Context& ctx, const std::string& sweep, const std::vector<int64_t>& runs) {
  v1::CancelSweepRequest req;
  *req.mutable_sweep() = ParseSweepRef(sweep);
  for (auto r : runs) req.add_run_ids(r);
  auto resp = ctx.Call("cancel", &v1::SweepService::Stub::CancelSweep, req);
  if (!resp.ok()) return Fail(resp.status());
  if (ctx.json) {
    std::cout << ToJson(*resp) << "\n";
  } else {
    std::cout << "cancelled " << resp->cancelled()
              << " run(s); running ones stop at their next heartbeat\n";
  }
  return 0;
}

int Retry(Context& ctx, const std::string& sweep, const std::vector<int64_t>& runs,
          const std::vector<std::string>& states) {
  v1::RetryRunsRequest req;
  *req.mutable_sweep() = ParseSweepRef(sweep);
  for (auto r : runs) req.add_run_ids(r);
  for (const auto& name : states) {
    auto st = ParseRunState(name);
    if (!st.ok()) return Fail(st.status());
    req.add_states(*st);
  }
  auto resp = ctx.Call("retry", &v1::SweepService::Stub::RetryRuns, req);
  if (!resp.ok()) return Fail(resp.status());
  if (ctx.json) {
    std::cout << ToJson(*resp) << "\n";
  } else {
    std::cout << "requeued " << resp->requeued() << " run(s)\n";
  }
  return 0;
}

}  // namespace ablate::cli
