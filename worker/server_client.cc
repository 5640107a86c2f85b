#include "worker/server_client.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/util/file.h"
#include "common/util/sha256.h"
#include "common/util/status_macros.h"

namespace ablate::worker {
namespace {

constexpr double kCallDeadlineSeconds = 30;
constexpr size_t kChunkBytes = 1 << 20;

// Writes a streamed download to `path` only once it is complete and verified, so a reader never
// sees half a checkpoint or data set.
template <typename Reader, typename Message>
absl::Status DownloadTo(Reader* reader, Message* chunk, const std::string& path,
                        const std::string& want_sha256, std::string_view what) {
  // A name of its own: with --slots two runs may fetch the same data set at once.
  const std::string tmp = util::TempPathFor(path);
  if (auto s = util::MakeDirs(std::filesystem::path(path).parent_path().string()); !s.ok()) {
    return s;
  }
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return util::FileError("cannot create", tmp, errno);
  Sha256 hash;
  int write_errno = 0;  // the first failed write's: later reads may change errno
  while (reader->Read(chunk)) {
    out.write(chunk->data().data(), static_cast<std::streamsize>(chunk->data().size()));
    if (!out && write_errno == 0) write_errno = errno != 0 ? errno : EIO;
    hash.Update(chunk->data());
  }
  out.close();
  if (!out) {
    // RESOURCE_EXHAUSTED on a full disk, which the session retries (rpc::IsTransient) until
    // there is space again.
    const absl::Status s = util::FileError("write", tmp, write_errno != 0 ? write_errno : errno);
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return s;
  }
  const std::string got = hash.HexDigest();
  if (!want_sha256.empty() && got != want_sha256) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    return absl::DataLossError(absl::StrCat(std::string(what), ": sha256 mismatch (got ", got,
                                            ", want ", want_sha256, ")"));
  }
  // Verified by its hash whenever it is used, so a rename is enough: no wait for the disk.
  return util::CommitFile(tmp, path, util::Durability::kRename);
}

// Streams `reader` into `path` (DownloadTo), then ends the call: when the server ends it with an
// error the file is not kept, and that error is the result.
template <typename Chunk>
absl::Status Download(grpc::ClientReader<Chunk>* reader, const std::string& path,
                      const std::string& want_sha256, std::string_view what,
                      const std::string& server) {
  Chunk chunk;
  const absl::Status s = DownloadTo(reader, &chunk, path, want_sha256, what);
  absl::Status fin =
      rpc::ToAbsl(reader->Finish(), absl::StrCat("download ", std::string(what)), server, "worker");
  if (!fin.ok()) {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
    return fin;
  }
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerClient>> ServerClient::Connect(
    const rpc::ClientConfig& config) {
  auto channel = rpc::MakeChannel(config);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<ServerClient>(new ServerClient(config, *std::move(channel)));
}

ServerClient::ServerClient(rpc::ClientConfig config, std::shared_ptr<grpc::Channel> channel)
    : config_(std::move(config)),
      channel_(std::move(channel)),
      stub_(v1::WorkerService::NewStub(channel_)) {}

void ServerClient::Prepare(grpc::ClientContext* context, double deadline_seconds) const {
  rpc::Authorize(context, config_.token);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(deadline_seconds * 1000)));
}

absl::StatusOr<v1::RegisterResponse> ServerClient::Register(
    const v1::WorkerInfo& info, const std::vector<v1::CrashedAttempt>* previous) {
  grpc::ClientContext ctx;
  Prepare(&ctx, kCallDeadlineSeconds);
  v1::RegisterRequest req;
  *req.mutable_info() = info;
  if (previous != nullptr) {
    req.set_new_process(true);
    for (const auto& c : *previous) *req.add_crashed() = c;
  }
  v1::RegisterResponse resp;
  auto s = rpc::ToAbsl(stub_->Register(&ctx, req, &resp), "register", config_.server, "worker");
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::LeaseResponse> ServerClient::Lease(int64_t worker_id, double wait_seconds) {
  grpc::ClientContext ctx;
  Prepare(&ctx, wait_seconds + kCallDeadlineSeconds);
  {
    std::lock_guard<std::mutex> lock(poll_mu_);
    if (poll_cancelled_) return absl::CancelledError("shutting down");
    poll_context_ = &ctx;
  }
  v1::LeaseRequest req;
  req.set_worker_id(worker_id);
  req.set_wait_seconds(wait_seconds);
  v1::LeaseResponse resp;
  grpc::Status status = stub_->Lease(&ctx, req, &resp);
  {
    std::lock_guard<std::mutex> lock(poll_mu_);
    poll_context_ = nullptr;
  }
  auto s = rpc::ToAbsl(status, "lease", config_.server, "worker");
  if (!s.ok()) return s;
  return resp;
}

void ServerClient::CancelLongPoll() {
  std::lock_guard<std::mutex> lock(poll_mu_);
  poll_cancelled_ = true;
  if (poll_context_ != nullptr) poll_context_->TryCancel();
}

absl::StatusOr<v1::HeartbeatResponse> ServerClient::Heartbeat(const RunLease& lease,
                                                              v1::HeartbeatRequest progress) {
  grpc::ClientContext ctx;
  Prepare(&ctx, 10);
  lease.Stamp(&progress);
  v1::HeartbeatResponse resp;
  auto s =
      rpc::ToAbsl(stub_->Heartbeat(&ctx, progress, &resp), "heartbeat", config_.server, "worker");
  if (!s.ok()) return s;
  return resp;
}

absl::Status ServerClient::ReportMetrics(const RunLease& lease,
                                         const std::vector<v1::MetricPoint>& points) {
  grpc::ClientContext ctx;
  Prepare(&ctx, kCallDeadlineSeconds);
  v1::ReportMetricsRequest req;
  lease.Stamp(&req);
  for (const auto& p : points) *req.add_points() = p;
  v1::ReportMetricsResponse resp;
  return rpc::ToAbsl(stub_->ReportMetrics(&ctx, req, &resp), "report metrics", config_.server,
                     "worker");
}

namespace {

// A file about to be uploaded: what its header announces.
struct FileDigest {
  std::string sha256;
  int64_t size_bytes = 0;
};

absl::StatusOr<FileDigest> DigestOf(const std::string& path) {
  auto sha = Sha256File(path);
  if (!sha.ok()) return sha.status();
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path, ": ", ec.message()));
  return FileDigest{*std::move(sha), static_cast<int64_t>(size)};
}

// Client-streaming upload: the header chunk, then the file in kChunkBytes pieces, then
// WritesDone. A refused write ends it early; Finish() says why.
template <typename Chunk, typename Writer>
void SendFile(Writer& writer, const Chunk& header, const std::string& path) {
  bool ok = writer.Write(header);
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(kChunkBytes);
  while (ok && in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() == 0) break;
    Chunk chunk;
    chunk.set_data(buf.data(), static_cast<size_t>(in.gcount()));
    ok = writer.Write(chunk);
  }
  writer.WritesDone();
}

}  // namespace

absl::Status ServerClient::PutCheckpoint(const RunLease& lease, int64_t step,
                                         const std::string& path, v1::CheckpointRef* stored) {
  ASSIGN_OR_RETURN(const FileDigest file, DigestOf(path));
  grpc::ClientContext ctx;
  Prepare(&ctx, 600);
  v1::PutCheckpointResponse resp;
  auto writer = stub_->PutCheckpoint(&ctx, &resp);
  v1::CheckpointChunk header;
  lease.Stamp(&header);
  header.mutable_ref()->set_step(step);
  header.mutable_ref()->set_sha256(file.sha256);
  header.mutable_ref()->set_size_bytes(file.size_bytes);
  SendFile(*writer, header, path);
  absl::Status s = rpc::ToAbsl(writer->Finish(), "upload checkpoint", config_.server, "worker");
  if (s.ok() && stored != nullptr) *stored = header.ref();
  return s;
}

absl::Status ServerClient::ReportLogs(const RunLease& lease,
                                      const std::vector<v1::LogLine>& lines) {
  grpc::ClientContext ctx;
  Prepare(&ctx, kCallDeadlineSeconds);
  v1::LogReportRequest req;
  lease.Stamp(&req);
  for (const auto& l : lines) *req.add_lines() = l;
  v1::LogReportResponse resp;
  return rpc::ToAbsl(stub_->ReportLogs(&ctx, req, &resp), "report logs", config_.server, "worker");
}

absl::Status ServerClient::GetCheckpoint(const RunLease& lease, const v1::CheckpointRef& ref,
                                         const std::string& path) {
  grpc::ClientContext ctx;
  Prepare(&ctx, 600);
  v1::GetCheckpointRequest req;
  lease.Stamp(&req);
  req.set_sha256(ref.sha256());
  auto reader = stub_->GetCheckpoint(&ctx, req);
  return Download(reader.get(), path, ref.sha256(), "checkpoint", config_.server);
}

absl::Status ServerClient::GetDataset(const std::string& sha256, const std::string& path) {
  grpc::ClientContext ctx;
  Prepare(&ctx, 3600);
  v1::GetDatasetRequest req;
  req.set_sha256(sha256);
  auto reader = stub_->GetDataset(&ctx, req);
  return Download(reader.get(), path, sha256, "data set", config_.server);
}

absl::Status ServerClient::Complete(const RunLease& lease, v1::CompleteRequest outcome) {
  grpc::ClientContext ctx;
  Prepare(&ctx, kCallDeadlineSeconds);
  lease.Stamp(&outcome);
  v1::CompleteResponse resp;
  return rpc::ToAbsl(stub_->Complete(&ctx, outcome, &resp), "complete", config_.server, "worker");
}

absl::Status ServerClient::Release(const RunLease& lease, const std::string& reason,
                                   v1::FaultClass fault) {
  grpc::ClientContext ctx;
  Prepare(&ctx, 10);
  v1::ReleaseRequest req;
  lease.Stamp(&req);
  req.set_reason(reason);
  req.set_fault(fault);
  v1::ReleaseResponse resp;
  return rpc::ToAbsl(stub_->Release(&ctx, req, &resp), "release", config_.server, "worker");
}

absl::Status ServerClient::Deregister(int64_t worker_id) {
  grpc::ClientContext ctx;
  Prepare(&ctx, 10);
  v1::CliDeregisterRequest req;
  req.set_worker_id(worker_id);
  v1::CliDeregisterResponse resp;
  return rpc::ToAbsl(stub_->Deregister(&ctx, req, &resp), "deregister", config_.server, "worker");
}

absl::StatusOr<v1::DataPrepClaimResponse> ServerClient::ClaimDataPrep(
    const v1::DataPrepClaimRequest& request) {
  grpc::ClientContext ctx;
  Prepare(&ctx, kCallDeadlineSeconds);
  v1::DataPrepClaimResponse resp;
  auto s = rpc::ToAbsl(stub_->ClaimDataPrep(&ctx, request, &resp), "claim data preparation",
                       config_.server, "worker");
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<v1::DataPrepClaimResponse> ServerClient::RenewDataPrep(int64_t worker_id,
                                                                      const DataPrepClaim& claim) {
  v1::DataPrepClaimRequest req;
  req.set_worker_id(worker_id);
  claim.Stamp(&req);
  return ClaimDataPrep(req);
}

absl::StatusOr<v1::PreparedFileRef> ServerClient::PutPreparedFile(const DataPrepClaim& claim,
                                                                  const std::string& role,
                                                                  const std::string& path) {
  ASSIGN_OR_RETURN(const FileDigest file, DigestOf(path));
  grpc::ClientContext ctx;
  Prepare(&ctx, 3600);
  v1::PreparedFileRef resp;
  auto writer = stub_->PutPreparedFile(&ctx, &resp);
  v1::PreparedFileChunk header;
  claim.Stamp(&header);
  header.mutable_ref()->set_role(role);
  header.mutable_ref()->set_sha256(file.sha256);
  header.mutable_ref()->set_size_bytes(file.size_bytes);
  SendFile(*writer, header, path);
  auto s = rpc::ToAbsl(writer->Finish(), "upload prepared file", config_.server, "worker");
  if (!s.ok()) return s;
  return resp;
}

namespace {

absl::Status SendPublish(v1::WorkerService::Stub* stub, grpc::ClientContext* ctx,
                         const v1::DataPrepPublishRequest& req, const std::string& server) {
  v1::DataPrepPublishResponse resp;
  return rpc::ToAbsl(stub->PublishDataPrep(ctx, req, &resp),
                     req.abandon() ? "abandon data preparation" : "publish prepared data", server,
                     "worker");
}

}  // namespace

absl::Status ServerClient::PublishDataPrep(const DataPrepClaim& claim,
                                           const std::vector<v1::PreparedFileRef>& files) {
  grpc::ClientContext ctx;
  Prepare(&ctx, kCallDeadlineSeconds);
  v1::DataPrepPublishRequest req;
  claim.Stamp(&req);
  for (const auto& f : files) *req.add_files() = f;
  return SendPublish(stub_.get(), &ctx, req, config_.server);
}

absl::Status ServerClient::AbandonDataPrep(const DataPrepClaim& claim) {
  grpc::ClientContext ctx;
  Prepare(&ctx, kCallDeadlineSeconds);
  v1::DataPrepPublishRequest req;
  claim.Stamp(&req);
  req.set_abandon(true);
  return SendPublish(stub_.get(), &ctx, req, config_.server);
}

absl::Status ServerClient::GetPreparedFile(const std::string& sha256, const std::string& path) {
  grpc::ClientContext ctx;
  Prepare(&ctx, 3600);
  v1::PreparedFileRequest req;
  req.set_sha256(sha256);
  auto reader = stub_->GetPreparedFile(&ctx, req);
  return Download(reader.get(), path, sha256, "prepared file", config_.server);
}

}  // namespace ablate::worker
