// export and report: a sweep's results leave the server, and become the study's answer.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <set>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/commands.h"
#include "client/render.h"
#include "common/analysis/analysis.h"
#include "common/analysis/refine.h"
#include "common/report/export.h"
#include "common/report/report.h"
#include "common/report/tables.h"
#include "common/sweep/sweep.h"
#include "common/util/did_you_mean.h"

namespace ablate::cli {
namespace {

absl::StatusOr<std::vector<report::MetricRow>> FetchMetrics(Context& ctx, int64_t run_id) {
  grpc::ClientContext gctx;
  ctx.Prepare(&gctx, 300);
  v1::GetRunMetricsRequest req;
  req.set_run_id(run_id);
  req.set_after_step(-1);
  auto reader = ctx.stub->GetRunMetrics(&gctx, req);
  v1::GetRunMetricsResponse chunk;
  std::vector<report::MetricRow> rows;
  while (reader->Read(&chunk)) {
    for (const auto& p : chunk.points()) rows.push_back({run_id, p.step(), p.name(), p.value()});
  }
  absl::Status s = rpc::ToAbsl(reader->Finish(), absl::StrCat("metrics of run ", run_id).c_str(),
                               ctx.conn.server);
  if (!s.ok()) return s;
  return rows;
}

// A bad option value: the usage line follows the message (README, Exit codes).
int UsageOrFail(const ReportArgs& args, const absl::Status& status) {
  if (args.usage_error) return args.usage_error(std::string(status.message()));
  return Fail(status);
}

absl::StatusOr<std::pair<double, double>> ParseRange(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  double a = 0, b = 0;
  if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &a) || !absl::SimpleAtod(parts[1], &b) ||
      !(a > 0) || !(b >= a)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr-range ", text, ": expected A:B with 0 < A <= B, e.g. 3e-4:3e-1"));
  }
  return std::make_pair(a, b);
}

// The analysis options `sweep` was planned with (PlanningOptions of its stored file), and the file
// itself in `parsed`; the defaults when it has none or it no longer parses.
analysis::Options PlannedOptions(const v1::Sweep& sweep, std::optional<sweep::SweepSpec>* parsed) {
  if (!sweep.spec_yaml().empty()) {
    auto stored = sweep::ParseStoredSweep(sweep.spec_yaml(), sweep.file_name());
    if (stored.ok()) *parsed = *std::move(stored);
  }
  return *parsed ? analysis::PlanningOptions(**parsed) : analysis::Options{};
}

// The text report's width: the terminal's on a terminal, else $COLUMNS when set (a script or a
// pager that wants a width says so), else none: a file or a pipe gets a row a line, for grep and
// diff. Never below 40, where a table could only be read a word a line.
int ReportWidth() {
  int width = 0;
  if (isatty(STDOUT_FILENO) != 0) {
    width = TerminalSize().first;
  } else if (const char* columns = std::getenv("COLUMNS"); columns != nullptr) {
    if (!absl::SimpleAtoi(columns, &width) || width < 0) width = 0;
  }
  return width > 0 ? std::max(40, width) : 0;
}

}  // namespace

absl::StatusOr<PilotNoise> MeasurePilot(Context& ctx, const std::string& pilot) {
  auto resp = FetchSweep(ctx, pilot);
  if (!resp.ok()) {
    return absl::Status(resp.status().code(),
                        absl::StrCat("--pilot ", pilot, ": ", resp.status().message()));
  }
  PilotNoise out;
  out.sweep = resp->sweep();
  std::vector<v1::Run> runs(resp->runs().begin(), resp->runs().end());
  if (runs.empty()) return out;  // no spread: the caller says so
  std::optional<sweep::SweepSpec> parsed;
  analysis::Options opts = PlannedOptions(out.sweep, &parsed);
  opts.lr_axis = analysis::Options{}.lr_axis;
  if (parsed) opts.vocab = parsed->data.tokenizer().vocab();
  opts.bootstrap_resamples = 0;  // the seed noise needs no intervals
  auto result = analysis::Analyze(runs, opts);
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat("--pilot ", pilot, ": ", result.status().message()));
  }
  out.pooled = analysis::PoolSeedNoise(result->curves);
  out.partial = result->partial;
  return out;
}

int Export(Context& ctx, const std::string& sweep, const std::string& out_dir, bool metrics) {
  auto resp = FetchSweep(ctx, sweep);
  if (!resp.ok()) return Fail(resp.status());
  report::Export data;
  data.sweep = resp->sweep();
  data.runs.assign(resp->runs().begin(), resp->runs().end());
  data.with_metrics = metrics;
  if (metrics) {
    for (const auto& r : data.runs) {
      auto rows = FetchMetrics(ctx, r.id());
      if (!rows.ok()) return Fail(rows.status());
      data.metrics.insert(data.metrics.end(), rows->begin(), rows->end());
    }
  }
  absl::Status s = report::WriteExport(data, out_dir);
  if (!s.ok()) return Fail(s);
  if (ctx.json) {
    std::cout << "{\"dir\":\"" << out_dir << "\",\"runs\":" << data.runs.size()
              << ",\"metric_points\":" << data.metrics.size() << "}\n";
  } else {
    std::cout << "exported sweep " << data.sweep.id() << " '" << data.sweep.name()
              << "': " << data.runs.size() << " runs"
              << (metrics ? absl::StrCat(", ", data.metrics.size(), " metric points")
                          : std::string(", no metrics"))
              << " -> " << out_dir << "\n";
  }
  return 0;
}

int Report(Context& ctx, const ReportArgs& args) {
  v1::Sweep sweep;
  std::vector<v1::Run> runs;
  if (!args.from.empty()) {
    auto data = report::ReadExport(args.from);
    if (!data.ok()) return Fail(data.status());
    sweep = data->sweep;
    runs = std::move(data->runs);
  } else {
    auto resp = FetchSweep(ctx, args.sweep);
    if (!resp.ok()) return Fail(resp.status());
    sweep = resp->sweep();
    runs.assign(resp->runs().begin(), resp->runs().end());
  }
  // An axis the sweep lacks would give an empty analysis that reads like a result.
  std::vector<std::string> axes(sweep.axes().begin(), sweep.axes().end());
  if (axes.empty()) {  // an export from before axes were recorded: the runs' grid keys
    std::set<std::string> keys;
    for (const auto& r : runs) {
      for (const auto& [k, v] : r.grid_values()) keys.insert(k);
    }
    axes.assign(keys.begin(), keys.end());
  }
  for (const auto& [flag, axis, given] :
       {std::tuple<const char*, std::string, bool>{"--variant", args.variant, args.variant_given},
        {"--by", args.by, args.by_given}}) {
    if (given && std::find(axes.begin(), axes.end(), axis) == axes.end()) {
      return UsageOrFail(args, absl::InvalidArgumentError(absl::StrCat(
                                   flag, " ", axis, ": sweep ", sweep.id(), " '", sweep.name(),
                                   "' has no axis '", axis, "'", util::DidYouMean(axis, axes),
                                   "; its axes: ", absl::StrJoin(axes, ", "))));
    }
  }
  // The defaults are the options the sweep was planned with (its file's `analysis:`), so a
  // plain report brackets the boundaries that refinement narrowed; flags override them.
  std::optional<sweep::SweepSpec> parsed;
  const analysis::Options planned = PlannedOptions(sweep, &parsed);
  analysis::Options opts = planned;
  opts.lr_axis = analysis::Options{}.lr_axis;
  if (args.variant_given) opts.variant_axis = args.variant;
  if (args.by_given) opts.moderator_axis = args.by;
  if (args.delta_given) opts.delta_floor = args.delta;
  if (args.tau_given) opts.tau = args.tau;
  if (!args.lr_range.empty()) {
    auto range = ParseRange(args.lr_range);
    if (!range.ok()) return UsageOrFail(args, range.status());
    opts.lr_min = range->first;
    opts.lr_max = range->second;
  }
  // ℓ0 falls back to ln(vocab) for cells where no run reported an initial loss.
  if (parsed) opts.vocab = parsed->data.tokenizer().vocab();
  auto result = analysis::Analyze(runs, opts);
  if (!result.ok()) return Fail(result.status());
  // The sweep's refine status (GetSweep, or sweep.json of an export) says which boundaries the
  // budget left wider than until_ratio; every output marks them. Not being able to tell must not
  // cost the report itself.
  if (sweep.has_refine()) {
    if (absl::Status s = analysis::MarkUnresolvedByBudget(runs, sweep.refine(), &*result);
        !s.ok()) {
      std::cerr << "ablate: warning: cannot tell which boundaries the refinement budget left "
                   "unresolved: "
                << s.message() << "\n";
    }
  }
  // Refinement and pruning chose their runs for the planned options; under others the report's
  // brackets are not the ones refinement narrowed.
  if (sweep.has_refine() || sweep.prune_above_divergence()) {
    analysis::Options compared = planned;
    compared.lr_axis = opts.lr_axis;
    const auto differ = analysis::OptionDifferences(opts, compared);
    if (!differ.empty()) {
      result->notes.push_back(
          absl::StrCat("options differ from those sweep ", sweep.id(),
                       " was refined and pruned for: ", absl::StrJoin(differ, ", "),
                       "; its added LRs and skipped runs bracket the boundaries of the latter"));
    }
  }
  // Checked before anything is printed or written: a pipeline that demands a uniform fleet gets
  // no report it might publish by mistake, only what differs (FailedPrecondition: exit 6).
  if (args.require_uniform) {
    if (absl::Status s = analysis::RequireUniform(*result); !s.ok()) return Fail(s);
  }

  report::ReportOptions ropts;
  ropts.title = absl::StrCat("sweep ", sweep.id(), " '", sweep.name(), "'");
  if (ctx.json || args.format == "json") {
    // One document for both spellings (docs/report.md#the-json-report): a report's JSON is read
    // as a whole, not streamed line by line like a listing's.
    std::cout << report::FormatJson(*result);
  } else if (args.format == "md") {
    std::cout << report::FormatMarkdown(*result, ropts) << report::CostTable(runs, true);
  } else {
    const int width = ReportWidth();
    std::cout << report::WrapText(absl::StrCat(ropts.title, ": ", CountsLine(sweep.counts())),
                                  width)
              << "\n"
              << report::FormatTable(*result, width) << report::CostTable(runs, false, width);
  }
  if (!args.out_dir.empty()) {
    auto written = report::WriteReport(*result, runs, ropts, args.out_dir);
    if (!written.ok()) return Fail(written.status());
    for (const auto& w : written->warnings) std::cerr << "ablate: warning: " << w << "\n";
    if (args.format == "table" && !ctx.json) {
      std::cout << "\nwrote " << written->files.size() << " files to " << args.out_dir
                << " (report.md, runs.csv, cells.csv, figures)\n";
    }
  }
  return 0;
}

}  // namespace ablate::cli
