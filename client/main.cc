// ablate: the command line for sweeps. Talks to ablate-server over gRPC; never links torch.
#include <cstdlib>
#include <iostream>
#include <optional>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands.h"
#include "client/completion.h"
#include "client/config.h"
#include "client/download.h"
#include "common/cli/edge.h"
#include "common/run/retry_policy.h"

int main(int argc, char** argv) {
  using namespace ablate::cli;
  CLI::App app{"ablate: submit ablation sweeps of small GPT models, watch them, report on them"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--server, --token, -o) may follow the command too
  app.set_help_all_flag("--help-all", "Help for every command");

  ConnectionFlags conn;
  std::string output = "table";
  ablate::cli_edge::AddServerFlags(app, &conn);
  app.add_option("--config", conn.config_file,
                 "Config file (env ABLATE_CONFIG; default ~/.config/ablate/config.yaml)");
  app.add_option("-o,--output", output, "table | json")->check(CLI::IsMember({"table", "json"}));

  SubmitArgs submit;
  auto* c_submit = app.add_subcommand("submit", "Validate a sweep file and queue its runs");
  c_submit->add_option("file", submit.file, "Sweep file (YAML)")->required();
  c_submit->add_flag("--dry-run", submit.dry_run,
                     "Check everything submit checks, print the expanded grid and the estimate, "
                     "queue nothing (no server configured: the file alone)");
  c_submit->add_flag("--watch", submit.watch, "Watch the sweep after submitting");
  c_submit->add_option("--priority", submit.priority, "Higher runs first (default 0)");

  EstimateArgs estimate;
  double sigma = 0;
  auto* c_estimate = app.add_subcommand(
      "estimate", "What a sweep file would cost on the fleet now: GPU-hours, wall time, money");
  c_estimate->add_option("file", estimate.file, "Sweep file (YAML)")->required();
  c_estimate->add_option("--sigma", sigma,
                         "Seed noise in nats (std of final val loss over seeds): print how many "
                         "seeds per cell the hypotheses need, and their cost");
  c_estimate->add_option("--pilot", estimate.plan.pilot,
                         "Take the seed noise from this finished sweep (id or name) instead");
  c_estimate
      ->add_option("--effect", estimate.plan.effect,
                   "Smallest effect the study must detect, in nats, for the seed plan")
      ->capture_default_str();
  c_estimate->add_option("--power", estimate.plan.power, "Chance to detect it, in (0, 1)")
      ->capture_default_str();
  c_estimate
      ->add_option("--alpha", estimate.plan.alpha,
                   "False-positive rate of each hypothesis's tests, in (0, 0.5)")
      ->capture_default_str();

  bool active_only = false;
  int limit = 50;
  auto* c_ls = app.add_subcommand("ls", "List sweeps");
  c_ls->add_flag("--active", active_only, "Only sweeps with unfinished runs");
  c_ls->add_option("--limit", limit, "At most this many (newest first)");
  // ls has a wide form (every count, whole names); the global -o has no `wide`, so completion
  // offers it where it applies.
  c_ls->add_option("-o,--output", output, "table | json | wide (every count, whole names)")
      ->check(CLI::IsMember({"table", "json", "wide"}));

  std::string sweep;
  auto* c_status = app.add_subcommand("status", "A sweep's grid: cells x run states, losses");
  c_status->add_option("sweep", sweep, "Sweep id or name")->required();

  double interval = 1;
  auto* c_watch = app.add_subcommand("watch", "Live progress of a sweep; exits when it ends");
  c_watch->add_option("sweep", sweep, "Sweep id or name")->required();
  c_watch->add_option("--interval", interval, "Seconds between updates");

  double raise = 0;
  auto* c_budget =
      app.add_subcommand("budget", "A sweep's budget and spend; --raise lets it continue");
  c_budget->add_option("sweep", sweep, "Sweep id or name")->required();
  c_budget->add_option("--raise", raise, "Add this much (GPU-hours or US dollars, as set)");

  std::vector<std::string> states;
  auto* c_runs = app.add_subcommand("runs", "List runs");
  c_runs->add_option("sweep", sweep, "Sweep id or name (default: all sweeps)");
  c_runs->add_option("--state", states, "Only runs in these states")->delimiter(',');
  c_runs->add_option("--limit", limit, "At most this many, newest first (default 50)");
  bool all_runs = false;
  c_runs->add_flag("--all", all_runs, "Every matching run");

  int64_t run = 0;
  std::vector<std::string> names;
  bool follow = false;
  auto* c_metrics = app.add_subcommand("metrics", "A run's metric points (step, name, value)");
  c_metrics->add_option("run", run, "Run id")->required();
  c_metrics->add_option("--name", names, "Only these metrics (e.g. train_loss,val_loss)")
      ->delimiter(',');
  c_metrics->add_flag("-f,--follow", follow, "Keep streaming until the run ends");

  auto* c_logs = app.add_subcommand(
      "logs", "A run's events (leases, expiries, fencing, results) and training progress lines");
  c_logs->add_option("run", run, "Run id")->required();
  c_logs->add_flag("-f,--follow", follow, "Keep streaming events and lines until the run ends");

  std::string artifacts_out;
  auto* c_artifacts = app.add_subcommand("artifacts", "A finished run's kept files");
  c_artifacts->require_subcommand(1);
  auto* c_artifacts_get =
      c_artifacts->add_subcommand("get", "Download a run's final checkpoint (SHA-256 verified)");
  c_artifacts_get->add_option("run", run, "Run id")->required();
  c_artifacts_get->add_option("--out", artifacts_out, "Directory (file: run-RUN-final.pt)")
      ->required();
  auto* c_artifacts_ls = c_artifacts->add_subcommand(
      "ls", "What the server keeps for a run: checkpoints (step, size, SHA-256), final weights");
  c_artifacts_ls->add_option("run", run, "Run id")->required();

  std::vector<int64_t> run_ids;
  auto* c_cancel =
      app.add_subcommand("cancel", "Cancel a sweep's unfinished runs (or some of them)");
  c_cancel->add_option("sweep", sweep,
                       "Sweep id or name (optional with --run: run ids are global)");
  c_cancel->add_option("--run", run_ids, "Only these run ids")->delimiter(',');

  // The states named here are the ones Retry accepts (common/run/retry_policy.h), so the help
  // cannot drift from what retry does.
  std::vector<std::string> retryable, retry_default;
  for (auto st : ablate::util::kRetryableStates) {
    retryable.emplace_back(ablate::util::RunStateName(st));
  }
  for (auto st : ablate::util::kDefaultRetryStates) {
    retry_default.emplace_back(ablate::util::RunStateName(st));
  }
  auto* c_retry =
      app.add_subcommand("retry", absl::StrCat("Requeue ", ablate::util::RetryableList(), " runs"));
  c_retry->add_option("sweep", sweep, "Sweep id or name")->required();
  c_retry->add_option("--run", run_ids, "Only these run ids")->delimiter(',');
  c_retry
      ->add_option("--state", states,
                   absl::StrCat("Runs in these states: ", absl::StrJoin(retryable, ", "),
                                " (default ", absl::StrJoin(retry_default, ","), ")"))
      ->delimiter(',')
      // The type name's {...} is what completion offers (client/completion.cc, Choices); the
      // check stays Retry's, whose refusal says why a state is not retried.
      ->type_name(absl::StrCat("STATE:{", absl::StrJoin(retryable, ","), "}"));

  bool yes = false;
  auto* c_delete = app.add_subcommand(
      "delete", "Delete a finished or cancelled sweep: its runs, metrics and stored checkpoints");
  c_delete->add_option("sweep", sweep, "Sweep id or name")->required();
  c_delete->add_flag("-y,--yes", yes, "Do not ask (needed when stdin is not a terminal)");

  bool all_workers = false;
  auto* c_workers = app.add_subcommand("workers", "The fleet: devices, state, current run");
  c_workers->add_flag("-a,--all", all_workers, "Include offline workers");
  std::string worker_name;
  auto* c_workers_unbench = c_workers->add_subcommand(
      "unbench", "Lift a worker's bench: it leases again at once, without its self-check");
  c_workers_unbench->add_option("worker", worker_name, "Worker name")->required();

  std::string out_dir;
  bool with_metrics = true;
  auto* c_export = app.add_subcommand("export", "Write a sweep's runs and metrics to a directory");
  c_export->add_option("sweep", sweep, "Sweep id or name")->required();
  c_export->add_option("--out", out_dir, "Directory (sweep.json, runs.jsonl, metrics.csv)")
      ->required();
  c_export->add_flag("!--no-metrics", with_metrics,
                     "Write no metrics.csv (sweep.json and runs.jsonl only)");
  c_export->footer(
      "Writes to DIR: sweep.json (the sweep and its file), runs.jsonl (one run a line, proto\n"
      "JSON) and, unless --no-metrics, metrics.csv (run_id,step,name,value: every metric\n"
      "point). `ablate report --from DIR` reads it.");

  ReportArgs report;
  auto* c_report =
      app.add_subcommand("report", "Answer the study's questions: tables, CSV, figures");
  c_report->add_option("sweep", report.sweep, "Sweep id or name");
  c_report->add_option("--from", report.from,
                       "Analyse an `ablate export` directory instead (no server)");
  c_report->add_option("--out", report.out_dir, "Write report.md, CSVs and figures here");
  c_report->add_option("--lr-range", report.lr_range,
                       "LR range A:B for LR sensitivity (default: the sweep file's "
                       "analysis.lr_range, else 3e-4:3e-1)");
  c_report->add_option("--delta", report.delta,
                       "Necessity-threshold floor in nats (default: analysis.delta, else 0.02)");
  c_report->add_option("--tau", report.tau,
                       "Max-good-LR tolerance (default: analysis.tau, else 0.2)");
  c_report->add_option("--variant", report.variant,
                       "Axis compared (default: analysis.variant, else qk_norm)");
  c_report->add_option("--by", report.by, "Moderator axis (default: analysis.by, else n_layer)");
  c_report
      ->add_option("--format", report.format,
                   "table | md | json (json: the same document as -o json)")
      ->check(CLI::IsMember({"table", "md", "json"}));
  c_report->add_flag("--require-uniform", report.require_uniform,
                     "Fail (exit 6) if any cell or comparison mixes device kinds, dtypes, torch "
                     "versions or tokenizers");

  auto* c_login = app.add_subcommand(
      "login", "Check a server and token, then save them to the config file (mode 0600)");
  c_login->footer(
      "ablate login --server HOST:PORT --token-file FILE [--tls-ca CA]\n"
      "Writes ~/.config/ablate/config.yaml (or --config, $ABLATE_CONFIG). Settings are taken\n"
      "from the flag, else the environment, else that file.");
  auto* c_config = app.add_subcommand("config", "The config file");
  c_config->require_subcommand(1);
  auto* c_config_init = c_config->add_subcommand(
      "init", "Save --server, --token-file and --tls-ca to the config file without checking");
  DataFetchArgs fetch;
  if (const char* dir = std::getenv("ABLATE_DATA_DIR"); dir != nullptr && *dir != '\0') {
    fetch.to = dir;
  } else {
    fetch.to = "data";
  }
  auto* c_data = app.add_subcommand("data", "Data sets for sweeps");
  c_data->require_subcommand(1);
  auto* c_fetch = c_data->add_subcommand(
      "fetch", "Download a public corpus (tinystories) or any text file into the data directory");
  c_fetch->add_option("dataset", fetch.dataset, "A known data set: tinystories");
  c_fetch->add_option("--url", fetch.url, "Download this file instead (http or https)");
  c_fetch->add_option("--sha256", fetch.sha256,
                      "With --url: its expected SHA-256 (else the first download's is recorded)");
  c_fetch->add_option("--name", fetch.name, "With --url: the file name to save as");
  c_fetch->add_option("--to", fetch.to, "Data directory (env ABLATE_DATA_DIR; default ./data)")
      ->capture_default_str();
  c_fetch->add_option("--base-url", fetch.base_url,
                      "Fetch a known data set's files from this mirror instead");
  c_fetch
      ->add_option("--low-speed-limit", fetch.low_speed_limit,
                   "Bytes/s under which the transfer counts as stalled")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  c_fetch
      ->add_option("--low-speed-time", fetch.low_speed_time,
                   "Seconds under --low-speed-limit before a stalled download is abandoned "
                   "(kept for a resume)")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}))
      ->capture_default_str();
  c_fetch->add_flag("-q,--quiet", fetch.quiet, "No progress bar");

  std::string shell;
  auto* c_completion = app.add_subcommand("completion", "Print a shell completion script");
  c_completion->add_option("shell", shell, "bash | zsh | fish")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));
  c_completion->footer(
      "bash: source <(ablate completion bash)   zsh: source <(ablate completion zsh)\n"
      "fish: ablate completion fish | source\n"
      "Sweep and run ids complete from the configured server (nothing without one).");
  // The scripts' helper, hidden (no group): `ablate __complete sweeps|runs [SWEEP]`.
  std::string complete_what, complete_sweep;
  auto* c_complete = app.add_subcommand("__complete", "Sweep or run ids for shell completion");
  c_complete->group("");
  c_complete->add_option("what", complete_what, "sweeps | runs | workers")->required();
  c_complete->add_option("sweep", complete_sweep, "With runs: only this sweep's");
  auto* c_version = ablate::cli_edge::AddVersion(app, "ablate");

  if (auto code = ablate::cli_edge::Parse(app, argc, argv, "ablate")) return *code;
  if (*c_fetch) {
    if (fetch.dataset.empty() == fetch.url.empty()) {
      return ablate::cli_edge::UsageError(
          *c_fetch, "give a data set name (tinystories) or --url URL, one of them");
    }
    for (const auto& [flag, url] : {std::pair<const char*, const std::string&>{"--url", fetch.url},
                                    {"--base-url", fetch.base_url}}) {
      if (url.empty()) continue;
      if (auto s = CheckDownloadUrl(url, flag); !s.ok()) {
        return ablate::cli_edge::UsageError(*c_fetch, std::string(s.message()));
      }
    }
    return DataFetch(fetch);
  }

  if (*c_version) {
    std::cout << ablate::cli_edge::VersionText("ablate") << "\n";
    return 0;
  }
  if (*c_complete) return CompleteIds(conn, complete_what, complete_sweep);
  if (*c_completion) {
    auto script = CompletionScript(app, shell);
    if (!script.ok()) return Fail(script.status());
    std::cout << *script;
    return 0;
  }
  if (*c_login) return Setup(conn, /*verify=*/true);
  if (*c_config_init) return Setup(conn, /*verify=*/false);

  report.usage_error = [c_report](const std::string& message) {
    return ablate::cli_edge::UsageError(*c_report, message);
  };
  report.variant_given = c_report->get_option("--variant")->count() > 0;
  report.by_given = c_report->get_option("--by")->count() > 0;
  report.tau_given = c_report->get_option("--tau")->count() > 0;
  report.delta_given = c_report->get_option("--delta")->count() > 0;
  estimate.usage_error = [c_estimate](const std::string& message) {
    return ablate::cli_edge::UsageError(*c_estimate, message);
  };
  if (*c_estimate) {
    if (c_estimate->get_option("--sigma")->count() > 0) estimate.plan.sigma = sigma;
    if (auto s = CheckSeedPlanFlags(estimate.plan); !s.ok()) {
      return estimate.usage_error(std::string(s.message()));
    }
  }
  if (*c_report && report.sweep.empty() == report.from.empty()) {
    return ablate::cli_edge::UsageError(*c_report, "give a sweep id or name, or --from DIR (one)");
  }
  Context ctx;
  ctx.json = output == "json";
  auto resolved = ResolveConnection(conn);
  if (!resolved.ok()) return Fail(resolved.status());
  ctx.conn = *resolved;
  if (ServerUnconfigured(conn)) {
    SetUnreachableHint(absl::StrCat(
        "ablate: no server is configured (no --server, no ABLATE_SERVER, no server: in ",
        ConfigPath(conn), "), so this tried the default ", ctx.conn.server,
        ". Configure one:\n"
        "  ablate login --server HOST:PORT --token-file FILE   checks it and saves it to the "
        "config file\n"
        "  ablate --server HOST:PORT ...  or  export ABLATE_SERVER=HOST:PORT   for this shell\n"));
  }
  // Offline commands need no channel; everything else dials lazily (gRPC connects on first call).
  // submit --dry-run asks a configured server for the estimate too, and works without one, as
  // estimate --sigma does for its seed plan.
  const bool offline = (*c_submit && submit.dry_run && ServerUnconfigured(conn)) ||
                       (*c_estimate && estimate.plan.sigma && ServerUnconfigured(conn)) ||
                       (*c_report && !report.from.empty());
  if (!offline) {
    auto channel = ablate::rpc::MakeChannel(ctx.conn);
    if (!channel.ok()) return Fail(channel.status());
    ctx.stub = ablate::v1::SweepService::NewStub(*channel);
  }

  if (*c_submit) return Submit(ctx, submit);
  if (*c_estimate) return Estimate(ctx, estimate);
  if (*c_budget) {
    return Budget(
        ctx, sweep,
        c_budget->get_option("--raise")->count() > 0 ? std::optional<double>(raise) : std::nullopt);
  }
  if (*c_ls) return ListSweeps(ctx, active_only, limit, output == "wide");
  if (*c_status) return Status(ctx, sweep);
  if (*c_watch) return Watch(ctx, sweep, interval);
  if (*c_runs) return Runs(ctx, sweep, states, all_runs ? 0 : limit);
  if (*c_metrics) return Metrics(ctx, run, names, follow);
  if (*c_logs) return Logs(ctx, run, follow);
  if (*c_artifacts_get) return ArtifactsGet(ctx, run, artifacts_out);
  if (*c_artifacts_ls) return ArtifactsLs(ctx, run);
  if (*c_cancel) {
    if (sweep.empty() && run_ids.empty()) {
      return ablate::cli_edge::UsageError(*c_cancel, "give a sweep, or --run RUN[,RUN...]");
    }
    return Cancel(ctx, sweep, run_ids);
  }
  if (*c_retry) return Retry(ctx, sweep, run_ids, states);
  if (*c_delete) return Delete(ctx, sweep, yes);
  if (*c_workers_unbench) return Unbench(ctx, worker_name);
  if (*c_workers) return Workers(ctx, all_workers);
  if (*c_export) return Export(ctx, sweep, out_dir, with_metrics);
  if (*c_report) return Report(ctx, report);
  return ablate::cli_edge::kUsageExit;
}
