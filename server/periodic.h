// A background thread that runs a task every `interval` until stopped; Stop() wakes it at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace ablate::server {

class Periodic {
 public:
  Periodic() = default;
  ~Periodic() { Stop(); }
  Periodic(const Periodic&) = delete;
  Periodic& operator=(const Periodic&) = delete;

  // Runs `task` now and then every `interval` (measured from the end of the previous run).
  void Start(std::chrono::milliseconds interval, std::function<void()> task) {
    thread_ = std::thread([this, interval, task = std::move(task)] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        lock.unlock();
        task();
        lock.lock();
        cv_.wait_for(lock, interval, [this] { return stop_; });
      }
    });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ablate::server
