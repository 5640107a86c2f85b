// The server's executor: timers and their cancellation. Run under scripts/test-sanitizers, this
// also catches the timer thread touching a cancelled timer's freed memory.
#include "server/executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace ablate::server {
namespace {

using namespace std::chrono_literals;

TEST(Executor, CancellingTheTimerBeingWaitedOnKeepsLaterTimersFiring) {
  Executor ex(1);
  std::atomic<bool> cancelled_fired{false};
  const uint64_t id = ex.RunAt(Executor::Clock::now() + 10s, [&] { cancelled_fired = true; });
  std::this_thread::sleep_for(50ms);  // the timer thread is now asleep until that deadline
  EXPECT_TRUE(ex.Cancel(id));
  EXPECT_FALSE(ex.Cancel(id)) << "a timer is cancelled once";
  std::promise<void> fired;
  ex.RunAt(Executor::Clock::now() + 20ms, [&] { fired.set_value(); });
  EXPECT_EQ(fired.get_future().wait_for(10s), std::future_status::ready);
  ex.Shutdown();
  EXPECT_FALSE(cancelled_fired);
}

TEST(Executor, TimersFireInDeadlineOrder) {
  Executor ex(1);
  std::mutex mu;
  std::vector<int> order;
  std::promise<void> done;
  const auto now = Executor::Clock::now();
  ex.RunAt(now + 60ms, [&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(2);
    done.set_value();
  });
  ex.RunAt(now + 20ms, [&] {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(1);
  });
  ASSERT_EQ(done.get_future().wait_for(10s), std::future_status::ready);
  ex.Shutdown();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace ablate::server
