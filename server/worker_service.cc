#include "server/worker_service.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/util/fields.h"
#include "common/util/status_macros.h"
#include "server/grpc_status.h"
#include "server/store/cost_store.h"
#include "spdlog/spdlog.h"

namespace ablate::server {
namespace {

// Under the default 16 MiB message cap with room to spare; large enough that a 100 MB
// checkpoint is ~100 messages.
constexpr size_t kChunkBytes = 1 << 20;
// ReportLogs: a batch is at most 100 lines of at most 512 bytes (a progress line is ~100).
constexpr int kMaxLogLinesPerReport = 100;
constexpr size_t kMaxLogLineBytes = 512;

// The free-text fields of what a worker says about itself (names are checked separately).
absl::Status CheckInfoText(const v1::WorkerInfo& info) {
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string&>{"info.device_name", info.device_name()},
        {"info.torch_version", info.torch_version()},
        {"info.hostname", info.hostname()},
        {"info.version", info.version()}}) {
    if (auto s = util::CheckText(field, value, util::kMaxNameBytes * 2); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// What cost figures are made of (docs/architecture.md#cost): a price and benchmark figures that
// are finite and within what a machine can be, and a handful of benchmarks, so no worker can
// poison a sweep's spend or estimate with NaN (or with 5e-324 FLOP/s, which made every estimate
// infinite) or make the server store megabytes of them. The benchmark's range is the store's
// (PlausibleBenchmark), which also leaves out what older rows hold.
constexpr int kMaxBenchmarks = 8;
constexpr double kMaxPricePerHour = 1e6;

absl::Status CheckInfoCost(const v1::WorkerInfo& info) {
  const double price = info.price_per_hour();
  if (!std::isfinite(price) || price < 0 || price > kMaxPricePerHour) {
    return absl::InvalidArgumentError(absl::StrCat(
        "info.price_per_hour must be a number from 0 to ", kMaxPricePerHour, " (got ", price, ")"));
  }
  if (info.benchmarks_size() > kMaxBenchmarks) {
    return absl::InvalidArgumentError(absl::StrCat("info.benchmarks: at most ", kMaxBenchmarks,
                                                   " (got ", info.benchmarks_size(), ")"));
  }
  for (int i = 0; i < info.benchmarks_size(); ++i) {
    const auto& b = info.benchmarks(i);
    const std::string field = absl::StrCat("info.benchmarks[", i, "]");
    RETURN_IF_ERROR(util::CheckNumber(field + ".flops_per_second", b.flops_per_second(),
                                      kMinBenchmarkFlops, kMaxBenchmarkFlops));
    RETURN_IF_ERROR(util::CheckNumber(field + ".tokens_per_second", b.tokens_per_second(), 0,
                                      kMaxTokensPerSecond));
    RETURN_IF_ERROR(util::CheckNumber(field + ".seconds", b.seconds(), 0, kMaxBenchmarkSeconds));
    RETURN_IF_ERROR(util::CheckText(field + ".dtype", b.dtype(), util::kMaxNameBytes));
    RETURN_IF_ERROR(util::CheckText(field + ".model", b.model(), util::kMaxNameBytes * 2));
  }
  return absl::OkStatus();
}

// The rest of what a worker says of itself in numbers: device memory (at most 1 PiB), cores,
// and the host key (SHA-256 hex, or empty).
constexpr int64_t kMaxMemoryBytes = int64_t{1} << 50;
absl::Status CheckInfoNumbers(const v1::WorkerInfo& info) {
  RETURN_IF_ERROR(util::CheckInteger("info.device_memory_bytes", info.device_memory_bytes(), 0,
                                     kMaxMemoryBytes));
  RETURN_IF_ERROR(util::CheckInteger("info.cpu_cores", info.cpu_cores(), 0, 1 << 20));
  if (!info.host_key().empty() && !IsSha256Hex(info.host_key())) {
    return absl::InvalidArgumentError(
        absl::StrCat("info.host_key must be 64 lower-case hex digits or empty (got ",
                     info.host_key().size(), " characters)"));
  }
  return absl::OkStatus();
}

// A step a worker reports (heartbeat, metric point, log line, checkpoint, result): at most
// 2^53 - 1, the largest integer a double (a JSON number, a Prometheus value) holds exactly; the
// store also keeps a run's step within its own steps.
constexpr int64_t kMaxStep = (int64_t{1} << 53) - 1;
constexpr double kMaxUnixSeconds = 1e11;  // the year 5138

absl::Status CheckResultNumbers(const v1::RunResult& r, int max_final_probes) {
  RETURN_IF_ERROR(util::CheckInteger("result.steps_done", r.steps_done(), 0, kMaxStep));
  // -1: did not diverge (the trainer's word for it), as steps_to_threshold's -1 is never reached.
  RETURN_IF_ERROR(util::CheckInteger("result.diverged_step", r.diverged_step(), -1, kMaxStep));
  RETURN_IF_ERROR(
      util::CheckInteger("result.steps_to_threshold", r.steps_to_threshold(), -1, kMaxStep));
  RETURN_IF_ERROR(
      util::CheckNumber("result.tokens_per_second", r.tokens_per_second(), 0, kMaxTokensPerSecond));
  RETURN_IF_ERROR(util::CheckNumber("result.wall_seconds", r.wall_seconds(), 0, 1e9));
  RETURN_IF_ERROR(
      util::CheckInteger("result.peak_memory_bytes", r.peak_memory_bytes(), 0, kMaxMemoryBytes));
  RETURN_IF_ERROR(util::CheckInteger("result.shards", r.shards(), 0, 1 << 16));
  if (r.final_probes_size() > max_final_probes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "result.final_probes: ", r.final_probes_size(), " entries; a run keeps at most ",
        max_final_probes, " (the server's --max-final-probes)"));
  }
  // The losses, perplexity and probe values are measurements: a diverged run's may be NaN or
  // infinite, and the reports read them so.
  return absl::OkStatus();
}

// RegisterRequest.crashed: at most one per slot, each an attempt of a run with its lease token
// and a cause in words.
absl::Status CheckCrashed(const v1::RegisterRequest& req) {
  if (req.crashed_size() > kMaxWorkerSlots) {
    return absl::InvalidArgumentError(absl::StrCat("crashed: at most ", kMaxWorkerSlots,
                                                   " attempts (got ", req.crashed_size(), ")"));
  }
  for (int i = 0; i < req.crashed_size(); ++i) {
    const auto& c = req.crashed(i);
    const std::string field = absl::StrCat("crashed[", i, "]");
    RETURN_IF_ERROR(
        util::CheckInteger(field + ".run_id", c.run_id(), 1, std::numeric_limits<int64_t>::max()));
    RETURN_IF_ERROR(util::CheckInteger(field + ".attempt", c.attempt(), 1,
                                       std::numeric_limits<int32_t>::max()));
    if (!IsSha256Hex(c.lease_token())) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".lease_token must be 64 lower-case hex digits"));
    }
    RETURN_IF_ERROR(util::CheckText(field + ".cause", c.cause(), 1024));
  }
  return absl::OkStatus();
}

// The roles a prepared data set publishes; the token file of the val text is absent when the
// run has no val file.
constexpr const char* kRequiredRoles[] = {"tokenizer_model", "tokenizer_vocab", "tokens_train"};
constexpr std::string_view kKnownRoles[] = {"tokenizer_model", "tokenizer_vocab", "tokens_train",
                                            "tokens_val"};
constexpr int kMaxPreparedFiles = 8;

absl::Status CheckKey(const char* field, const std::string& key) {
  if (!IsSha256Hex(key)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be 64 lower-case hex digits (got ", key.size(), " characters)"));
  }
  return absl::OkStatus();
}

absl::Status CheckRef(const std::string& field, const v1::PreparedFileRef& ref, int64_t cap) {
  if (auto s = util::CheckName(field + ".role", ref.role()); !s.ok()) return s;
  // Only the roles a worker looks for: a role is never a file name, but nothing else has a use.
  if (std::find(std::begin(kKnownRoles), std::end(kKnownRoles), ref.role()) ==
      std::end(kKnownRoles)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".role ", util::LogQuote(ref.role()),
                     " is not one of tokenizer_model, tokenizer_vocab, tokens_train, tokens_val"));
  }
  if (!IsSha256Hex(ref.sha256())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".sha256 must be 64 lower-case hex digits"));
  }
  if (ref.size_bytes() < 0 || ref.size_bytes() > cap) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".size_bytes ", ref.size_bytes(),
                                                   " is outside [0, ", cap,
                                                   "] (the server's --max-prepared-bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace

grpc::Status WorkerServiceImpl::Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                                         v1::RegisterResponse* resp) {
  return guard_.Run(*ctx, "Register", [&](const Caller& caller) -> absl::Status {
    RETURN_IF_ERROR(util::CheckName("info.name", req->info().name()));
    RETURN_IF_ERROR(CheckInfoText(req->info()));
    RETURN_IF_ERROR(CheckInfoCost(req->info()));
    RETURN_IF_ERROR(CheckInfoNumbers(req->info()));
    RETURN_IF_ERROR(CheckCrashed(*req));
    if (req->info().slots() < 0 || req->info().slots() > kMaxWorkerSlots) {
      return absl::InvalidArgumentError(absl::StrCat("info.slots must be between 0 and ",
                                                     kMaxWorkerSlots, " (got ", req->info().slots(),
                                                     ")"));
    }
    auto registered =
        d_.workers->Register(req->info(), caller.token_id, d_.options->max_worker_names);
    if (!registered.ok()) {
      if (absl::IsAlreadyExists(registered.status())) {
        spdlog::warn("register refused name={} token={}: name held by a live worker",
                     util::LogQuote(req->info().name()), util::LogQuote(caller.name));
      } else if (absl::IsResourceExhausted(registered.status())) {
        spdlog::warn("register refused name={} token={}: --max-worker-names reached",
                     util::LogQuote(req->info().name()), util::LogQuote(caller.name));
      }
      return registered.status();
    }
    const int64_t id = registered->id;
    if (!registered->inherited_from.empty()) {
      spdlog::warn("worker id={} name={} inherits the bench of {} (same box and work dir)", id,
                   util::LogQuote(req->info().name()), util::LogQuote(registered->inherited_from));
    }
    if (req->new_process()) {
      // The process that held this worker's leases is gone: what it reported of its end counts
      // against it, the rest goes back to the queue now rather than when the leases expire.
      const std::vector<v1::CrashedAttempt> crashed(req->crashed().begin(), req->crashed().end());
      ASSIGN_OR_RETURN(const RestartResult restarted, d_.runs->WorkerRestarted(id, crashed));
      if (restarted.faulted + restarted.stale + restarted.released > 0) {
        spdlog::warn(
            "worker id={} name={} restarted: {} attempt(s) its previous process held when it died "
            "counted as worker faults, {} reported too late (already requeued), {} lease(s) "
            "released",
            id, util::LogQuote(req->info().name()), restarted.faulted, restarted.stale,
            restarted.released);
      }
    }
    resp->set_worker_id(id);
    resp->set_lease_seconds(d_.workers->lease_seconds());
    d_.costs->FleetChanged();  // estimates see the new worker at once, not after the cache's TTL
    spdlog::info("worker registered id={} name={} device={}", id,
                 util::LogQuote(req->info().name()), util::LogQuote(req->info().device_kind()));
    return absl::OkStatus();
  });
}

namespace {

// Lease's reactor: what DefaultReactor does, and OnCancel, which takes a parked call out of the
// broker's list the moment its caller hangs up (lease_broker.h, "Callers that went away"). The
// state it shares with the executor's closures outlives the reactor (deleted at OnDone).
class LeaseReactor final : public grpc::ServerUnaryReactor {
 public:
  struct State {
    LeaseBroker* broker = nullptr;
    std::mutex mu;
    LeaseBroker::Handle call;  // set once the broker has the call
    bool cancelled = false;
  };

  explicit LeaseReactor(LeaseBroker* broker) : state_(std::make_shared<State>()) {
    state_->broker = broker;
  }
  std::shared_ptr<State> state() const { return state_; }

  // After the broker took the call: a cancel that came first is passed on now.
  static void Parked(const std::shared_ptr<State>& state, LeaseBroker::Handle call) {
    bool cancelled;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->call = call;
      cancelled = state->cancelled;
    }
    if (cancelled) state->broker->Cancel(call);
  }

  void OnCancel() override {
    LeaseBroker::Handle call;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->cancelled = true;
      call = state_->call;
    }
    state_->broker->Cancel(call);
  }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<State> state_;
};

}  // namespace

grpc::ServerUnaryReactor* WorkerServiceImpl::Lease(grpc::CallbackServerContext* ctx,
                                                   const v1::LeaseRequest* req,
                                                   v1::LeaseResponse* resp) {
  auto* reactor = new LeaseReactor(d_.broker);
  const auto start = std::chrono::steady_clock::now();
  auto finish = [this, reactor, start](const grpc::Status& status) {
    d_.metrics->ObserveRpc(
        "Lease", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    reactor->Finish(status);
  };
  // Authentication may query the database: do it on the executor, not on gRPC's thread.
  d_.executor->Post([this, ctx, req, resp, finish, state = reactor->state()] {
    auto caller = guard_.Authorize(*ctx, "Lease");
    if (!caller.ok()) {
      finish(ToGrpc(caller.status()));
      return;
    }
    auto call = d_.broker->Lease(
        req->worker_id(), caller->token_id, req->wait_seconds(),
        [ctx] { return !ctx->IsCancelled(); },
        [this, ctx, resp, finish](absl::StatusOr<v1::LeaseResponse> r) {
          if (!r.ok()) {
            finish(ToGrpc(r.status()));
            return;
          }
          if (r->has_run()) {
            if (ctx->IsCancelled()) {
              // The worker hung up while we leased for it: hand the run straight back rather
              // than let it sit leased until the lease expires.
              v1::ReleaseRequest back;
              back.set_run_id(r->lease().run_id());
              back.set_attempt(r->lease().attempt());
              back.set_lease_token(r->lease().token());
              back.set_reason("lease reply undeliverable: caller went away");
              auto s = d_.runs->Release(back);
              if (!s.ok()) spdlog::warn("release after cancelled lease: {}", s.ToString());
              finish(grpc::Status(grpc::StatusCode::CANCELLED, "caller went away"));
              return;
            }
            d_.metrics->LeaseGranted();
          }
          *resp = *std::move(r);
          finish(grpc::Status::OK);
        });
    LeaseReactor::Parked(state, std::move(call));
  });
  return reactor;
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                          v1::HeartbeatResponse* resp) {
  return guard_.Run(*ctx, "Heartbeat", [&](const Caller& caller) -> absl::Status {
    RETURN_IF_ERROR(util::CheckInteger("step", req->step(), 0, kMaxStep));
    RETURN_IF_ERROR(
        util::CheckNumber("tokens_per_second", req->tokens_per_second(), 0, kMaxTokensPerSecond));
    RETURN_IF_ERROR(util::CheckInteger("device_memory_used_bytes", req->device_memory_used_bytes(),
                                       0, kMaxMemoryBytes));
    ASSIGN_OR_RETURN(*resp, d_.runs->Heartbeat(*req, caller.token_id));
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::ReportMetrics(grpc::ServerContext* ctx,
                                              const v1::ReportMetricsRequest* req,
                                              v1::ReportMetricsResponse* resp) {
  return guard_.Run(*ctx, "ReportMetrics", [&](const Caller&) -> absl::Status {
    if (req->points_size() > d_.options->max_points_per_report) {
      return absl::InvalidArgumentError(
          absl::StrCat("points: ", req->points_size(), " points in one report; the limit is ",
                       d_.options->max_points_per_report, " (send smaller batches)"));
    }
    for (int i = 0; i < req->points_size(); ++i) {
      const auto& p = req->points(i);
      RETURN_IF_ERROR(util::CheckName(absl::StrCat("points[", i, "].name"), p.name()));
      RETURN_IF_ERROR(
          util::CheckInteger(absl::StrCat("points[", i, "].step"), p.step(), 0, kMaxStep));
      RETURN_IF_ERROR(
          util::CheckNumber(absl::StrCat("points[", i, "].time"), p.time(), 0, kMaxUnixSeconds));
      // The value is a measurement: a diverged run's loss may be NaN or infinite.
    }
    ASSIGN_OR_RETURN(const int n, d_.ingest->ReportMetrics(*req));
    d_.metrics->MetricPoints(n);
    resp->set_accepted(n);
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::PutCheckpoint(grpc::ServerContext* ctx,
                                              grpc::ServerReader<v1::CheckpointChunk>* reader,
                                              v1::PutCheckpointResponse* resp) {
  return guard_.Run(*ctx, "PutCheckpoint", [&](const Caller&) -> absl::Status {
    v1::CheckpointChunk header;
    if (!reader->Read(&header)) {
      return absl::InvalidArgumentError("checkpoint: empty stream (no header chunk)");
    }
    const v1::CheckpointRef ref = header.ref();
    const int64_t run_id = header.run_id();
    const int attempt = header.attempt();
    const std::string lease_token = header.lease_token();
    const int64_t cap = d_.options->max_checkpoint_bytes;
    if (!IsSha256Hex(ref.sha256()) || ref.size_bytes() < 0 || ref.step() < 0 ||
        ref.step() > kMaxStep) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: header ref needs step from 0 to ", kMaxStep,
                       ", size_bytes >= 0 and a 64-hex-digit sha256"));
    }
    if (ref.size_bytes() > cap) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: header ref.size_bytes ", ref.size_bytes(),
                       " is over the server's --max-checkpoint-bytes (", cap, ")"));
    }
    // Refuse a stale attempt before it uploads hundreds of MB; checked again when recording.
    RETURN_IF_ERROR(d_.runs->CheckFence(run_id, attempt, lease_token));
    // The cap holds even if the header lies about the size: the writer stops at it.
    ASSIGN_OR_RETURN(auto writer, d_.blobs->NewWriter(cap));
    v1::CheckpointChunk chunk = std::move(header);
    do {
      RETURN_IF_ERROR(writer->Append(chunk.data()));
    } while (reader->Read(&chunk));
    // The blob moves into the store only once the fence passes (under the run's row lock): an
    // upload whose lease was lost meanwhile leaves nothing behind.
    RETURN_IF_ERROR(d_.runs->RecordCheckpoint(run_id, attempt, lease_token, ref, [&] {
      return writer->Commit(ref.sha256(), ref.size_bytes());
    }));
    *resp->mutable_stored() = ref;
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::GetCheckpoint(grpc::ServerContext* ctx,
                                              const v1::GetCheckpointRequest* req,
                                              grpc::ServerWriter<v1::CheckpointChunk>* writer) {
  return guard_.Run(*ctx, "GetCheckpoint", [&](const Caller&) -> absl::Status {
    RETURN_IF_ERROR(d_.runs->CheckFence(req->run_id(), req->attempt(), req->lease_token()));
    ASSIGN_OR_RETURN(const v1::CheckpointRef ref,
                     d_.workers->FindCheckpoint(req->run_id(), req->sha256()));
    ASSIGN_OR_RETURN(const auto path, d_.blobs->PathOf(ref.sha256()));
    bool first = true;
    return StreamFile(path, kChunkBytes, [&](std::string&& data, int64_t) {
      v1::CheckpointChunk chunk;
      if (first) {
        chunk.set_run_id(req->run_id());
        chunk.set_attempt(req->attempt());
        *chunk.mutable_ref() = ref;
        first = false;
      }
      chunk.set_data(std::move(data));
      return writer->Write(chunk);
    });
  });
}

grpc::Status WorkerServiceImpl::GetDataset(grpc::ServerContext* ctx,
                                           const v1::GetDatasetRequest* req,
                                           grpc::ServerWriter<v1::DataChunk>* writer) {
  return guard_.Run(*ctx, "GetDataset", [&](const Caller&) -> absl::Status {
    ASSIGN_OR_RETURN(const auto found, d_.workers->DatasetPath(req->sha256()));
    // Confined again at serve time: the file may have been replaced by a link since it was
    // submitted, and every worker token may call this.
    auto real = d_.datasets->Confine(found.first);
    std::error_code ec;
    const auto size =
        real.ok() ? static_cast<int64_t>(std::filesystem::file_size(*real, ec)) : int64_t{-1};
    if (!real.ok() || ec || size != found.second) {
      // The worker checks the digest anyway; refusing early names the cause.
      return absl::FailedPreconditionError(
          absl::StrCat("data set ", req->sha256(), " (", found.first,
                       ") changed or vanished on the server since it was submitted"));
    }
    return StreamFile(*real, kChunkBytes, [&](std::string&& data, int64_t total) {
      v1::DataChunk chunk;
      chunk.set_total_bytes(total);
      chunk.set_data(std::move(data));
      return writer->Write(chunk);
    });
  });
}

grpc::Status WorkerServiceImpl::Complete(grpc::ServerContext* ctx, const v1::CompleteRequest* req,
                                         v1::CompleteResponse* /*resp*/) {
  return guard_.Run(*ctx, "Complete", [&](const Caller&) -> absl::Status {
    RETURN_IF_ERROR(util::CheckText("error", req->error()));
    RETURN_IF_ERROR(
        util::CheckText("result.device", req->result().device(), util::kMaxNameBytes * 2));
    RETURN_IF_ERROR(CheckResultNumbers(req->result(), d_.options->max_final_probes));
    for (const auto& [name, value] : req->result().final_probes()) {
      RETURN_IF_ERROR(util::CheckText("result.final_probes key", name, util::kMaxNameBytes));
    }
    // The final weights must be a checkpoint this run uploaded (PutCheckpoint, fenced), exactly
    // as recorded: `ablate artifacts get` serves the blob the ref names to any user.
    if (req->result().has_final_checkpoint()) {
      const auto& ref = req->result().final_checkpoint();
      auto found = IsSha256Hex(ref.sha256())
                       ? d_.workers->FindCheckpoint(req->run_id(), ref.sha256())
                       : absl::StatusOr<v1::CheckpointRef>(absl::InvalidArgumentError(""));
      if (!found.ok() || found->step() != ref.step() || found->size_bytes() != ref.size_bytes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "result.final_checkpoint: no checkpoint of run ", req->run_id(), " at step ",
            ref.step(), " with that sha256 and size was uploaded (PutCheckpoint it first)"));
      }
    }
    return d_.runs->Complete(*req);
  });
}

grpc::Status WorkerServiceImpl::Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                                        v1::ReleaseResponse* /*resp*/) {
  return guard_.Run(*ctx, "Release", [&](const Caller&) -> absl::Status {
    RETURN_IF_ERROR(util::CheckText("reason", req->reason(), 4096));
    return d_.runs->Release(*req);
  });
}

grpc::Status WorkerServiceImpl::ReportLogs(grpc::ServerContext* ctx,
                                           const v1::LogReportRequest* req,
                                           v1::LogReportResponse* resp) {
  return guard_.Run(*ctx, "ReportLogs", [&](const Caller&) -> absl::Status {
    if (req->lines_size() > kMaxLogLinesPerReport) {
      return absl::InvalidArgumentError(
          absl::StrCat("lines: ", req->lines_size(), " lines in one report; the limit is ",
                       kMaxLogLinesPerReport, " (send smaller batches)"));
    }
    for (int i = 0; i < req->lines_size(); ++i) {
      const auto& l = req->lines(i);
      RETURN_IF_ERROR(
          util::CheckText(absl::StrCat("lines[", i, "].text"), l.text(), kMaxLogLineBytes));
      if (l.step() < 0 || l.step() > kMaxStep || !std::isfinite(l.time())) {
        return absl::InvalidArgumentError(
            absl::StrCat("lines[", i, "]: step must be from 0 to ", kMaxStep, " and time finite"));
      }
    }
    ASSIGN_OR_RETURN(const int n, d_.ingest->ReportLogs(*req));
    resp->set_accepted(n);
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::Deregister(grpc::ServerContext* ctx,
                                           const v1::CliDeregisterRequest* req,
                                           v1::CliDeregisterResponse* /*resp*/) {
  return guard_.Run(*ctx, "Deregister", [&](const Caller& caller) -> absl::Status {
    RETURN_IF_ERROR(d_.workers->Deregister(req->worker_id(), caller.token_id));
    d_.costs->FleetChanged();
    spdlog::info("worker stopped id={}", req->worker_id());
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::ClaimDataPrep(grpc::ServerContext* ctx,
                                              const v1::DataPrepClaimRequest* req,
                                              v1::DataPrepClaimResponse* resp) {
  return guard_.Run(*ctx, "ClaimDataPrep", [&](const Caller& caller) -> absl::Status {
    if (auto s = CheckKey("key", req->key()); !s.ok()) return s;
    if (auto s = util::CheckText("description", req->description(), 512); !s.ok()) return s;
    if (!req->claim_token().empty()) {
      if (auto s = CheckKey("claim_token", req->claim_token()); !s.ok()) return s;
    }
    auto r = d_.prepared->Claim(*req, caller.token_id);
    if (!r.ok()) return r.status();
    if (r->state() == v1::DataPrepClaimResponse::CLAIMED && req->claim_token().empty()) {
      spdlog::info("data prep claimed key={} worker_id={} description={}", req->key().substr(0, 16),
                   req->worker_id(), util::LogQuote(req->description()));
    }
    *resp = *std::move(r);
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::PutPreparedFile(grpc::ServerContext* ctx,
                                                grpc::ServerReader<v1::PreparedFileChunk>* reader,
                                                v1::PreparedFileRef* resp) {
  return guard_.Run(*ctx, "PutPreparedFile", [&](const Caller&) -> absl::Status {
    v1::PreparedFileChunk header;
    if (!reader->Read(&header)) {
      return absl::InvalidArgumentError("prepared file: empty stream (no header chunk)");
    }
    const int64_t cap = d_.options->max_prepared_bytes;
    if (auto s = CheckKey("key", header.key()); !s.ok()) return s;
    if (auto s = CheckKey("claim_token", header.claim_token()); !s.ok()) return s;
    if (auto s = CheckRef("ref", header.ref(), cap); !s.ok()) return s;
    const v1::PreparedFileRef ref = header.ref();
    const std::string key = header.key();
    const std::string claim_token = header.claim_token();
    // Refuse a lost claim before it uploads gigabytes; checked again before the blob is kept.
    if (auto s = d_.prepared->CheckClaim(key, claim_token); !s.ok()) return s;
    auto writer = d_.blobs->NewWriter(cap, "prepared file", "--max-prepared-bytes");
    if (!writer.ok()) return writer.status();
    v1::PreparedFileChunk chunk = std::move(header);
    do {
      if (auto s = (*writer)->Append(chunk.data()); !s.ok()) return s;
    } while (reader->Read(&chunk));
    // Kept only under the live claim, and recorded as this claim's: PublishDataPrep accepts
    // only files its own claim uploaded.
    if (auto s = d_.prepared->RecordUpload(
            key, claim_token, ref,
            [&] { return (*writer)->Commit(ref.sha256(), ref.size_bytes()); });
        !s.ok()) {
      return s;
    }
    *resp = ref;
    return absl::OkStatus();
  });
}

grpc::Status WorkerServiceImpl::PublishDataPrep(grpc::ServerContext* ctx,
                                                const v1::DataPrepPublishRequest* req,
                                                v1::DataPrepPublishResponse* /*resp*/) {
  return guard_.Run(*ctx, "PublishDataPrep", [&](const Caller&) -> absl::Status {
    if (auto s = CheckKey("key", req->key()); !s.ok()) return s;
    if (auto s = CheckKey("claim_token", req->claim_token()); !s.ok()) return s;
    if (req->abandon()) {
      spdlog::info("data prep abandoned key={}", req->key().substr(0, 16));
      return d_.prepared->Abandon(req->key(), req->claim_token());
    }
    if (req->files_size() > kMaxPreparedFiles) {
      return absl::InvalidArgumentError(absl::StrCat("files: ", req->files_size(),
                                                     " files; a prepared data set has at most ",
                                                     kMaxPreparedFiles));
    }
    std::vector<v1::PreparedFileRef> files;
    std::set<std::string> roles;
    for (int i = 0; i < req->files_size(); ++i) {
      const std::string field = absl::StrCat("files[", i, "]");
      if (auto s = CheckRef(field, req->files(i), d_.options->max_prepared_bytes); !s.ok()) {
        return s;
      }
      if (!roles.insert(req->files(i).role()).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".role \"", req->files(i).role(), "\" appears twice"));
      }
      files.push_back(req->files(i));
    }
    for (const char* role : kRequiredRoles) {
      if (!roles.contains(role)) {
        return absl::InvalidArgumentError(
            absl::StrCat("files: no file with role \"", role, "\" (a prepared data set needs ",
                         "tokenizer_model, tokenizer_vocab and tokens_train)"));
      }
    }
    auto s = d_.prepared->Publish(req->key(), req->claim_token(), files, [&]() -> absl::Status {
      for (size_t i = 0; i < files.size(); ++i) {
        auto path = d_.blobs->PathOf(files[i].sha256());
        std::error_code ec;
        if (!path.ok() ||
            static_cast<int64_t>(std::filesystem::file_size(*path, ec)) != files[i].size_bytes() ||
            ec) {
          return absl::FailedPreconditionError(
              absl::StrCat("files[", i, "] (", files[i].role(), ", sha256 ", files[i].sha256(),
                           ") was not uploaded with that size; PutPreparedFile it first"));
        }
      }
      return absl::OkStatus();
    });
    if (s.ok())
      spdlog::info("data prep published key={} files={}", req->key().substr(0, 16), files.size());
    return s;
  });
}

grpc::Status WorkerServiceImpl::GetPreparedFile(grpc::ServerContext* ctx,
                                                const v1::PreparedFileRequest* req,
                                                grpc::ServerWriter<v1::DataChunk>* writer) {
  return guard_.Run(*ctx, "GetPreparedFile", [&](const Caller&) -> absl::Status {
    if (auto s = CheckKey("sha256", req->sha256()); !s.ok()) return s;
    // Only published files: the store also holds checkpoints, which only their run's lease may
    // read (GetCheckpoint).
    auto published = d_.prepared->IsPublishedFile(req->sha256());
    if (!published.ok()) return published.status();
    if (!*published) {
      return absl::NotFoundError(
          absl::StrCat("no published prepared file has sha256 ", req->sha256()));
    }
    auto path = d_.blobs->PathOf(req->sha256());
    if (!path.ok()) return path.status();
    auto s = StreamFile(*path, kChunkBytes, [&](std::string&& data, int64_t total) {
      v1::DataChunk chunk;
      chunk.set_total_bytes(total);
      chunk.set_data(std::move(data));
      return writer->Write(chunk);
    });
    return s;
  });
}

}  // namespace ablate::server
