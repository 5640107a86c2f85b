#include "server/sweep_service.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cost/flops.h"
#include "common/run/metric_names.h"
#include "common/run/run_state.h"
#include "common/sweep/sweep.h"
#include "common/util/did_you_mean.h"
#include "common/util/fields.h"
#include "common/util/status_macros.h"
#include "server/polling_stream.h"
#include "server/retention.h"
#include "server/store/channels.h"
#include "spdlog/spdlog.h"

namespace ablate::server {
namespace {

// Streams of metric points are read and sent a page of this many points at a time (a message
// well under the cap; four concurrent reads of a 2-million-point run took the server from 88 MB
// to 621 MB when each read the whole run at once).
constexpr int kPointsPerMessage = 20000;
// GetRunMetrics' names: more than any run may have (--max-metric-names' default).
constexpr int kMaxMetricNamesAsked = 4096;
constexpr size_t kLogLinesPerMessage = 500;
constexpr size_t kArtifactChunkBytes = 1 << 20;  // well under the 16 MiB message cap
// Fallback re-read for streams when no NOTIFY arrives (ETA and worker liveness change silently).
constexpr auto kIdlePoll = std::chrono::seconds(5);
constexpr int kWatchAllRunsUpTo = 5000;
// A dry run returns this many expanded rows (and the total count).
constexpr int64_t kDryRunRows = 100;
// ListRuns: limit <= 0 means this many; larger limits are capped.
constexpr int kDefaultListRuns = 1000;
constexpr int kMaxListRuns = 10000;
// ListCells, the same way.
constexpr int kDefaultListCells = 1000;
constexpr int kMaxListCells = 10000;

std::vector<v1::RunState> States(const google::protobuf::RepeatedField<int>& states) {
  std::vector<v1::RunState> out;
  for (int s : states) out.push_back(static_cast<v1::RunState>(s));
  return out;
}

}  // namespace

bool ParseSlots::Acquire(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, wait, [this] { return free_ > 0; })) return false;
  --free_;
  return true;
}

void ParseSlots::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  ++free_;
  cv_.notify_one();
}

grpc::Status SweepServiceImpl::SubmitSweep(grpc::ServerContext* ctx,
                                           const v1::SubmitSweepRequest* req,
                                           v1::SubmitSweepResponse* resp) {
  return guard_.Run(*ctx, "SubmitSweep", [&](const Caller& caller) -> absl::Status {
    // Checked before anything echoes it: the file name prefixes every error message.
    RETURN_IF_ERROR(sweep::CheckFileName(req->file_name()));
    const std::string file_name = req->file_name().empty() ? "sweep.yaml" : req->file_name();
    if (static_cast<int64_t>(req->spec_yaml().size()) > d_.options->max_spec_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_name, ": sweep file is ", req->spec_yaml().size(),
                       " bytes; the server accepts at most ", d_.options->max_spec_bytes));
    }
    const auto wait = std::chrono::milliseconds(
        static_cast<int64_t>(std::max(0.0, d_.options->parse_wait_seconds) * 1000));
    if (!parse_slots_.Acquire(wait)) {
      spdlog::warn("sweep submit refused: parse slots busy file={} by={}",
                   util::LogQuote(file_name), util::LogQuote(caller.name));
      return absl::ResourceExhaustedError(absl::StrCat(
          file_name, ": the server is busy parsing ", d_.options->max_concurrent_parses,
          " other sweep file(s); retry in a few seconds"));
    }
    absl::Status out = Submit(caller, *req, resp);
    parse_slots_.Release();
    return out;
  });
}

absl::Status SweepServiceImpl::Submit(const Caller& caller, const v1::SubmitSweepRequest& req,
                                      v1::SubmitSweepResponse* resp) {
  const std::string file_name = req.file_name().empty() ? "sweep.yaml" : req.file_name();
  sweep::Limits limits;
  limits.max_runs = d_.options->max_grid;
  // Each run is checked by the one walk that stores it (or, for a dry run, answers with it):
  // a run the grid makes invalid fails that walk with the same error, and nothing is stored.
  limits.check_runs = false;
  auto parsed = sweep::ParseSweep(req.spec_yaml(), file_name, limits);
  if (!parsed.ok()) return parsed.status();
  v1::DataSpec data = parsed->data;
  auto datasets = d_.datasets->Resolve(file_name, parsed->data_lines, &data);
  if (!datasets.ok()) return datasets.status();
  NewSweep s;
  s.name = parsed->name;
  s.file_name = file_name;
  s.spec_yaml = req.spec_yaml();
  s.submitted_by = caller.name;
  s.priority = req.priority() != 0 ? req.priority() : parsed->priority;
  s.max_attempts = parsed->max_attempts;
  for (const auto& axis : parsed->grid) s.axes.push_back(axis.name);
  s.refine = parsed->refine;
  s.prune_above_divergence = parsed->prune_above_divergence;
  s.budget = parsed->budget;
  // The walks below check every run (ForEachRun) and fill in what the sweep file leaves to the
  // server.
  auto finish = [&](v1::RunSpec* run) {
    run->set_sweep_name(parsed->name);
    *run->mutable_data() = data;
  };
  if (req.dry_run()) {
    // A dry run answers with the count, the axes and the first rows: the whole expansion of a
    // 256-byte file can be 100,000 runs (~150 MB built, ~40 MB sent) per request.
    int64_t count = 0;
    std::vector<cost::WorkShape> shapes;  // the grid's distinct run sizes, for the estimate
    auto walk = sweep::ForEachRun(*parsed, limits, [&](v1::RunSpec&& run) {
      cost::AddRun(run.config(), cost::VocabOf(data), &shapes);
      if (++count <= kDryRunRows) {
        finish(&run);
        *resp->add_expanded() = std::move(run);
      }
      return absl::OkStatus();
    });
    if (!walk.ok()) return walk;
    resp->set_runs(static_cast<int>(count));
    auto* out = resp->mutable_sweep();
    out->set_name(s.name);
    out->set_state("dry_run");
    out->set_spec_yaml(s.spec_yaml);
    out->set_file_name(s.file_name);
    out->set_priority(s.priority);
    for (const auto& a : s.axes) out->add_axes(a);
    if (s.refine) *out->mutable_refine() = *s.refine;
    out->set_prune_above_divergence(s.prune_above_divergence);
    out->mutable_counts()->set_total(static_cast<int>(count));
    if (s.budget) *out->mutable_budget() = *s.budget;
    ASSIGN_OR_RETURN(*resp->mutable_estimate(),
                     d_.costs->Estimate(shapes, count, s.refine ? s.refine->max_new_runs() : 0));
    if (s.budget) *resp->mutable_estimate()->mutable_budget() = *s.budget;
    return absl::OkStatus();
  }
  auto count = sweep::CountRuns(*parsed, limits);
  if (!count.ok()) return count.status();
  s.run_count = *count;
  // The store walks the grid for each attempt at its transaction, inserting a few
  // thousand runs at a time; the expansion is deterministic, so every walk yields the same runs.
  s.for_each_run = [&](const NewSweep::RunVisitor& visit) {
    return sweep::ForEachRun(*parsed, limits, [&](v1::RunSpec&& run) {
      finish(&run);
      return visit(std::move(run));
    });
  };
  resp->set_runs(static_cast<int>(*count));
  auto stored = d_.sweeps->Insert(s, *datasets);
  if (!stored.ok()) return stored.status();
  *resp->mutable_sweep() = *std::move(stored);
  if (s.budget) {
    // Its runs wait for the keeper's first round (budget_runs_left starts at 0): have it now.
    if (auto kept = d_.costs->KeepBudget(resp->sweep().id()); !kept.ok()) {
      spdlog::warn("budget keeper: sweep {}: {}", resp->sweep().id(), kept.ToString());
    }
  }
  spdlog::info("sweep submitted id={} name={} file={} runs={} by={}", resp->sweep().id(),
               util::LogQuote(s.name), util::LogQuote(file_name), resp->runs(),
               util::LogQuote(caller.name));
  return absl::OkStatus();
}

absl::StatusOr<v1::Sweep> SweepServiceImpl::ReadSweep(int64_t sweep_id) {
  ASSIGN_OR_RETURN(v1::Sweep s, d_.sweep_reads->Get(sweep_id));
  // Annotate's fleet-speed ETA knows nothing of what holds a sweep: a held sweep keeps no ETA
  // and says why, and one with runs no live worker can hold counts only the others.
  const std::string held = s.eta_basis();
  RETURN_IF_ERROR(d_.costs->Annotate(&s));
  if (held.starts_with(pg::kEtaHeld)) {
    s.set_eta_seconds(-1);
    s.set_eta_basis(held);
  } else if (s.eta_basis() == "throughput" && s.counts().unfittable() > 0 && s.eta_seconds() > 0) {
    const auto& c = s.counts();
    const int remaining = c.queued() + c.leased() + c.running();
    if (remaining > 0) {
      s.set_eta_seconds(s.eta_seconds() * std::max(0, remaining - c.unfittable()) / remaining);
    }
  }
  return s;
}

grpc::Status SweepServiceImpl::GetSweep(grpc::ServerContext* ctx, const v1::GetSweepRequest* req,
                                        v1::GetSweepResponse* resp) {
  return guard_.Run(*ctx, "GetSweep", [&](const Caller&) -> absl::Status {
    ASSIGN_OR_RETURN(const int64_t id, d_.sweep_reads->Resolve(req->sweep()));
    ASSIGN_OR_RETURN(*resp->mutable_sweep(), ReadSweep(id));
    if (req->include_runs()) {
      // No reply carries more runs than one ListRuns page: a 100,000-run sweep would be ~40 MB
      // built and sent in one message (ablate's own client pages ListRuns instead).
      if (resp->sweep().counts().total() > kMaxListRuns) {
        return absl::FailedPreconditionError(
            absl::StrCat("sweep ", id, " has ", resp->sweep().counts().total(),
                         " runs; GetSweep includes at most ", kMaxListRuns,
                         ": page them with ListRuns (ablate runs --all)"));
      }
      ASSIGN_OR_RETURN(auto runs, d_.sweep_reads->ListRuns(id, {}));
      for (auto& r : runs) *resp->add_runs() = std::move(r);
    }
    return absl::OkStatus();
  });
}

grpc::Status SweepServiceImpl::ListSweeps(grpc::ServerContext* ctx,
                                          const v1::ListSweepsRequest* req,
                                          v1::ListSweepsResponse* resp) {
  return guard_.Run(*ctx, "ListSweeps", [&](const Caller&) -> absl::Status {
    ASSIGN_OR_RETURN(auto list, d_.sweep_reads->List(req->limit(), req->active_only()));
    for (auto& s : list) *resp->add_sweeps() = std::move(s);
    return absl::OkStatus();
  });
}

grpc::Status SweepServiceImpl::CancelSweep(grpc::ServerContext* ctx,
                                           const v1::CancelSweepRequest* req,
                                           v1::CancelSweepResponse* resp) {
  return guard_.Run(*ctx, "CancelSweep", [&](const Caller& caller) -> absl::Status {
    const std::vector<int64_t> run_ids(req->run_ids().begin(), req->run_ids().end());
    std::map<int64_t, std::vector<int64_t>> by_sweep;
    if (req->sweep().id() == 0 && req->sweep().name().empty() && !run_ids.empty()) {
      // Run ids are global: without a sweep, each run's own (`ablate cancel --run ID`).
      ASSIGN_OR_RETURN(by_sweep, d_.sweep_reads->SweepsOfRuns(run_ids));
    } else {
      ASSIGN_OR_RETURN(const int64_t id, d_.sweep_reads->Resolve(req->sweep()));
      by_sweep[id] = run_ids;
    }
    int cancelled = 0;
    for (const auto& [id, ids] : by_sweep) {
      ASSIGN_OR_RETURN(const int n, d_.runs->Cancel(id, ids));
      cancelled += n;
      spdlog::info("sweep cancel id={} runs_cancelled={} by={}", id, n,
                   util::LogQuote(caller.name));
    }
    resp->set_cancelled(cancelled);
    return absl::OkStatus();
  });
}

grpc::Status SweepServiceImpl::RetryRuns(grpc::ServerContext* ctx, const v1::RetryRunsRequest* req,
                                         v1::RetryRunsResponse* resp) {
  return guard_.Run(*ctx, "RetryRuns", [&](const Caller&) -> absl::Status {
    ASSIGN_OR_RETURN(const int64_t id, d_.sweep_reads->Resolve(req->sweep()));
    ASSIGN_OR_RETURN(const int n, d_.runs->Retry(id, {req->run_ids().begin(), req->run_ids().end()},
                                                 States(req->states())));
    resp->set_requeued(n);
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::SweepUpdate>* SweepServiceImpl::WatchSweep(
    grpc::CallbackServerContext* ctx, const v1::WatchSweepRequest* req) {
  const double interval = req->min_interval_seconds() > 0 ? req->min_interval_seconds() : 1.0;
  using Stream = PollingStream<v1::SweepUpdate>;
  return Stream::Start(
      d_.executor, d_.hub, std::chrono::milliseconds(static_cast<int64_t>(interval * 1000)),
      kIdlePoll, [this, ctx, req]() -> absl::StatusOr<Stream::Plan> {
        if (auto a = guard_.Authorize(*ctx, "WatchSweep"); !a.ok()) return a.status();
        auto id = d_.sweep_reads->Resolve(req->sweep());
        if (!id.ok()) return id.status();
        const int64_t sweep_id = *id;
        // Only changes are sent: a re-read identical to the last update is dropped.
        auto previous = std::make_shared<std::string>();
        Stream::Fetch fetch = [this, sweep_id, previous]() -> absl::StatusOr<Stream::Batch> {
          auto sweep = ReadSweep(sweep_id);
          if (!sweep.ok()) return sweep.status();
          // Every run, re-sent at up to min_interval, is fine for thousands of runs; beyond
          // that an update carries only the runs in flight (what a live view shows) and the
          // counts, so a 100,000-run sweep does not stream 40 MB a second.
          auto runs = sweep->counts().total() > kWatchAllRunsUpTo
                          ? d_.sweep_reads->InFlight(sweep_id)
                          : d_.sweep_reads->ListRuns(sweep_id, {});
          if (!runs.ok()) return runs.status();
          v1::SweepUpdate update;
          *update.mutable_sweep() = *std::move(sweep);
          for (auto& r : *runs) *update.add_runs() = std::move(r);
          update.set_finished(update.sweep().state() != "active");
          Stream::Batch batch;
          batch.last = update.finished();
          std::string bytes = update.SerializeAsString();
          if (bytes != *previous || batch.last) {
            *previous = std::move(bytes);
            batch.messages.push_back(std::move(update));
          }
          return batch;
        };
        return Stream::Plan{channels::kSweep, absl::StrCat(sweep_id), std::move(fetch)};
      });
}

grpc::Status SweepServiceImpl::ListRuns(grpc::ServerContext* ctx, const v1::ListRunsRequest* req,
                                        v1::ListRunsResponse* resp) {
  return guard_.Run(*ctx, "ListRuns", [&](const Caller&) -> absl::Status {
    int64_t sweep_id = 0;
    if (req->sweep().id() != 0 || !req->sweep().name().empty()) {
      ASSIGN_OR_RETURN(sweep_id, d_.sweep_reads->Resolve(req->sweep()));
    }
    // Unbounded, one call over every sweep would serialise the whole runs table into one reply.
    const int limit = req->limit() <= 0 ? kDefaultListRuns : std::min(req->limit(), kMaxListRuns);
    ASSIGN_OR_RETURN(
        auto page, d_.sweep_reads->RunsPage(sweep_id, States(req->states()), limit, req->offset()));
    for (auto& r : page.runs) *resp->add_runs() = std::move(r);
    resp->set_total(page.total);
    return absl::OkStatus();
  });
}

grpc::Status SweepServiceImpl::ListCells(grpc::ServerContext* ctx, const v1::ListCellsRequest* req,
                                         v1::ListCellsResponse* resp) {
  return guard_.Run(*ctx, "ListCells", [&](const Caller&) -> absl::Status {
    // A cell key is grid values joined: 64 KiB of text at most, no NUL (PostgreSQL refuses it).
    RETURN_IF_ERROR(util::CheckText("after_cell", req->after_cell()));
    ASSIGN_OR_RETURN(const int64_t sweep_id, d_.sweep_reads->Resolve(req->sweep()));
    const int limit = req->limit() <= 0 ? kDefaultListCells : std::min(req->limit(), kMaxListCells);
    ASSIGN_OR_RETURN(*resp, d_.sweep_reads->CellsPage(sweep_id, req->after_cell(), limit));
    return absl::OkStatus();
  });
}

namespace {

// GetRunMetrics' names: each must name a series the run has or, while the run may still report
// it, a metric the trainer reports (metric::IsReported); anything else is NOT_FOUND listing what
// the run has, so a misspelt --name is an error rather than an empty answer.
absl::Status CheckMetricNames(const std::vector<std::string>& asked,
                              const std::vector<std::string>& stored, bool finished,
                              int64_t run_id) {
  constexpr size_t kListed = 40;
  for (size_t i = 0; i < asked.size(); ++i) {
    const std::string& name = asked[i];
    if (std::find(stored.begin(), stored.end(), name) != stored.end()) continue;
    if (!finished && metric::IsReported(name)) continue;
    std::vector<std::string> shown(stored.begin(),
                                   stored.begin() + std::min(stored.size(), kListed));
    return absl::NotFoundError(absl::StrCat(
        "names[", i, "]: run ", run_id, " has no metric ", util::LogQuote(name),
        util::DidYouMean(name, stored),
        stored.empty() ? "; it has no points yet"
                       : absl::StrCat("; it has ", absl::StrJoin(shown, ", "),
                                      stored.size() > kListed
                                          ? absl::StrCat(" and ", stored.size() - kListed, " more")
                                          : "")));
  }
  return absl::OkStatus();
}

}  // namespace

grpc::ServerWriteReactor<v1::GetRunMetricsResponse>* SweepServiceImpl::GetRunMetrics(
    grpc::CallbackServerContext* ctx, const v1::GetRunMetricsRequest* req) {
  using Stream = PollingStream<v1::GetRunMetricsResponse>;
  return Stream::Start(
      d_.executor, d_.hub, std::chrono::milliseconds(200), kIdlePoll,
      [this, ctx, req]() -> absl::StatusOr<Stream::Plan> {
        if (auto a = guard_.Authorize(*ctx, "GetRunMetrics"); !a.ok()) return a.status();
        const int64_t run_id = req->run_id();
        if (req->names_size() > kMaxMetricNamesAsked) {
          return absl::InvalidArgumentError(absl::StrCat("names: at most ", kMaxMetricNamesAsked,
                                                         " (got ", req->names_size(), ")"));
        }
        for (int i = 0; i < req->names_size(); ++i) {
          RETURN_IF_ERROR(util::CheckName(absl::StrCat("names[", i, "]"), req->names(i)));
        }
        const std::vector<std::string> names(req->names().begin(), req->names().end());
        if (!names.empty() && !req->skip_points()) {
          v1::RunState state = v1::RUN_STATE_UNSPECIFIED;
          ASSIGN_OR_RETURN(const std::vector<std::string> stored,
                           d_.sweep_reads->MetricNames(run_id, &state));
          RETURN_IF_ERROR(CheckMetricNames(names, stored, util::IsTerminal(state), run_id));
        }
        const bool follow = req->follow();
        // The cursor is the newest change sent (metric_points.seq), so a follower also gets
        // the values a resumed attempt rewrote at steps it had already seen. Points come a page
        // at a time (kPointsPerMessage), so no read holds a whole run in memory.
        const int64_t after_step = req->after_step();
        const bool logs = req->include_logs(), points = !req->skip_points();
        const bool events = req->include_events();
        auto cursor = std::make_shared<SweepReads::MetricsCursor>();
        auto log_seq = std::make_shared<int64_t>(0);
        auto event_id = std::make_shared<int64_t>(0);
        auto first = std::make_shared<bool>(true);
        Stream::Fetch fetch = [this, run_id, names, follow, after_step, cursor, log_seq, event_id,
                               first, logs, points, events]() -> absl::StatusOr<Stream::Batch> {
          // Events are read first and, once the run is seen finished, again: each message is a
          // merge by time, so lines read after the events cannot be older than an event left
          // for the next read, and a finished run's last event (completed, fenced) was stored
          // before its state said so.
          std::vector<v1::RunEvent> new_events;
          int64_t newest_event = *event_id;
          auto read_events = [&]() -> absl::Status {
            if (!events) return absl::OkStatus();
            auto read = d_.sweep_reads->Events(run_id, newest_event, &newest_event);
            if (!read.ok()) return read.status();
            for (auto& e : *read) new_events.push_back(std::move(e));
            return absl::OkStatus();
          };
          if (absl::Status s = read_events(); !s.ok()) return s;
          SweepReads::MetricsCursor next = *cursor;
          bool more = false;
          absl::StatusOr<v1::GetRunMetricsResponse> got = v1::GetRunMetricsResponse();
          if (points) {
            got =
                d_.sweep_reads->Metrics(run_id, names, after_step, kPointsPerMessage, &next, &more);
          }
          if (!got.ok()) return got.status();
          // Progress lines are read after the points: a run seen finished above sent its last
          // lines before Complete, so they are all here.
          RunLogPage page;
          if (logs || (events && !points)) {  // without points, the state comes from here
            auto read = d_.sweep_reads->RunLogs(run_id, *log_seq);
            if (!read.ok()) return read.status();
            page = *std::move(read);
            if (!points) got->set_state(page.state);
            if (!logs) page.lines.clear();
          }
          Stream::Batch batch;
          // Done once a pass over the points that began with the run ended is through (or, with
          // no points asked, once the run is seen ended).
          const bool ended = points ? next.seq_hi == 0 && !more && next.pass_saw_terminal
                                    : util::IsTerminal(got->state());
          const bool done = !more && (!follow || ended);
          if (done) {
            if (absl::Status s = read_events(); !s.ok()) return s;
          }
          // One message of points (a page), and always one on the first read and the last (it
          // carries the run's state).
          if (got->points_size() > 0 || *first || done) {
            v1::GetRunMetricsResponse msg;
            msg.set_state(got->state());
            *msg.mutable_points() = std::move(*got->mutable_points());
            batch.messages.push_back(std::move(msg));
          }
          // Each message carries the events up to its last line's time, so a client that merges
          // a message's lines and events by time prints them in order.
          size_t next_event = 0;
          auto add_events_until = [&](v1::GetRunMetricsResponse& msg, double until) {
            for (; next_event < new_events.size() && new_events[next_event].time() <= until;
                 ++next_event) {
              *msg.add_events() = std::move(new_events[next_event]);
            }
          };
          for (size_t i = 0; i < page.lines.size(); i += kLogLinesPerMessage) {
            v1::GetRunMetricsResponse msg;
            msg.set_state(got->state());
            const size_t end = std::min(page.lines.size(), i + kLogLinesPerMessage);
            add_events_until(msg, page.lines[end - 1].time());
            for (size_t j = i; j < end; ++j) *msg.add_log_lines() = std::move(page.lines[j]);
            batch.messages.push_back(std::move(msg));
          }
          if (next_event < new_events.size()) {
            v1::GetRunMetricsResponse msg;
            msg.set_state(got->state());
            add_events_until(msg, std::numeric_limits<double>::infinity());
            batch.messages.push_back(std::move(msg));
          }
          *event_id = newest_event;
          *log_seq = page.max_seq;
          *cursor = next;
          *first = false;
          batch.last = done;
          batch.more = more;
          return batch;
        };
        return Stream::Plan{channels::kRun, absl::StrCat(run_id), std::move(fetch)};
      });
}

grpc::Status SweepServiceImpl::ListRunEvents(grpc::ServerContext* ctx,
                                             const v1::ListRunEventsRequest* req,
                                             v1::ListRunEventsResponse* resp) {
  return guard_.Run(*ctx, "ListRunEvents", [&](const Caller&) -> absl::Status {
    ASSIGN_OR_RETURN(auto events, d_.sweep_reads->Events(req->run_id()));
    for (auto& e : events) *resp->add_events() = std::move(e);
    return absl::OkStatus();
  });
}

grpc::Status SweepServiceImpl::ListWorkers(grpc::ServerContext* ctx,
                                           const v1::ListWorkersRequest* req,
                                           v1::ListWorkersResponse* resp) {
  return guard_.Run(*ctx, "ListWorkers", [&](const Caller&) -> absl::Status {
    ASSIGN_OR_RETURN(auto workers, d_.sweep_reads->Workers(req->include_offline(),
                                                           req->recent_offline_seconds()));
    for (auto& w : workers) *resp->add_workers() = std::move(w);
    return absl::OkStatus();
  });
}

grpc::Status SweepServiceImpl::GetArtifact(grpc::ServerContext* ctx, const v1::ArtifactRequest* req,
                                           grpc::ServerWriter<v1::ArtifactChunk>* writer) {
  return guard_.Run(*ctx, "GetArtifact", [&](const Caller&) -> absl::Status {
    if (!req->name().empty() && req->name() != "final") {
      return absl::InvalidArgumentError(
          absl::StrCat("name: ", util::LogQuote(req->name().substr(0, 64)),
                       " is not an artifact (the only one is \"final\", the final checkpoint)"));
    }
    ASSIGN_OR_RETURN(const v1::CheckpointRef ref, d_.sweep_reads->FinalCheckpoint(req->run_id()));
    auto path = d_.blobs->PathOf(ref.sha256());
    if (!path.ok()) {
      spdlog::error("run {}: final checkpoint {} is recorded but not in the store", req->run_id(),
                    ref.sha256());
      return absl::DataLossError(absl::StrCat(
          "run ", req->run_id(), ": its final checkpoint is missing from the server's store"));
    }
    v1::ArtifactChunk header;
    header.set_name("final");
    *header.mutable_ref() = ref;
    if (!writer->Write(header)) return absl::CancelledError("client went away");
    return StreamFile(*path, kArtifactChunkBytes, [&](std::string&& data, int64_t /*total*/) {
      v1::ArtifactChunk chunk;
      chunk.set_data(std::move(data));
      return writer->Write(chunk);
    });
  });
}

grpc::Status SweepServiceImpl::ListArtifacts(grpc::ServerContext* ctx,
                                             const v1::ListArtifactsRequest* req,
                                             v1::ListArtifactsResponse* resp) {
  return guard_.Run(*ctx, "ListArtifacts", [&](const Caller&) -> absl::Status {
    ASSIGN_OR_RETURN(*resp, d_.sweep_reads->Artifacts(req->run_id()));
    return absl::OkStatus();
  });
}

grpc::Status SweepServiceImpl::SetBudget(grpc::ServerContext* ctx, const v1::SetBudgetRequest* req,
                                         v1::SetBudgetResponse* resp) {
  return guard_.Run(*ctx, "SetBudget", [&](const Caller& caller) -> absl::Status {
    if (!(req->raise() > 0) || !(req->raise() <= sweep::kMaxBudget)) {
      return absl::InvalidArgumentError(
          absl::StrCat("raise: must be a number above 0 and at most 1e9 (in the budget's unit), "
                       "not ",
                       req->raise()));
    }
    ASSIGN_OR_RETURN(const int64_t id, d_.sweep_reads->Resolve(req->sweep()));
    RETURN_IF_ERROR(d_.costs->Raise(id, req->raise()));
    spdlog::info("sweep budget raised id={} by={} amount={}", id, util::LogQuote(caller.name),
                 req->raise());
    ASSIGN_OR_RETURN(*resp->mutable_sweep(), ReadSweep(id));
    return absl::OkStatus();
  });
}

grpc::Status SweepServiceImpl::DeleteSweep(grpc::ServerContext* ctx,
                                           const v1::DeleteSweepRequest* req,
                                           v1::DeleteSweepResponse* resp) {
  return guard_.Run(*ctx, "DeleteSweep", [&](const Caller& caller) -> absl::Status {
    // The name reaches SQL and the refusal's text: a sweep's name passed CheckName at submit,
    // so anything else names no sweep.
    if (req->sweep().id() == 0) RETURN_IF_ERROR(util::CheckName("sweep.name", req->sweep().name()));
    ASSIGN_OR_RETURN(const int64_t id, d_.sweep_reads->Resolve(req->sweep()));
    auto answer = [&](const DeletedSweep& rows, int64_t files, int64_t bytes) {
      resp->set_sweep_id(id);
      resp->set_name(rows.name);
      resp->set_runs(rows.runs);
      resp->set_metric_points(rows.metric_points);
      resp->set_checkpoints(rows.checkpoints);
      resp->set_checkpoint_files(files);
      resp->set_checkpoint_bytes(bytes);
      return absl::OkStatus();
    };
    if (req->dry_run()) {
      ASSIGN_OR_RETURN(const DeletedSweep would, d_.retention->DeleteSweep(id, true));
      return answer(would, would.checkpoints, would.checkpoint_bytes);
    }
    ASSIGN_OR_RETURN(const SweepDeletion gone, server::DeleteSweep(d_.retention, *d_.blobs, id));
    spdlog::info(
        "sweep deleted id={} name={} by={} runs={} metric_points={} checkpoints={} "
        "files_removed={} bytes_removed={}",
        id, util::LogQuote(gone.rows.name), util::LogQuote(caller.name), gone.rows.runs,
        gone.rows.metric_points, gone.rows.checkpoints, gone.files_removed, gone.bytes_removed);
    return answer(gone.rows, gone.files_removed, gone.bytes_removed);
  });
}

grpc::Status SweepServiceImpl::UnbenchWorker(grpc::ServerContext* ctx,
                                             const v1::UnbenchWorkerRequest* req,
                                             v1::UnbenchWorkerResponse* resp) {
  // An operator's call, allowed to the roles that cancel sweeps and raise budgets.
  return guard_.Run(*ctx, "UnbenchWorker", [&](const Caller& caller) -> absl::Status {
    // The name reaches SQL and the reply's text: a worker registered under a checked name.
    RETURN_IF_ERROR(util::CheckName("name", req->name()));
    ASSIGN_OR_RETURN(*resp->mutable_worker(), d_.sweep_reads->Unbench(req->name()));
    spdlog::info("worker unbenched name={} by={}", util::LogQuote(req->name()),
                 util::LogQuote(caller.name));
    return absl::OkStatus();
  });
}

}  // namespace ablate::server
