// The seed plan `ablate estimate` prints (client/seed_plan.h).
#include "client/seed_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/render.h"
#include "common/analysis/inference.h"
#include "common/analysis/refine.h"

namespace ablate::cli {
namespace {

absl::Status Bad(const char* flag, double value, const char* rule) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", value, ": ", rule));
}

int AxisValues(const sweep::SweepSpec& spec, const std::string& axis) {
  for (const auto& a : spec.grid) {
    if (a.name == axis) return std::max<int>(1, static_cast<int>(a.values.size()));
  }
  return 1;
}

std::string Seeds(int n, bool at_cap) {
  return at_cap ? absl::StrCat(n, " or more") : std::to_string(n);
}

// "a" or "a–b" (the grid to the grid plus refinement's maximum), as the estimate's table shows.
std::string Span(const std::string& lo, const std::string& hi) {
  return lo == hi ? lo : absl::StrCat(lo, "–", hi);
}

// The estimate's figure x scale; -1 (unknown) stays -1.
double Scaled(double value, double scale) { return value < 0 ? -1 : value * scale; }

}  // namespace

absl::Status CheckSeedPlanFlags(const SeedPlanFlags& f) {
  if (!(f.effect > 0) || !std::isfinite(f.effect)) {
    return Bad("--effect", f.effect, "must be a finite number of nats above 0");
  }
  if (!(f.power > 0 && f.power < 1)) return Bad("--power", f.power, "must be in (0, 1), e.g. 0.8");
  if (!(f.alpha > 0 && f.alpha < 0.5)) {
    return Bad("--alpha", f.alpha, "must be in (0, 0.5), e.g. 0.05");
  }
  if (f.sigma && (!(*f.sigma > 0) || !std::isfinite(*f.sigma))) {
    return Bad("--sigma", *f.sigma, "must be a finite number of nats above 0");
  }
  if (f.sigma && !f.pilot.empty()) {
    return absl::InvalidArgumentError(
        "--sigma and --pilot: give one (the seed noise, or a sweep to measure it from)");
  }
  return absl::OkStatus();
}

GridCounts CountGrid(const sweep::SweepSpec& spec) {
  GridCounts g;
  // The axes the report's tests group by: the file's `analysis:` moderator, and the LR axis the
  // report compares on (analysis::Options' lr_axis, as `ablate report` uses it).
  g.moderator_axis = analysis::PlanningOptions(spec).moderator_axis;
  g.lrs = AxisValues(spec, analysis::Options{}.lr_axis);
  g.moderators = AxisValues(spec, g.moderator_axis);
  g.seeds = AxisValues(spec, "seed");
  return g;
}

SeedPlan PlanSeeds(double sigma, const SeedPlanFlags& flags, const GridCounts& grid) {
  SeedPlan p;
  p.sigma = sigma;
  p.effect = flags.effect;
  p.power = flags.power;
  p.alpha = flags.alpha;
  p.grid = grid;
  // The families as the report's tests control them (docs/report.md#verdicts-as-tests).
  p.families = {
      {"H1/eta-dagger", grid.lrs * grid.moderators, 0}, {"H2", 3, 0}, {"H3", grid.moderators, 0}};
  for (auto& f : p.families) {
    if (f.name == "H3" && grid.moderators < 2) continue;  // no trend over a single value
    f.seeds = analysis::SeedsForPower(sigma, flags.effect, flags.alpha, flags.power, f.comparisons,
                                      kSeedCap);
    p.seeds = std::max(p.seeds, f.seeds);
  }
  p.at_cap = p.seeds >= kSeedCap;
  p.cost_scale = static_cast<double>(p.seeds) / std::max(1, grid.seeds);
  return p;
}

std::string PilotLine(int64_t sweep_id, const analysis::PooledNoise& pooled) {
  return absl::StrFormat("pilot sweep %d: sigma %s nats from %d dof", sweep_id,
                         Num(pooled.sigma, 2), pooled.dof);
}

std::string SeedPlanText(const SeedPlan& p, const v1::SweepEstimate* estimate) {
  std::vector<std::string> parts;
  for (const auto& f : p.families) {
    if (f.seeds == 0) {
      parts.push_back(absl::StrCat(f.name, " n/a (one ", p.grid.moderator_axis, " value)"));
      continue;
    }
    const std::string over = f.comparisons == 1
                                 ? std::string("1 comparison")
                                 : absl::StrCat("Holm over ", f.comparisons, " comparisons");
    // "seeds" once, after the first family: "H1/eta-dagger 4 seeds (...), H2 3 (...)".
    parts.push_back(absl::StrCat(f.name, " ", Seeds(f.seeds, f.seeds >= kSeedCap),
                                 parts.empty() ? " seeds" : "", " (", over, ")"));
  }
  std::string out = absl::StrCat(
      "seed plan (sigma ", Num(p.sigma, 2), " nats, effect ", Num(p.effect, 3), ", power ",
      Num(100 * p.power, 3), "%, alpha ", Num(p.alpha, 3), "): ", absl::StrJoin(parts, ", "),
      "\n  -> ", Seeds(p.seeds, p.at_cap), " seeds per cell (the file has ", p.grid.seeds, ")");
  if (estimate == nullptr) return absl::StrCat(out, "\n");
  const v1::SweepEstimate& e = *estimate;
  if (e.wall_seconds_base() < 0) {
    absl::StrAppend(&out, ": cost unknown (no live worker with a known speed can run it)\n");
    return out;
  }
  const double k = p.cost_scale;
  absl::StrAppend(&out, ": ",
                  Span(GpuHours(Scaled(e.device_seconds_base(), k)),
                       GpuHours(Scaled(e.device_seconds_max(), k))));
  if (e.usd_base() >= 0) {
    absl::StrAppend(&out, ", ", Span(Usd(Scaled(e.usd_base(), k)), Usd(Scaled(e.usd_max(), k))));
  }
  absl::StrAppend(
      &out, ", ~",
      Span(Duration(Scaled(e.wall_seconds_base(), k)), Duration(Scaled(e.wall_seconds_max(), k))),
      " wall on the live fleet\n");
  return out;
}

std::string SeedPlanHint(const SeedPlanFlags& flags) {
  return absl::StrCat(
      "seed plan: add --sigma S (the seed noise in nats) or --pilot SWEEP (a "
      "finished sweep with 2+ seeds) for the seeds per cell that detect ",
      Num(flags.effect, 3), " nats\n");
}

nlohmann::ordered_json SeedPlanJson(const SeedPlan& p, const v1::SweepEstimate* estimate) {
  nlohmann::ordered_json families = nlohmann::ordered_json::array();
  for (const auto& f : p.families) {
    nlohmann::ordered_json j = {{"name", f.name}, {"comparisons", f.comparisons}};
    j["seeds"] = f.seeds > 0 ? nlohmann::ordered_json(f.seeds) : nlohmann::ordered_json(nullptr);
    families.push_back(std::move(j));
  }
  nlohmann::ordered_json out = {{"sigma", p.sigma},
                                {"effect", p.effect},
                                {"power", p.power},
                                {"alpha", p.alpha},
                                {"lr_values", p.grid.lrs},
                                {"moderator_axis", p.grid.moderator_axis},
                                {"moderator_values", p.grid.moderators},
                                {"file_seeds", p.grid.seeds},
                                {"families", std::move(families)},
                                {"seeds", p.seeds},
                                {"at_cap", p.at_cap},
                                {"cost_scale", p.cost_scale}};
  if (p.pilot_sweep > 0) {
    out["pilot_sweep"] = p.pilot_sweep;
    out["pilot_dof"] = p.pilot_dof;
  }
  if (estimate != nullptr) {
    const double k = p.cost_scale;
    const auto hours = [k](double seconds) { return seconds < 0 ? -1 : seconds * k / 3600; };
    out["device_hours_base"] = hours(estimate->device_seconds_base());
    out["device_hours_max"] = hours(estimate->device_seconds_max());
    out["usd_base"] = Scaled(estimate->usd_base(), k);
    out["usd_max"] = Scaled(estimate->usd_max(), k);
    out["wall_seconds_base"] = Scaled(estimate->wall_seconds_base(), k);
    out["wall_seconds_max"] = Scaled(estimate->wall_seconds_max(), k);
  }
  return out;
}

}  // namespace ablate::cli
