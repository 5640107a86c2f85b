#include "server/store/notify_batcher.h"

#include <chrono>
#include <vector>

#include "server/store/pg_codec.h"

namespace ablate::server {

void NotifyBatcher::Add(const std::string& channel, const std::string& payload) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.emplace(channel, payload);
}

void NotifyBatcher::Start() {
  loop_.Start(std::chrono::milliseconds(20), [this] { Flush(); });
}

void NotifyBatcher::Stop() {
  loop_.Stop();
  Flush();
}

void NotifyBatcher::Flush() {
  std::set<std::pair<std::string, std::string>> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(pending_);
  }
  if (batch.empty()) return;
  std::vector<std::string> channels, payloads;
  for (const auto& [c, p] : batch) {
    channels.push_back(c);
    payloads.push_back(p);
  }
  // A failure loses hints only (see header); watchers fall back to polling.
  (void)db_->Tx<bool>("notify", [&](pqxx::work& tx) -> absl::StatusOr<bool> {
    pg::Exec(tx, "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS t(c, p)",
             pg::TextArray(channels), pg::TextArray(payloads));
    return true;
  });
}

}  // namespace ablate::server
