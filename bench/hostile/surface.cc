#include "bench/hostile/surface.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>
#include <tuple>
#include <vector>

#include "ablate/v1/ablate.grpc.pb.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"

namespace ablate::bench {

double StatusMb(pid_t pid, const std::string& key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  }
  return -1;
}

namespace {

using grpc::StatusCode;

std::string CodeName(StatusCode c) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(c));
}

std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token, double seconds = 60) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  return ctx;
}

std::string SweepYaml(const std::string& name, const std::string& extra = "") {
  return absl::StrCat("name: ", name,
                      "\ndata: {train: \"synthetic:50\", val: \"synthetic:10\"}\n"
                      "fixed: {n_embd: 32, n_head: 2, block_size: 32, batch_size: 4, steps: 100}\n"
                      "grid:\n  lr: [0.001, 0.002, 0.004, 0.008, 0.016, 0.032]\n",
                      extra);
}

// One worker-side lease as the attacks use it.
struct Held {
  int64_t run = 0;
  int attempt = 0;
  std::string token;
};

class Surface {
 public:
  Surface(std::shared_ptr<grpc::Channel> channel, SurfaceTokens tokens, pid_t server)
      : workers_(v1::WorkerService::NewStub(channel)),
        sweeps_(v1::SweepService::NewStub(channel)),
        t_(std::move(tokens)),
        server_(server) {}

  int Run() {
    if (!SetUp()) return 1;
    std::printf("\n%-16s %-60s %-19s %-19s\n", "RPC", "attack", "want", "got");
    NoOrRevokedToken();
    WrongRole();
    AnotherWorkersIdentity();
    AnotherWorkersLease();
    DataSetsAndFinalWeights();
    SizesAndCounts();
    PathLikeNames();
    RefineAndPruneInput();
    Retention();
    CostAndBudget();
    std::printf("%d attacks: %d refused as expected, %d NOT\n", attacks_, attacks_ - unexpected_,
                unexpected_);
    Bursts();
    return unexpected_;
  }

 private:
  // ---- the calls ----
  grpc::Status Register(const std::string& token, const std::string& name, int slots,
                        int64_t* id = nullptr) {
    v1::RegisterRequest req;
    req.mutable_info()->set_name(name);
    req.mutable_info()->set_device_kind("cpu");
    req.mutable_info()->set_slots(slots);
    v1::RegisterResponse resp;
    auto s = workers_->Register(Ctx(token).get(), req, &resp);
    if (id != nullptr) *id = resp.worker_id();
    return s;
  }
  grpc::Status Lease(const std::string& token, int64_t worker, Held* held = nullptr) {
    v1::LeaseRequest req;
    req.set_worker_id(worker);
    v1::LeaseResponse resp;
    auto s = workers_->Lease(Ctx(token).get(), req, &resp);
    if (s.ok() && !resp.has_run()) return grpc::Status(StatusCode::NOT_FOUND, "nothing queued");
    if (held != nullptr)
      *held = {resp.lease().run_id(), resp.lease().attempt(), resp.lease().token()};
    return s;
  }
  grpc::Status Heartbeat(const std::string& token, int64_t worker, const Held& h,
                         v1::HeartbeatResponse* resp) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_run_id(h.run);
    req.set_attempt(h.attempt);
    req.set_lease_token(h.token);
    return workers_->Heartbeat(Ctx(token).get(), req, resp);
  }
  grpc::Status Report(const std::string& token, const Held& h) {
    v1::ReportMetricsRequest req;
    req.set_run_id(h.run);
    req.set_attempt(h.attempt);
    req.set_lease_token(h.token);
    auto* p = req.add_points();
    p->set_name("train_loss");
    p->set_step(1);
    p->set_value(1);
    v1::ReportMetricsResponse resp;
    return workers_->ReportMetrics(Ctx(token).get(), req, &resp);
  }
  grpc::Status Logs(const std::string& token, const Held& h, int lines, size_t bytes) {
    v1::LogReportRequest req;
    req.set_run_id(h.run);
    req.set_attempt(h.attempt);
    req.set_lease_token(h.token);
    for (int i = 0; i < lines; ++i) {
      auto* l = req.add_lines();
      l->set_step(i);
      l->set_attempt(h.attempt);
      l->set_time(1.7e9);
      l->set_text(std::string(bytes, 'x'));
    }
    v1::LogReportResponse resp;
    return workers_->ReportLogs(Ctx(token).get(), req, &resp);
  }
  grpc::Status PutCheckpoint(const std::string& token, const Held& h, const std::string& data,
                             int64_t announced, v1::CheckpointRef* ref = nullptr) {
    v1::PutCheckpointResponse stored;
    auto ctx = Ctx(token);
    auto writer = workers_->PutCheckpoint(ctx.get(), &stored);
    v1::CheckpointChunk header;
    header.set_run_id(h.run);
    header.set_attempt(h.attempt);
    header.set_lease_token(h.token);
    header.mutable_ref()->set_step(10);
    header.mutable_ref()->set_sha256(Sha256Hex(data));
    header.mutable_ref()->set_size_bytes(announced);
    if (ref != nullptr) *ref = header.ref();
    writer->Write(header);
    for (size_t off = 0; off < data.size(); off += 1 << 20) {
      v1::CheckpointChunk c;
      c.set_data(data.substr(off, 1 << 20));
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }
  grpc::Status GetCheckpoint(const std::string& token, const Held& h, const std::string& sha = "") {
    v1::GetCheckpointRequest req;
    req.set_run_id(h.run);
    req.set_attempt(h.attempt);
    req.set_lease_token(h.token);
    req.set_sha256(sha);
    auto ctx = Ctx(token);
    auto reader = workers_->GetCheckpoint(ctx.get(), req);
    v1::CheckpointChunk c;
    while (reader->Read(&c)) {
    }
    return reader->Finish();
  }
  grpc::Status Complete(const std::string& token, const Held& h, v1::RunState state,
                        const v1::CheckpointRef* final_ref = nullptr) {
    v1::CompleteRequest req;
    req.set_run_id(h.run);
    req.set_attempt(h.attempt);
    req.set_lease_token(h.token);
    req.set_state(state);
    if (final_ref != nullptr) *req.mutable_result()->mutable_final_checkpoint() = *final_ref;
    v1::CompleteResponse resp;
    return workers_->Complete(Ctx(token).get(), req, &resp);
  }
  grpc::Status Release(const std::string& token, const Held& h) {
    v1::ReleaseRequest req;
    req.set_run_id(h.run);
    req.set_attempt(h.attempt);
    req.set_lease_token(h.token);
    req.set_reason("hostile");
    v1::ReleaseResponse resp;
    return workers_->Release(Ctx(token).get(), req, &resp);
  }
  grpc::Status Deregister(const std::string& token, int64_t worker) {
    v1::CliDeregisterRequest req;
    req.set_worker_id(worker);
    v1::CliDeregisterResponse resp;
    return workers_->Deregister(Ctx(token).get(), req, &resp);
  }
  grpc::Status Claim(const std::string& token, int64_t worker, const std::string& key,
                     v1::DataPrepClaimResponse* resp, const std::string& claim = "") {
    v1::DataPrepClaimRequest req;
    req.set_worker_id(worker);
    req.set_key(key);
    req.set_claim_token(claim);
    return workers_->ClaimDataPrep(Ctx(token).get(), req, resp);
  }
  grpc::Status PutPrepared(const std::string& token, const std::string& key,
                           const std::string& claim, const std::string& role,
                           const std::string& data, int64_t announced,
                           v1::PreparedFileRef* stored = nullptr) {
    v1::PreparedFileRef ref;
    auto ctx = Ctx(token);
    auto writer = workers_->PutPreparedFile(ctx.get(), &ref);
    v1::PreparedFileChunk header;
    header.set_key(key);
    header.set_claim_token(claim);
    header.mutable_ref()->set_role(role);
    header.mutable_ref()->set_sha256(Sha256Hex(data));
    header.mutable_ref()->set_size_bytes(announced);
    writer->Write(header);
    for (size_t off = 0; off < data.size(); off += 1 << 20) {
      v1::PreparedFileChunk c;
      c.set_data(data.substr(off, 1 << 20));
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    auto s = writer->Finish();
    if (stored != nullptr) *stored = ref;
    return s;
  }
  grpc::Status Publish(const std::string& token, const std::string& key, const std::string& claim,
                       const std::vector<v1::PreparedFileRef>& files) {
    v1::DataPrepPublishRequest req;
    req.set_key(key);
    req.set_claim_token(claim);
    for (const auto& f : files) *req.add_files() = f;
    v1::DataPrepPublishResponse resp;
    return workers_->PublishDataPrep(Ctx(token).get(), req, &resp);
  }
  grpc::Status GetPrepared(const std::string& token, const std::string& sha,
                           std::string* out = nullptr) {
    v1::PreparedFileRequest req;
    req.set_sha256(sha);
    auto ctx = Ctx(token);
    auto reader = workers_->GetPreparedFile(ctx.get(), req);
    v1::DataChunk c;
    while (reader->Read(&c)) {
      if (out != nullptr) *out += c.data();
    }
    return reader->Finish();
  }
  grpc::Status Submit(const std::string& token, const std::string& yaml, int64_t* id = nullptr) {
    v1::SubmitSweepRequest req;
    req.set_spec_yaml(yaml);
    req.set_file_name("hostile.yaml");
    v1::SubmitSweepResponse resp;
    auto s = sweeps_->SubmitSweep(Ctx(token).get(), req, &resp);
    if (id != nullptr) *id = resp.sweep().id();
    return s;
  }
  grpc::Status ListWorkers(const std::string& token) {
    v1::ListWorkersRequest req;
    v1::ListWorkersResponse resp;
    return sweeps_->ListWorkers(Ctx(token).get(), req, &resp);
  }
  grpc::Status ListArtifacts(const std::string& token, int64_t run) {
    v1::ListArtifactsRequest req;
    req.set_run_id(run);
    v1::ListArtifactsResponse resp;
    return sweeps_->ListArtifacts(Ctx(token).get(), req, &resp);
  }
  grpc::Status GetArtifact(const std::string& token, int64_t run, const std::string& name = "",
                           int64_t* bytes = nullptr) {
    v1::ArtifactRequest req;
    req.set_run_id(run);
    req.set_name(name);
    auto ctx = Ctx(token);
    auto reader = sweeps_->GetArtifact(ctx.get(), req);
    v1::ArtifactChunk c;
    while (reader->Read(&c)) {
      if (bytes != nullptr) *bytes += static_cast<int64_t>(c.data().size());
    }
    return reader->Finish();
  }
  grpc::Status Metrics(const std::string& token, int64_t run) {
    v1::GetRunMetricsRequest req;
    req.set_run_id(run);
    req.set_after_step(-1);
    req.set_include_logs(true);
    auto ctx = Ctx(token);
    auto reader = sweeps_->GetRunMetrics(ctx.get(), req);
    v1::GetRunMetricsResponse m;
    while (reader->Read(&m)) {
    }
    return reader->Finish();
  }
  grpc::Status GetSweep(const std::string& token) {
    v1::GetSweepRequest req;
    req.mutable_sweep()->set_id(sweep_);
    v1::GetSweepResponse resp;
    return sweeps_->GetSweep(Ctx(token).get(), req, &resp);
  }
  grpc::Status ListSweeps(const std::string& token) {
    v1::ListSweepsRequest req;
    v1::ListSweepsResponse resp;
    return sweeps_->ListSweeps(Ctx(token).get(), req, &resp);
  }
  grpc::Status ListRuns(const std::string& token) {
    v1::ListRunsRequest req;
    v1::ListRunsResponse resp;
    return sweeps_->ListRuns(Ctx(token).get(), req, &resp);
  }
  grpc::Status ListCells(const std::string& token, const std::string& after = "") {
    v1::ListCellsRequest req;
    req.mutable_sweep()->set_id(sweep_);
    req.set_after_cell(after);
    req.set_limit(std::numeric_limits<int32_t>::max());
    v1::ListCellsResponse resp;
    return sweeps_->ListCells(Ctx(token).get(), req, &resp);
  }
  grpc::Status ListRunEvents(const std::string& token) {
    v1::ListRunEventsRequest req;
    req.set_run_id(ra_.run);
    v1::ListRunEventsResponse resp;
    return sweeps_->ListRunEvents(Ctx(token).get(), req, &resp);
  }
  grpc::Status WatchSweep(const std::string& token) {
    v1::WatchSweepRequest req;
    req.mutable_sweep()->set_id(sweep_);
    auto ctx = Ctx(token, 2);
    auto reader = sweeps_->WatchSweep(ctx.get(), req);
    v1::SweepUpdate u;
    if (reader->Read(&u)) {
      ctx->TryCancel();  // it streams until the sweep ends: one update shows it was let in
      reader->Finish();
      return grpc::Status::OK;
    }
    return reader->Finish();
  }
  grpc::Status GetDataset(const std::string& token) {
    v1::GetDatasetRequest req;
    req.set_sha256(Sha256Hex("no such data set"));
    auto ctx = Ctx(token);
    auto reader = workers_->GetDataset(ctx.get(), req);
    v1::DataChunk c;
    while (reader->Read(&c)) {
    }
    return reader->Finish();
  }
  grpc::Status Retry(const std::string& token, int64_t sweep) {
    v1::RetryRunsRequest req;
    req.mutable_sweep()->set_id(sweep);
    v1::RetryRunsResponse resp;
    return sweeps_->RetryRuns(Ctx(token).get(), req, &resp);
  }
  grpc::Status Cancel(const std::string& token, int64_t sweep) {
    v1::CancelSweepRequest req;
    req.mutable_sweep()->set_id(sweep);
    v1::CancelSweepResponse resp;
    return sweeps_->CancelSweep(Ctx(token).get(), req, &resp);
  }

  grpc::Status Delete(const std::string& token, const v1::SweepRef& ref, bool dry_run = false) {
    v1::DeleteSweepRequest req;
    *req.mutable_sweep() = ref;
    req.set_dry_run(dry_run);
    v1::DeleteSweepResponse resp;
    return sweeps_->DeleteSweep(Ctx(token).get(), req, &resp);
  }
  grpc::Status Delete(const std::string& token, int64_t sweep) {
    v1::SweepRef ref;
    ref.set_id(sweep);
    return Delete(token, ref);
  }

  // ---- bookkeeping ----
  void Expect(const char* rpc, const std::string& what, StatusCode want, const grpc::Status& got) {
    ++attacks_;
    const bool as_expected = got.error_code() == want;
    if (!as_expected) ++unexpected_;
    std::printf(
        "%-16s %-60s %-19s %-19s%s\n", rpc, what.substr(0, 60).c_str(), CodeName(want).c_str(),
        CodeName(got.error_code()).c_str(),
        as_expected
            ? ""
            : absl::StrCat("  <-- NOT AS EXPECTED: ", got.error_message()).substr(0, 200).c_str());
  }

  bool SetUp() {
    const std::string& admin = t_.admin;
    bool ok = Submit(admin, SweepYaml("victim"), &sweep_).ok() &&
              Register(t_.worker_a, "bench-a", 1, &a_).ok() &&
              Register(t_.worker_b, "bench-b", 1, &b_).ok() && Lease(t_.worker_a, a_, &ra_).ok();
    checkpoint_ = std::string(64 << 10, 'w') + "the weights of worker a's run";
    ok = ok && PutCheckpoint(t_.worker_a, ra_, checkpoint_,
                             static_cast<int64_t>(checkpoint_.size()), &checkpoint_ref_)
                   .ok();
    if (!ok) std::fprintf(stderr, "hostile_bench: could not set up the surface attacks\n");
    guess_ = {ra_.run, ra_.attempt, std::string(64, '0')};
    return ok;
  }

  void NoOrRevokedToken() {
    for (const auto& [who, token, code] :
         {std::tuple<const char*, std::string, StatusCode>{"no token", "",
                                                           StatusCode::UNAUTHENTICATED},
          {"revoked token", t_.revoked, StatusCode::UNAUTHENTICATED}}) {
      const std::string w = who;
      Expect("Register", w, code, Register(token, "anon", 1));
      Expect("Lease", w, code, Lease(token, a_));
      v1::HeartbeatResponse hr;
      Expect("Heartbeat", w, code, Heartbeat(token, a_, ra_, &hr));
      Expect("ReportLogs", w, code, Logs(token, ra_, 1, 10));
      v1::DataPrepClaimResponse cr;
      Expect("ClaimDataPrep", w, code, Claim(token, a_, Sha256Hex("k"), &cr));
      Expect("GetPreparedFile", w, code, GetPrepared(token, checkpoint_ref_.sha256()));
      Expect("Deregister", w, code, Deregister(token, a_));
      Expect("SubmitSweep", w, code, Submit(token, SweepYaml("anon")));
      Expect("ListWorkers", w, code, ListWorkers(token));
      Expect("GetArtifact", w, code, GetArtifact(token, ra_.run));
      Expect("GetRunMetrics", w, code, Metrics(token, ra_.run));
      // The rest of the surface, so that every RPC of both services is tried without a token.
      Expect("ReportMetrics", w, code, Report(token, ra_));
      Expect("PutCheckpoint", w, code, PutCheckpoint(token, ra_, "x", 1));
      Expect("GetCheckpoint", w, code, GetCheckpoint(token, ra_));
      Expect("GetDataset", w, code, GetDataset(token));
      Expect("Complete", w, code, Complete(token, ra_, v1::FAILED));
      Expect("Release", w, code, Release(token, ra_));
      Expect("PutPreparedFile", w, code,
             PutPrepared(token, Sha256Hex("k"), Sha256Hex("c"), "tokens_train", "x", 1));
      Expect("PublishDataPrep", w, code, Publish(token, Sha256Hex("k"), Sha256Hex("c"), {}));
      Expect("GetSweep", w, code, GetSweep(token));
      Expect("ListSweeps", w, code, ListSweeps(token));
      Expect("ListRuns", w, code, ListRuns(token));
      Expect("ListCells", w, code, ListCells(token));
      Expect("ListRunEvents", w, code, ListRunEvents(token));
      Expect("WatchSweep", w, code, WatchSweep(token));
      Expect("RetryRuns", w, code, Retry(token, sweep_));
      Expect("CancelSweep", w, code, Cancel(token, sweep_));
      Expect("DeleteSweep", w, code, Delete(token, sweep_));
      Expect("SetBudget", w, code, Raise(token, sweep_, 1));
      Expect("ListArtifacts", w, code, ListArtifacts(token, ra_.run));
    }
  }

  void WrongRole() {
    const std::string u = "user token on WorkerService", w = "worker token on SweepService";
    const auto denied = StatusCode::PERMISSION_DENIED;
    Expect("Register", u, denied, Register(t_.user, "user-worker", 1));
    Expect("Lease", u, denied, Lease(t_.user, a_));
    Expect("ReportLogs", u, denied, Logs(t_.user, ra_, 1, 10));
    v1::DataPrepClaimResponse cr;
    Expect("ClaimDataPrep", u, denied, Claim(t_.user, a_, Sha256Hex("k"), &cr));
    Expect("PutPreparedFile", u, denied,
           PutPrepared(t_.user, Sha256Hex("k"), Sha256Hex("c"), "tokens_train", "x", 1));
    Expect("PublishDataPrep", u, denied, Publish(t_.user, Sha256Hex("k"), Sha256Hex("c"), {}));
    Expect("GetPreparedFile", u, denied, GetPrepared(t_.user, checkpoint_ref_.sha256()));
    Expect("Deregister", u, denied, Deregister(t_.user, a_));
    v1::HeartbeatResponse hr;
    Expect("Heartbeat", u, denied, Heartbeat(t_.user, a_, ra_, &hr));
    Expect("ReportMetrics", u, denied, Report(t_.user, ra_));
    Expect("PutCheckpoint", u, denied, PutCheckpoint(t_.user, ra_, "x", 1));
    Expect("GetCheckpoint", u, denied, GetCheckpoint(t_.user, ra_));
    Expect("GetDataset", u, denied, GetDataset(t_.user));
    Expect("Complete", u, denied, Complete(t_.user, ra_, v1::FAILED));
    Expect("Release", u, denied, Release(t_.user, ra_));
    Expect("GetSweep", w, denied, GetSweep(t_.worker_a));
    Expect("ListSweeps", w, denied, ListSweeps(t_.worker_a));
    Expect("ListRuns", w, denied, ListRuns(t_.worker_a));
    Expect("ListCells", w, denied, ListCells(t_.worker_a));
    Expect("ListRunEvents", w, denied, ListRunEvents(t_.worker_a));
    Expect("WatchSweep", w, denied, WatchSweep(t_.worker_a));
    Expect("SubmitSweep", w, denied, Submit(t_.worker_a, SweepYaml("by-worker")));
    Expect("ListWorkers", w, denied, ListWorkers(t_.worker_a));
    Expect("GetArtifact", w, denied, GetArtifact(t_.worker_a, ra_.run));
    Expect("GetRunMetrics", w, denied, Metrics(t_.worker_a, ra_.run));
    Expect("RetryRuns", w, denied, Retry(t_.worker_a, sweep_));
    Expect("CancelSweep", w, denied, Cancel(t_.worker_a, sweep_));
    Expect("DeleteSweep", w, denied, Delete(t_.worker_a, sweep_));
    Expect("SetBudget", w, denied, Raise(t_.worker_a, sweep_, 1));
    Expect("ListArtifacts", w, denied, ListArtifacts(t_.worker_a, ra_.run));
  }

  void AnotherWorkersIdentity() {
    const std::string w = "worker b names worker a's id";
    Expect("Lease", w, StatusCode::NOT_FOUND, Lease(t_.worker_b, a_));
    v1::HeartbeatResponse hr;
    Expect("Heartbeat", w, StatusCode::NOT_FOUND, Heartbeat(t_.worker_b, a_, Held{}, &hr));
    v1::DataPrepClaimResponse cr;
    Expect("ClaimDataPrep", w, StatusCode::NOT_FOUND,
           Claim(t_.worker_b, a_, Sha256Hex("in a's name"), &cr));
    Expect("Deregister", w, StatusCode::NOT_FOUND, Deregister(t_.worker_b, a_));
  }

  void AnotherWorkersLease() {
    const std::string w = "worker b, worker a's run and attempt, a guessed token";
    const auto lost = StatusCode::FAILED_PRECONDITION;
    v1::HeartbeatResponse hr;
    auto hb = Heartbeat(t_.worker_b, b_, guess_, &hr);
    // Heartbeat answers lease_lost rather than an error: count OK without it as a failure.
    Expect("Heartbeat", "worker b beats worker a's run (answer: lease_lost)", StatusCode::OK,
           hb.ok() && !hr.lease_lost() ? grpc::Status(StatusCode::INTERNAL, "lease kept") : hb);
    Expect("ReportMetrics", w, lost, Report(t_.worker_b, guess_));
    Expect("ReportLogs", w, lost, Logs(t_.worker_b, guess_, 1, 10));
    Expect("PutCheckpoint", w, lost, PutCheckpoint(t_.worker_b, guess_, "x", 1));
    Expect("GetCheckpoint", w, lost, GetCheckpoint(t_.worker_b, guess_));
    Expect("Complete", w, lost, Complete(t_.worker_b, guess_, v1::FAILED));
    Expect("Release", w, lost, Release(t_.worker_b, guess_));
  }

  void DataSetsAndFinalWeights() {
    key_ = Sha256Hex("hostile data key");
    v1::DataPrepClaimResponse claim;
    if (!Claim(t_.worker_b, b_, key_, &claim).ok()) return;
    claim_ = claim.claim_token();
    std::vector<v1::PreparedFileRef> refs(2);
    PutPrepared(t_.worker_b, key_, claim_, "tokenizer_model", "model", 5, &refs[0]);
    PutPrepared(t_.worker_b, key_, claim_, "tokenizer_vocab", "vocab", 5, &refs[1]);
    v1::PreparedFileRef stolen;
    stolen.set_role("tokens_train");
    stolen.set_sha256(checkpoint_ref_.sha256());
    stolen.set_size_bytes(checkpoint_ref_.size_bytes());
    Expect("PublishDataPrep", "a data set naming worker a's checkpoint as tokens_train",
           StatusCode::FAILED_PRECONDITION,
           Publish(t_.worker_b, key_, claim_, {refs[0], refs[1], stolen}));
    std::string bytes;
    Expect("GetPreparedFile", "worker a's checkpoint by its sha256", StatusCode::NOT_FOUND,
           GetPrepared(t_.worker_b, checkpoint_ref_.sha256(), &bytes));
    Expect("GetPreparedFile", "an uploaded but unpublished file", StatusCode::NOT_FOUND,
           GetPrepared(t_.worker_b, refs[0].sha256()));
    v1::DataPrepClaimResponse renew;
    Expect("ClaimDataPrep", "renew the claim with a guessed claim token",
           StatusCode::FAILED_PRECONDITION,
           Claim(t_.worker_a, a_, key_, &renew, std::string(64, 'f')));
    Expect("PutPreparedFile", "upload under a guessed claim token", StatusCode::FAILED_PRECONDITION,
           PutPrepared(t_.worker_a, key_, std::string(64, 'f'), "tokens_train", "t", 1));
    if (!Lease(t_.worker_b, b_, &rb_).ok()) return;
    Expect("Complete", "final weights = worker a's checkpoint (another run)",
           StatusCode::INVALID_ARGUMENT,
           Complete(t_.worker_b, rb_, v1::SUCCEEDED, &checkpoint_ref_));
  }

  void SizesAndCounts() {
    Expect("Lease", "a second lease for a worker that declared 1 slot",
           StatusCode::RESOURCE_EXHAUSTED, Lease(t_.worker_b, b_));
    Expect("Register", "info.slots 65", StatusCode::INVALID_ARGUMENT,
           Register(t_.worker_b, "greedy", 65));
    for (int i = 1; i < 4; ++i) {
      v1::DataPrepClaimResponse r;
      Claim(t_.worker_b, b_, Sha256Hex(absl::StrCat("more keys ", i)), &r);
    }
    v1::DataPrepClaimResponse fifth;
    Expect("ClaimDataPrep", "a 5th open data-preparation claim", StatusCode::RESOURCE_EXHAUSTED,
           Claim(t_.worker_b, b_, Sha256Hex("one too many"), &fifth));
    std::vector<v1::PreparedFileRef> nine(9);
    for (int i = 0; i < 9; ++i) {
      nine[i].set_role("tokens_train");
      nine[i].set_sha256(Sha256Hex(absl::StrCat(i)));
    }
    Expect("PublishDataPrep", "9 files", StatusCode::INVALID_ARGUMENT,
           Publish(t_.worker_b, key_, claim_, nine));
    Expect("ReportLogs", "101 lines", StatusCode::INVALID_ARGUMENT,
           Logs(t_.worker_a, ra_, 101, 10));
    Expect("ReportLogs", "a 513-byte line", StatusCode::INVALID_ARGUMENT,
           Logs(t_.worker_a, ra_, 1, 513));
    Expect("PutPreparedFile", "announces more than --max-prepared-bytes",
           StatusCode::INVALID_ARGUMENT,
           PutPrepared(t_.worker_b, key_, claim_, "tokens_train", "x", int64_t{1} << 40));
    Expect(
        "PutPreparedFile", "announces 1 KB, sends 70 MB (cap 64 MiB)", StatusCode::INVALID_ARGUMENT,
        PutPrepared(t_.worker_b, key_, claim_, "tokens_train", std::string(70 << 20, 'p'), 1024));
    Expect("PutCheckpoint", "announces more than --max-checkpoint-bytes",
           StatusCode::INVALID_ARGUMENT, PutCheckpoint(t_.worker_a, ra_, "x", int64_t{1} << 40));
  }

  void PathLikeNames() {
    Expect("PutPreparedFile", "role \"../../etc/passwd\"", StatusCode::INVALID_ARGUMENT,
           PutPrepared(t_.worker_b, key_, claim_, "../../etc/passwd", "x", 1));
    Expect("GetPreparedFile", "sha256 \"../../../etc/passwd\"", StatusCode::INVALID_ARGUMENT,
           GetPrepared(t_.worker_b, "../../../etc/passwd"));
    Expect("GetCheckpoint", "sha256 \"../../../etc/passwd\" (own lease)", StatusCode::NOT_FOUND,
           GetCheckpoint(t_.worker_a, ra_, "../../../etc/passwd"));
    Expect("GetArtifact", "name \"../../etc/passwd\"", StatusCode::INVALID_ARGUMENT,
           GetArtifact(t_.admin, ra_.run, "../../etc/passwd"));
    Expect("SubmitSweep", "data.train \"../../etc/passwd\"", StatusCode::INVALID_ARGUMENT,
           Submit(t_.admin, absl::StrCat("name: paths\ndata: {train: \"../../etc/passwd\"}\n"
                                         "fixed: {steps: 10}\ngrid:\n  lr: [0.001]\n")));
    Expect("Register", "name with a newline (log forgery)", StatusCode::INVALID_ARGUMENT,
           Register(t_.worker_b, "b\nlevel=error msg=forged", 1));
  }

  void RefineAndPruneInput() {
    const auto bad = StatusCode::INVALID_ARGUMENT;
    Expect("SubmitSweep", "refine.until_ratio 1", bad,
           Submit(t_.admin, SweepYaml("r1", "refine: {until_ratio: 1, max_new_runs: 4}\n")));
    Expect("SubmitSweep", "refine.max_new_runs -1", bad,
           Submit(t_.admin, SweepYaml("r2", "refine: {max_new_runs: -1}\n")));
    Expect("SubmitSweep", "refine.axis \"../lr\"", bad,
           Submit(t_.admin, SweepYaml("r3", "refine: {axis: ../lr, max_new_runs: 4}\n")));
    Expect(
        "SubmitSweep", "refine.boundaries [everything]", bad,
        Submit(t_.admin, SweepYaml("r4", "refine: {boundaries: [everything], max_new_runs: 4}\n")));
    Expect("SubmitSweep", "prune.above_divergence \"maybe\"", bad,
           Submit(t_.admin, SweepYaml("r5", "prune: {above_divergence: maybe}\n")));
    Expect("SubmitSweep", "refine.max_new_runs 10^12", bad,
           Submit(t_.admin, SweepYaml("r6", "refine: {max_new_runs: 1000000000000}\n")));
  }

  // DeleteSweep: bad references, a live sweep (any user may delete any finished sweep: sweeps
  // are shared by every user token, as cancel is), and a delete racing the Complete that
  // finishes the sweep, after which the deleted run's worker can write nothing.
  void Retention() {
    v1::SweepRef none, path, huge;
    path.set_name("../../etc/passwd");
    huge.set_name(std::string(100 << 10, 's'));
    Expect("DeleteSweep", "no id and no name", StatusCode::INVALID_ARGUMENT, Delete(t_.user, none));
    Expect("ListCells", "after_cell with a NUL byte", StatusCode::INVALID_ARGUMENT,
           ListCells(t_.user, std::string("a\0b", 3)));
    Expect("ListCells", "a 100 KB after_cell", StatusCode::INVALID_ARGUMENT,
           ListCells(t_.user, std::string(100 << 10, 'c')));
    Expect("DeleteSweep", "an id no sweep has", StatusCode::NOT_FOUND,
           Delete(t_.user, int64_t{1} << 60));
    Expect("DeleteSweep", "name \"../../etc/passwd\" (only looked up)", StatusCode::NOT_FOUND,
           Delete(t_.user, path));
    Expect("DeleteSweep", "a 100 KB name", StatusCode::INVALID_ARGUMENT, Delete(t_.user, huge));
    Expect("DeleteSweep", "a sweep with leased and queued runs", StatusCode::FAILED_PRECONDITION,
           Delete(t_.user, sweep_));
    v1::SweepRef victim;
    victim.set_id(sweep_);
    Expect("DeleteSweep", "a live sweep, dry run", StatusCode::FAILED_PRECONDITION,
           Delete(t_.user, victim, true));
    // Worker b's slot is free again, then leases the one run of a sweep queued ahead of the
    // victim's, uploads a checkpoint and completes it while a user deletes the sweep.
    if (!Complete(t_.worker_b, rb_, v1::FAILED).ok()) return;
    v1::SubmitSweepRequest sub;
    sub.set_spec_yaml(
        "name: doomed\ndata: {train: \"synthetic:50\", val: \"synthetic:10\"}\n"
        "fixed: {n_embd: 32, n_head: 2, block_size: 32, batch_size: 4, steps: 100}\n"
        "grid:\n  lr: [0.001]\n");
    sub.set_file_name("doomed.yaml");
    sub.set_priority(100);
    v1::SubmitSweepResponse subbed;
    Held run;
    v1::CheckpointRef ref;
    const std::string weights = "the doomed run's weights";
    if (!sweeps_->SubmitSweep(Ctx(t_.admin).get(), sub, &subbed).ok() ||
        !Lease(t_.worker_b, b_, &run).ok() ||
        !PutCheckpoint(t_.worker_b, run, weights, static_cast<int64_t>(weights.size()), &ref)
             .ok()) {
      Expect("DeleteSweep", "set-up of the race (submit, lease, checkpoint)", StatusCode::OK,
             grpc::Status(StatusCode::INTERNAL, "set-up failed"));
      return;
    }
    const int64_t doomed = subbed.sweep().id();
    std::atomic<bool> done{false};
    grpc::Status deleted(StatusCode::DEADLINE_EXCEEDED, "never deleted");
    std::thread deleter([&] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (std::chrono::steady_clock::now() < until) {
        deleted = Delete(t_.user, doomed);
        if (deleted.error_code() != StatusCode::FAILED_PRECONDITION) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(done ? 5 : 1));
      }
    });
    Expect("Complete", "the last run's Complete racing DeleteSweep", StatusCode::OK,
           Complete(t_.worker_b, run, v1::SUCCEEDED, &ref));
    done = true;
    deleter.join();
    Expect("DeleteSweep", "racing the last run's Complete (deletes once finished)", StatusCode::OK,
           deleted);
    Expect("DeleteSweep", "the same sweep again", StatusCode::NOT_FOUND, Delete(t_.user, doomed));
    Expect("ReportMetrics", "a run of a deleted sweep, its old lease", StatusCode::NOT_FOUND,
           Report(t_.worker_b, run));
    Expect("GetArtifact", "the final weights of a deleted sweep's run", StatusCode::NOT_FOUND,
           GetArtifact(t_.user, run.run));
    Lease(t_.worker_b, b_, &rb_);  // worker b holds its one slot again, as Bursts expects
  }

  // Issue #25: what a worker declares it costs, and budgets.
  grpc::Status RegisterWith(const std::string& name, const v1::WorkerInfo& extra) {
    v1::RegisterRequest req;
    *req.mutable_info() = extra;
    req.mutable_info()->set_name(name);
    req.mutable_info()->set_device_kind("cpu");
    v1::RegisterResponse resp;
    return workers_->Register(Ctx(t_.worker_b).get(), req, &resp);
  }
  grpc::Status Raise(const std::string& token, int64_t sweep, double amount) {
    v1::SetBudgetRequest req;
    req.mutable_sweep()->set_id(sweep);
    req.set_raise(amount);
    v1::SetBudgetResponse resp;
    return sweeps_->SetBudget(Ctx(token).get(), req, &resp);
  }

  void CostAndBudget() {
    const auto bad = StatusCode::INVALID_ARGUMENT;
    v1::WorkerInfo info;
    info.set_price_per_hour(std::nan(""));
    Expect("Register", "price_per_hour NaN", bad, RegisterWith("priced-nan", info));
    info.set_price_per_hour(-0.35);
    Expect("Register", "a negative price_per_hour", bad, RegisterWith("priced-neg", info));
    info.set_price_per_hour(1e300);
    Expect("Register", "price_per_hour 1e300", bad, RegisterWith("priced-huge", info));
    info.Clear();
    for (int i = 0; i < 100; ++i) info.add_benchmarks()->set_flops_per_second(1e9);
    Expect("Register", "100 startup benchmarks", bad, RegisterWith("bench-many", info));
    info.Clear();
    info.add_benchmarks()->set_flops_per_second(std::numeric_limits<double>::infinity());
    Expect("Register", "a benchmark of infinite FLOP/s", bad, RegisterWith("bench-inf", info));
    info.Clear();
    info.add_benchmarks()->set_model(std::string(100 << 10, 'm'));
    Expect("Register", "a benchmark with a 100 KB model text", bad,
           RegisterWith("bench-text", info));

    Expect("SetBudget", "raise NaN", bad, Raise(t_.user, sweep_, std::nan("")));
    Expect("SetBudget", "raise -5", bad, Raise(t_.user, sweep_, -5));
    Expect("SetBudget", "raise 1e300", bad, Raise(t_.user, sweep_, 1e300));
    Expect("SetBudget", "an id no sweep has", StatusCode::NOT_FOUND,
           Raise(t_.user, int64_t{1} << 60, 1));
    Expect("SetBudget", "a sweep without a budget", StatusCode::FAILED_PRECONDITION,
           Raise(t_.user, sweep_, 1));
    Expect("SubmitSweep", "budget {usd: 1e300}", bad,
           Submit(t_.user, SweepYaml("rich") + "budget: {usd: 1e300}\n"));
    Expect("SubmitSweep", "budget {gpu_hours: .nan}", bad,
           Submit(t_.user, SweepYaml("nan-budget") + "budget: {gpu_hours: .nan}\n"));
  }

  // 8 threads, `per_thread` calls each; returns how many calls succeeded.
  static int Burst(int per_thread, const std::function<bool()>& call) {
    std::atomic<int> ok{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < per_thread; ++i) ok += call() ? 1 : 0;
      });
    }
    for (auto& t : threads) t.join();
    return ok.load();
  }

  void Bursts() {
    std::printf("\nmemory under abuse (8 concurrent callers each):\n");
    auto report = [&](const char* what, int ok, int total, double secs) {
      std::printf("%-58s %4d/%-4d ok in %5.2f s; server peak RSS %.0f MB, RSS after %.0f MB\n",
                  what, ok, total, secs, StatusMb(server_, "VmHWM"), StatusMb(server_, "VmRSS"));
    };
    auto timed = [&](const char* what, int per_thread, const std::function<bool()>& call) {
      const auto t0 = std::chrono::steady_clock::now();
      const int ok = Burst(per_thread, call);
      report(what, ok, 8 * per_thread,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    timed("ReportLogs: 100 lines x 512 B per call (run keeps 2,000)", 25,
          [&] { return Logs(t_.worker_a, ra_, 100, 512).ok(); });
    timed("PutPreparedFile: announces 1 KB, streams 70 MB", 1, [&] {
      return PutPrepared(t_.worker_b, key_, claim_, "tokens_train", std::string(70 << 20, 'q'),
                         1024)
          .ok();
    });
    timed("Lease past the worker's slots", 50, [&] { return Lease(t_.worker_b, b_).ok(); });
    timed("ClaimDataPrep past the open-claim cap", 25, [&] {
      v1::DataPrepClaimResponse r;
      return Claim(t_.worker_b, b_, Sha256Hex(absl::StrCat("burst ", std::rand())), &r).ok();
    });
    timed("GetPreparedFile of a checkpoint's sha256", 25,
          [&] { return GetPrepared(t_.worker_b, checkpoint_ref_.sha256()).ok(); });
    // Final weights of 32 MB, downloaded 8 at once by user tokens (allowed: any user may).
    const std::string weights(32 << 20, 'f');
    v1::CheckpointRef ref;
    if (PutCheckpoint(t_.worker_a, ra_, weights, static_cast<int64_t>(weights.size()), &ref).ok() &&
        Complete(t_.worker_a, ra_, v1::SUCCEEDED, &ref).ok()) {
      timed("GetArtifact: 32 MB final weights", 2, [&] {
        int64_t bytes = 0;
        return GetArtifact(t_.user, ra_.run, "", &bytes).ok() &&
               bytes == static_cast<int64_t>(weights.size());
      });
    }
    timed("ListWorkers", 25, [&] { return ListWorkers(t_.user).ok(); });
  }

  // gRPC client proxies for the two services (what gRPC calls a Stub), over one channel.
  std::unique_ptr<v1::WorkerService::Stub> workers_;
  std::unique_ptr<v1::SweepService::Stub> sweeps_;
  SurfaceTokens t_;
  pid_t server_;
  int attacks_ = 0, unexpected_ = 0;
  int64_t sweep_ = 0, a_ = 0, b_ = 0;
  Held ra_, rb_, guess_;
  std::string checkpoint_;
  v1::CheckpointRef checkpoint_ref_;
  std::string key_, claim_;
};

}  // namespace

int RunSurfaceAttacks(const std::shared_ptr<grpc::Channel>& channel, const SurfaceTokens& tokens,
                      pid_t server) {
  return Surface(channel, tokens, server).Run();
}

}  // namespace ablate::bench
