// The CLI's commands. Each returns the process exit code and prints its own errors.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "client/config.h"
#include "client/context.h"
#include "client/seed_plan.h"
#include "common/util/backoff.h"

namespace ablate::cli {

struct SubmitArgs {
  std::string file;
  bool dry_run = false;
  bool watch = false;
  int priority = 0;
};
// --dry-run works without a server; with one reachable it also prints the estimate.
int Submit(Context& ctx, const SubmitArgs& args);
// `ablate estimate FILE`: what the sweep would cost on the fleet now (the server's dry run), and
// with --sigma or --pilot the seeds per cell its hypotheses need and what they cost
// (client/seed_plan.h). With --sigma and no server configured, the seed plan alone.
struct EstimateArgs {
  std::string file;
  SeedPlanFlags plan;  // checked (CheckSeedPlanFlags) before Estimate is called
  // A bad value found only against the pilot sweep (no seed spread in it): prints the message
  // and estimate's usage line, returns the usage exit code (2).
  std::function<int(const std::string&)> usage_error;
};
int Estimate(Context& ctx, const EstimateArgs& args);
// `--pilot SWEEP`: the sweep with its runs (FetchSweep, as `ablate report` reads them) and its seed
// noise, pooled over its curves (analysis::Analyze without resamples).
struct PilotNoise {
  v1::Sweep sweep;
  analysis::PooledNoise pooled;
  bool partial = false;  // some of its runs are unfinished: the noise is from the finished ones
};
absl::StatusOr<PilotNoise> MeasurePilot(Context& ctx, const std::string& pilot);
// `ablate budget SWEEP [--raise N]`: shows the budget, or raises it (in its unit).
int Budget(Context& ctx, const std::string& sweep, std::optional<double> raise);
// `wide` (-o wide): every count and the whole name; else a table that fits 80 columns.
int ListSweeps(Context& ctx, bool active_only, int limit, bool wide);
int Status(Context& ctx, const std::string& sweep);
int Watch(Context& ctx, const std::string& sweep, double interval);
int Runs(Context& ctx, const std::string& sweep, const std::vector<std::string>& states, int limit);
int Metrics(Context& ctx, int64_t run, const std::vector<std::string>& names, bool follow);
// The run's events; then its progress lines (step, loss, tokens/s), and with `follow` new ones as
// the worker reports them, until the run ends.
int Logs(Context& ctx, int64_t run, bool follow);
// Downloads a finished run's final checkpoint to DIR/run-RUN-final.pt (verified, atomic).
int ArtifactsGet(Context& ctx, int64_t run, const std::string& out_dir);
int ArtifactsLs(Context& ctx, int64_t run);
int Cancel(Context& ctx, const std::string& sweep, const std::vector<int64_t>& runs);
// `ablate delete SWEEP [--yes]`: deletes a finished or cancelled sweep after asking (a terminal)
// or with --yes (scripts); without either, refuses (exit 2).
int Delete(Context& ctx, const std::string& sweep, bool yes);
int Retry(Context& ctx, const std::string& sweep, const std::vector<int64_t>& runs,
          const std::vector<std::string>& states);
int Workers(Context& ctx, bool include_offline);
// `ablate workers unbench NAME`: lifts the worker's bench (docs/server.md#failures).
int Unbench(Context& ctx, const std::string& name);

struct ReportArgs {
  std::string sweep;  // or
  std::string from;   // an `ablate export` directory
  std::string out_dir;
  std::string lr_range;  // "A:B"
  double delta = 0.02;
  double tau = 0.2;
  std::string variant = "qk_norm";
  std::string by = "n_layer";
  // Given on the command line: an axis the sweep lacks is then an error (exit 2), while the
  // defaults may be absent (a sweep without n_layer reports one curve per variant).
  bool variant_given = false;
  bool by_given = false;
  // Given on the command line: otherwise tau, delta, the LR range and the axes come from the
  // sweep file's `analysis:` (the options its refinement and pruning were planned with).
  bool tau_given = false;
  bool delta_given = false;
  std::string format = "table";  // table | md | json
  bool require_uniform = false;  // a mixed cell or comparison is an error (exit 6), not a note
  // A bad option value found only against the sweep (an axis it lacks, a bad --lr-range):
  // prints the message and report's usage line, returns the usage exit code (2).
  std::function<int(const std::string&)> usage_error;
};
int Export(Context& ctx, const std::string& sweep, const std::string& out_dir, bool metrics);
int Report(Context& ctx, const ReportArgs& args);

// login (verify = true: a call to the server must succeed first) and config init.
int Setup(const ConnectionFlags& flags, bool verify);
struct DataFetchArgs {
  std::string dataset;   // a name from client/data_manifest.h, or empty with url
  std::string url;       // any file over HTTP(S)
  std::string sha256;    // with url: the expected hash (else trust on first use)
  std::string name;      // with url: the file name under `to` (default: the URL's last segment)
  std::string to;        // the data directory
  std::string base_url;  // a mirror of the data set's files
  int64_t low_speed_limit = 1024;  // bytes/s ...
  int64_t low_speed_time = 30;     // ... for this many seconds: the download is stalled
  bool quiet = false;
};
int DataFetch(const DataFetchArgs& args);  // no server

// The most runs the CLI asks of one ListRuns call (the server's own cap is 10,000): more (--all, a
// large --limit, a big sweep's runs) takes several calls, each answered in a small fraction of a
// second however big the sweep (docs/server.md, Benchmark: bench/scale/scale_bench).
inline constexpr int kRunsPerPage = 1000;
// Cells a ListCells call asks for (the server's default page).
inline constexpr int kCellsPerPage = 1000;
// Shared by commands: a finished-or-not sweep with all its runs in queue order (GetSweep, then
// ListRuns a page at a time).
absl::StatusOr<v1::GetSweepResponse> FetchSweep(Context& ctx, const std::string& sweep);
int Fail(const absl::Status& status);  // prints "ablate: <message>" and returns ExitCode
// A follow stream (`watch`, `logs -f`) that ended with `status`: when the server went away
// (UNAVAILABLE, or cancelled by a server going down), says so on stderr, waits out the back-off
// and returns true (open the stream again); else false. FollowResumed, on the first message of
// a stream opened again, says it is back and resets the back-off.
bool FollowAgain(const char* what, const grpc::Status& status, util::Backoff* backoff,
                 bool* reconnecting);
void FollowResumed(const char* what, util::Backoff* backoff, bool* reconnecting);
// Printed by Fail after an unreachable-server error (exit 5): how to configure a server, set
// when none is (first run).
void SetUnreachableHint(std::string hint);
absl::StatusOr<v1::RunState> ParseRunState(const std::string& name);  // "failed" -> FAILED

}  // namespace ablate::cli
