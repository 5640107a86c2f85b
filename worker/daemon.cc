#include "worker/daemon.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/backoff.h"
#include "common/util/fields.h"
#include "common/util/log.h"
#include "common/util/net.h"
#include "common/util/threads.h"
#include "worker/coordinator.h"
#include "worker/fleet_data.h"
#include "worker/run_session.h"
#include "worker/slots.h"
#include "worker/train/trainer.h"
#include "worker/worker_metrics.h"

namespace ablate::worker {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_shutdown{false};

void OnSignal(int) { g_shutdown = true; }

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "worker";
  return buf;
}

bool ShuttingDown() { return g_shutdown; }

void LogRetry(const absl::Status& s, std::chrono::milliseconds wait) {
  spdlog::warn("{}; retrying in {:.1f}s", s.message(), double(wait.count()) / 1000);
}

// Registers, retrying while the server is unreachable. Permanent errors (bad token) end the daemon.
absl::StatusOr<v1::RegisterResponse> RegisterWithRetry(Coordinator* c, const v1::WorkerInfo& info) {
  if (g_shutdown) return absl::CancelledError("shutting down");
  auto resp = util::Retry(
      util::kDaemonBackoff, [&] { return c->Register(info); }, rpc::IsTransient, ShuttingDown,
      LogRetry);
  if (!resp.ok() && rpc::IsTransient(resp.status()) && g_shutdown) {
    return absl::CancelledError("shutting down");
  }
  return resp;
}

}  // namespace

absl::Status CheckDaemonOptions(const DaemonOptions& o) {
  if (!o.metrics_listen.empty() && !util::IsLoopback(o.metrics_listen) && !o.metrics_insecure) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve /metrics on ", o.metrics_listen,
        ": it has no TLS and no authentication; give --metrics-insecure if the network is "
        "trusted, or keep --metrics-listen on loopback"));
  }
  // `!(v >= lo && v <= hi)` so that NaN is refused too.
  if (!(o.lease_wait_seconds >= 0 && o.lease_wait_seconds <= 3600)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lease-wait must be between 0 and 3600 seconds (got ", o.lease_wait_seconds, ")"));
  }
  if (o.threads < 0 || o.threads > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be between 0 (all cores) and 4096 (got ", o.threads, ")"));
  }
  if (!(o.min_step_seconds >= 0 && o.min_step_seconds <= 60)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--test-min-step-ms must be between 0 and 60000 (got ", o.min_step_seconds * 1000, ")"));
  }
  if (o.max_runs < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-runs must be >= 0 (0: never stop; got ", o.max_runs, ")"));
  }
  if (auto per_slot = ThreadsPerSlot(o.threads, o.slots, 1); !per_slot.ok()) {
    return per_slot.status();
  }
  if (!o.name.empty()) return util::CheckName("--name", o.name);
  return absl::OkStatus();
}

int RunDaemon(const DaemonOptions& options) {
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  if (auto s = CheckDaemonOptions(options); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }

  auto device = train::ProbeDevice(options.device);
  if (!device.ok()) {
    spdlog::error("device: {}", device.status().message());
    return 2;
  }
  if (options.device == "auto" && device->kind == "cpu") {
    spdlog::info("--device auto: no CUDA or MPS device here, training on the CPU ({})",
                 train::TorchBuildLine());
  }
  v1::WorkerInfo info;
  info.set_name(options.name.empty() ? Hostname() : options.name);
  info.set_hostname(Hostname());
  info.set_device_kind(device->kind);
  info.set_device_name(device->name);
  info.set_device_memory_bytes(device->memory_bytes);
  info.set_cpu_cores(int32_t(std::thread::hardware_concurrency()));
  info.set_torch_version(device->torch_version);
  info.set_version(ABLATE_VERSION);
  // The server leases at most this many runs at once to this worker.
  info.set_slots(options.slots);

  std::error_code ec;
  std::filesystem::create_directories(options.work_dir, ec);
  if (ec) {
    spdlog::error("--work-dir {}: {}", options.work_dir, ec.message());
    return 2;
  }
  auto coordinator = Coordinator::Connect(options.client);
  if (!coordinator.ok()) {
    spdlog::error("{}", coordinator.status().message());
    return 2;
  }
  Coordinator* c = coordinator->get();

  // Checked by CheckDaemonOptions.
  const int threads_per_slot = *ThreadsPerSlot(options.threads, options.slots, util::Cores());
  // BLIS takes its thread count from the environment once, at its first call, for the whole
  // process: set it to one slot's share before any slot trains.
  train::ConfigureThreads(threads_per_slot);
  std::vector<SessionStats> stats(static_cast<size_t>(options.slots));
  std::unique_ptr<WorkerMetrics> metrics;
  if (!options.metrics_listen.empty()) {
    auto m = WorkerMetrics::Start(
        options.metrics_listen,
        {info.name(), info.device_kind(), info.device_name(), info.torch_version()}, stats);
    if (!m.ok()) {
      spdlog::error("{}", m.status().message());
      return 2;
    }
    metrics = *std::move(m);
  }
  // Ends a long-poll as soon as a signal arrives rather than at its deadline.
  std::thread watcher([c] {
    while (!g_shutdown) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    c->CancelLongPoll();
  });
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      g_shutdown = true;
      t.join();
    }
  } joiner{watcher};

  spdlog::info("ablate-worker {} on {} ({}), server {}", util::LogQuote(info.name()),
               info.device_name(), info.device_kind(), options.client.server);
  auto reg = RegisterWithRetry(c, info);
  if (!reg.ok()) {
    if (absl::IsCancelled(reg.status())) return 0;
    spdlog::error("{}", reg.status().message());
    return absl::IsUnauthenticated(reg.status()) || absl::IsPermissionDenied(reg.status()) ? 3 : 1;
  }
  int64_t worker_id = reg->worker_id();
  SessionOptions sopts;
  sopts.work_dir = options.work_dir;
  sopts.device = options.device;
  sopts.threads = threads_per_slot;
  sopts.min_step_seconds = options.min_step_seconds;
  if (options.min_step_seconds > 0) {
    spdlog::warn("test pacing: every training step lasts at least {} ms (--test-min-step-ms)",
                 options.min_step_seconds * 1000);
  }
  sopts.heartbeat_seconds = HeartbeatSeconds(reg->lease_seconds());
  sopts.shutdown = &g_shutdown;
  sopts.train = train::Train;
  // Counted on the first slot's stats (the metrics sum every slot's). One preparation at a time
  // in this process: a second slot asking for the same data then finds it in the local cache
  // instead of racing the first on the same files.
  SessionStats* stats_for_data = &stats[0];
  auto prepare_mu = std::make_shared<std::mutex>();
  sopts.prepare_data = [c, worker_id, &options, stats_for_data, prepare_mu](
                           const v1::DataSpec& data, int64_t run_id,
                           const std::function<bool()>& should_stop) -> absl::Status {
    std::lock_guard<std::mutex> lock(*prepare_mu);
    FleetDataOptions fleet;
    fleet.worker_id = worker_id;
    fleet.cache_dir = (std::filesystem::path(options.work_dir) / "cache").string();
    fleet.run_id = run_id;
    fleet.should_stop = should_stop;
    auto source = EnsureFleetData(c, data, fleet);
    if (!source.ok()) return source.status();
    CountFleetData(*source, stats_for_data);
    return absl::OkStatus();
  };
  spdlog::info("registered as worker {} (lease {}s){}", worker_id, reg->lease_seconds(),
               options.slots > 1
                   ? absl::StrCat(", ", options.slots, " slots of ", threads_per_slot, " thread(s)")
                   : "");

  // Each slot trains one leased run on its own thread (its own Session: lease, heartbeat, spool,
  // checkpoints); this thread only leases, whenever a slot is free.
  std::mutex mu;
  std::condition_variable slot_freed;
  SlotScheduler slots(options.slots, options.max_runs);
  std::vector<std::thread> slot_threads(static_cast<size_t>(options.slots));
  std::vector<Clock::time_point> last_end(static_cast<size_t>(options.slots));
  auto run_in_slot = [&](int slot, int64_t worker, v1::LeaseResponse lease) {
    SessionOutcome out = RunSession(c, worker, lease, sopts, &stats[static_cast<size_t>(slot)]);
    const double wall = out.train_seconds + out.overhead_seconds;
    Clock::time_point& last = last_end[static_cast<size_t>(slot)];
    std::string gap;
    if (last != Clock::time_point{} && out.train_started != Clock::time_point{}) {
      gap = absl::StrCat(
          ", dispatch gap ",
          std::chrono::duration<double, std::milli>(out.train_started - last).count(), " ms");
    }
    spdlog::info("run {}: {} — train {:.2f}s, worker overhead {:.3f}s ({:.2f}%){}{}",
                 lease.spec().run_id(), out.detail, out.train_seconds, out.overhead_seconds,
                 wall > 0 ? 100.0 * out.overhead_seconds / wall : 0.0, gap,
                 options.slots > 1 ? absl::StrCat(" [slot ", slot, "]") : "");
    last = out.ended;
    {
      std::lock_guard<std::mutex> lock(mu);
      slots.Release(slot);
    }
    slot_freed.notify_all();
  };

  int exit_code = 0;
  util::Backoff backoff(util::kDaemonBackoff);
  while (!g_shutdown) {
    {
      std::unique_lock<std::mutex> lock(mu);
      // Polled so that a signal ends the wait too.
      while (!g_shutdown && !slots.WantLease() && !slots.Done()) {
        slot_freed.wait_for(lock, std::chrono::milliseconds(100));
      }
      if (g_shutdown || slots.Done()) break;
    }
    auto lease = c->Lease(worker_id, options.lease_wait_seconds);
    if (!lease.ok()) {
      if (g_shutdown) break;
      if (absl::IsNotFound(lease.status())) {  // the server forgot us (e.g. pruned): register again
        auto again = RegisterWithRetry(c, info);
        if (again.ok()) worker_id = again->worker_id();
        continue;
      }
      if (!rpc::IsTransient(lease.status())) {
        spdlog::error("{}", lease.status().message());
        exit_code =
            absl::IsUnauthenticated(lease.status()) || absl::IsPermissionDenied(lease.status()) ? 3
                                                                                                : 1;
        // The runs held keep training to their end; nothing new is leased.
        std::lock_guard<std::mutex> lock(mu);
        slots.StopLeasing();
        continue;
      }
      const auto wait = backoff.Next();
      LogRetry(lease.status(), wait);
      util::SleepUnless(wait, ShuttingDown);
      continue;
    }
    backoff.Reset();
    if (!lease->has_run()) {
      if (options.exit_when_idle) {
        std::lock_guard<std::mutex> lock(mu);
        slots.StopLeasing();
      }
      continue;
    }
    int slot;
    {
      std::lock_guard<std::mutex> lock(mu);
      slot = slots.Acquire();
    }
    std::thread& t = slot_threads[static_cast<size_t>(slot)];
    if (t.joinable()) t.join();  // its run has ended: Release came last
    t = std::thread(run_in_slot, slot, worker_id, *std::move(lease));
  }
  // On shutdown every session checkpoints and hands its run back (SessionOptions.shutdown).
  for (auto& t : slot_threads) {
    if (t.joinable()) t.join();
  }
  // A clean stop is announced so `ablate workers` shows it offline at once; if the server cannot
  // be told, the worker still goes offline once its silence outlasts two lease periods.
  if (auto s = c->Deregister(worker_id); !s.ok()) {
    spdlog::warn("could not tell the server this worker is stopping: {}", s.message());
  }
  spdlog::info("ablate-worker stopping after {} run(s)", slots.started());
  return exit_code;
}

}  // namespace ablate::worker
