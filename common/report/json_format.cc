#include <cmath>

#include "common/report/report.h"
#include "nlohmann/json.hpp"

namespace ablate::report {
namespace {

using nlohmann::json;

json Opt(const std::optional<double>& x) {
  return x && std::isfinite(*x) ? json(*x) : json(nullptr);
}

// An interval as [lo, hi]; null without one. An infinite end is null: for η† +infinity is
// "never" (no η† in that share of resamples), so [0.003, null] is "from 0.003 to never". A 0 end
// of max stable or good LR stays 0: "none" (below the smallest LR), as the analysis has it.
json Ci(const std::optional<analysis::Interval>& ci) {
  if (!ci) return nullptr;
  return json::array({Opt(ci->lo), Opt(ci->hi)});
}

json PointJson(const analysis::Point& p) {
  json j = {{"lr", p.lr},
            {"lr_text", p.lr_text},
            {"l0", Opt(p.l0)},
            {"loss", Opt(p.loss)},
            {"loss_ci", Ci(p.loss_ci)},
            {"loss_std", Opt(p.loss_std)},
            {"train_loss", Opt(p.train_loss)},
            {"perplexity", Opt(p.perplexity)},
            {"steps_to_threshold", Opt(p.steps_to_threshold)},
            {"n", p.n},
            {"n_diverged", p.n_diverged},
            {"n_diverged_grid", p.n_diverged_grid},
            {"n_extra_seeds", p.n_extra_seeds},
            {"n_untrained", p.n_untrained},
            {"n_pending", p.n_pending},
            {"n_failed", p.n_failed},
            {"n_cancelled", p.n_cancelled},
            {"n_absent", p.n_absent},
            {"n_inferred", p.n_inferred},
            {"refine_round", p.refine_round},
            {"run_ids", p.run_ids},
            {"probes", json::object()}};
  for (const auto& [name, v] : p.probes) j["probes"][name] = v;
  j["mixed"] = p.mixed;
  j["provenance"] = json::array();
  for (const auto& [prov, n] : p.provenance) {
    j["provenance"].push_back({{"device_kind", prov.device_kind},
                               {"dtype", prov.dtype},
                               {"torch_version", prov.torch_version},
                               {"tokenizer_sha256", prov.tokenizer_sha256},
                               {"runs", n}});
  }
  return j;
}

}  // namespace

std::string FormatJson(const analysis::Analysis& a) {
  const auto& o = a.options;
  json j = {{"options",
             {{"variant_axis", o.variant_axis},
              {"moderator_axis", o.moderator_axis},
              {"lr_axis", o.lr_axis},
              {"lr_range", {o.lr_min, o.lr_max}},
              {"delta_floor", o.delta_floor},
              {"tau", o.tau},
              {"alpha", o.alpha},
              {"bootstrap_resamples", o.bootstrap_resamples},
              {"bootstrap_seed", o.bootstrap_seed},
              {"effect", o.effect},
              {"power", o.power},
              {"untrained_margin", o.untrained_margin}}},
            // What every "_ci" interval is; resamples is what was drawn (0: no intervals).
            {"uncertainty",
             {{"method", "seed bootstrap"},
              {"resamples", a.bootstrap_resamples},
              {"seed", o.bootstrap_seed},
              {"level", 1 - o.alpha}}},
            {"adaptive_seed_cells", a.adaptive_seed_cells},
            {"baseline", a.baseline},
            {"variants", a.variants},
            {"moderators", a.moderators},
            {"contexts", a.contexts},
            {"runs", a.runs},
            {"finished", a.finished},
            {"diverged", a.diverged},
            {"pending", a.pending},
            {"failed", a.failed},
            {"cancelled", a.cancelled},
            {"absent", a.absent},
            {"inferred", a.inferred},
            {"refined", a.refined},
            {"unresolved_by_budget", a.unresolved_by_budget},
            {"partial", a.partial},
            {"notes", a.notes},
            {"mixed", json::array()},
            {"curves", json::array()},
            {"necessity", json::array()},
            {"verdicts", json::array()}};
  for (const auto& c : a.curves) {
    json cj = {{"context", c.context},
               {"variant", c.variant},
               {"moderator", c.moderator},
               {"l0", Opt(c.l0)},
               {"opt_lr", Opt(c.opt_lr)},
               {"opt_loss", Opt(c.opt_loss)},
               {"opt_fitted", c.opt_fitted},
               {"opt_clamped", c.opt_clamped},
               {"opt_lr_ci", Ci(c.opt_lr_ci)},
               {"opt_loss_ci", Ci(c.opt_loss_ci)},
               {"best_lr", Opt(c.best_lr)},
               {"seed_sigma", Opt(c.seed_sigma)},
               {"seed_dof", c.seed_dof},
               {"lr_sensitivity", Opt(c.lr_sensitivity)},
               {"lr_sensitivity_ci", Ci(c.lr_sensitivity_ci)},
               {"lr_sensitivity_coverage", Opt(c.lr_sensitivity_coverage)},
               {"lr_sensitivity_paper", Opt(c.lr_sensitivity_paper)},
               {"paper_points", c.paper_points},
               {"sensitivity_points", c.sensitivity_points},
               {"sensitivity_inferred", c.sensitivity_inferred},
               {"max_stable_lr", Opt(c.max_stable_lr)},
               {"max_good_lr", Opt(c.max_good_lr)},
               {"max_stable_ci", Ci(c.max_stable_ci)},
               {"max_good_ci", Ci(c.max_good_ci)},
               {"max_stable_bracket", {Opt(c.max_stable_lr), Opt(c.max_stable_above)}},
               {"max_good_bracket", {Opt(c.max_good_lr), Opt(c.max_good_above)}},
               {"max_stable_unresolved_by_budget", c.max_stable_unresolved_by_budget},
               {"max_good_unresolved_by_budget", c.max_good_unresolved_by_budget},
               {"opt_unresolved_by_budget", c.opt_unresolved_by_budget},
               {"seeds", c.seeds},
               {"complete", c.complete},
               {"mixed", c.mixed},
               {"points", json::array()}};
    for (const auto& p : c.points) cj["points"].push_back(PointJson(p));
    j["curves"].push_back(std::move(cj));
  }
  for (const auto& n : a.necessity) {
    j["necessity"].push_back({{"context", n.context},
                              {"moderator", n.moderator},
                              {"baseline", n.baseline},
                              {"variant", n.variant},
                              {"eta_dagger", Opt(n.eta_dagger)},
                              {"eta_dagger_ci", Ci(n.eta_dagger_ci)},
                              {"never_share", n.never_share},
                              {"censored", n.censored},
                              {"censored_at", Opt(n.censored_at)},
                              {"censor_reason", n.censor_reason},
                              {"interpolated", n.interpolated},
                              {"bracket", {Opt(n.bracket_lo), Opt(n.bracket_hi)}},
                              {"cap", Opt(n.cap)},
                              {"inferred", n.inferred},
                              {"unresolved_by_budget", n.unresolved_by_budget},
                              {"detail", n.detail},
                              {"mixed", n.mixed},
                              {"deciding_lrs", n.deciding_lrs},
                              {"seeds", n.seeds}});
  }
  for (const auto& v : a.verdicts) {
    j["verdicts"].push_back({{"hypothesis", v.hypothesis},
                             {"outcome", v.outcome},
                             {"context", v.context},
                             {"variant", v.variant},
                             {"inferred", v.inferred},
                             {"line", v.line},
                             {"mixed", v.mixed},
                             {"seeds", v.seeds},
                             {"test", v.test},
                             {"p_value", Opt(v.p_value)},
                             {"alpha", v.alpha},
                             {"seeds_needed", v.seeds_needed}});
  }
  for (const auto& m : a.mixed) {
    j["mixed"].push_back(
        {{"kind", m.kind}, {"where", m.where}, {"differs", m.differs}, {"detail", m.detail}});
  }
  return j.dump(2) + "\n";
}

}  // namespace ablate::report
