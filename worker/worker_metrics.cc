#include "worker/worker_metrics.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/log.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

#if defined(__linux__)
#include <dlfcn.h>
#include <pthread.h>

// civetweb (prometheus-cpp's HTTP server) gives its threads a fixed 100 KiB stack, and glibc
// takes the process's static TLS out of a thread's requested stack size: LibTorch for CUDA
// brings ~160 KB of it (libcublasLt alone 100 KB), so pthread_create failed with EINVAL and a
// CUDA worker could not serve /metrics ("Cannot create first worker thread"). The executable's
// definition interposes libc's for every library (worker/CMakeLists.txt exports it): the size
// asked for is taken as the usable stack wanted, and room for the static TLS is added.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn libc_setstacksize =
      reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  constexpr size_t kStaticTlsRoom = size_t{1} << 20;
  return libc_setstacksize(attr, size + kStaticTlsRoom);
}
#endif

namespace ablate::worker {

absl::StatusOr<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Start(
    const std::string& listen, const WorkerIdentity& id, const std::vector<SessionStats>& stats,
    const std::atomic<bool>* benched) {
  std::unique_ptr<WorkerMetrics> m(new WorkerMetrics());
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen ", listen, ": cannot serve /metrics: ", e.what()));
  }
  m->registry_ = std::make_shared<prometheus::Registry>();
  m->exposer_->RegisterCollectable(m->registry_);
  m->thread_ = std::thread([p = m.get(), id, s = &stats, benched] {
    // A thread's entry: whatever the sampling throws stops /metrics from updating, not the daemon.
    try {
      p->Loop(id, s, benched);
    } catch (const std::exception& e) {
      spdlog::error("/metrics: sampling stopped: {}", e.what());
    }
  });
  return m;
}

WorkerMetrics::~WorkerMetrics() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void WorkerMetrics::Loop(WorkerIdentity id, const std::vector<SessionStats>* stats,
                         const std::atomic<bool>* benched) {
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
  // With --slots N these sum (or, for step time, take the slowest of) the slots' figures; busy
  // counts the runs training.
  auto& busy =
      gauge("ablate_worker_busy", "Runs training now (0 when idle; up to --slots)").Add(who);
  auto& step_s =
      gauge("ablate_worker_step_seconds", "Duration of the last training step (slowest slot)")
          .Add(who);
  auto& tps = gauge("ablate_worker_tokens_per_second", "Training throughput (all slots)").Add(who);
  auto& mem =
      gauge("ablate_worker_device_memory_used_bytes", "Resident memory of the worker").Add(who);
  auto& spooled =
      gauge("ablate_worker_spooled_points", "Metric points not yet stored by the server").Add(who);
  auto& paused = gauge("ablate_worker_paused_runs",
                       "Runs whose training waits for space in the work dir (disk full)")
                     .Add(who);
  auto& current = gauge("ablate_worker_current_run", "The runs being trained (1 each)");
  auto& benched_g = gauge("ablate_worker_benched",
                          "1 while the server has benched this worker for failures of its own: it "
                          "leases nothing until the bench ends and its self-check passes")
                        .Add(who);
  // Where each run's tokenizer and token files came from: what shows a fleet preparing a corpus
  // once and downloading it everywhere else. Summed over the slots.
  auto& data_sets = prometheus::BuildCounter()
                        .Name("ablate_worker_data_sets_total")
                        .Help("Runs whose tokenizer and token files came from each source")
                        .Register(*registry_);
  struct Source {
    std::atomic<int64_t> SessionStats::*count;
    prometheus::Counter* counter;
    int64_t shown = 0;
  };
  std::vector<Source> sources;
  for (const auto& [name, count] : {std::pair<const char*, std::atomic<int64_t> SessionStats::*>{
                                        "cache", &SessionStats::data_from_cache},
                                    {"downloaded", &SessionStats::data_downloaded},
                                    {"prepared", &SessionStats::data_prepared},
                                    {"prepared_locally", &SessionStats::data_prepared_locally}}) {
    sources.push_back({count, &data_sets.Add({{"worker", id.worker}, {"source", name}})});
  }
  std::map<int64_t, prometheus::Gauge*> shown;
  while (!stop_) {
    for (Source& src : sources) {
      int64_t now = 0;
      for (const SessionStats& s : *stats) now += (s.*src.count).load();
      if (now > src.shown) src.counter->Increment(static_cast<double>(now - src.shown));
      src.shown = now;
    }
    std::set<int64_t> runs;
    double step_seconds = 0, tokens_per_second = 0, spooled_points = 0, paused_runs = 0;
    for (const SessionStats& s : *stats) {
      const int64_t run = s.run_id;
      if (run == 0) continue;
      runs.insert(run);
      step_seconds = std::max(step_seconds, s.step_seconds.load());
      tokens_per_second += s.tokens_per_second;
      spooled_points += static_cast<double>(s.spooled_points);
      if (s.paused_for_space) paused_runs += 1;
    }
    busy.Set(static_cast<double>(runs.size()));
    step_s.Set(step_seconds);
    tps.Set(tokens_per_second);
    spooled.Set(spooled_points);
    paused.Set(paused_runs);
    benched_g.Set(benched != nullptr && benched->load() ? 1 : 0);
    // Resident set size: on CPU and MPS (unified memory) this is the device memory that matters.
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      long pages = 0, resident = 0;
      if (std::fscanf(f, "%ld %ld", &pages, &resident) == 2) {
        mem.Set(static_cast<double>(resident) * 4096.0);
      }
      std::fclose(f);
    }
    for (auto it = shown.begin(); it != shown.end();) {
      if (runs.count(it->first) == 0) {
        current.Remove(it->second);
        it = shown.erase(it);
      } else {
        ++it;
      }
    }
    for (int64_t run : runs) {
      if (shown.count(run) != 0) continue;
      prometheus::Gauge* g = &current.Add({{"worker", id.worker}, {"run", std::to_string(run)}});
      g->Set(1);
      shown[run] = g;
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace ablate::worker
