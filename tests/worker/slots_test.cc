#include "worker/slots.h"

#include <gtest/gtest.h>

#include <string>

namespace ablate::worker {
namespace {

TEST(ThreadsPerSlot, SplitsTheTotalEvenly) {
  EXPECT_EQ(*ThreadsPerSlot(2, 2, 16), 1);
  EXPECT_EQ(*ThreadsPerSlot(8, 3, 16), 2);  // the remainder is left idle, not given to one slot
  EXPECT_EQ(*ThreadsPerSlot(4, 1, 16), 4);
}

TEST(ThreadsPerSlot, ZeroMeansAllCores) {
  EXPECT_EQ(*ThreadsPerSlot(0, 1, 16), 16);
  EXPECT_EQ(*ThreadsPerSlot(0, 4, 16), 4);
  EXPECT_EQ(*ThreadsPerSlot(0, 4, 2), 1);  // more slots than cores: one thread each
  EXPECT_EQ(*ThreadsPerSlot(0, 1, 0), 1);  // hardware_concurrency may say 0
}

TEST(ThreadsPerSlot, RefusesWhatCannotBeSplit) {
  auto few = ThreadsPerSlot(1, 2, 16);
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(few.status().message(),
            "--threads 1 cannot give each of --slots 2 a thread; --threads is the worker's total "
            "(0: all cores)");
  for (int slots : {0, -1, kMaxSlots + 1}) {
    auto bad = ThreadsPerSlot(0, slots, 16);
    ASSERT_FALSE(bad.ok()) << slots;
    EXPECT_EQ(bad.status().message(),
              "--slots must be between 1 and 64 (got " + std::to_string(slots) + ")");
  }
}

TEST(SlotScheduler, LeasesWhileASlotIsFree) {
  SlotScheduler s(2, 0);
  EXPECT_TRUE(s.WantLease());
  EXPECT_EQ(s.Acquire(), 0);
  EXPECT_TRUE(s.WantLease());  // one slot still free: lease a second run at once
  EXPECT_EQ(s.Acquire(), 1);
  EXPECT_FALSE(s.WantLease());
  EXPECT_EQ(s.Acquire(), -1);
  EXPECT_EQ(s.busy(), 2);
  s.Release(0);
  EXPECT_TRUE(s.WantLease());
  EXPECT_EQ(s.Acquire(), 0);  // the freed slot is reused
  EXPECT_EQ(s.started(), 3);
  EXPECT_FALSE(s.Done());
}

TEST(SlotScheduler, MaxRunsCountsRunsStartedAndWaitsForThem) {
  SlotScheduler s(2, 3);
  ASSERT_EQ(s.Acquire(), 0);
  ASSERT_EQ(s.Acquire(), 1);
  s.Release(1);
  ASSERT_TRUE(s.WantLease());
  ASSERT_EQ(s.Acquire(), 1);
  s.Release(0);
  EXPECT_FALSE(s.WantLease());  // three started: a slot is free but no more runs
  EXPECT_FALSE(s.Done());       // slot 1 still trains
  s.Release(1);
  EXPECT_TRUE(s.Done());
}

TEST(SlotScheduler, StopLeasingLetsHeldRunsFinish) {
  SlotScheduler s(3, 0);
  ASSERT_EQ(s.Acquire(), 0);
  s.StopLeasing();
  EXPECT_FALSE(s.WantLease());
  EXPECT_FALSE(s.Done());
  s.Release(0);
  EXPECT_TRUE(s.Done());
}

TEST(SlotScheduler, OneSlotIsTheOldDaemon) {
  SlotScheduler s(1, 0);
  EXPECT_EQ(s.Acquire(), 0);
  EXPECT_FALSE(s.WantLease());  // no lease is asked for while the one run trains
  s.Release(0);
  EXPECT_TRUE(s.WantLease());
  EXPECT_FALSE(s.Done());  // no limit, not stopped: it waits for the next run
}

}  // namespace
}  // namespace ablate::worker
