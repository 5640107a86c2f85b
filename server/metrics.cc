#include "server/metrics.h"

#include <cctype>
#include <set>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace ablate::server {

ServerMetrics::ServerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  leases_granted_ = &prometheus::BuildCounter()
                         .Name("ablate_leases_granted_total")
                         .Help("Runs handed to a worker (by this replica)")
                         .Register(r)
                         .Add({});
  leases_expired_ = &prometheus::BuildCounter()
                         .Name("ablate_leases_expired_total")
                         .Help("Leases the reaper found expired (by this replica)")
                         .Register(r)
                         .Add({});
  metric_points_ = &prometheus::BuildCounter()
                        .Name("ablate_metric_points_total")
                        .Help("Metric points stored through ReportMetrics (by this replica)")
                        .Register(r)
                        .Add({});
  rpc_duration_ = &prometheus::BuildHistogram()
                       .Name("ablate_rpc_duration_seconds")
                       .Help("Server-side RPC duration, long-poll waits included")
                       .Register(r);
  auto gauge = [&](const char* name, const char* help) {
    return std::make_unique<GaugeSet>(&prometheus::BuildGauge().Name(name).Help(help).Register(r));
  };
  runs_ = gauge("ablate_runs", "Runs of active sweeps by state");
  workers_ =
      gauge("ablate_workers", "Workers by state (idle, busy, benched, lost, offline) and device");
  // Issue #38: which worker is benched (its bench runs or its self-check is due), so an alert
  // can name it; a series exists only while it is benched.
  worker_benched_ = gauge("ablate_worker_benched",
                          "1 for each worker benched now (leases nothing; `ablate workers` says "
                          "why and until when)");
  progress_ = gauge("ablate_sweep_progress_ratio", "Finished runs / all runs of a sweep");
  eta_ = gauge("ablate_sweep_eta_seconds", "Estimated seconds until the sweep finishes");
  run_step_ = gauge("ablate_run_step", "Latest step of a run");
  run_train_loss_ = gauge("ablate_run_train_loss", "Latest training loss of a run");
  run_val_loss_ = gauge("ablate_run_val_loss", "Latest validation loss of a run");
  run_tps_ = gauge("ablate_run_tokens_per_second", "Training throughput of a run");
  run_logit_ = gauge("ablate_run_max_attn_logit", "Latest max attention logit of a run");
  run_probe_ = gauge("ablate_run_probe",
                     "Latest value of a run's aggregate probes (attention entropy, kurtosis, "
                     "grad and parameter norm, output-logit max, learning rate)");
  refined_ = gauge("ablate_sweep_refined_runs", "Runs a sweep's refinement added (any state)");
  cell_refine_round_ = gauge("ablate_cell_refine_round",
                             "Refinement round that added a cell (only cells refinement added)");
  cell_val_loss_ = gauge("ablate_cell_val_loss",
                         "Mean validation loss of a cell's runs (final if succeeded, latest if "
                         "live or failed; diverged runs have none)");
  cell_logit_ = gauge("ablate_cell_max_attn_logit",
                      "Highest max attention logit any of a cell's runs reported");
  auto counter = [&](const char* name, const char* help) {
    return std::make_unique<CounterSet>(
        &prometheus::BuildCounter().Name(name).Help(help).Register(r));
  };
  device_seconds_ = counter("ablate_sweep_device_seconds_total",
                            "Device time charged to an active sweep's runs, by device class "
                            "(running attempts up to now; a slot's share of its worker)");
  cost_usd_ = counter("ablate_sweep_cost_usd_total",
                      "US dollars charged to an active sweep's runs on priced workers, by "
                      "device class");
  // Summed over every worker in the database (stopped ones too), so it only grows.
  worker_faults_ = counter("ablate_worker_faults_total",
                           "Attempts workers ended with a worker-side or unknown failure (out of "
                           "device memory, a device runtime error, disk, a crashed trainer), by "
                           "device kind");
  budget_used_ = gauge("ablate_sweep_budget_used_ratio",
                       "A budgeted sweep's spend over its limit (1: reached or passed)");
}

ServerMetrics::~ServerMetrics() { Stop(); }

absl::Status ServerMetrics::Expose(const std::string& address) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address);
    exposer_->RegisterCollectable(registry_);
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("--metrics-listen ", address, ": ", e.what()));
  }
  return absl::OkStatus();
}

void ServerMetrics::ObserveRpc(const std::string& method, double seconds) {
  prometheus::Histogram* h;
  {
    std::lock_guard<std::mutex> lock(rpc_mu_);
    auto it = rpc_by_method_.find(method);
    if (it == rpc_by_method_.end()) {
      static const prometheus::Histogram::BucketBoundaries kBuckets = {
          0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
      it =
          rpc_by_method_.emplace(method, &rpc_duration_->Add({{"method", method}}, kBuckets)).first;
    }
    h = it->second;
  }
  h->Observe(seconds);
}

namespace {

// A grid axis may become a label unless it would clash with one of ours or Prometheus's (axes
// are RunConfig field names, so none does today).
bool AxisLabelAllowed(const std::string& axis) {
  static const std::set<std::string> kReserved = {
      "sweep", "run", "variant", "probe", "state", "job", "instance", "le", "device", "worker"};
  if (axis.empty() || kReserved.count(axis) || axis.starts_with("__")) return false;
  for (char c : axis) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return !std::isdigit(static_cast<unsigned char>(axis.front()));
}

}  // namespace

ServerMetrics::Labels ServerMetrics::AxisLabels(
    const std::string& sweep, const std::string& qk_norm, const std::string& lr,
    const std::string& n_layer, const std::map<std::string, std::string>& grid_values) {
  // qk_norm, lr and n_layer always (the Run and Sweep dashboards' columns), then every other grid
  // axis of the sweep under its own name, and `variant`: the values of the axes other than lr,
  // n_layer and seed ("attn_softcap=30,pos=rope"; "all" when there are none), what the Sweep
  // dashboard splits its LR x depth tables and legends by.
  Labels labels = {{"sweep", sweep}, {"qk_norm", qk_norm}, {"lr", lr}, {"n_layer", n_layer}};
  std::string variant;
  for (const auto& [axis, value] : grid_values) {  // sorted by axis name
    if (!AxisLabelAllowed(axis)) continue;
    labels[axis] = value;
    if (axis == "lr" || axis == "n_layer" || axis == "seed") continue;
    absl::StrAppend(&variant, variant.empty() ? "" : ",", axis, "=", value);
  }
  labels["variant"] = variant.empty() ? "all" : variant;
  return labels;
}

ServerMetrics::Labels ServerMetrics::RunLabels(const std::string& sweep, const RunStats& r) {
  Labels labels = AxisLabels(sweep, r.qk_norm, r.lr, r.n_layer, r.grid_values);
  labels["run"] = absl::StrCat(r.run_id);
  labels["seed"] = r.seed;
  return labels;
}

ServerMetrics::Labels ServerMetrics::CellLabels(const std::string& sweep, const CellStats& c) {
  return AxisLabels(sweep, c.qk_norm, c.lr, c.n_layer, c.grid_values);  // no seed in a cell's
}

absl::Status ServerMetrics::Refresh(SweepReads* sweeps, StatsStore* stats) {
  auto active = sweeps->List(100000, /*active_only=*/true);
  if (!active.ok()) return active.status();
  auto runs = stats->ActiveRuns();
  if (!runs.ok()) return runs.status();
  auto cells = stats->ActiveCells();
  if (!cells.ok()) return cells.status();
  auto workers = stats->Workers();
  if (!workers.ok()) return workers.status();
  auto usage = stats->Usage();
  if (!usage.ok()) return usage.status();
  auto faulted = stats->FaultedWorkers();
  if (!faulted.ok()) return faulted.status();
  // The sweep label is the sweep's name (what dashboards let you pick); a sweep submitted while
  // a live one holds its name is told apart by its id, and neither label changes until its
  // sweep ends (StatsStore::SweepLabels).
  auto labels_of = stats->SweepLabels();
  if (!labels_of.ok()) return labels_of.status();
  const std::map<int64_t, std::string>& label_of = *labels_of;

  std::lock_guard<std::mutex> lock(refresh_mu_);
  for (auto* g : {runs_.get(), progress_.get(), eta_.get(), workers_.get(), run_step_.get(),
                  run_train_loss_.get(), run_val_loss_.get(), run_tps_.get(), run_logit_.get(),
                  run_probe_.get(), refined_.get(), cell_refine_round_.get(), cell_val_loss_.get(),
                  cell_logit_.get(), budget_used_.get(), worker_benched_.get()}) {
    g->Begin();
  }
  device_seconds_->Begin();
  cost_usd_->Begin();
  worker_faults_->Begin();
  for (const auto& s : *active) {
    auto label = label_of.find(s.id());
    if (label == label_of.end()) continue;  // became active between the two queries
    const std::string& sweep = label->second;
    const auto& c = s.counts();
    const std::pair<const char*, int> by_state[] = {
        {"queued", c.queued()},       {"leased", c.leased()},     {"running", c.running()},
        {"succeeded", c.succeeded()}, {"diverged", c.diverged()}, {"failed", c.failed()},
        {"cancelled", c.cancelled()}, {"skipped", c.skipped()}};
    for (const auto& [state, n] : by_state) runs_->Set({{"sweep", sweep}, {"state", state}}, n);
    const int done = c.succeeded() + c.diverged() + c.failed() + c.cancelled() + c.skipped();
    if (s.has_refine()) refined_->Set({{"sweep", sweep}}, c.refined());
    progress_->Set({{"sweep", sweep}}, c.total() > 0 ? static_cast<double>(done) / c.total() : 0);
    eta_->Set({{"sweep", sweep}}, s.eta_seconds());
    if (s.has_budget()) {
      const double limit = s.budget().usd() > 0 ? s.budget().usd() : s.budget().gpu_hours();
      if (limit > 0) budget_used_->Set({{"sweep", sweep}}, s.budget().spent() / limit);
    }
  }
  // Cardinality: active sweeps x the device classes that ran them (docs/server.md#metrics).
  for (const auto& u : *usage) {
    auto label = label_of.find(u.sweep_id);
    if (label == label_of.end()) continue;
    const Labels labels = {{"sweep", label->second}, {"device_class", u.device_class}};
    device_seconds_->Reach(labels, u.device_seconds);
    if (u.priced) cost_usd_->Reach(labels, u.usd);
  }
  std::map<std::string, int64_t> faults_by_device;
  for (const auto& w : *workers) {
    workers_->Set({{"state", w.state}, {"device", w.device}}, w.count);
    faults_by_device[w.device] += w.runs_faulted;
  }
  for (const auto& [device, n] : faults_by_device) {
    worker_faults_->Reach({{"device", device}}, static_cast<double>(n));
  }
  for (const auto& w : *faulted) {
    if (w.benched) worker_benched_->Set({{"worker", w.name}, {"device", w.device}}, 1);
  }
  for (const auto& r : *runs) {
    auto it = label_of.find(r.sweep_id);
    if (it == label_of.end()) continue;  // sweep ended between the two queries
    const Labels labels = RunLabels(it->second, r);
    run_step_->Set(labels, r.step);
    if (r.train_loss) run_train_loss_->Set(labels, *r.train_loss);
    if (r.val_loss) run_val_loss_->Set(labels, *r.val_loss);
    if (r.tokens_per_second) run_tps_->Set(labels, *r.tokens_per_second);
    if (r.max_attn_logit) run_logit_->Set(labels, *r.max_attn_logit);
    for (const auto& [probe, value] : r.probes) {
      Labels with_probe = labels;
      with_probe["probe"] = probe;
      run_probe_->Set(with_probe, value);
    }
  }
  // Cardinality: the active sweeps' cells (finished runs are folded into them), not their runs.
  for (const auto& c : *cells) {
    auto it = label_of.find(c.sweep_id);
    if (it == label_of.end()) continue;
    const Labels labels = CellLabels(it->second, c);
    if (c.val_loss) cell_val_loss_->Set(labels, *c.val_loss);
    if (c.max_attn_logit) cell_logit_->Set(labels, *c.max_attn_logit);
    if (c.refine_round > 0) cell_refine_round_->Set(labels, c.refine_round);
  }
  for (auto* g : {runs_.get(), progress_.get(), eta_.get(), workers_.get(), run_step_.get(),
                  run_train_loss_.get(), run_val_loss_.get(), run_tps_.get(), run_logit_.get(),
                  run_probe_.get(), refined_.get(), cell_refine_round_.get(), cell_val_loss_.get(),
                  cell_logit_.get(), budget_used_.get(), worker_benched_.get()}) {
    g->End();
  }
  device_seconds_->End();
  cost_usd_->End();
  worker_faults_->End();
  return absl::OkStatus();
}

void ServerMetrics::StartRefresh(SweepReads* sweeps, StatsStore* stats,
                                 std::chrono::milliseconds interval) {
  refresher_.Start(interval, [this, sweeps, stats] {
    absl::Status s = Refresh(sweeps, stats);
    if (!s.ok()) spdlog::warn("metrics refresh: {}", s.ToString());
  });
}

}  // namespace ablate::server
