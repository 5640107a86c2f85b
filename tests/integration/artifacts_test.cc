// Issue #15: progress lines (ReportLogs -> GetRunMetrics include_logs, capped per run) and final
// checkpoints (PutCheckpoint + Complete's result.final_checkpoint -> GetArtifact), through real
// gRPC against a real PostgreSQL, with the wrong role and hostile input.
#include "absl/strings/str_cat.h"
#include "common/util/sha256.h"
#include "server/store/ingest_store.h"
#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

class ArtifactsTest : public ServerFixture {
 protected:
  grpc::Status ReportLogs(int64_t run, int attempt, const std::string& token,
                          const std::vector<std::string>& texts, int64_t first_step = 0,
                          const std::string& bearer = "") {
    v1::LogReportRequest req;
    req.set_run_id(run);
    req.set_attempt(attempt);
    req.set_lease_token(token);
    int64_t step = first_step;
    for (const auto& t : texts) {
      auto* l = req.add_lines();
      l->set_step(step++);
      l->set_attempt(attempt);
      l->set_time(1e9 + static_cast<double>(step));
      l->set_text(t);
    }
    v1::LogReportResponse resp;
    return WorkerStub()->ReportLogs(Ctx(bearer.empty() ? admin_ : bearer).get(), req, &resp);
  }

  // A run of a fresh one-run sweep, leased, that has sent its first progress line ("step 0"),
  // and the request `ablate logs -f` makes for it (lines, no points, following; with events
  // when `events`).
  struct Followed {
    int64_t run = 0;
    std::string token;
    v1::GetRunMetricsRequest request;
  };
  Followed LeaseAndFollow(const std::string& name, bool events) {
    Submit(SweepYaml(name, 1, 1));
    auto l = Lease(Register(name + "-worker"));
    Followed f{l.spec().run_id(), l.lease().token(), {}};
    EXPECT_TRUE(ReportLogs(f.run, 1, f.token, {"step 0"}).ok());
    f.request.set_run_id(f.run);
    f.request.set_after_step(-1);
    f.request.set_include_logs(true);
    f.request.set_include_events(events);
    f.request.set_skip_points(true);
    f.request.set_follow(true);
    return f;
  }

  // Every progress line of the run (not following).
  std::vector<v1::LogLine> Lines(int64_t run, v1::RunState* state = nullptr) {
    v1::GetRunMetricsRequest req;
    req.set_run_id(run);
    req.set_after_step(-1);
    req.set_include_logs(true);
    req.set_skip_points(true);
    auto ctx = Ctx();
    auto reader = SweepStub()->GetRunMetrics(ctx.get(), req);
    std::vector<v1::LogLine> out;
    v1::GetRunMetricsResponse msg;
    while (reader->Read(&msg)) {
      EXPECT_EQ(msg.points_size(), 0);
      if (state != nullptr) *state = msg.state();
      for (const auto& l : msg.log_lines()) out.push_back(l);
    }
    EXPECT_TRUE(reader->Finish().ok());
    return out;
  }

  grpc::Status Upload(int64_t run, int attempt, int64_t step, const std::string& blob) {
    v1::PutCheckpointResponse stored;
    auto ctx = Ctx();
    auto writer = WorkerStub()->PutCheckpoint(ctx.get(), &stored);
    v1::CheckpointChunk header;
    header.set_run_id(run);
    header.set_attempt(attempt);
    header.set_lease_token(LeaseToken(run, attempt));
    header.mutable_ref()->set_step(step);
    header.mutable_ref()->set_sha256(Sha256Hex(blob));
    header.mutable_ref()->set_size_bytes(static_cast<int64_t>(blob.size()));
    writer->Write(header);
    v1::CheckpointChunk c;
    c.set_data(blob);
    writer->Write(c);
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status Complete(int64_t run, const v1::CheckpointRef* final_ref) {
    v1::CompleteRequest c;
    c.set_run_id(run);
    c.set_attempt(1);
    c.set_lease_token(LeaseToken(run, 1));
    c.set_state(v1::SUCCEEDED);
    c.mutable_result()->set_final_val_loss(3.0);
    if (final_ref != nullptr) *c.mutable_result()->mutable_final_checkpoint() = *final_ref;
    v1::CompleteResponse cr;
    return WorkerStub()->Complete(Ctx().get(), c, &cr);
  }

  // The artifact's header and bytes, or the call's status.
  grpc::Status Artifact(int64_t run, v1::CheckpointRef* ref, std::string* bytes,
                        const std::string& bearer = "", const std::string& name = "final") {
    v1::ArtifactRequest req;
    req.set_run_id(run);
    req.set_name(name);
    auto ctx = Ctx(bearer.empty() ? admin_ : bearer);
    auto reader = SweepStub()->GetArtifact(ctx.get(), req);
    v1::ArtifactChunk chunk;
    bool header = true;
    while (reader->Read(&chunk)) {
      if (header) {
        *ref = chunk.ref();
        EXPECT_EQ(chunk.name(), "final");
        header = false;
      } else {
        bytes->append(chunk.data());
      }
    }
    return reader->Finish();
  }
};

TEST_F(ArtifactsTest, ProgressLinesAreStoredInOrderFencedCappedAndStreamed) {
  auto sub = Submit(SweepYaml("logs", 1, 1));
  const int64_t w = Register("log-worker");
  auto l = Lease(w);
  const int64_t run = l.spec().run_id();
  const std::string token = l.lease().token();
  ASSERT_TRUE(
      ReportLogs(run, 1, token, {"step      0  loss 5.5000", "step      1  loss 5.4000"}).ok());
  v1::RunState state{};
  auto lines = Lines(run, &state);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].text(), "step      0  loss 5.5000");
  EXPECT_EQ(lines[1].step(), 1);
  EXPECT_EQ(lines[1].attempt(), 1);
  EXPECT_EQ(state, v1::LEASED);

  // Fenced: a wrong token, a stale attempt, a user token.
  EXPECT_EQ(ReportLogs(run, 1, "not-the-token", {"x"}).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ReportLogs(run, 2, token, {"x"}).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(ReportLogs(run, 1, token, {"x"}, 0, Token(server::Role::kUser, "u")).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Hostile: too many lines, a line too long, a control character.
  EXPECT_EQ(ReportLogs(run, 1, token, std::vector<std::string>(101, "x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ReportLogs(run, 1, token, {std::string(513, 'x')}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ReportLogs(run, 1, token, {std::string("a\0b", 3)}).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Lines(run).size(), 2u);

  // The cap: only the newest kMaxLogLinesPerRun lines are kept.
  for (int batch = 0; batch < 21; ++batch) {
    std::vector<std::string> texts;
    for (int i = 0; i < 100; ++i) texts.push_back(absl::StrCat("line ", batch * 100 + i));
    ASSERT_TRUE(ReportLogs(run, 1, token, texts, 2 + batch * 100).ok());
  }
  lines = Lines(run);
  ASSERT_EQ(lines.size(), static_cast<size_t>(server::kMaxLogLinesPerRun));
  EXPECT_EQ(lines.front().text(), "line 100");  // 2 + 2,100 sent, the first 102 dropped
  EXPECT_EQ(lines.back().text(), "line 2099");
}

TEST_F(ArtifactsTest, FollowingStreamsNewLinesUntilTheRunEnds) {
  const Followed f = LeaseAndFollow("follow", /*events=*/false);
  const int64_t run = f.run;
  auto ctx = Ctx();
  auto reader = SweepStub()->GetRunMetrics(ctx.get(), f.request);
  std::vector<std::string> seen;
  v1::GetRunMetricsResponse msg;
  bool sent_more = false, completed = false;
  v1::RunState last{};
  while (reader->Read(&msg)) {
    last = msg.state();
    for (const auto& line : msg.log_lines()) seen.push_back(line.text());
    if (!sent_more && !seen.empty()) {
      // The follower has the first line; the next ones arrive while it waits.
      ASSERT_TRUE(ReportLogs(run, 1, f.token, {"step 1", "step 2"}, 1).ok());
      sent_more = true;
    } else if (sent_more && !completed && seen.size() == 3) {
      ASSERT_TRUE(Complete(run, nullptr).ok());
      completed = true;
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"step 0", "step 1", "step 2"}));
  EXPECT_EQ(last, v1::SUCCEEDED);
}

// `ablate logs -f`: the lifecycle events come in the same stream as the lines, each once, until
// the run ends.
TEST_F(ArtifactsTest, FollowingWithEventsSendsEachEventOnceAlongTheLines) {
  Followed f = LeaseAndFollow("events", /*events=*/true);
  const int64_t run = f.run;
  v1::GetRunMetricsRequest& req = f.request;
  auto ctx = Ctx();
  auto reader = SweepStub()->GetRunMetrics(ctx.get(), req);
  std::vector<std::string> kinds, lines;
  v1::GetRunMetricsResponse msg;
  bool completed = false;
  v1::RunState last{};
  while (reader->Read(&msg)) {
    last = msg.state();
    for (const auto& e : msg.events()) kinds.push_back(e.kind());
    for (const auto& line : msg.log_lines()) lines.push_back(line.text());
    if (!completed && !kinds.empty() && !lines.empty()) {
      ASSERT_TRUE(Complete(run, nullptr).ok());
      completed = true;
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(kinds, (std::vector<std::string>{"leased", "completed"}));
  EXPECT_EQ(lines, (std::vector<std::string>{"step 0"}));
  EXPECT_EQ(last, v1::SUCCEEDED);

  // Events alone (no lines, no points) still carry the run's state; an unknown run is NOT_FOUND.
  req.set_include_logs(false);
  req.set_follow(false);
  auto ctx2 = Ctx();
  reader = SweepStub()->GetRunMetrics(ctx2.get(), req);
  kinds.clear();
  while (reader->Read(&msg)) {
    last = msg.state();
    EXPECT_EQ(msg.log_lines_size(), 0);
    for (const auto& e : msg.events()) kinds.push_back(e.kind());
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(kinds, (std::vector<std::string>{"leased", "completed"}));
  EXPECT_EQ(last, v1::SUCCEEDED);
  req.set_run_id(run + 1000);
  auto ctx3 = Ctx();
  reader = SweepStub()->GetRunMetrics(ctx3.get(), req);
  while (reader->Read(&msg)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
}

// `ablate artifacts ls`: every checkpoint kept for a run, by step; the one its result names final
// is "final" once the run finished.
TEST_F(ArtifactsTest, ListArtifactsShowsEveryKeptCheckpointAndWhichIsFinal) {
  auto sub = Submit(SweepYaml("listed", 1, 1));
  const int64_t w = Register("ls-worker");
  auto l = Lease(w);
  const int64_t run = l.spec().run_id();
  auto list = [&](int64_t id, v1::ListArtifactsResponse* resp, const std::string& bearer = "") {
    v1::ListArtifactsRequest req;
    req.set_run_id(id);
    return SweepStub()->ListArtifacts(Ctx(bearer.empty() ? admin_ : bearer).get(), req, resp);
  };
  v1::ListArtifactsResponse resp;
  ASSERT_TRUE(list(run, &resp).ok());
  EXPECT_EQ(resp.state(), v1::LEASED);
  EXPECT_EQ(resp.artifacts_size(), 0);

  const std::string mid = "weights at step 50", last = "weights at step 100";
  ASSERT_TRUE(Upload(run, 1, 100, last).ok());
  ASSERT_TRUE(Upload(run, 1, 50, mid).ok());
  auto names = [&] {
    v1::ListArtifactsResponse r;
    EXPECT_TRUE(list(run, &r).ok());
    std::vector<std::string> out;
    for (const auto& a : r.artifacts()) out.push_back(absl::StrCat(a.name(), "@", a.ref().step()));
    return out;
  };
  EXPECT_EQ(names(), (std::vector<std::string>{"checkpoint@50", "checkpoint@100"}));
  v1::CheckpointRef final_ref;
  final_ref.set_step(100);
  final_ref.set_sha256(Sha256Hex(last));
  final_ref.set_size_bytes(static_cast<int64_t>(last.size()));
  ASSERT_TRUE(Complete(run, &final_ref).ok());
  EXPECT_EQ(names(), (std::vector<std::string>{"checkpoint@50", "final@100"}));
  resp.Clear();
  ASSERT_TRUE(list(run, &resp, Token(server::Role::kUser, "reader")).ok());
  EXPECT_EQ(resp.state(), v1::SUCCEEDED);
  ASSERT_EQ(resp.artifacts_size(), 2);
  const v1::Artifact& a = resp.artifacts(1);
  EXPECT_EQ(a.ref().sha256(), Sha256Hex(last));
  EXPECT_EQ(a.ref().size_bytes(), static_cast<int64_t>(last.size()));
  EXPECT_EQ(a.attempt(), 1);
  EXPECT_GT(a.created_at(), 1.7e9);
  EXPECT_EQ(resp.artifacts(0).ref().sha256(), Sha256Hex(mid));

  EXPECT_EQ(list(run + 1000, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(list(run, &resp, Token(server::Role::kWorker, "wk")).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(ArtifactsTest, AFinishedRunsFinalCheckpointIsServedVerbatim) {
  auto sub = Submit(SweepYaml("final", 2, 1));
  const int64_t w = Register("final-worker");
  auto l = Lease(w);
  const int64_t run = l.spec().run_id();
  EXPECT_TRUE(l.spec().keep_final());                                    // the sweep-file default
  const std::string blob = std::string(3 << 20, 'w') + "final weights";  // several chunks

  // Before it finishes there is nothing to get.
  v1::CheckpointRef ref;
  std::string bytes;
  EXPECT_EQ(Artifact(run, &ref, &bytes).error_code(), grpc::StatusCode::NOT_FOUND);

  // Complete may only name a checkpoint this run uploaded, exactly as recorded.
  v1::CheckpointRef claimed;
  claimed.set_step(100);
  claimed.set_sha256(Sha256Hex(blob));
  claimed.set_size_bytes(static_cast<int64_t>(blob.size()));
  EXPECT_EQ(Complete(run, &claimed).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Upload(run, 1, 100, blob).ok());
  v1::CheckpointRef wrong_size = claimed;
  wrong_size.set_size_bytes(5);
  EXPECT_EQ(Complete(run, &wrong_size).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Complete(run, &claimed).ok());

  ASSERT_TRUE(Artifact(run, &ref, &bytes).ok());
  EXPECT_EQ(ref.step(), 100);
  EXPECT_EQ(ref.sha256(), Sha256Hex(blob));
  EXPECT_EQ(ref.size_bytes(), static_cast<int64_t>(blob.size()));
  EXPECT_EQ(bytes, blob);
  // The run's result names it, so `ablate runs -o json` shows it too.
  auto sweep = GetSweep(sub.sweep().id());
  bool found = false;
  for (const auto& r : sweep.runs()) {
    if (r.id() == run) {
      found = true;
      EXPECT_EQ(r.result().final_checkpoint().sha256(), Sha256Hex(blob));
    }
  }
  EXPECT_TRUE(found);

  // Users may read it; a worker token may not; only "final" exists; a missing run is NOT_FOUND.
  std::string other;
  EXPECT_TRUE(Artifact(run, &ref, &other, Token(server::Role::kUser, "reader")).ok());
  EXPECT_EQ(Artifact(run, &ref, &other, Token(server::Role::kWorker, "wk")).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Artifact(run, &ref, &other, "", "../../etc/passwd").error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Artifact(run + 1000, &ref, &other).error_code(), grpc::StatusCode::NOT_FOUND);

  // A run completed without one (keep_final: false) says why there is nothing.
  auto l2 = Lease(w);
  ASSERT_TRUE(l2.has_run());
  v1::CompleteRequest c;
  c.set_run_id(l2.spec().run_id());
  c.set_attempt(1);
  c.set_lease_token(l2.lease().token());
  c.set_state(v1::SUCCEEDED);
  v1::CompleteResponse cr;
  ASSERT_TRUE(WorkerStub()->Complete(Ctx().get(), c, &cr).ok());
  auto s = Artifact(l2.spec().run_id(), &ref, &other);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("keep_final: false"), std::string::npos) << s.error_message();
}

TEST_F(ArtifactsTest, KeepFinalFalseReachesTheWorker) {
  auto sub = Submit(SweepYaml("discard", 1, 1, "", "keep_final: false\n"));
  auto l = Lease(Register("discard-worker"));
  ASSERT_TRUE(l.has_run());
  EXPECT_FALSE(l.spec().keep_final());
}

}  // namespace
}  // namespace ablate::testing
