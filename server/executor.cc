#include "server/executor.h"

namespace ablate::server {

Executor::Executor(int threads) {
  for (int i = 0; i < (threads > 0 ? threads : 1); ++i) threads_.emplace_back([this] { Work(); });
  timer_thread_ = std::thread([this] { Time(); });
}

Executor::~Executor() { Shutdown(); }

void Executor::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  work_cv_.notify_one();
}

uint64_t Executor::RunAt(Clock::time_point when, std::function<void()> task) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = next_timer_++;
    timers_.emplace(when, std::make_pair(id, std::move(task)));
    timer_index_[id] = when;
  }
  timer_cv_.notify_one();
  return id;
}

bool Executor::Cancel(uint64_t timer_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = timer_index_.find(timer_id);
  if (it == timer_index_.end()) return false;
  auto range = timers_.equal_range(it->second);
  for (auto t = range.first; t != range.second; ++t) {
    if (t->second.first == timer_id) {
      timers_.erase(t);
      break;
    }
  }
  timer_index_.erase(it);
  return true;
}

void Executor::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  work_cv_.notify_all();
  timer_cv_.notify_all();
  if (timer_thread_.joinable()) timer_thread_.join();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void Executor::Work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void Executor::Time() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (timers_.empty()) {
      timer_cv_.wait(lock);
      continue;
    }
    auto first = timers_.begin();
    if (first->first > Clock::now()) {
      // A copy: wait_until reads the deadline again after waking, and a Cancel() meanwhile may
      // have freed the map node that holds it.
      const Clock::time_point deadline = first->first;
      timer_cv_.wait_until(lock, deadline);
      continue;
    }
    timer_index_.erase(first->second.first);
    tasks_.push_back(std::move(first->second.second));
    timers_.erase(first);
    work_cv_.notify_one();
  }
}

}  // namespace ablate::server
