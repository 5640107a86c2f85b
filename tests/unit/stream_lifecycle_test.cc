// StreamLifecycle (server/stream_lifecycle.h): PollingStream's phases, driven by hand through
// every transition, including a cancel or error racing a write, a read or an armed timer.
#include "server/stream_lifecycle.h"

#include "gtest/gtest.h"

namespace ablate::server {
namespace {

using Do = StreamLifecycle::Do;
using Phase = StreamLifecycle::Phase;

TEST(StreamLifecycle, ReadsWritesWaitsAndEndsAfterTheLastBatch) {
  StreamLifecycle s;
  EXPECT_EQ(s.phase(), Phase::kSetup);
  ASSERT_TRUE(s.BeginRead());
  EXPECT_EQ(s.phase(), Phase::kReading);
  EXPECT_EQ(s.ReadDone(/*messages=*/true, /*last=*/false), Do::kWrite);
  EXPECT_EQ(s.phase(), Phase::kWriting);
  EXPECT_EQ(s.WriteDone(/*ok=*/true, /*more=*/true), Do::kWrite);
  EXPECT_EQ(s.WriteDone(true, false), Do::kArmIdleRead);  // nothing new: the fallback poll
  EXPECT_EQ(s.phase(), Phase::kIdleWait);

  ASSERT_TRUE(s.BeginRead());  // the idle read fired
  EXPECT_EQ(s.ReadDone(false, false), Do::kArmIdleRead);
  ASSERT_TRUE(s.BeginRead());
  EXPECT_EQ(s.ReadDone(true, /*last=*/true), Do::kWrite);
  EXPECT_EQ(s.WriteDone(true, false), Do::kFinish);
  EXPECT_EQ(s.phase(), Phase::kFinished);
  EXPECT_TRUE(s.finish_status().ok());
  EXPECT_FALSE(s.Done());  // no read armed
  EXPECT_EQ(s.phase(), Phase::kDone);
}

TEST(StreamLifecycle, ALastReadWithNothingToWriteFinishesAtOnce) {
  StreamLifecycle s;
  ASSERT_TRUE(s.BeginRead());
  EXPECT_EQ(s.ReadDone(false, true), Do::kFinish);
  EXPECT_TRUE(s.finish_status().ok());
  EXPECT_FALSE(s.BeginRead());
}

TEST(StreamLifecycle, APokeWhileReadingOrWritingArmsOneReadAfterwardsNotASecondOneNow) {
  StreamLifecycle s;
  ASSERT_TRUE(s.BeginRead());
  EXPECT_EQ(s.Poke(), Do::kNothing);  // a second concurrent fetch would race the first
  EXPECT_TRUE(s.dirty());
  EXPECT_EQ(s.ReadDone(false, false), Do::kArmPromptRead);
  EXPECT_EQ(s.phase(), Phase::kPromptWait);
  EXPECT_EQ(s.Poke(), Do::kNothing);  // already armed promptly

  ASSERT_TRUE(s.BeginRead());
  EXPECT_FALSE(s.dirty());
  EXPECT_EQ(s.ReadDone(true, false), Do::kWrite);
  EXPECT_EQ(s.Poke(), Do::kNothing);
  EXPECT_EQ(s.WriteDone(true, false), Do::kArmPromptRead);
}

TEST(StreamLifecycle, APokeDuringSetupIsReadByTheFirstRead) {
  StreamLifecycle s;
  EXPECT_EQ(s.Poke(), Do::kNothing);
  ASSERT_TRUE(s.BeginRead());
  EXPECT_FALSE(s.dirty());
  EXPECT_EQ(s.ReadDone(false, false), Do::kArmIdleRead);
}

TEST(StreamLifecycle, APokeReplacesTheIdlePollWithAPromptRead) {
  StreamLifecycle s;
  ASSERT_TRUE(s.BeginRead());
  EXPECT_EQ(s.ReadDone(false, false), Do::kArmIdleRead);
  EXPECT_EQ(s.Poke(), Do::kRearmPrompt);
  EXPECT_EQ(s.phase(), Phase::kPromptWait);
  EXPECT_EQ(s.Poke(), Do::kNothing);
  // Whether the idle timer was cancelled and re-armed or had already fired, one read comes.
  ASSERT_TRUE(s.BeginRead());
  EXPECT_FALSE(s.BeginRead());  // and only one
}

TEST(StreamLifecycle, CancelDuringAWriteIsSentWhenTheWriteCompletes) {
  StreamLifecycle s;
  ASSERT_TRUE(s.BeginRead());
  ASSERT_EQ(s.ReadDone(true, false), Do::kWrite);
  EXPECT_EQ(s.Cancelled(), Do::kNothing);  // gRPC wants no Finish while a write is out
  EXPECT_EQ(s.phase(), Phase::kFinishOwed);
  EXPECT_EQ(s.Poke(), Do::kNothing);
  EXPECT_FALSE(s.BeginRead());
  EXPECT_EQ(s.WriteDone(/*ok=*/false, /*more=*/true), Do::kFinish);
  EXPECT_EQ(s.finish_status().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(s.finish_status().error_message(), "cancelled");
  EXPECT_EQ(s.WriteDone(true, false), Do::kNothing);  // Finish goes out once
}

TEST(StreamLifecycle, TheFirstFinishWinsARaceWithALaterOne) {
  StreamLifecycle s;
  ASSERT_TRUE(s.BeginRead());
  ASSERT_EQ(s.ReadDone(true, true), Do::kWrite);
  EXPECT_EQ(s.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "db down")), Do::kNothing);
  EXPECT_EQ(s.Cancelled(), Do::kNothing);
  EXPECT_EQ(s.WriteDone(true, false), Do::kFinish);
  EXPECT_EQ(s.finish_status().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(s.Cancelled(), Do::kNothing);
}

TEST(StreamLifecycle, AFailedWriteEndsTheStreamAsClientGone) {
  StreamLifecycle s;
  ASSERT_TRUE(s.BeginRead());
  ASSERT_EQ(s.ReadDone(true, false), Do::kWrite);
  EXPECT_EQ(s.WriteDone(false, true), Do::kFinish);
  EXPECT_EQ(s.finish_status().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(s.finish_status().error_message(), "client went away");
}

TEST(StreamLifecycle, CancelWhileReadingFinishesNowAndDropsTheRead) {
  StreamLifecycle s;
  ASSERT_TRUE(s.BeginRead());
  EXPECT_EQ(s.Cancelled(), Do::kFinish);  // no write outstanding
  EXPECT_EQ(s.ReadDone(true, false), Do::kNothing);
  EXPECT_EQ(s.phase(), Phase::kFinished);
}

TEST(StreamLifecycle, CancelWhileWaitingFinishesAndTheArmedReadDoesNothing) {
  StreamLifecycle s;
  ASSERT_TRUE(s.BeginRead());
  ASSERT_EQ(s.ReadDone(false, false), Do::kArmIdleRead);
  EXPECT_EQ(s.Cancelled(), Do::kFinish);
  EXPECT_FALSE(s.BeginRead());  // the timer fired before it could be cancelled
}

TEST(StreamLifecycle, CancelOrAFailedSetupBeforeTheFirstReadFinishes) {
  StreamLifecycle cancelled;
  EXPECT_EQ(cancelled.Cancelled(), Do::kFinish);
  EXPECT_FALSE(cancelled.BeginRead());

  StreamLifecycle refused;
  EXPECT_EQ(refused.Finish(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "role")), Do::kFinish);
  EXPECT_EQ(refused.finish_status().error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST(StreamLifecycle, AfterDoneNothingIsSentAndAnArmedReadIsCancelled) {
  StreamLifecycle s;
  ASSERT_TRUE(s.BeginRead());
  ASSERT_EQ(s.ReadDone(false, false), Do::kArmIdleRead);
  EXPECT_TRUE(s.Done());  // the armed read must be cancelled
  EXPECT_EQ(s.Poke(), Do::kNothing);
  EXPECT_EQ(s.Cancelled(), Do::kNothing);
  EXPECT_EQ(s.Finish(grpc::Status::OK), Do::kNothing);
  EXPECT_EQ(s.WriteDone(true, false), Do::kNothing);
  EXPECT_FALSE(s.BeginRead());
}

}  // namespace
}  // namespace ablate::server
