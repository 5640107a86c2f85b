// ablate-worker: trains runs. `ablate-worker --server ...` is the daemon; `train` and
// `data prepare` work with no server at all.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "common/cli/edge.h"
#include "common/cli/server_flags.h"
#include "common/util/fields.h"
#include "spdlog/spdlog.h"
#include "worker/daemon.h"
#include "worker/train/commands.h"
#include "worker/train/trainer.h"

namespace {

using ablate::cli_edge::Env;

// An empty variable counts as unset.
std::string DefaultCacheDir() {
  if (std::string xdg = Env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/ablate";
  const std::string home = Env("HOME");
  return (home.empty() ? std::string("/tmp") : home) + "/.cache/ablate";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ablate-worker: trains ablation-sweep runs with LibTorch (CUDA, MPS or CPU).\n"
      "Without a subcommand it is the daemon: it leases runs from ablate-server and trains them."};
  app.require_subcommand(0, 1);

  ablate::worker::DaemonOptions daemon;
  daemon.work_dir = Env("ABLATE_WORK_DIR");
  if (daemon.work_dir.empty()) daemon.work_dir = DefaultCacheDir() + "/worker";
  ablate::cli_edge::ServerFlags server;
  ablate::cli_edge::AddServerFlags(app, &server);
  app.add_option("--device", daemon.device, "auto | cpu | cuda | mps")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "mps"}));
  app.add_option("--work-dir", daemon.work_dir, "Data sets, cache, spool (env ABLATE_WORK_DIR)");
  app.add_option("--name", daemon.name,
                 "Worker name shown by `ablate workers` (default: hostname)");
  app.add_option("--metrics-listen", daemon.metrics_listen,
                 "Serve Prometheus /metrics on HOST:PORT (loopback unless --metrics-insecure)");
  app.add_flag("--metrics-insecure", daemon.metrics_insecure,
               "Allow --metrics-listen beyond loopback (/metrics has no TLS and no auth)");
  app.add_option("--threads", daemon.threads,
                 "CPU threads for training, all slots together (0: all cores)");
  app.add_option("--slots", daemon.slots,
                 "Runs trained at once, each with its own lease (1-64; threads split evenly)");
  app.add_option("--lease-wait", daemon.lease_wait_seconds, "Long-poll seconds per Lease call");
  app.add_option("--max-runs", daemon.max_runs, "Exit after this many runs (0: never)");
  app.add_flag("--exit-when-idle", daemon.exit_when_idle, "Exit when no run is left to lease");
  auto* price = app.add_option(
      "--price-per-hour", daemon.price_per_hour,
      "What this machine costs an hour in US dollars, for the server's estimates and budgets "
      "(env ABLATE_PRICE_PER_HOUR; 0: not declared)");
  // Hidden (no help group): a test option, never a way to run a fleet.
  double test_min_step_ms = 0;
  app.add_option("--test-min-step-ms", test_min_step_ms,
                 "Every training step lasts at least this long (tests only)")
      ->group("");
  // Hidden too: the e2e and soak tests' broken worker (worker/failure_class.h, InjectedFault).
  app.add_option("--test-fault-file", daemon.fault_file,
                 "While PATH exists, every attempt fails at step 0 with its contents as the error "
                 "(empty: a CUDA error), the worker's fault, or the run's when its first line "
                 "starts 'run:'; a benched worker's self-check fails too; removing it heals the "
                 "worker (tests only)")
      ->group("");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace | debug | info | warn | error");

  ablate::train::TrainCommandArgs train;
  train.cache_dir = DefaultCacheDir();
  auto* train_cmd = app.add_subcommand("train", "Train one run from RUN.yaml, no server needed");
  train_cmd->add_option("run_file", train.run_file, "Run file (a sweep file with one value each)")
      ->required();
  train_cmd->add_option("--out", train.out_dir, "Output directory (rerun with it to resume)")
      ->required();
  train_cmd->add_option("--device", train.device, "auto | cpu | cuda | mps")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "mps"}));
  train_cmd->add_option("--cache-dir", train.cache_dir, "Tokenizer and token-file cache");
  train_cmd
      ->add_option("--threads", train.threads, "CPU threads, all copies together (0: all cores)")
      ->check(CLI::NonNegativeNumber);
  train_cmd
      ->add_option("--copies", train.copies,
                   "Train N copies at once (seeds seed..seed+N-1, DIR/copy-K), as --slots N "
                   "would: per-copy and total tokens/s, to size --slots for a device")
      ->check(CLI::Range(1, 64));
  train_cmd->add_flag("--quiet", train.quiet, "Print only the result");

  ablate::train::DataPrepareArgs prep;
  prep.cache_dir = DefaultCacheDir();
  auto* data_cmd = app.add_subcommand("data", "Data set tools");
  data_cmd->require_subcommand(1);
  auto* prep_cmd = data_cmd->add_subcommand(
      "prepare", "Train a BPE tokenizer on text files and write uint16 token files");
  prep_cmd->add_option("--text", prep.text_files, "Text files (UTF-8)")->required();
  prep_cmd->add_option("--vocab", prep.vocab, "Vocabulary size")->check(CLI::Range(260, 65535));
  prep_cmd->add_option("--cache-dir", prep.cache_dir, "Where prepared data sets are cached");
  prep_cmd->add_option("--out", prep.out_dir, "Also copy the tokenizer and token files here");

  // Loading LibTorch only when asked: the version lines name the torch the worker trains with.
  auto torch_line = [] { return std::vector<std::string>{ablate::train::TorchBuildLine()}; };
  auto* version = ablate::cli_edge::AddVersion(app, "ablate-worker", torch_line);
  if (auto code = ablate::cli_edge::Parse(app, argc, argv, "ablate-worker")) return *code;
  if (version->parsed()) {
    std::printf("%s\n", ablate::cli_edge::VersionText("ablate-worker", torch_line()).c_str());
    return 0;
  }
  // The same precedence as the CLI's (flag, then environment), without a config file.
  auto client = ablate::cli_edge::ResolveServer(server);
  if (!client.ok()) {
    std::fprintf(stderr, "ablate-worker: %s\n", std::string(client.status().message()).c_str());
    return 2;
  }
  daemon.client = *client;
  daemon.min_step_seconds = test_min_step_ms / 1000;
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  if (*train_cmd) return ablate::train::RunTrainCommand(train);
  if (*prep_cmd) return ablate::train::RunDataPrepareCommand(prep);
  // The flag, else the environment: the worker's env file (systemd EnvironmentFile, docker
  // --env-file) is where a box's price is configured.
  if (price->count() == 0) {
    if (const std::string env = Env("ABLATE_PRICE_PER_HOUR"); !env.empty()) {
      if (!absl::SimpleAtod(env, &daemon.price_per_hour) ||
          !(daemon.price_per_hour >= 0 && std::isfinite(daemon.price_per_hour))) {
        return ablate::cli_edge::UsageError(
            app, "ABLATE_PRICE_PER_HOUR must be a finite number of US dollars >= 0 (got " +
                     ablate::util::LogQuote(env) + ")");
      }
    }
  }
  // A flag out of range is a usage error, as CLI11's own are: the reason and the usage line.
  if (auto s = ablate::worker::CheckDaemonOptions(daemon); !s.ok()) {
    return ablate::cli_edge::UsageError(app, std::string(s.message()));
  }
  return ablate::worker::RunDaemon(daemon);
}
