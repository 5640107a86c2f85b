// Wake-ups for streaming reads (WatchSweep, GetRunMetrics follow): a stream subscribes to one
// (channel, key) and is poked when a NOTIFY for it arrives, from this replica or another. A poke
// only says "look again"; the stream re-reads the database, so coalesced or lost pokes cost
// freshness, never correctness (streams also re-read on a timer).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace ablate::server {

class WatchHub {
 public:
  using Poke = std::function<void()>;

  uint64_t Subscribe(const std::string& channel, const std::string& key, Poke poke);
  void Unsubscribe(uint64_t id);

  // Notifier handler; channel "" (resync) pokes every subscriber.
  void OnNotify(const std::string& channel, const std::string& payload);

 private:
  struct Sub {
    std::string channel, key;
    Poke poke;
  };
  std::mutex mu_;
  uint64_t next_ = 1;
  std::map<uint64_t, Sub> subs_;
  std::multimap<std::pair<std::string, std::string>, uint64_t> index_;
};

}  // namespace ablate::server
