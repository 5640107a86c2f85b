#include "server/watch_hub.h"

#include <vector>

namespace ablate::server {

uint64_t WatchHub::Subscribe(const std::string& channel, const std::string& key, Poke poke) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_++;
  subs_[id] = Sub{channel, key, std::move(poke)};
  index_.emplace(std::make_pair(channel, key), id);
  return id;
}

void WatchHub::Unsubscribe(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = subs_.find(id);
  if (it == subs_.end()) return;
  auto range = index_.equal_range({it->second.channel, it->second.key});
  for (auto i = range.first; i != range.second; ++i) {
    if (i->second == id) {
      index_.erase(i);
      break;
    }
  }
  subs_.erase(it);
}

void WatchHub::OnNotify(const std::string& channel, const std::string& payload) {
  std::vector<Poke> pokes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (channel.empty()) {
      for (auto& [id, sub] : subs_) pokes.push_back(sub.poke);
    } else {
      auto range = index_.equal_range({channel, payload});
      for (auto i = range.first; i != range.second; ++i) pokes.push_back(subs_[i->second].poke);
    }
  }
  for (auto& p : pokes) p();
}

}  // namespace ablate::server
