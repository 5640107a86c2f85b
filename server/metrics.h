// Prometheus /metrics for the server (docs/architecture.md#observability; names are what the
// dashboards query).
//
// Counters count what this replica did (Prometheus sums replicas). Gauges of state are read
// from PostgreSQL every few seconds, so every replica exports the same values whichever served
// the calls. Per-run series exist only while their sweep is active; a finished sweep's series
// are removed at the next refresh, which bounds cardinality by the active sweeps' size.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/periodic.h"
#include "server/store/stats_store.h"
#include "server/store/sweep_reads.h"

namespace ablate::server {

class ServerMetrics {
 public:
  ServerMetrics();
  ~ServerMetrics();

  // Serves /metrics on `address` (host:port).
  absl::Status Expose(const std::string& address);

  void LeaseGranted() { leases_granted_->Increment(); }
  void LeasesExpired(int n) { leases_expired_->Increment(n); }
  void MetricPoints(int n) { metric_points_->Increment(n); }
  void ObserveRpc(const std::string& method, double seconds);

  // Reads the state gauges from the database now.
  absl::Status Refresh(SweepReads* sweeps, StatsStore* stats);
  // Refreshes every `interval` on a background thread until Stop().
  void StartRefresh(SweepReads* sweeps, StatsStore* stats, std::chrono::milliseconds interval);
  void Stop() { refresher_.Stop(); }

  prometheus::Registry& registry() { return *registry_; }

 private:
  using Labels = std::map<std::string, std::string>;
  // The labels of a run's and a cell's series: see docs/server.md#metrics-metrics (cardinality
  // too). A cell's are its runs' without `run` and `seed`.
  static Labels RunLabels(const std::string& sweep, const RunStats& run);
  static Labels CellLabels(const std::string& sweep, const CellStats& cell);
  static Labels AxisLabels(const std::string& sweep, const std::string& qk_norm,
                           const std::string& lr, const std::string& n_layer,
                           const std::map<std::string, std::string>& grid_values);
  // A family whose series set is replaced wholesale on each refresh: Begin, then Series for
  // each one still there, then End removes the rest (their sweep ended).
  template <typename M>
  class SeriesSet {
   public:
    explicit SeriesSet(prometheus::Family<M>* family) : family_(family) {}
    void Begin() { seen_.clear(); }
    M& Series(const Labels& labels) {
      auto it = series_.find(labels);
      if (it == series_.end()) it = series_.emplace(labels, &family_->Add(labels)).first;
      seen_[labels] = true;
      return *it->second;
    }
    void End() {
      for (auto it = series_.begin(); it != series_.end();) {
        if (seen_.count(it->first) == 0) {
          family_->Remove(it->second);
          it = series_.erase(it);
        } else {
          ++it;
        }
      }
    }

   private:
    prometheus::Family<M>* family_;
    std::map<Labels, M*> series_;
    std::map<Labels, bool> seen_;
  };
  class GaugeSet : public SeriesSet<prometheus::Gauge> {
   public:
    using SeriesSet::SeriesSet;
    void Set(const Labels& labels, double value) { Series(labels).Set(value); }
  };
  // Issue #25: counters whose totals are read from the database (what a sweep was charged, which
  // only grows): each refresh increments a series up to the stored total.
  class CounterSet : public SeriesSet<prometheus::Counter> {
   public:
    using SeriesSet::SeriesSet;
    void Reach(const Labels& labels, double total) {
      prometheus::Counter& c = Series(labels);
      if (total > c.Value()) c.Increment(total - c.Value());
    }
  };

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  prometheus::Counter* leases_granted_;
  prometheus::Counter* leases_expired_;
  prometheus::Counter* metric_points_;
  prometheus::Family<prometheus::Histogram>* rpc_duration_;
  std::mutex rpc_mu_;
  std::map<std::string, prometheus::Histogram*> rpc_by_method_;

  std::mutex refresh_mu_;  // one refresh at a time
  std::unique_ptr<GaugeSet> runs_, workers_, progress_, eta_;
  std::unique_ptr<GaugeSet> run_step_, run_train_loss_, run_val_loss_, run_tps_, run_logit_;
  std::unique_ptr<GaugeSet> run_probe_;  // labels of the run + probe
  // Issue #11: runs a sweep's refinement added, and per added cell the round that added it.
  std::unique_ptr<GaugeSet> refined_;
  std::unique_ptr<GaugeSet> cell_refine_round_;
  // Issue #22: every cell of an active sweep, its runs folded (what the LR x depth tables show).
  std::unique_ptr<GaugeSet> cell_val_loss_, cell_logit_;
  std::unique_ptr<CounterSet> device_seconds_, cost_usd_;
  std::unique_ptr<GaugeSet> budget_used_;
  // Issue #38: benched workers by name, and worker-side failures by device kind.
  std::unique_ptr<GaugeSet> worker_benched_;
  std::unique_ptr<CounterSet> worker_faults_;

  Periodic refresher_;
};

// Records one RPC's duration on destruction.
class RpcTimer {
 public:
  RpcTimer(ServerMetrics* metrics, const char* method)
      : metrics_(metrics), method_(method), start_(std::chrono::steady_clock::now()) {}
  ~RpcTimer() {
    metrics_->ObserveRpc(
        method_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  ServerMetrics* metrics_;
  const char* method_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ablate::server
