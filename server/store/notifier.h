// The one LISTEN connection per server process. PostgreSQL NOTIFYs (sent in the same
// transaction as the change, so they arrive only after it commits) are fanned out to
// in-process subscribers: the lease broker and the watch hub. This is what lets a replica wake
// a long-poll for a run another replica requeued.
//
// While the listener is disconnected, notifications are lost. On reconnect every subscriber
// gets a resync call (empty channel) and re-checks, so the cost of a PostgreSQL restart is one
// round of re-polling, not a stuck worker.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ablate::server {

class Notifier {
 public:
  // channel == "" means "resync: anything may have changed".
  using Handler = std::function<void(const std::string& channel, const std::string& payload)>;

  explicit Notifier(std::string database_url);
  ~Notifier();

  // Handlers must be cheap and not block: they run on the listener thread.
  void AddHandler(Handler handler);
  void Start();
  void Stop();
  bool connected() const { return connected_.load(); }

 private:
  void Loop();
  void Dispatch(const std::string& channel, const std::string& payload);

  std::string url_;
  std::mutex mu_;
  std::vector<Handler> handlers_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> connected_{false};
  std::thread thread_;
};

}  // namespace ablate::server
