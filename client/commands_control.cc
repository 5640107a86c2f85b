// budget, cancel, retry, delete: changing a sweep that is already submitted.
#include <unistd.h>

#include <cmath>
#include <functional>
#include <iostream>
#include <map>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "client/render.h"
#include "common/run/retry_policy.h"

namespace ablate::cli {

int Budget(Context& ctx, const std::string& sweep_ref, std::optional<double> raise) {
  v1::Sweep sweep;
  if (raise.has_value()) {
    // A raise of 0 would change nothing: refused like any other amount that is not above 0,
    // rather than printing the budget as if it had been raised.
    if (!(*raise > 0) || !std::isfinite(*raise)) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--raise: must be a finite number above 0 (in the budget's unit), not ",
                       *raise, *raise == 0 ? ": raising by 0 changes nothing" : "")));
    }
    v1::SetBudgetRequest req;
    *req.mutable_sweep() = ParseSweepRef(sweep_ref);
    req.set_raise(*raise);
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
