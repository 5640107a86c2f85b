// submit and estimate: a sweep file sent to the server, as a real submit or a dry run.
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/render.h"
#include "client/seed_plan.h"
#include "common/sweep/sweep.h"
#include "common/util/file.h"
#include "nlohmann/json.hpp"

namespace ablate::cli {

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

}  // namespace ablate::cli
