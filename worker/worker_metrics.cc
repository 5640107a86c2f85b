#include "worker/worker_metrics.h"

#include <chrono>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace ablate::worker {

absl::StatusOr<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Start(const std::string& listen,
                                                                    const WorkerIdentity& id,
                                                                    const SessionStats* stats) {
  std::unique_ptr<WorkerMetrics> m(new WorkerMetrics());
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen ", listen, ": cannot serve /metrics: ", e.what()));
  }
  m->registry_ = std::make_shared<prometheus::Registry>();
  m->exposer_->RegisterCollectable(m->registry_);
  m->thread_ = std::thread([p = m.get(), id, stats] { p->Loop(id, stats); });
  return m;
}

WorkerMetrics::~WorkerMetrics() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void WorkerMetrics::Loop(WorkerIdentity id, const SessionStats* stats) {
  auto gauge = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Gauge>& {
    return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
  };
  const std::map<std::string, std::string> who{{"worker", id.worker}};
  gauge("ablate_worker_info", "Worker identity (always 1)")
      .Add({{"worker", id.worker},
            {"device_kind", id.device_kind},
            {"device_name", id.device_name},
            {"torch_version", id.torch_version}})
      .Set(1);
  auto& busy = gauge("ablate_worker_busy", "1 while training a run").Add(who);
  auto& step_s = gauge("ablate_worker_step_seconds", "Duration of the last training step").Add(who);
  auto& tps = gauge("ablate_worker_tokens_per_second", "Training throughput").Add(who);
  auto& mem =
      gauge("ablate_worker_device_memory_used_bytes", "Resident memory of the worker").Add(who);
  auto& spooled =
      gauge("ablate_worker_spooled_points", "Metric points not yet stored by the server").Add(who);
  auto& current = gauge("ablate_worker_current_run", "The run being trained (1)");
  // Where each run's tokenizer and token files came from: what shows a fleet preparing a corpus
  // once and downloading it everywhere else.
  auto& data_sets = prometheus::BuildCounter()
                        .Name("ablate_worker_data_sets_total")
                        .Help("Runs whose tokenizer and token files came from each source")
                        .Register(*registry_);
  struct Source {
    const std::atomic<int64_t>* count;
    prometheus::Counter* counter;
    int64_t shown = 0;
  };
  std::vector<Source> sources;
  for (const auto& [name, count] :
       {std::pair<const char*, const std::atomic<int64_t>*>{"cache", &stats->data_from_cache},
        {"downloaded", &stats->data_downloaded},
        {"prepared", &stats->data_prepared},
        {"prepared_locally", &stats->data_prepared_locally}}) {
    sources.push_back({count, &data_sets.Add({{"worker", id.worker}, {"source", name}})});
  }
  prometheus::Gauge* current_run = nullptr;
  int64_t shown_run = 0;
  while (!stop_) {
    for (Source& s : sources) {
      const int64_t now = s.count->load();
      if (now > s.shown) s.counter->Increment(static_cast<double>(now - s.shown));
      s.shown = now;
    }
    const int64_t run = stats->run_id;
    busy.Set(run != 0 ? 1 : 0);
    step_s.Set(stats->step_seconds);
    tps.Set(stats->tokens_per_second);
    spooled.Set(static_cast<double>(stats->spooled_points));
    // Resident set size: on CPU and MPS (unified memory) this is the device memory that matters.
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      long pages = 0, resident = 0;
      if (std::fscanf(f, "%ld %ld", &pages, &resident) == 2) {
        mem.Set(static_cast<double>(resident) * 4096.0);
      }
      std::fclose(f);
    }
    if (run != shown_run) {
      if (current_run != nullptr) current.Remove(current_run);
      current_run = nullptr;
      if (run != 0) {
        current_run = &current.Add({{"worker", id.worker}, {"run", std::to_string(run)}});
        current_run->Set(1);
      }
      shown_run = run;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace ablate::worker
