#include "worker/daemon.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/cost/flops.h"
#include "common/cost/memory.h"
#include "common/util/backoff.h"
#include "common/util/fields.h"
#include "common/util/log.h"
#include "common/util/net.h"
#include "common/util/threads.h"
#include "worker/crash_record.h"
#include "worker/failure_class.h"
#include "worker/fleet_data.h"
#include "worker/host.h"
#include "worker/run_session.h"
#include "worker/self_check.h"
#include "worker/server_client.h"
#include "worker/slots.h"
#include "worker/train/device_benchmark.h"
#include "worker/train/trainer.h"
#include "worker/worker_metrics.h"

namespace ablate::worker {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_shutdown{false};
// Until the lease loop starts, the worker holds no run: a signal then also arms an alarm, so a
// start-up step that cannot be interrupted (a LibTorch or driver call that blocks, a thread that
// cannot be created under a tight memory cap) still ends the process promptly.
std::atomic<bool> g_starting{true};
constexpr unsigned kStartupStopSeconds = 5;
static_assert(kStartupStopSeconds == 5, "OnStartupAlarm's message names the seconds");

// Only async-signal-safe calls: write and _exit. Exit 0, as a start-up stopped by the signal in
// time would: nothing was held and nothing is lost.
void OnStartupAlarm(int) {
  static constexpr char kMessage[] =
      "ablate-worker: start-up did not stop within 5 s of the signal; exiting\n";
  (void)!write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  _exit(0);
}

void OnSignal(int) {
  g_shutdown = true;
  if (g_starting) alarm(kStartupStopSeconds);
}

// First of all, before the device, LibTorch or the network are touched: SIGTERM must be able to
// end every stage of the start.
void InstallSignalHandlers() {
  std::signal(SIGALRM, OnStartupAlarm);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
}

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
// `previous`: the process's first Register (ServerClient::Register).
absl::StatusOr<v1::RegisterResponse> RegisterWithRetry(
    ServerClient* c, const v1::WorkerInfo& info,
    const std::vector<v1::CrashedAttempt>* previous = nullptr) {
  if (g_shutdown) return absl::CancelledError("shutting down");
  auto resp = util::Retry(
      util::kDaemonBackoff, [&] { return c->Register(info, previous); }, rpc::IsTransient,
      ShuttingDown, LogRetry);
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
  if (!(o.price_per_hour >= 0 && std::isfinite(o.price_per_hour))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--price-per-hour must be a finite number of US dollars >= 0 (0: not declared; got ",
        o.price_per_hour, ")"));
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

namespace {

// The exit code of a permanent error from Register or Lease: 3 when the token is refused.
int ExitCodeFor(const absl::Status& s) {
  return absl::IsUnauthenticated(s) || absl::IsPermissionDenied(s) ? 3 : 1;
}

// What start-up hands the lease loop. It stays where RunDaemon made it: the /metrics exposer
// reads `stats` in place.
struct Worker {
  v1::WorkerInfo info;
  std::unique_ptr<ServerClient> client;
  int threads_per_slot = 1;
  std::vector<SessionStats> stats;  // one per slot
  std::unique_ptr<WorkerMetrics> metrics;
  // The server's id for this worker: set at registration, and again when the server forgot the
  // worker and it registered anew (LeaseLoop); the data-prep hook reads it on each call.
  std::atomic<int64_t> worker_id{0};
  // The server has benched this worker (LeaseResponse.benched_until, self_check_due): exported
  // as ablate_worker_benched.
  std::atomic<bool> benched{false};
  // The runs this process holds, and how the one before it ended (worker/crash_record.h).
  std::unique_ptr<CrashRecord> crash;
};

// Whether `count` threads can run at once. Under a tight memory cap LibTorch's thread pool
// (pthreadpool, started by at::set_num_threads in train::ConfigureThreads) waits forever for a
// thread it could not create: a worker that hung there never registered and could only be
// killed. Starting as many threads first turns that into an error that says why.
constexpr int kThreadMargin = 8;
absl::Status CanStartThreads(int count) {
  std::vector<std::thread> threads;
  absl::Status status = absl::OkStatus();
  try {
    for (int i = 0; i < count; ++i) threads.emplace_back([] {});
  } catch (const std::system_error& e) {
    status =
        absl::ResourceExhaustedError(absl::StrCat("cannot start ", count, " threads (", e.what(),
                                                  "): is this worker's memory limit (ulimit -v, "
                                                  "the container's) too low for its --threads?"));
  }
  for (auto& t : threads) t.join();
  return status;
}

// Start-up before the server is asked anything: options, device, work dir, connection, the
// threads per slot and /metrics. nullopt when the worker is ready; else the exit code (2), the
// reason logged, or 0 when a signal came meanwhile.
std::optional<int> StartUp(const DaemonOptions& options, Worker* w) {
  if (auto s = CheckDaemonOptions(options); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  auto device = train::ProbeDevice(options.device);
  if (g_shutdown) return 0;  // LibTorch's and the driver's first calls can take long
  if (!device.ok()) {
    spdlog::error("device: {}", device.status().message());
    return 2;
  }
  if (options.device == "auto" && device->kind == "cpu") {
    spdlog::info("--device auto: no CUDA or MPS device here, training on the CPU ({})",
                 train::TorchBuildLine());
  }
  v1::WorkerInfo& info = w->info;
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
  info.set_price_per_hour(options.price_per_hour);

  std::error_code ec;
  std::filesystem::create_directories(options.work_dir, ec);
  if (ec) {
    spdlog::error("--work-dir {}: {}", options.work_dir, ec.message());
    return 2;
  }
  // A CPU's (or Apple GPU's unified) memory is this process's to the extent its cgroup or ulimit
  // lets it: the server routes runs by what is registered here, so a capped worker registers its
  // cap, not the machine's RAM, and is not handed runs that can only be killed by the OOM killer.
  if (info.device_kind() == "cpu" || info.device_kind() == "mps") {
    if (const auto cap = MemoryLimitBytes(); cap && *cap < info.device_memory_bytes()) {
      spdlog::info("memory limit {} (cgroup or ulimit) registered instead of the machine's {}",
                   cost::FormatBytes(*cap), cost::FormatBytes(info.device_memory_bytes()));
      info.set_device_memory_bytes(*cap);
    }
  }
  info.set_host_key(HostKey(options.work_dir));
  // What the last process on this work dir left, and this one's record from now on.
  auto crash = CrashRecord::Open(options.work_dir);
  if (!crash.ok()) {
    spdlog::error("{}", crash.status().message());
    return 2;
  }
  w->crash = *std::move(crash);
  if (!w->crash->previous_note().empty()) spdlog::warn("{}", w->crash->previous_note());
  // Threads first, before gRPC starts its own (which would hang the exit if they could not all
  // start) and LibTorch its pool: the slot's share, and a margin for the threads the worker and
  // gRPC start later (heartbeat, sender, a slot's). Checked by CheckDaemonOptions.
  w->threads_per_slot = *ThreadsPerSlot(options.threads, options.slots, util::Cores());
  if (auto s = CanStartThreads(w->threads_per_slot + kThreadMargin); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  // BLIS takes its thread count from the environment once, at its first call, for the whole
  // process: set it to one slot's share before any slot trains.
  train::ConfigureThreads(w->threads_per_slot);
  if (g_shutdown) return 0;
  auto client = ServerClient::Connect(options.client);
  if (!client.ok()) {
    spdlog::error("{}", client.status().message());
    return 2;
  }
  w->client = *std::move(client);
  if (g_shutdown) return 0;

  w->stats = std::vector<SessionStats>(static_cast<size_t>(options.slots));
  if (!options.metrics_listen.empty()) {
    auto m = WorkerMetrics::Start(
        options.metrics_listen,
        {info.name(), info.device_kind(), info.device_name(), info.torch_version()}, w->stats,
        &w->benched);
    if (!m.ok()) {
      spdlog::error("{}", m.status().message());
      return 2;
    }
    w->metrics = *std::move(m);
  }
  return std::nullopt;
}

// The device benchmark (device_benchmark.h) on the thread count a slot trains with, stopped by
// a signal between its steps. At start-up a result cached in the work dir serves; as the
// self-check of a benched worker it is always measured afresh, and the fault file of the hidden
// --test-fault-file fails it as it fails attempts (a broken device fails its benchmark too), so
// an injected fault keeps the worker benched until the file is removed.
absl::StatusOr<train::DeviceBenchmarkResult> MeasureDevice(const DaemonOptions& options,
                                                           const Worker& w, bool self_check) {
  if (self_check) {
    auto injected = InjectedFault(options.fault_file);
    if (injected && ClassifyFailure(*injected, FaultStage::kTrain) == v1::FAULT_WORKER) {
      return *injected;
    }
  }
  train::DeviceBenchmarkOptions bench;
  bench.device = options.device;
  bench.threads = w.threads_per_slot;
  if (!self_check) {
    bench.cache_file = (std::filesystem::path(options.work_dir) / "device-benchmark.json").string();
  }
  bench.ablate_version = ABLATE_VERSION;
  bench.should_stop = ShuttingDown;
  return train::RunDeviceBenchmark(bench);
}

// The startup benchmark into info.benchmarks, before any slot trains. It never stops the worker:
// on failure the worker registers without figures and the server estimates from finished runs
// alone.
void BenchmarkDevice(const DaemonOptions& options, Worker* w) {
  auto result = MeasureDevice(options, *w, /*self_check=*/false);
  if (!result.ok()) {
    if (!g_shutdown) spdlog::warn("{}; registering without a benchmark", result.status().message());
    return;
  }
  for (const auto& b : result->benchmarks) *w->info.add_benchmarks() = b;
  spdlog::info("startup benchmark: {}", train::DescribeBenchmarks(*result));
}

std::string DescribePrice(const DaemonOptions& options) {
  if (options.price_per_hour == 0) {
    return "price not declared (--price-per-hour): the server counts hours, not money";
  }
  return absl::StrFormat(
      "price $%g/h%s", options.price_per_hour,
      options.slots > 1 ? absl::StrCat(", split over ", options.slots, " slots") : "");
}

// Ends a long-poll as soon as a signal arrives rather than at its deadline. Its end (RunDaemon
// returning) counts as a shutdown too.
class ShutdownWatcher {
 public:
  explicit ShutdownWatcher(ServerClient* c)
      : thread_([c] {
          while (!g_shutdown) std::this_thread::sleep_for(std::chrono::milliseconds(50));
          c->CancelLongPoll();
        }) {}
  ~ShutdownWatcher() {
    g_shutdown = true;
    thread_.join();
  }

 private:
  std::thread thread_;
};

// What every slot's session runs with, once registered: the lease's heartbeat period, the
// shutdown flag, the trainer and the hook that makes a run's data ready (fleet_data.h).
SessionOptions SessionOptionsFor(const DaemonOptions& options, Worker* w, double lease_seconds) {
  SessionOptions sopts;
  sopts.work_dir = options.work_dir;
  sopts.device = options.device;
  sopts.threads = w->threads_per_slot;
  sopts.min_step_seconds = options.min_step_seconds;
  if (options.min_step_seconds > 0) {
    spdlog::warn("test pacing: every training step lasts at least {} ms (--test-min-step-ms)",
                 options.min_step_seconds * 1000);
  }
  sopts.heartbeat_seconds = HeartbeatSeconds(lease_seconds);
  sopts.shutdown = &g_shutdown;
  sopts.train = train::Train;
  sopts.peak_memory_bytes = [kind = w->info.device_kind()] { return train::PeakMemoryBytes(kind); };
  sopts.fault_file = options.fault_file;
  if (!options.fault_file.empty()) {
    spdlog::warn(
        "fault injection: every attempt fails at step 0 while {} exists (--test-fault-file)",
        options.fault_file);
  }
  // Counted on the first slot's stats (the metrics sum every slot's). One preparation at a time
  // in this process: a second slot asking for the same data then finds it in the local cache
  // instead of racing the first on the same files.
  ServerClient* c = w->client.get();
  SessionStats* stats_for_data = &w->stats[0];
  auto prepare_mu = std::make_shared<std::mutex>();
  const std::string cache_dir = (std::filesystem::path(options.work_dir) / "cache").string();
  sopts.prepare_data = [c, w, cache_dir, stats_for_data, prepare_mu](
                           const v1::DataSpec& data, int64_t run_id,
                           const std::function<bool()>& should_stop) -> absl::Status {
    std::lock_guard<std::mutex> lock(*prepare_mu);
    FleetDataOptions fleet;
    fleet.worker_id = w->worker_id.load();
    fleet.cache_dir = cache_dir;
    fleet.run_id = run_id;
    fleet.should_stop = should_stop;
    auto source = EnsureFleetData(c, data, fleet);
    if (!source.ok()) return source.status();
    CountFleetData(*source, stats_for_data);
    return absl::OkStatus();
  };
  return sopts;
}

// The lease loop. This thread only leases, whenever a slot is free; each slot trains one leased
// run on its own thread (its own Session: lease, heartbeat, spool, checkpoints). It ends on a
// signal, at --max-runs, when idle with --exit-when-idle, or (once the runs held have ended) on a
// permanent Lease error; then every slot's session has checkpointed and handed its run back
// (SessionOptions.shutdown) or finished it, and the server is told the worker stopped.
class LeaseLoop {
 public:
  LeaseLoop(const DaemonOptions& options, Worker* w, SessionOptions sopts)
      : options_(options),
        w_(w),
        c_(w->client.get()),
        sopts_(std::move(sopts)),
        slots_(options.slots, options.max_runs),
        slot_threads_(static_cast<size_t>(options.slots)),
        last_end_(static_cast<size_t>(options.slots)) {}

  // Returns the exit code: 0, or that of the permanent Lease error that stopped leasing.
  int Run() {
    util::Backoff backoff(util::kDaemonBackoff);
    while (WaitForFreeSlot()) {
      auto lease = c_->Lease(w_->worker_id, options_.lease_wait_seconds);
      if (!lease.ok()) {
        if (g_shutdown) break;
        OnLeaseError(lease.status(), &backoff);
        continue;
      }
      backoff.Reset();
      if (lease->has_run()) {
        Unbenched();
        StartInFreeSlot(*std::move(lease));
      } else if (lease->self_check_due()) {
        SelfCheck();
      } else if (lease->benched_until() > UnixNow()) {
        // Benched is not idle: --exit-when-idle waits for the bench to end like any worker.
        Benched(*lease);
      } else {
        Unbenched();
        if (options_.exit_when_idle) StopLeasing();
      }
    }
    return Stop();
  }

 private:
  // Waits until a slot is free; false when the loop should end instead. Polled so that a signal
  // ends the wait too.
  bool WaitForFreeSlot() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!g_shutdown && !slots_.WantLease() && !slots_.Done()) {
      slot_freed_.wait_for(lock, std::chrono::milliseconds(100));
    }
    return !g_shutdown && !slots_.Done();
  }

  void StopLeasing() {
    std::lock_guard<std::mutex> lock(mu_);
    slots_.StopLeasing();
  }

  // Registers again when the server forgot this worker (e.g. pruned); on a permanent error
  // stops leasing (the runs held keep training to their end) and keeps its exit code; else
  // waits out the backoff.
  void OnLeaseError(const absl::Status& s, util::Backoff* backoff) {
    if (absl::IsNotFound(s)) {
      auto again = RegisterWithRetry(c_, w_->info);
      if (again.ok()) w_->worker_id = again->worker_id();
      return;
    }
    if (!rpc::IsTransient(s)) {
      spdlog::error("{}", s.message());
      exit_code_ = ExitCodeFor(s);
      StopLeasing();
      return;
    }
    const auto wait = backoff->Next();
    LogRetry(s, wait);
    util::SleepUnless(wait, ShuttingDown);
  }

  static double UnixNow() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  // The server benched this worker: it says so once per bench (and again if the reason or the
  // end changes), then asks again every kBenchPoll at most, since an operator may lift the bench
  // at any time (`ablate workers unbench`), or when the bench ends, if sooner.
  void Benched(const v1::LeaseResponse& lease) {
    w_->benched = true;
    if (lease.benched_until() != logged_bench_until_ || lease.bench_reason() != logged_reason_) {
      logged_bench_until_ = lease.benched_until();
      logged_reason_ = lease.bench_reason();
      const absl::Time until = absl::FromUnixSeconds(static_cast<int64_t>(lease.benched_until()));
      spdlog::warn("benched until {}: {}",
                   absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", until, absl::UTCTimeZone()),
                   lease.bench_reason().empty() ? "no reason given" : lease.bench_reason());
    }
    const double left = std::max(0.0, lease.benched_until() - UnixNow());
    const auto wait = std::min<std::chrono::milliseconds>(
        BenchedPoll(), std::chrono::milliseconds(static_cast<int64_t>(left * 1000) + 100));
    util::SleepUnless(wait, ShuttingDown);
  }

  // How long a benched worker waits before asking Lease again: kBenchPoll, and at least as often
  // as a heartbeat too, since each ask keeps the worker seen, so `ablate workers` shows it
  // benched rather than lost.
  std::chrono::milliseconds BenchedPoll() const {
    return std::min<std::chrono::milliseconds>(
        kBenchPoll,
        std::chrono::milliseconds(static_cast<int64_t>(sopts_.heartbeat_seconds * 1000)));
  }

  // A lease that did not say benched: the bench, if there was one, is over.
  void Unbenched() {
    if (!w_->benched.exchange(false)) return;
    logged_bench_until_ = 0;
    logged_reason_.clear();
    spdlog::info("no longer benched");
  }

  // The bench is over and the server asks for the self-check: the work dir written and read back,
  // the memory the last run that failed for lack of it needs, and the device benchmark measured
  // afresh (worker/self_check.h): the check of what failed, whatever it was. When it passes,
  // Register again with the figures (which clears self_check_due). When it fails the worker stays
  // benched and tries again after a back-off that grows.
  void SelfCheck() {
    w_->benched = true;
    if (const auto now = Clock::now(); now < next_self_check_) {
      // Backing off after a failed self-check, still asking Lease as a benched worker does.
      util::SleepUnless(std::min<std::chrono::milliseconds>(
                            BenchedPoll(), std::chrono::duration_cast<std::chrono::milliseconds>(
                                               next_self_check_ - now)),
                        ShuttingDown);
      return;
    }
    FaultArea area;
    int64_t memory_need;
    {
      std::lock_guard<std::mutex> lock(mu_);
      area = last_fault_area_;
      memory_need = last_memory_need_;
    }
    spdlog::info(
        "bench over: running the self-check (the work dir, {}the device benchmark measured "
        "afresh; the last worker-side failure pointed at: {})",
        area == FaultArea::kMemory && memory_need > 0 ? "the memory the run that failed needs, "
                                                      : "",
        FaultAreaName(area));
    absl::Status checked = CheckWorkDir(options_.work_dir);
    const std::string& kind = w_->info.device_kind();
    if (checked.ok() && area == FaultArea::kMemory && (kind == "cpu" || kind == "mps")) {
      checked = CheckMemory(memory_need);
    }
    const absl::StatusOr<train::DeviceBenchmarkResult> result =
        checked.ok() ? MeasureDevice(options_, *w_, /*self_check=*/true)
                     : absl::StatusOr<train::DeviceBenchmarkResult>(checked);
    if (g_shutdown) return;
    if (!result.ok()) {
      const auto wait = self_check_backoff_.Next();
      next_self_check_ = Clock::now() + wait;
      spdlog::warn("self-check failed: {}; trying again in {:.0f}s", result.status().message(),
                   double(wait.count()) / 1000);
      return;
    }
    w_->info.clear_benchmarks();
    for (const auto& b : result->benchmarks) *w_->info.add_benchmarks() = b;
    auto again = RegisterWithRetry(c_, w_->info);
    if (!again.ok()) {
      if (!g_shutdown)
        spdlog::warn("self-check passed, registering failed: {}", again.status().message());
      return;
    }
    w_->worker_id = again->worker_id();
    self_check_backoff_.Reset();
    spdlog::info("self-check passed ({}); registered again as worker {}",
                 train::DescribeBenchmarks(*result), again->worker_id());
    Unbenched();
  }

  void StartInFreeSlot(v1::LeaseResponse lease) {
    int slot;
    {
      std::lock_guard<std::mutex> lock(mu_);
      slot = slots_.Acquire();
    }
    std::thread& t = slot_threads_[static_cast<size_t>(slot)];
    if (t.joinable()) t.join();  // its run has ended: Release came last
    // Kept apart: std::thread's constructor takes the lease even when it cannot start the thread.
    const RunLease held(lease.lease());
    // On disk while held: if this process dies, the next one reports the attempt (crash_record.h).
    w_->crash->Hold(held);
    try {
      t = std::thread(&LeaseLoop::RunInSlot, this, slot, w_->worker_id.load(), std::move(lease));
    } catch (const std::system_error& e) {
      ReleaseUnstarted(held, absl::StrCat("cannot start a thread for the run: ", e.what()));
      w_->crash->Drop(held);
      {
        std::lock_guard<std::mutex> lock(mu_);
        slots_.Release(slot);
      }
      // Leasing again at once would take the next run the same way; the server benches a worker
      // that keeps letting runs go, and meanwhile this one waits a moment.
      util::SleepUnless(kCannotStartWait, ShuttingDown);
    }
  }

  // A run this worker cannot go on with outside its session: released at once, its fault.
  void ReleaseUnstarted(const RunLease& lease, const std::string& reason) {
    spdlog::error("run {}: {}; this worker cannot go on with the run and releases it",
                  lease.run_id(), reason);
    if (auto s = c_->Release(lease, reason, v1::FAULT_WORKER); !s.ok()) {
      spdlog::warn("run {}: could not release it ({}); its lease will expire", lease.run_id(),
                   s.message());
    }
  }

  // A slot's thread: one run's session, its log line, then the slot is free again. Whatever the
  // session throws releases the run as the worker's fault rather than ending the daemon.
  void RunInSlot(int slot, int64_t worker, v1::LeaseResponse lease) {
    SessionOutcome out;
    try {
      out = RunSession(c_, worker, lease, sopts_, &w_->stats[static_cast<size_t>(slot)]);
    } catch (const std::exception& e) {
      ReleaseUnstarted(RunLease(lease.lease()),
                       absl::StrCat("the run's session failed: ", e.what()));
      out.end = SessionEnd::kWorkerFault;
      out.detail = absl::StrCat("session failed: ", e.what());
      out.ended = Clock::now();
    } catch (...) {
      ReleaseUnstarted(RunLease(lease.lease()),
                       "the run's session failed: an exception of unknown type");
      out.end = SessionEnd::kWorkerFault;
      out.detail = "session failed";
      out.ended = Clock::now();
    }
    w_->crash->Drop(RunLease(lease.lease()));
    const double wall = out.train_seconds + out.overhead_seconds;
    Clock::time_point& last = last_end_[static_cast<size_t>(slot)];
    std::string gap;
    if (last != Clock::time_point{} && out.train_started != Clock::time_point{}) {
      gap = absl::StrCat(
          ", dispatch gap ",
          std::chrono::duration<double, std::milli>(out.train_started - last).count(), " ms");
    }
    spdlog::info("run {}: {} — train {:.2f}s, worker overhead {:.3f}s ({:.2f}%){}{}",
                 lease.spec().run_id(), out.detail, out.train_seconds, out.overhead_seconds,
                 wall > 0 ? 100.0 * out.overhead_seconds / wall : 0.0, gap,
                 options_.slots > 1 ? absl::StrCat(" [slot ", slot, "]") : "");
    last = out.ended;
    {
      std::lock_guard<std::mutex> lock(mu_);
      slots_.Release(slot);
      // What the self-check tests again if this failure is one of those that bench the worker.
      if (out.area != FaultArea::kOther) {
        last_fault_area_ = out.area;
        last_memory_need_ =
            out.area == FaultArea::kMemory
                ? cost::RunMemoryBytes(lease.spec().config(), cost::VocabOf(lease.spec().data()))
                : 0;
      }
    }
    slot_freed_.notify_all();
  }

  // Waits for every slot's run to end, then deregisters.
  int Stop() {
    for (auto& t : slot_threads_) {
      if (t.joinable()) t.join();
    }
    // A clean stop is announced so `ablate workers` shows it offline at once; if the server
    // cannot be told, the worker still goes offline once its silence outlasts two lease periods.
    if (auto s = c_->Deregister(w_->worker_id); !s.ok()) {
      spdlog::warn("could not tell the server this worker is stopping: {}", s.message());
    }
    w_->crash->Close();  // a clean stop: nothing held, nothing for the next process to report
    spdlog::info("ablate-worker stopping after starting {} run(s)", slots_.started());
    return exit_code_;
  }

  // While benched, Lease is asked again this often at most: an operator may lift the bench.
  static constexpr std::chrono::milliseconds kBenchPoll{15000};
  // After a run's thread could not be started, before leasing again.
  static constexpr std::chrono::milliseconds kCannotStartWait{5000};

  const DaemonOptions& options_;
  Worker* w_;
  ServerClient* c_;
  const SessionOptions sopts_;
  int exit_code_ = 0;
  // The bench last logged (this thread's): logged once, not every poll.
  double logged_bench_until_ = 0;
  std::string logged_reason_;
  // Between failed self-checks: 15 s, doubling up to 10 minutes.
  Clock::time_point next_self_check_{};  // not before this, after a failed one
  util::Backoff self_check_backoff_{
      util::BackoffPolicy{std::chrono::seconds(15), std::chrono::minutes(10)}};
  std::mutex mu_;
  std::condition_variable slot_freed_;
  SlotScheduler slots_;  // guarded by mu_
  // The last worker-side failure's area and, for memory, what its run needs (guarded by mu_).
  FaultArea last_fault_area_ = FaultArea::kOther;
  int64_t last_memory_need_ = 0;
  std::vector<std::thread> slot_threads_;    // this thread's
  std::vector<Clock::time_point> last_end_;  // each slot's thread's own entry
};

}  // namespace

namespace {

int Daemon(const DaemonOptions& options) {
  Worker w;
  if (auto exit_code = StartUp(options, &w)) return *exit_code;
  if (g_shutdown) return 0;
  ShutdownWatcher watcher(w.client.get());

  spdlog::info("ablate-worker {} on {} ({}), server {}", util::LogQuote(w.info.name()),
               w.info.device_name(), w.info.device_kind(), options.client.server);
  spdlog::info("{}", DescribePrice(options));
  BenchmarkDevice(options, &w);
  if (g_shutdown) {
    spdlog::info("stopped during start-up");
    return 0;
  }
  // The first Register of this process: the leases an earlier process left are released, and
  // those it held when it died count against this worker with their cause (crash_record.h).
  auto reg = RegisterWithRetry(w.client.get(), w.info, &w.crash->previous());
  if (!reg.ok()) {
    if (absl::IsCancelled(reg.status())) return 0;
    spdlog::error("{}", reg.status().message());
    return ExitCodeFor(reg.status());
  }
  if (!w.crash->previous().empty()) {
    spdlog::info("reported {} attempt(s) the previous process held when it died",
                 w.crash->previous().size());
  }
  w.crash->Reported();
  w.worker_id = reg->worker_id();
  // From here a signal is answered by the lease loop: each run checkpointed and handed back.
  g_starting = false;
  alarm(0);
  if (g_shutdown) return 0;
  SessionOptions sopts = SessionOptionsFor(options, &w, reg->lease_seconds());
  spdlog::info("registered as worker {} (lease {}s){}", reg->worker_id(), reg->lease_seconds(),
               options.slots > 1 ? absl::StrCat(", ", options.slots, " slots of ",
                                                w.threads_per_slot, " thread(s)")
                                 : "");
  return LeaseLoop(options, &w, std::move(sopts)).Run();
}

}  // namespace

int RunDaemon(const DaemonOptions& options) {
  InstallSignalHandlers();
  // The main thread's entry: nothing thrown may end the daemon in std::terminate. What gets here
  // (a thread the start could not create, memory it could not get) ends it with a message.
  try {
    return Daemon(options);
  } catch (const std::exception& e) {
    spdlog::error("ablate-worker stopping: {}", e.what());
  } catch (...) {
    spdlog::error("ablate-worker stopping: an exception of unknown type");
  }
  return 1;
}

}  // namespace ablate::worker
