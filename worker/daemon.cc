#include "worker/daemon.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/util/backoff.h"
#include "common/util/fields.h"
#include "common/util/log.h"
#include "common/util/net.h"
#include "worker/coordinator.h"
#include "worker/fleet_data.h"
#include "worker/run_session.h"
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
  if (o.max_runs < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-runs must be >= 0 (0: never stop; got ", o.max_runs, ")"));
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
  v1::WorkerInfo info;
  info.set_name(options.name.empty() ? Hostname() : options.name);
  info.set_hostname(Hostname());
  info.set_device_kind(device->kind);
  info.set_device_name(device->name);
  info.set_device_memory_bytes(device->memory_bytes);
  info.set_cpu_cores(int32_t(std::thread::hardware_concurrency()));
  info.set_torch_version(device->torch_version);
  info.set_version(ABLATE_VERSION);

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

  SessionStats stats;
  std::unique_ptr<WorkerMetrics> metrics;
  if (!options.metrics_listen.empty()) {
    auto m = WorkerMetrics::Start(
        options.metrics_listen,
        {info.name(), info.device_kind(), info.device_name(), info.torch_version()}, &stats);
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
  sopts.threads = options.threads;
  sopts.heartbeat_seconds = HeartbeatSeconds(reg->lease_seconds());
  sopts.shutdown = &g_shutdown;
  sopts.train = train::Train;
  SessionStats* stats_for_data = &stats;
  sopts.prepare_data = [c, worker_id, &options, stats_for_data](
                           const v1::DataSpec& data, int64_t run_id,
                           const std::function<bool()>& should_stop) -> absl::Status {
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
  spdlog::info("registered as worker {} (lease {}s)", worker_id, reg->lease_seconds());

  int runs = 0;
  util::Backoff backoff(util::kDaemonBackoff);
  Clock::time_point last_end{};
  while (!g_shutdown && (options.max_runs == 0 || runs < options.max_runs)) {
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
        return absl::IsUnauthenticated(lease.status()) || absl::IsPermissionDenied(lease.status())
                   ? 3
                   : 1;
      }
      const auto wait = backoff.Next();
      LogRetry(lease.status(), wait);
      util::SleepUnless(wait, ShuttingDown);
      continue;
    }
    backoff.Reset();
    if (!lease->has_run()) {
      if (options.exit_when_idle) break;
      continue;
    }
    SessionOutcome out = RunSession(c, worker_id, *lease, sopts, &stats);
    ++runs;
    const double wall = out.train_seconds + out.overhead_seconds;
    std::string gap;
    if (last_end != Clock::time_point{} && out.train_started != Clock::time_point{}) {
      gap = absl::StrCat(
          ", dispatch gap ",
          std::chrono::duration<double, std::milli>(out.train_started - last_end).count(), " ms");
    }
    spdlog::info("run {}: {} — train {:.2f}s, worker overhead {:.3f}s ({:.2f}%){}",
                 lease->spec().run_id(), out.detail, out.train_seconds, out.overhead_seconds,
                 wall > 0 ? 100.0 * out.overhead_seconds / wall : 0.0, gap);
    last_end = out.ended;
  }
  // A clean stop is announced so `ablate workers` shows it offline at once; if the server cannot
  // be told, the worker still goes offline once its silence outlasts two lease periods.
  if (auto s = c->Deregister(worker_id); !s.ok()) {
    spdlog::warn("could not tell the server this worker is stopping: {}", s.message());
  }
  spdlog::info("ablate-worker stopping after {} run(s)", runs);
  return 0;
}

}  // namespace ablate::worker
