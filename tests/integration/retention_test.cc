// Retention: DeleteSweep (refused while a sweep is live; everything of a finished or cancelled
// sweep goes, and nothing of another sweep's) and `ablate-server gc` (CollectGarbage: orphaned
// store files older than the grace period go; young and referenced ones stay), against a real
// PostgreSQL and a real server on loopback.
#include "server/retention.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"
#include "gmock/gmock.h"
#include "pqxx/pqxx"
#include "server/store/pqxx_compat.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class RetentionTest : public ServerFixture {
 protected:
  grpc::Status Delete(const v1::SweepRef& ref, v1::DeleteSweepResponse* resp,
                      const std::string& token = "", bool dry_run = false) {
    v1::DeleteSweepRequest req;
    *req.mutable_sweep() = ref;
    req.set_dry_run(dry_run);
    return SweepStub()->DeleteSweep(Ctx(token.empty() ? admin_ : token).get(), req, resp);
  }
  grpc::Status Delete(int64_t id, v1::DeleteSweepResponse* resp, bool dry_run = false) {
    v1::SweepRef ref;
    ref.set_id(id);
    return Delete(ref, resp, "", dry_run);
  }

  // Leases the next run, reports `points` train_loss points, uploads `blob` as its checkpoint
  // (none when empty) and completes it.
  int64_t RunToEnd(int64_t worker, int points, const std::string& blob) {
    auto l = Lease(worker);
    const int64_t run = l.spec().run_id();
    EXPECT_GT(run, 0);
    v1::ReportMetricsRequest rep;
    rep.set_run_id(run);
    rep.set_attempt(l.lease().attempt());
    rep.set_lease_token(l.lease().token());
    for (int i = 0; i < points; ++i) {
      auto* p = rep.add_points();
      p->set_name("train_loss");
      p->set_step(i);
      p->set_value(3.0);
    }
    v1::ReportMetricsResponse rr;
    EXPECT_TRUE(WorkerStub()->ReportMetrics(Ctx().get(), rep, &rr).ok());
    v1::CompleteRequest c;
    if (!blob.empty()) {
      v1::PutCheckpointResponse stored;
      auto ctx = Ctx();
      auto writer = WorkerStub()->PutCheckpoint(ctx.get(), &stored);
      v1::CheckpointChunk header;
      header.set_run_id(run);
      header.set_attempt(l.lease().attempt());
      header.set_lease_token(l.lease().token());
      header.mutable_ref()->set_step(points);
      header.mutable_ref()->set_sha256(Sha256Hex(blob));
      header.mutable_ref()->set_size_bytes(static_cast<int64_t>(blob.size()));
      writer->Write(header);
      v1::CheckpointChunk chunk;
      chunk.set_data(blob);
      writer->Write(chunk);
      writer->WritesDone();
      EXPECT_TRUE(writer->Finish().ok());
      *c.mutable_result()->mutable_final_checkpoint() = header.ref();
    }
    c.set_run_id(run);
    c.set_attempt(l.lease().attempt());
    c.set_lease_token(l.lease().token());
    c.set_state(v1::SUCCEEDED);
    c.mutable_result()->set_final_val_loss(3.0);
    v1::CompleteResponse cr;
    EXPECT_TRUE(WorkerStub()->Complete(Ctx().get(), c, &cr).ok());
    return run;
  }

  fs::path BlobPath(const std::string& blob) const {
    const std::string sha = Sha256Hex(blob);
    return fs::path(options_.store_dir) / sha.substr(0, 2) / sha;
  }

  // Rows of `table` that belong to one of `runs`.
  int64_t RowsOfRuns(const std::string& table, const std::vector<int64_t>& runs) {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    std::string ids = "{";
    for (size_t i = 0; i < runs.size(); ++i) absl::StrAppend(&ids, i ? "," : "", runs[i]);
    ids += "}";
    return server::pg::ExecText(
               tx,
               absl::StrCat("SELECT count(*) FROM ", table, " WHERE run_id = ANY($1::bigint[])"),
               ids)[0][0]
        .as<int64_t>();
  }

  static void Age(const fs::path& p, std::chrono::seconds by) {
    fs::last_write_time(p, fs::file_time_type::clock::now() - by);
  }
  static void Write(const fs::path& p, const std::string& data) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << data;
  }
};

TEST_F(RetentionTest, RefusedWhileLiveThenDeletesACancelledSweep) {
  auto sub = Submit(SweepYaml("live", 2, 1));
  const int64_t id = sub.sweep().id();
  v1::DeleteSweepResponse resp;
  // Only queued runs: live all the same.
  auto queued = Delete(id, &resp);
  EXPECT_EQ(queued.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(queued.error_message(), HasSubstr("2 unfinished run(s)"));
  EXPECT_THAT(queued.error_message(), HasSubstr(absl::StrCat("ablate cancel ", id)));
  Lease(Register("live-worker"));
  EXPECT_EQ(Delete(id, &resp, true).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Delete(id, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(GetSweep(id).sweep().counts().queued(), 1);

  // The wrong role, bad references.
  v1::SweepRef ref;
  ref.set_id(id);
  EXPECT_EQ(Delete(ref, &resp, Token(server::Role::kWorker, "w")).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::SweepRef none;
  EXPECT_EQ(Delete(none, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::SweepRef bad_name;
  bad_name.set_name("line\nbreak");
  EXPECT_EQ(Delete(bad_name, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Delete(int64_t{1} << 50, &resp).error_code(), grpc::StatusCode::NOT_FOUND);

  v1::CancelSweepRequest cancel;
  cancel.mutable_sweep()->set_id(id);
  v1::CancelSweepResponse cancelled;
  ASSERT_TRUE(SweepStub()->CancelSweep(Ctx().get(), cancel, &cancelled).ok());
  // A dry run says what would go and deletes nothing.
  ASSERT_TRUE(Delete(id, &resp, true).ok());
  EXPECT_EQ(resp.runs(), 2);
  EXPECT_EQ(GetSweep(id).sweep().id(), id);
  v1::SweepRef by_name;
  by_name.set_name("live");
  v1::DeleteSweepResponse gone;
  ASSERT_TRUE(Delete(by_name, &gone, Token(server::Role::kUser, "u")).ok());
  EXPECT_EQ(gone.sweep_id(), id);
  EXPECT_EQ(gone.name(), "live");
  EXPECT_EQ(gone.runs(), 2);
  v1::GetSweepRequest get;
  get.mutable_sweep()->set_id(id);
  v1::GetSweepResponse got;
  EXPECT_EQ(SweepStub()->GetSweep(Ctx().get(), get, &got).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Delete(id, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(RetentionTest, DeletesAFinishedSweepsRowsAndFilesAndNothingOfAnother) {
  const int64_t a = Submit(SweepYaml("old", 1, 2)).sweep().id();
  const int64_t b = Submit(SweepYaml("kept", 1, 1)).sweep().id();
  const int64_t w = Register("retention-worker");
  const std::string own = "weights only sweep a kept", shared = "weights both sweeps kept";
  const std::vector<int64_t> a_runs = {RunToEnd(w, 3, own), RunToEnd(w, 2, shared)};
  const int64_t b_run = RunToEnd(w, 4, shared);
  ASSERT_EQ(GetSweep(a).sweep().state(), "finished");
  ASSERT_TRUE(fs::exists(BlobPath(own)));
  // Rows every table keeps per run, before.
  const std::vector<std::string> tables = {"run_specs",  "metric_points", "checkpoints",
                                           "run_events", "run_usage",     "run_logs"};
  for (const char* t : {"run_specs", "metric_points", "checkpoints", "run_events", "run_usage"}) {
    EXPECT_GT(RowsOfRuns(t, a_runs), 0) << t;
  }

  v1::DeleteSweepResponse resp;
  ASSERT_TRUE(Delete(a, &resp).ok());
  EXPECT_EQ(resp.runs(), 2);
  EXPECT_EQ(resp.metric_points(), 5);
  EXPECT_EQ(resp.checkpoints(), 2);
  EXPECT_EQ(resp.checkpoint_files(), 1);  // the shared file stays
  EXPECT_EQ(resp.checkpoint_bytes(), static_cast<int64_t>(own.size()));
  EXPECT_FALSE(fs::exists(BlobPath(own)));
  EXPECT_TRUE(fs::exists(BlobPath(shared)));
  for (const auto& t : tables) EXPECT_EQ(RowsOfRuns(t, a_runs), 0) << t;
  {
    pqxx::connection conn(url_);
    pqxx::work tx(conn);
    EXPECT_EQ(server::pg::ExecText(tx, "SELECT count(*) FROM runs WHERE sweep_id = $1", a)[0][0]
                  .as<int64_t>(),
              0);
    for (const char* table : {"run_usage", "run_spec_base"}) {
      EXPECT_EQ(
          server::pg::ExecText(
              tx, absl::StrCat("SELECT count(*) FROM ", table, " WHERE sweep_id = $1"), a)[0][0]
              .as<int64_t>(),
          0)
          << table;
    }
    EXPECT_EQ(
        server::pg::ExecText(tx, "SELECT count(*) FROM run_spec_base WHERE sweep_id = $1", b)[0][0]
            .as<int64_t>(),
        1);
    EXPECT_EQ(server::pg::ExecText(tx,
                                   "SELECT count(*) FROM workers WHERE current_run_id = "
                                   "ANY($1::bigint[])",
                                   absl::StrCat("{", a_runs[0], ",", a_runs[1], "}"))[0][0]
                  .as<int64_t>(),
              0);
  }
  // Sweep b is whole: its run, points, checkpoint and final weights.
  auto kept = GetSweep(b);
  EXPECT_EQ(kept.sweep().counts().succeeded(), 1);
  EXPECT_EQ(Points(b_run).size(), 4u);
  EXPECT_EQ(RowsOfRuns("checkpoints", {b_run}), 1);
  v1::ListArtifactsRequest la;
  la.set_run_id(b_run);
  v1::ListArtifactsResponse artifacts;
  ASSERT_TRUE(SweepStub()->ListArtifacts(Ctx().get(), la, &artifacts).ok());
  EXPECT_EQ(artifacts.artifacts_size(), 1);
}

TEST_F(RetentionTest, GcRemovesOldOrphansAndKeepsYoungAndReferencedFiles) {
  Submit(SweepYaml("referenced", 1, 1));
  const std::string referenced = "weights a run references";
  RunToEnd(Register("gc-worker"), 1, referenced);
  const fs::path store(options_.store_dir);
  const std::string old_orphan = "an old orphan", young_orphan = "a young orphan";
  Write(BlobPath(old_orphan), old_orphan);
  Write(BlobPath(young_orphan), young_orphan);
  Write(store / "tmp" / "123-4.part", "an interrupted upload");
  Write(store / "tmp" / "123-5.part", "an upload in flight");
  Write(store / "README", "not the store's: never touched");
  const auto two_hours = std::chrono::seconds(7200);
  Age(BlobPath(old_orphan), two_hours);
  Age(BlobPath(referenced), two_hours);
  Age(store / "tmp" / "123-4.part", two_hours);
  Age(store / "README", two_hours);

  server::Db db(url_, 1);
  server::RetentionStore retention(&db);
  server::BlobStore blobs(options_.store_dir);
  std::vector<std::string> listed;
  auto note = [&](const server::BlobStore::File& f) { listed.push_back(f.path); };
  server::GcOptions dry;
  dry.dry_run = true;
  auto would = server::CollectGarbage(&retention, blobs, dry, note);
  ASSERT_TRUE(would.ok()) << would.status();
  EXPECT_EQ(would->files_removed, 2);
  EXPECT_EQ(listed.size(), 2u);
  EXPECT_TRUE(fs::exists(BlobPath(old_orphan)));

  listed.clear();
  auto report = server::CollectGarbage(&retention, blobs, server::GcOptions{}, note);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->files_removed, 2);
  EXPECT_EQ(report->bytes_removed,
            static_cast<int64_t>(old_orphan.size() + std::string("an interrupted upload").size()));
  EXPECT_EQ(report->files_kept, 3);  // referenced, young orphan, upload in flight
  EXPECT_FALSE(fs::exists(BlobPath(old_orphan)));
  EXPECT_FALSE(fs::exists(store / "tmp" / "123-4.part"));
  EXPECT_TRUE(fs::exists(BlobPath(young_orphan)));
  EXPECT_TRUE(fs::exists(BlobPath(referenced)));
  EXPECT_TRUE(fs::exists(store / "tmp" / "123-5.part"));
  EXPECT_TRUE(fs::exists(store / "README"));

  // With no grace period the young orphan goes too; the referenced file never does.
  server::GcOptions now;
  now.min_age = std::chrono::seconds(0);
  auto again = server::CollectGarbage(&retention, blobs, now, note);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(fs::exists(BlobPath(young_orphan)));
  EXPECT_TRUE(fs::exists(BlobPath(referenced)));
}

}  // namespace
}  // namespace ablate::testing
