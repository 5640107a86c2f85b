// runs.csv and cells.csv.
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/report/csv.h"
#include "common/report/report.h"
#include "common/run/run_state.h"

namespace ablate::report {
namespace {

// Full precision for CSV (it feeds other tools); empty for a figure that does not exist.
std::string Cell(const std::optional<double>& x) {
  return x && std::isfinite(*x) ? absl::StrFormat("%.10g", *x) : "";
}

std::string Cell(double x) { return Cell(std::optional<double>(x)); }

}  // namespace

std::string RunsCsv(const std::vector<ablate::v1::Run>& runs) {
  std::set<std::string> axes, probes;
  for (const auto& r : runs) {
    for (const auto& [axis, value] : r.grid_values()) axes.insert(axis);
    for (const auto& [name, value] : r.result().final_probes()) probes.insert(name);
  }
  std::vector<std::string> header = {"id"};
  header.insert(header.end(), axes.begin(), axes.end());
  for (const char* h :
       {"state", "attempt", "l0", "final_train_loss", "final_val_loss", "final_val_ppl",
        "diverged_step", "steps_to_threshold", "steps_done", "wall_seconds", "device",
        "device_kind", "dtype", "torch_version", "tokenizer_sha256", "refine_round"}) {
    header.push_back(h);
  }
  for (const auto& p : probes) header.push_back(absl::StrCat("probe_", p));
  std::string out = CsvLine(header);
  for (const auto& r : runs) {
    const auto& res = r.result();
    const bool finished = ablate::util::HasOutcome(r.state());
    std::vector<std::string> row = {absl::StrCat(r.id())};
    for (const auto& axis : axes) {
      auto it = r.grid_values().find(axis);
      row.push_back(it == r.grid_values().end() ? "" : it->second);
    }
    row.push_back(std::string(ablate::util::RunStateName(r.state())));
    row.push_back(absl::StrCat(r.attempt()));
    row.push_back(finished ? Cell(res.initial_loss()) : "");
    row.push_back(finished ? Cell(res.final_train_loss()) : "");
    row.push_back(finished && !res.diverged() ? Cell(res.final_val_loss()) : "");
    row.push_back(finished && !res.diverged() ? Cell(res.final_val_ppl()) : "");
    row.push_back(res.diverged() ? absl::StrCat(res.diverged_step()) : "");
    row.push_back(finished && res.steps_to_threshold() >= 0 ? absl::StrCat(res.steps_to_threshold())
                                                            : "");
    row.push_back(finished ? absl::StrCat(res.steps_done()) : "");
    row.push_back(finished ? Cell(res.wall_seconds()) : "");
    row.push_back(res.device());
    const analysis::Provenance provenance = analysis::ProvenanceOf(r);
    row.insert(row.end(), {provenance.device_kind, provenance.dtype, provenance.torch_version,
                           provenance.tokenizer_sha256, absl::StrCat(r.refine_round())});
    for (const auto& p : probes) {
      auto it = res.final_probes().find(p);
      row.push_back(it == res.final_probes().end() ? "" : Cell(it->second));
    }
    out += CsvLine(row);
  }
  return out;
}

std::string CellsCsv(const analysis::Analysis& a) {
  std::set<std::string> probes;
  for (const auto& c : a.curves) {
    for (const auto& p : c.points) {
      for (const auto& [name, v] : p.probes) probes.insert(name);
    }
  }
  std::vector<std::string> header = {"context", a.options.variant_axis, a.options.moderator_axis,
                                     a.options.lr_axis};
  for (const char* h :
       {"l0", "loss_mean", "loss_std", "n", "n_diverged", "n_pending", "n_failed", "n_missing",
        "train_loss_mean", "perplexity", "steps_to_threshold_median", "mixed", "provenance",
        "n_inferred", "refine_round", "loss_ci_lo", "loss_ci_hi", "n_extra_seeds", "n_untrained"}) {
    header.push_back(h);
  }
  for (const auto& p : probes) header.push_back(absl::StrCat("probe_", p));
  std::string out = CsvLine(header);
  for (const auto& c : a.curves) {
    for (const auto& p : c.points) {
      std::vector<std::string> row = {
          c.context,
          c.variant,
          c.moderator,
          p.lr_text,
          Cell(p.l0),
          Cell(p.loss),
          Cell(p.loss_std),
          absl::StrCat(p.n),
          absl::StrCat(p.n_diverged),
          absl::StrCat(p.n_pending),
          absl::StrCat(p.n_failed),
          absl::StrCat(p.n_absent),
          Cell(p.train_loss),
          Cell(p.perplexity),
          !a.has_threshold       ? ""
          : p.steps_to_threshold ? Cell(p.steps_to_threshold)
                                 : "never",
          absl::StrJoin(p.mixed, "; "),
          absl::StrJoin(analysis::ProvenanceLabels(p.provenance, {}), "; "),
          absl::StrCat(p.n_inferred),
          absl::StrCat(p.refine_round),
          Cell(p.loss_ci ? std::optional<double>(p.loss_ci->lo) : std::nullopt),
          Cell(p.loss_ci ? std::optional<double>(p.loss_ci->hi) : std::nullopt),
          absl::StrCat(p.n_extra_seeds),
          absl::StrCat(p.n_untrained)};
      for (const auto& name : probes) {
        auto it = p.probes.find(name);
        row.push_back(it == p.probes.end() ? "" : Cell(it->second));
      }
      out += CsvLine(row);
    }
  }
  return out;
}

}  // namespace ablate::report
