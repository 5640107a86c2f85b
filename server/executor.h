// A fixed pool of threads for blocking work (database calls) started from gRPC callbacks, plus
// one timer thread. Callback-API handlers must not block gRPC's own threads, and long-polls must
// not hold a thread while they wait: a waiting call is a timer entry, not a thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace ablate::server {

class Executor {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Executor(int threads);
  ~Executor();  // Shutdown() if not yet called
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void Post(std::function<void()> task);

  // Posts `task` at `when`. Returns an id for Cancel.
  uint64_t RunAt(Clock::time_point when, std::function<void()> task);
  // True if the timer was cancelled before it fired.
  bool Cancel(uint64_t timer_id);

  // Runs the tasks already posted, drops pending timers, joins the threads.
  void Shutdown();

 private:
  void Work();
  void Time();

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable timer_cv_;
  std::deque<std::function<void()>> tasks_;
  std::multimap<Clock::time_point, std::pair<uint64_t, std::function<void()>>> timers_;
  std::map<uint64_t, Clock::time_point> timer_index_;
  uint64_t next_timer_ = 1;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  std::thread timer_thread_;
};

}  // namespace ablate::server
