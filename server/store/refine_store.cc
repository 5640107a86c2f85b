#include "server/store/refine_store.h"

#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/analysis/refine.h"
#include "common/cost/flops.h"
#include "common/cost/memory.h"
#include "common/sweep/sweep.h"
#include "common/util/log.h"
#include "server/store/channels.h"
#include "server/store/pg_codec.h"
#include "server/store/proto_json.h"

namespace ablate::server {
namespace {

// Advisory lock class of the per-sweep refinement lock (the two-key form: it cannot collide with
// the migrator's one-key lock). "ablr" in ASCII.
constexpr int kRefineLockClass = 0x61626c72;

// A planning error (e.g. a run set the analysis cannot read) must not block the Complete that
// triggered it: the worker would retry it forever. It is logged and the sweep goes on unrefined.
void LogPlanningError(int64_t sweep_id, const absl::Status& status) {
  spdlog::warn("refine sweep={} error={}", sweep_id, status);
}

std::vector<v1::Run> LoadRuns(pqxx::work& tx, int64_t sweep_id) {
  pqxx::result r = pg::Exec(tx, "refine_load_runs", sweep_id);
  std::vector<v1::Run> runs;
  auto bases = pg::LoadBaseSpecs(tx, r);
  if (!bases.ok()) {
    LogPlanningError(sweep_id, bases.status());
    return runs;
  }
  const pg::ByName col(r);
  runs.reserve(r.size());
  for (const auto& row : r) {
    auto run = pg::RunFromRow(col, row, *bases);
    if (run.ok()) runs.push_back(*std::move(run));
  }
  return runs;
}

// The runs a pruning or requeue plan names, as the two arrays its statement unnests; false when
// there are none (or planning failed, which is logged).
bool Planned(int64_t sweep_id, const absl::StatusOr<std::vector<analysis::PruneRun>>& plan,
             std::vector<int64_t>* ids, std::vector<std::string>* reasons) {
  if (!plan.ok()) {
    LogPlanningError(sweep_id, plan.status());
    return false;
  }
  for (const auto& p : *plan) {
    ids->push_back(p.run_id);
    reasons->push_back(p.reason);
  }
  return !ids->empty();
}

int Prune(pqxx::work& tx, int64_t sweep_id, const analysis::Options& options,
          std::vector<v1::Run>* runs) {
  std::vector<int64_t> ids;
  std::vector<std::string> reasons;
  if (!Planned(sweep_id, analysis::PlanPruning(*runs, options), &ids, &reasons)) return 0;
  pqxx::result done =
      pg::Exec(tx, "refine_prune", sweep_id, pg::Int64Array(ids), pg::TextArray(reasons));
  const pg::ByName col(done);
  std::map<int64_t, bool> skipped;
  for (const auto& row : done) skipped[col(row, "id").as<int64_t>()] = true;
  for (auto& run : *runs) {
    if (skipped.count(run.id()) > 0) run.set_state(v1::SKIPPED);
  }
  return static_cast<int>(done.size());
}

// skipped -> queued for the runs whose pruning the evidence no longer supports (a success above
// their wall, or their wall LR retried and succeeding): PlanRequeue. The event is `unskipped`,
// not `requeued`, so a later, consistent wall may skip them again (a user's retry is final).
int Requeue(pqxx::work& tx, int64_t sweep_id, const analysis::Options& options,
            std::vector<v1::Run>* runs) {
  std::vector<int64_t> ids;
  std::vector<std::string> reasons;
  if (!Planned(sweep_id, analysis::PlanRequeue(*runs, options), &ids, &reasons)) return 0;
  pqxx::result done =
      pg::Exec(tx, "refine_requeue", sweep_id, pg::Int64Array(ids), pg::TextArray(reasons));
  if (done.empty()) return 0;
  const pg::ByName col(done);
  std::set<std::string> devices;
  std::set<int64_t> requeued;
  for (const auto& row : done) {
    requeued.insert(col(row, "id").as<int64_t>());
    devices.insert(col(row, "device").as<std::string>());
  }
  for (auto& run : *runs) {
    if (requeued.count(run.id()) > 0) {
      run.set_state(v1::QUEUED);
      run.clear_error();
    }
  }
  // A sweep finished by its pruning has work again.
  pg::Exec(tx, "refine_reactivate_sweep", sweep_id);
  for (const auto& device : devices) {
    pg::Exec(tx, "notify", std::string(channels::kQueue), device);
  }
  return static_cast<int>(done.size());
}

int Refine(pqxx::work& tx, int64_t sweep_id, const sweep::SweepSpec& sweep,
           const v1::RefineStatus& rule, const analysis::Options& options, int priority,
           int max_attempts, const std::vector<v1::Run>& runs) {
  auto plan = analysis::PlanRefinement(runs, rule, options);
  if (!plan.ok()) {
    LogPlanningError(sweep_id, plan.status());
    return 0;
  }
  if (plan->runs.empty()) return 0;
  // The sweep's base run spec, which its runs' specs are stored against (migration 0014); none
  // for a sweep stored before it, whose runs hold their whole spec.
  std::optional<v1::RunSpec> base;
  std::optional<pg::JsonDelta> delta;
  if (pqxx::result b = pg::Exec(tx, "run_spec_base_get", sweep_id); !b.empty()) {
    if (pg::FromJson(b[0]["spec"].as<std::string>(), &base.emplace()).ok()) {
      delta = pg::JsonDelta::Make(*base, "config");
    }
    if (!delta) {
      LogPlanningError(sweep_id, absl::InternalError("run_spec_base is not a RunSpec"));
      return 0;
    }
  }
  int added = 0;
  std::map<std::string, bool> devices;
  for (const auto& add : plan->runs) {
    // The run the grid would have run at this point: the sweep file expanded there by the code
    // that expanded the grid, so every derived setting (min_lr = lr x min_lr_ratio, ...) follows
    // the new LR. Copying the template's spec and changing lr kept the template's min_lr. The
    // text is canonical (%.6g), so the run trains with exactly the number its cell names.
    auto expanded = sweep::ExpandPoint(sweep, add.grid_values);
    if (!expanded.ok()) {
      LogPlanningError(sweep_id, expanded.status());
      continue;
    }
    v1::RunSpec spec = *std::move(expanded);
    if (spec.cell() != add.cell) {
      LogPlanningError(sweep_id, absl::InternalError(absl::StrCat("expanded cell ", spec.cell(),
                                                                  " is not ", add.cell)));
      continue;
    }
    // The data sets are the submit's: resolved then (paths under --data-dir, SHA-256s), the same
    // for every run of the sweep, and kept in each stored spec (merged over the base as Lease
    // merges it).
    pqxx::result t = pg::Exec(tx, "refine_template_data", add.template_run_id);
    absl::StatusOr<v1::RunSpec> stored = absl::NotFoundError("no stored spec");
    if (!t.empty()) {
      stored = pg::MergeRunSpec(base ? &*base : nullptr, t[0]["spec_whole"], t[0]["spec_own"]);
    }
    if (!stored.ok() || !stored->has_data()) {
      LogPlanningError(sweep_id, absl::InternalError(absl::StrCat("no readable data for run ",
                                                                  add.template_run_id)));
      continue;
    }
    spec.mutable_data()->Swap(stored->mutable_data());
    std::string own;
    if (!delta) {
      own = pg::ToJson(spec);
    } else if (!delta->Append(spec, &own)) {
      LogPlanningError(sweep_id, absl::InternalError("a refined run's spec cannot be written"));
      continue;
    }
    const std::string device = spec.config().device().empty() ? "auto" : spec.config().device();
    pqxx::result ins = pg::Exec(
        tx, "refine_insert_run", sweep_id, add.cell, add.seed, priority, device, max_attempts,
        spec.config().steps(), add.round, own,
        absl::StrCat("added by refinement round ", add.round, ": ", add.boundary),
        cost::RunFlops(spec.config(), cost::VocabOf(spec.data())),
        cost::FlopsPerToken(spec.config(), cost::VocabOf(spec.data())), spec.config().dtype(),
        cost::RunMemoryBytes(spec.config(), cost::VocabOf(spec.data())));
    if (ins.empty()) continue;  // already there (the unique key): nothing to add
    ++added;
    devices[device] = true;
  }
  if (added > 0) {
    for (const auto& [device, unused] : devices) {
      pg::Exec(tx, "notify", std::string(channels::kQueue), device);
    }
  }
  return added;
}

}  // namespace

absl::StatusOr<RefineOutcome> RefineAfterRunFinished(pqxx::work& tx, int64_t sweep_id) {
  RefineOutcome out;
  pqxx::result s = pg::Exec(tx, "refine_sweep", sweep_id);
  if (s.empty()) return out;
  const pqxx::row sw = s.front();
  const bool refine = !sw["refine"].is_null();
  const bool prune = sw["prune_above_divergence"].as<bool>();
  if ((!refine && !prune) || sw["state"].as<std::string>() == "cancelled") return out;
  v1::RefineStatus rule;
  if (refine && !pg::FromJson(sw["refine"].as<std::string>(), &rule).ok()) {
    LogPlanningError(sweep_id, absl::InternalError("sweeps.refine is not a RefineStatus"));
    return out;
  }
  // The sweep file as submitted: refined runs are expanded from it, and its `analysis:` options
  // are what the boundaries are planned with (the ones `ablate report` defaults to). Parsed
  // before taking the lock; without the grid walk it costs what the text costs.
  auto sweep =
      sweep::ParseStoredSweep(sw["spec_yaml"].as<std::string>(), sw["file_name"].as<std::string>());
  if (!sweep.ok()) {
    LogPlanningError(sweep_id, sweep.status());
    return out;
  }
  const analysis::Options options = analysis::PlanningOptions(*sweep);
  pg::Exec(tx, "refine_lock", kRefineLockClass, static_cast<int>(sweep_id % 2147483647));
  // Read after taking the lock: READ COMMITTED gives each statement a fresh snapshot, so this
  // sees every completion that held the lock before us.
  std::vector<v1::Run> runs = LoadRuns(tx, sweep_id);
  if (runs.empty()) return out;
  if (prune) {
    out.skipped = Prune(tx, sweep_id, options, &runs);
    out.requeued = Requeue(tx, sweep_id, options, &runs);
  }
  if (refine) {
    out.added = Refine(tx, sweep_id, *sweep, rule, options, sw["priority"].as<int>(),
                       sw["max_attempts"].as<int>(), runs);
  }
  return out;
}

}  // namespace ablate::server
