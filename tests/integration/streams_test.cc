// Streaming reads woken by NOTIFY: WatchSweep and GetRunMetrics(follow) deliver changes as
// they happen and end when the sweep / run does.
#include <thread>

#include "tests/integration/harness.h"

namespace ablate::testing {
namespace {

class StreamsTest : public ServerFixture {};

TEST_F(StreamsTest, WatchSweepSeesProgressAndEndsWhenTheSweepFinishes) {
  auto sub = Submit(SweepYaml("watched", 2, 1));
  const int64_t w = Register("w");
  v1::WatchSweepRequest req;
  req.mutable_sweep()->set_id(sub.sweep().id());
  req.set_min_interval_seconds(0.05);
  auto ctx = Ctx(admin_, 60);
  auto reader = SweepStub()->WatchSweep(ctx.get(), req);
  v1::SweepUpdate update;
  ASSERT_TRUE(reader->Read(&update));
  EXPECT_EQ(update.sweep().counts().queued(), 2);
  EXPECT_EQ(update.runs_size(), 2);

  std::thread worker([&] {
    for (int i = 0; i < 2; ++i) {
      auto l = Lease(w);
      v1::CompleteRequest c;
      c.set_run_id(l.spec().run_id());
      c.set_attempt(l.lease().attempt());
      c.set_lease_token(l.lease().token());
      c.set_state(v1::SUCCEEDED);
      v1::CompleteResponse cr;
      EXPECT_TRUE(WorkerStub()->Complete(Ctx().get(), c, &cr).ok());
    }
  });
  int updates = 1;
  bool finished = false;
  while (reader->Read(&update)) {
    ++updates;
    finished = update.finished();
  }
  worker.join();
  auto s = reader->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(finished);
  EXPECT_GE(updates, 2);
  EXPECT_EQ(update.sweep().counts().succeeded(), 2);
  EXPECT_EQ(update.sweep().state(), "finished");
}

TEST_F(StreamsTest, FollowingARunDeliversEveryPointThenEnds) {
  Submit(SweepYaml("followed", 1, 1));
  const int64_t w = Register("w");
  auto l = Lease(w);
  const int64_t run = l.spec().run_id();
  v1::GetRunMetricsRequest req;
  req.set_run_id(run);
  req.set_after_step(-1);
  req.set_follow(true);
  auto ctx = Ctx(admin_, 60);
  auto reader = SweepStub()->GetRunMetrics(ctx.get(), req);

  std::thread worker([&] {
    for (int batch = 0; batch < 5; ++batch) {
      v1::ReportMetricsRequest rep;
      rep.set_run_id(run);
      rep.set_attempt(1);
      rep.set_lease_token(l.lease().token());
      for (int s = batch * 10; s < batch * 10 + 10; ++s) {
        auto* p = rep.add_points();
        p->set_name("train_loss");
        p->set_step(s);
        p->set_value(s);
      }
      v1::ReportMetricsResponse resp;
      EXPECT_TRUE(WorkerStub()->ReportMetrics(Ctx().get(), rep, &resp).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    v1::CompleteRequest c;
    c.set_run_id(run);
    c.set_attempt(1);
    c.set_lease_token(l.lease().token());
    c.set_state(v1::SUCCEEDED);
    v1::CompleteResponse cr;
    EXPECT_TRUE(WorkerStub()->Complete(Ctx().get(), c, &cr).ok());
  });
  std::vector<int64_t> steps;
  v1::GetRunMetricsResponse msg;
  v1::RunState last_state = v1::RUN_STATE_UNSPECIFIED;
  while (reader->Read(&msg)) {
    for (const auto& p : msg.points()) steps.push_back(p.step());
    last_state = msg.state();
  }
  worker.join();
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(last_state, v1::SUCCEEDED);
  ASSERT_EQ(steps.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(steps[i], i);
}

}  // namespace
}  // namespace ablate::testing
