#include "tests/integration/hostile_client.h"

#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"

namespace ablate::testing {

using grpc::StatusCode;

namespace {

// Writes a streamed upload: the header, then `data` in 1 MiB chunks (stops when the server has
// ended the stream), then Finish.
template <typename Chunk, typename Writer>
grpc::Status StreamUp(Writer* writer, const Chunk& header, const std::string& data) {
  writer->Write(header);
  for (size_t off = 0; off < data.size(); off += 1 << 20) {
    Chunk c;
    c.set_data(data.substr(off, 1 << 20));
    if (!writer->Write(c)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

// Reads a stream to its end; `sink` sees each message.
template <typename Message, typename Reader, typename Sink>
grpc::Status ReadAll(Reader* reader, Sink sink) {
  Message m;
  while (reader->Read(&m)) sink(m);
  return reader->Finish();
}

}  // namespace

HostileClient::HostileClient(const std::shared_ptr<grpc::Channel>& channel)
    : workers_(v1::WorkerService::NewStub(channel)), sweeps_(v1::SweepService::NewStub(channel)) {}

std::unique_ptr<grpc::ClientContext> HostileClient::Ctx(const std::string& token, double seconds) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  return ctx;
}

grpc::Status HostileClient::Register(const std::string& token, const std::string& name, int slots,
                                     int64_t* id) {
  v1::RegisterRequest req;
  req.mutable_info()->set_name(name);
  req.mutable_info()->set_device_kind("cpu");
  req.mutable_info()->set_slots(slots);
  v1::RegisterResponse resp;
  auto s = workers_->Register(Ctx(token).get(), req, &resp);
  if (id != nullptr) *id = resp.worker_id();
  return s;
}

grpc::Status HostileClient::RegisterWith(const std::string& token, const std::string& name,
                                         const v1::WorkerInfo& extra) {
  v1::RegisterRequest req;
  *req.mutable_info() = extra;
  req.mutable_info()->set_name(name);
  req.mutable_info()->set_device_kind("cpu");
  v1::RegisterResponse resp;
  return workers_->Register(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::Lease(const std::string& token, int64_t worker, Held* held) {
  v1::LeaseRequest req;
  req.set_worker_id(worker);
  v1::LeaseResponse resp;
  auto s = workers_->Lease(Ctx(token).get(), req, &resp);
  if (s.ok() && !resp.has_run()) return grpc::Status(StatusCode::NOT_FOUND, "nothing queued");
  if (held != nullptr)
    *held = {resp.lease().run_id(), resp.lease().attempt(), resp.lease().token()};
  return s;
}

grpc::Status HostileClient::Heartbeat(const std::string& token, int64_t worker, const Held& h,
                                      v1::HeartbeatResponse* resp) {
  v1::HeartbeatRequest req;
  req.set_worker_id(worker);
  req.set_run_id(h.run);
  req.set_attempt(h.attempt);
  req.set_lease_token(h.token);
  return workers_->Heartbeat(Ctx(token).get(), req, resp);
}

grpc::Status HostileClient::Report(const std::string& token, const Held& h) {
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

grpc::Status HostileClient::Logs(const std::string& token, const Held& h, int lines, size_t bytes) {
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

grpc::Status HostileClient::PutCheckpoint(const std::string& token, const Held& h,
                                          const std::string& data, int64_t announced,
                                          v1::CheckpointRef* ref) {
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
  return StreamUp(writer.get(), header, data);
}

grpc::Status HostileClient::GetCheckpoint(const std::string& token, const Held& h,
                                          const std::string& sha) {
  v1::GetCheckpointRequest req;
  req.set_run_id(h.run);
  req.set_attempt(h.attempt);
  req.set_lease_token(h.token);
  req.set_sha256(sha);
  auto ctx = Ctx(token);
  auto reader = workers_->GetCheckpoint(ctx.get(), req);
  return ReadAll<v1::CheckpointChunk>(reader.get(), [](const auto&) {});
}

grpc::Status HostileClient::GetDataset(const std::string& token, const std::string& sha) {
  v1::GetDatasetRequest req;
  req.set_sha256(sha);
  auto ctx = Ctx(token);
  auto reader = workers_->GetDataset(ctx.get(), req);
  return ReadAll<v1::DataChunk>(reader.get(), [](const auto&) {});
}

grpc::Status HostileClient::Complete(const std::string& token, const Held& h, v1::RunState state,
                                     const v1::CheckpointRef* final_ref) {
  v1::CompleteRequest req;
  req.set_run_id(h.run);
  req.set_attempt(h.attempt);
  req.set_lease_token(h.token);
  req.set_state(state);
  if (final_ref != nullptr) *req.mutable_result()->mutable_final_checkpoint() = *final_ref;
  v1::CompleteResponse resp;
  return workers_->Complete(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::Release(const std::string& token, const Held& h) {
  v1::ReleaseRequest req;
  req.set_run_id(h.run);
  req.set_attempt(h.attempt);
  req.set_lease_token(h.token);
  req.set_reason("hostile");
  v1::ReleaseResponse resp;
  return workers_->Release(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::Deregister(const std::string& token, int64_t worker) {
  v1::CliDeregisterRequest req;
  req.set_worker_id(worker);
  v1::CliDeregisterResponse resp;
  return workers_->Deregister(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::Claim(const std::string& token, int64_t worker, const std::string& key,
                                  v1::DataPrepClaimResponse* resp, const std::string& claim) {
  v1::DataPrepClaimRequest req;
  req.set_worker_id(worker);
  req.set_key(key);
  req.set_claim_token(claim);
  return workers_->ClaimDataPrep(Ctx(token).get(), req, resp);
}

grpc::Status HostileClient::PutPrepared(const std::string& token, const std::string& key,
                                        const std::string& claim, const std::string& role,
                                        const std::string& data, int64_t announced,
                                        v1::PreparedFileRef* stored) {
  v1::PreparedFileRef ref;
  auto ctx = Ctx(token);
  auto writer = workers_->PutPreparedFile(ctx.get(), &ref);
  v1::PreparedFileChunk header;
  header.set_key(key);
  header.set_claim_token(claim);
  header.mutable_ref()->set_role(role);
  header.mutable_ref()->set_sha256(Sha256Hex(data));
  header.mutable_ref()->set_size_bytes(announced);
  auto s = StreamUp(writer.get(), header, data);
  if (stored != nullptr) *stored = ref;
  return s;
}

grpc::Status HostileClient::Publish(const std::string& token, const std::string& key,
                                    const std::string& claim,
                                    const std::vector<v1::PreparedFileRef>& files) {
  v1::DataPrepPublishRequest req;
  req.set_key(key);
  req.set_claim_token(claim);
  for (const auto& f : files) *req.add_files() = f;
  v1::DataPrepPublishResponse resp;
  return workers_->PublishDataPrep(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::GetPrepared(const std::string& token, const std::string& sha,
                                        std::string* out) {
  v1::PreparedFileRequest req;
  req.set_sha256(sha);
  auto ctx = Ctx(token);
  auto reader = workers_->GetPreparedFile(ctx.get(), req);
  return ReadAll<v1::DataChunk>(reader.get(), [&](const v1::DataChunk& c) {
    if (out != nullptr) *out += c.data();
  });
}

grpc::Status HostileClient::Submit(const std::string& token, const std::string& yaml, int64_t* id,
                                   int priority) {
  v1::SubmitSweepRequest req;
  req.set_spec_yaml(yaml);
  req.set_file_name("hostile.yaml");
  req.set_priority(priority);
  v1::SubmitSweepResponse resp;
  auto s = sweeps_->SubmitSweep(Ctx(token).get(), req, &resp);
  if (id != nullptr) *id = resp.sweep().id();
  return s;
}

grpc::Status HostileClient::GetSweep(const std::string& token, int64_t sweep) {
  v1::GetSweepRequest req;
  req.mutable_sweep()->set_id(sweep);
  v1::GetSweepResponse resp;
  return sweeps_->GetSweep(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::ListSweeps(const std::string& token) {
  v1::ListSweepsRequest req;
  v1::ListSweepsResponse resp;
  return sweeps_->ListSweeps(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::ListRuns(const std::string& token) {
  v1::ListRunsRequest req;
  v1::ListRunsResponse resp;
  return sweeps_->ListRuns(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::ListCells(const std::string& token, int64_t sweep,
                                      const std::string& after) {
  v1::ListCellsRequest req;
  req.mutable_sweep()->set_id(sweep);
  req.set_after_cell(after);
  req.set_limit(std::numeric_limits<int32_t>::max());
  v1::ListCellsResponse resp;
  return sweeps_->ListCells(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::ListRunEvents(const std::string& token, int64_t run) {
  v1::ListRunEventsRequest req;
  req.set_run_id(run);
  v1::ListRunEventsResponse resp;
  return sweeps_->ListRunEvents(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::WatchSweep(const std::string& token, int64_t sweep) {
  v1::WatchSweepRequest req;
  req.mutable_sweep()->set_id(sweep);
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

grpc::Status HostileClient::Metrics(const std::string& token, int64_t run) {
  v1::GetRunMetricsRequest req;
  req.set_run_id(run);
  req.set_after_step(-1);
  req.set_include_logs(true);
  auto ctx = Ctx(token);
  auto reader = sweeps_->GetRunMetrics(ctx.get(), req);
  return ReadAll<v1::GetRunMetricsResponse>(reader.get(), [](const auto&) {});
}

grpc::Status HostileClient::ListWorkers(const std::string& token) {
  v1::ListWorkersRequest req;
  v1::ListWorkersResponse resp;
  return sweeps_->ListWorkers(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::ListArtifacts(const std::string& token, int64_t run) {
  v1::ListArtifactsRequest req;
  req.set_run_id(run);
  v1::ListArtifactsResponse resp;
  return sweeps_->ListArtifacts(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::GetArtifact(const std::string& token, int64_t run,
                                        const std::string& name, int64_t* bytes) {
  v1::ArtifactRequest req;
  req.set_run_id(run);
  req.set_name(name);
  auto ctx = Ctx(token);
  auto reader = sweeps_->GetArtifact(ctx.get(), req);
  return ReadAll<v1::ArtifactChunk>(reader.get(), [&](const v1::ArtifactChunk& c) {
    if (bytes != nullptr) *bytes += static_cast<int64_t>(c.data().size());
  });
}

grpc::Status HostileClient::Retry(const std::string& token, int64_t sweep) {
  v1::RetryRunsRequest req;
  req.mutable_sweep()->set_id(sweep);
  v1::RetryRunsResponse resp;
  return sweeps_->RetryRuns(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::Cancel(const std::string& token, int64_t sweep) {
  v1::CancelSweepRequest req;
  req.mutable_sweep()->set_id(sweep);
  v1::CancelSweepResponse resp;
  return sweeps_->CancelSweep(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::Raise(const std::string& token, int64_t sweep, double amount) {
  v1::SetBudgetRequest req;
  req.mutable_sweep()->set_id(sweep);
  req.set_raise(amount);
  v1::SetBudgetResponse resp;
  return sweeps_->SetBudget(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::Delete(const std::string& token, const v1::SweepRef& ref,
                                   bool dry_run) {
  v1::DeleteSweepRequest req;
  *req.mutable_sweep() = ref;
  req.set_dry_run(dry_run);
  v1::DeleteSweepResponse resp;
  return sweeps_->DeleteSweep(Ctx(token).get(), req, &resp);
}

grpc::Status HostileClient::Delete(const std::string& token, int64_t sweep) {
  v1::SweepRef ref;
  ref.set_id(sweep);
  return Delete(token, ref);
}

grpc::Status HostileClient::Unbench(const std::string& token, const std::string& name) {
  v1::UnbenchWorkerRequest req;
  req.set_name(name);
  v1::UnbenchWorkerResponse resp;
  return sweeps_->UnbenchWorker(Ctx(token).get(), req, &resp);
}

}  // namespace ablate::testing
